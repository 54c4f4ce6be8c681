-- Every statement the package runs, as named blocks: a line "-- name --"
-- starts a block. Python code looks them up by name (see store.py) and never
-- builds SQL text. Parameters are psycopg2 %(name)s placeholders.

-- listen --
-- Workers hear the job_queue triggers' wake-ups on this channel (see
-- migrations/0001; db.WAKEUP_CHANNEL names it for tests and tools).
LISTEN motir_job_queue;

-- no_jit --
SET jit = off;

-- claim_due_jobs --
-- One statement, hence one transaction: it locks due rows, skipping rows
-- another worker holds, and writes the claim before anything else can see
-- them. The handler runs only after it commits. The locking subquery is
-- uncorrelated, so it runs once, and ARRAY() hands its ids to the update as
-- one value: the update then finds each row through the primary key, where a
-- join could hash the whole table for every batch.
--
-- The jobs run by priority, then in the order they fell due. One walk of
-- job_queue_claim (priority, run_at, id) in that order could not stop at
-- the first row not due yet: the rows of the next priority follow it, so a
-- claim that finds fewer due rows than it asks for would read every pending
-- row, delayed ones and backoffs included. Instead job_queue_priorities (a
-- view, migrations/0004) hops from one distinct priority of the pending
-- rows to the next (one index probe each, and there are few), and each
-- priority's due rows are a range of the index that ends at now(). The nested loop runs the priorities in
-- ascending order and stops once the limit is reached.
--
-- Paused queues (migrations/0003) are read once, as one array, behind a
-- test of whether any queue is paused at all: on its own, `queue <> ALL`
-- of an array the planner cannot see is estimated to keep almost no row
-- (with few distinct queues, any one value is likely to be in it), and the
-- planner then sorts the whole backlog instead of walking the index; the
-- test makes it an even bet, and skips the array when nothing is paused.
--
-- Jobs of a limited kind are not this claim's (migrations/0004): see
-- claim_limited_jobs.
--
-- The payload comes back as the row's JSON text: the handle decodes it
-- when a handler first reads it (see registry.Job.payload), not the
-- worker's main thread for every job it claims.
--
-- more_due says whether a due row is left beside the ones claimed, so that
-- a worker whose claim took all it asked for can wake another one. Every
-- due row ahead of the last one claimed, in the claim's order, is either
-- claimed now or held by another claim (SKIP LOCKED passed it), so the
-- look starts right after that row: in its priority, from its (run_at, id)
-- on, a range of job_queue_claim; then in each greater priority, from the
-- start. Walking instead from the start of the lane past the rows just
-- claimed (which this statement's snapshot still sees pending) would read
-- every one of them a second time.
WITH priorities AS (
    SELECT priority FROM job_queue_priorities
), claimed AS (
    UPDATE job_queue AS j
    SET state = 'running',
        locked_by = %(claimant)s,
        -- clock_timestamp(), not now(): a claim that waited on a lock still
        -- gets a whole lease from the moment it is written.
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
        attempts = j.attempts + 1,
        started_at = now()
    WHERE j.id = ANY(ARRAY(
        SELECT due.id
        FROM priorities AS p
        CROSS JOIN LATERAL (
            SELECT id
            FROM job_queue
            WHERE state = 'pending'
              AND NOT limited
              AND priority = p.priority
              AND run_at <= now()
              AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
              AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                   OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
            ORDER BY run_at, id
            LIMIT %(limit)s
            FOR UPDATE SKIP LOCKED
        ) AS due
        WHERE p.priority IS NOT NULL
        LIMIT %(limit)s
    ))
    RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts, j.checkpoint,
              j.priority, j.run_at
), last_claimed AS (
    SELECT priority, run_at, id
    FROM claimed
    ORDER BY priority DESC, run_at DESC, id DESC
    LIMIT 1
)
SELECT id, queue, kind, payload, attempts, max_attempts, checkpoint, priority,
       EXISTS (
           SELECT
           FROM last_claimed AS l
           JOIN priorities AS p ON p.priority >= l.priority
           CROSS JOIN LATERAL (
               SELECT
               FROM job_queue AS n
               WHERE n.state = 'pending'
                 AND NOT n.limited
                 AND n.priority = p.priority
                 -- After the last claimed row in its priority, from the
                 -- start in the greater ones: a bound of the index's range
                 -- either way (an OR of the two would be a filter).
                 AND (n.run_at, n.id) > (
                     CASE WHEN p.priority = l.priority THEN l.run_at ELSE '-infinity' END,
                     CASE WHEN p.priority = l.priority THEN l.id ELSE -9223372036854775808 END)
                 AND n.run_at <= now()
                 AND (%(queues)s::text[] IS NULL OR n.queue = ANY(%(queues)s::text[]))
                 AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                      OR n.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
               ORDER BY n.run_at, n.id
               LIMIT 1
           ) AS left_over) AS more_due
FROM claimed
ORDER BY priority, run_at, id;

-- seconds_until_next_due --
-- How long until the earliest pending job of these queues is due (negative
-- when one is due already): an idle worker sleeps no longer than that. The
-- database's clock decides, so a skewed worker clock does not matter. A
-- paused queue's jobs are not waited for: `resume` wakes the workers. Nor
-- are the jobs of a limited kind at its limit: a slot of it that frees
-- wakes the workers (migrations/0004). Both lanes are walked one priority
-- at a time, as the claims do: the earliest run_at of each priority is the
-- first entry of its range of the index. The second
-- column says whether any kind is limited, so that a worker knows whether
-- to run claim_limited_jobs at all.
WITH RECURSIVE priorities AS (
    SELECT priority FROM job_queue_priorities
), lanes AS (
    SELECT l.kind,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND q.kind = l.kind) AS priority
    FROM job_queue_limits AS l
    WHERE l.max_running > (SELECT count(*) FROM job_queue AS r
                           WHERE r.state = 'running' AND r.limited AND r.kind = l.kind)
    UNION ALL
    SELECT lanes.kind,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND q.kind = lanes.kind
              AND q.priority > lanes.priority)
    FROM lanes
    WHERE lanes.priority IS NOT NULL
)
SELECT extract(epoch FROM least(
           (SELECT min((SELECT min(q.run_at)
                        FROM job_queue AS q
                        WHERE q.state = 'pending' AND NOT q.limited
                          AND q.priority = p.priority
                          AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
                          AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                               OR q.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))))
            FROM priorities AS p
            WHERE p.priority IS NOT NULL),
           (SELECT min((SELECT min(q.run_at)
                        FROM job_queue AS q
                        WHERE q.state = 'pending' AND q.limited
                          AND q.kind = lanes.kind AND q.priority = lanes.priority
                          AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
                          AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                               OR q.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))))
            FROM lanes
            WHERE lanes.priority IS NOT NULL))
       - clock_timestamp())::float8,
       EXISTS (SELECT FROM job_queue_limits);

-- lock_limited_claims --
-- Sent with claim_limited_jobs, before it, in one query string: PostgreSQL
-- runs the statements as one transaction, and the claim's snapshot is taken
-- after this lock is held (see there). Under READ COMMITTED whatever the
-- role's or database's default: under REPEATABLE READ the transaction's one
-- snapshot would be taken by the first statement, before the lock, and two
-- claims waiting on it would both count the same free slot. No JIT, as for
-- every worker session (db.JobStore.open), also on a --no-listen one.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCAL jit = off;
SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));

-- claim_limited_jobs --
-- The claim of the jobs of limited kinds (`@job(max_running=N)`, see
-- migrations/0004), never more than a kind's max_running running at once
-- across every worker of every supervisor. Why it cannot overshoot:
--
-- * Only this statement claims a limited job. The regular claim takes only
--   rows that are not `limited`, and the database keeps that column true
--   on every pending and running row of a limited kind: the route triggers
--   for rows inserted or retried, sync_limits for the rows already there
--   when a limit appears.
-- * This statement runs only after lock_limited_claims, an earlier
--   statement of its transaction. So limited claims run one at a time,
--   fleet-wide, and under READ COMMITTED each statement takes its snapshot
--   when it starts: this one's sees every earlier limited claim committed.
-- * It counts the kind's running rows in that snapshot. No row starts
--   running that it does not see (only a limited claim starts one, and none
--   runs beside it); a row that stopped running since is still counted,
--   which only leaves a slot for the next claim (the slot's notification
--   brings it). So it takes at most max_running minus those running.
--
-- The lock could not be taken inside this statement: its snapshot would be
-- older than the lock, and would miss a claim committed while it waited
-- (tests/integration/test_limits.py and tests/e2e/test_limits.py keep that
-- variant as a negative control, and it overshoots).
--
-- The lock serialises only the limited claims, each well under a
-- millisecond; workers run one only when a limited job may be due (see
-- Producer.claim_while_room in worker/producer.py), and only for the slots they have free, so a limited job never
-- holds a slot of its kind while it waits in a worker's reserve.
--
-- Each kind's pending rows are walked one priority at a time, as the
-- regular claim does, up to the kind's free slots; the kinds' due rows then
-- go by priority, run_at and id, up to the limit. more_due: more could run
-- than this claim took.
WITH RECURSIVE free AS (
    SELECT l.kind,
           l.max_running - (SELECT count(*) FROM job_queue AS r
                            WHERE r.state = 'running' AND r.limited AND r.kind = l.kind) AS slots
    FROM job_queue_limits AS l
), lanes AS (
    SELECT f.kind, f.slots,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND q.kind = f.kind) AS priority
    FROM free AS f
    WHERE f.slots > 0
    UNION ALL
    SELECT lanes.kind, lanes.slots,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND q.kind = lanes.kind
              AND q.priority > lanes.priority)
    FROM lanes
    WHERE lanes.priority IS NOT NULL
), candidates AS (
    SELECT due.id, due.priority, due.run_at, lanes.slots,
           row_number() OVER (PARTITION BY lanes.kind
                              ORDER BY due.priority, due.run_at, due.id) AS place
    FROM lanes
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at
        FROM job_queue
        WHERE state = 'pending'
          AND limited
          AND kind = lanes.kind
          AND priority = lanes.priority
          AND run_at <= now()
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
          AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
               OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
        ORDER BY run_at, id
        -- No lane locks more rows than the claim could take, and one more
        -- to tell whether more could run (more_due).
        LIMIT least(lanes.slots, %(limit)s + 1)
        FOR UPDATE SKIP LOCKED
    ) AS due
    WHERE lanes.priority IS NOT NULL
), chosen AS (
    SELECT id
    FROM candidates
    WHERE place <= slots
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
), claimed AS (
    -- The claim's write, as in claim_due_jobs: each claim stays one
    -- statement, planned and prepared whole.
    UPDATE job_queue AS j
    SET state = 'running',
        locked_by = %(claimant)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
        attempts = j.attempts + 1,
        started_at = now()
    WHERE j.id = ANY(ARRAY(SELECT id FROM chosen))
    RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts, j.checkpoint,
              j.priority, j.run_at
)
SELECT id, queue, kind, payload, attempts, max_attempts, checkpoint, priority,
       (SELECT count(*) FROM candidates WHERE place <= slots) > %(limit)s AS more_due
FROM claimed
ORDER BY priority, run_at, id;

-- renew_leases --
-- Fenced on the claimant: a lease another process took over is not renewed,
-- and the ids missing from the result tell the worker it lost them. A row
-- with a claimant and a lease is running (the table's CHECK
-- job_queue_claim_consistent), and the fence says so without naming the
-- state: with `state = 'running'` the prepared statement's generic plan
-- could read job_queue_leases, every running row of every worker, and
-- compare each with every id of the array (see record_successes).
UPDATE job_queue
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(%(ids)s::bigint[])
  AND locked_by = %(claimant)s
  AND lease_expires_at IS NOT NULL
RETURNING id, cancel_requested;

-- record_successes --
-- record_outcomes below, for the runs of a batch that returned (the others
-- go there). Without the per-row decision and its join, and with far less to
-- plan, the server spends much less on each job than the general statement
-- does. Fenced as renew_leases is, on the claimant and a lease rather than
-- on the state: the statistics of a table whose rows were all pending when
-- last analysed put the running rows at one, and a generic plan fenced on
-- the state takes job_queue_leases for the cheapest path to them, reading
-- every running row of the fleet for each write and comparing it with each
-- of the write's ids. Through the primary key, each id is one probe.
UPDATE job_queue
SET state = 'succeeded',
    finished_at = now(),
    last_error = NULL,
    locked_by = NULL,
    lease_expires_at = NULL
WHERE id = ANY(%(ids)s::bigint[])
  AND locked_by = %(claimant)s
  AND lease_expires_at IS NOT NULL
RETURNING id, state, kind;

-- record_outcomes --
-- The outcomes of a batch of runs in one statement, each fenced on the claim:
-- a row another process took over meanwhile is left alone, and its id is
-- missing from the result. A NULL error is a success. A failure goes back to
-- pending after its backoff, or ends failed on its last attempt or when the
-- handler asked for no retry, or cancelled when an operator asked for that.
-- A snoozed run (the handler raised Snooze) goes back to pending after its
-- delay with its attempt handed back and the last error kept. Successes go
-- to record_successes (db.JobStore.record_outcomes_of), so what comes here
-- is the failures and snoozes of a batch, usually few. The fence names a claimant
-- and a lease, not the state, as in record_successes, and the target rows
-- are named by their ids once more: with the state, the generic plan joins
-- every running row of the fleet with every outcome; without the ids, a
-- custom plan reads the whole table for the claimant's rows.
WITH outcome AS (
    SELECT *
    FROM unnest(%(ids)s::bigint[], %(errors)s::text[], %(retry_in_seconds)s::float8[],
                %(permanent)s::boolean[], %(snoozed)s::boolean[])
         AS o(id, error, retry_in_seconds, permanent, snoozed)
), decided AS (
    SELECT o.id, o.error, o.retry_in_seconds, o.snoozed,
           CASE WHEN j.cancel_requested AND (o.error IS NOT NULL OR o.snoozed) THEN 'cancelled'
                WHEN o.snoozed THEN 'pending'
                WHEN o.error IS NULL THEN 'succeeded'
                WHEN o.permanent OR j.attempts >= j.max_attempts THEN 'failed'
                ELSE 'pending' END AS state
    FROM outcome AS o JOIN job_queue AS j ON j.id = o.id
)
UPDATE job_queue AS j
SET state = d.state,
    run_at = CASE WHEN d.state = 'pending'
                  THEN now() + make_interval(secs => d.retry_in_seconds) ELSE j.run_at END,
    finished_at = CASE WHEN d.state = 'pending' THEN NULL ELSE now() END,
    attempts = CASE WHEN d.snoozed THEN greatest(j.attempts - 1, 0) ELSE j.attempts END,
    last_error = CASE WHEN d.snoozed THEN j.last_error ELSE d.error END,
    locked_by = NULL,
    lease_expires_at = NULL
FROM decided AS d
WHERE j.id = d.id
  AND j.id = ANY(%(ids)s::bigint[])
  AND j.locked_by = %(claimant)s
  AND j.lease_expires_at IS NOT NULL
RETURNING j.id, j.state, j.kind;

-- save_checkpoint --
UPDATE job_queue
SET checkpoint = %(checkpoint)s
WHERE id = %(id)s
  AND locked_by = %(claimant)s
  AND state = 'running'
RETURNING id;

-- release_claims_of --
-- A drain gives the jobs back unfinished: due again at once, and the attempt
-- is handed back too, because a deploy is not the job's failure.
UPDATE job_queue
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    finished_at = CASE WHEN cancel_requested THEN now() END,
    attempts = greatest(attempts - 1, 0),
    locked_by = NULL,
    lease_expires_at = NULL
WHERE locked_by = ANY(%(claimants)s::text[])
  AND state = 'running'
  AND (%(ids)s::bigint[] IS NULL OR id = ANY(%(ids)s::bigint[]))
RETURNING id;

-- release_claims_not_held --
-- After a lost connection: a claim whose reply was lost with it may have
-- committed. Whatever the claimant holds beyond the jobs it knows of is
-- such a claim, and goes back at once rather than at lease expiry.
UPDATE job_queue
SET state = 'pending',
    attempts = greatest(attempts - 1, 0),
    locked_by = NULL,
    lease_expires_at = NULL
WHERE locked_by = %(claimant)s
  AND state = 'running'
  AND NOT (id = ANY(%(held)s::bigint[]))
RETURNING id;

-- fail_claims_of_dead --
-- The claimant died running these jobs (killed, out of memory, crashed,
-- timed out). The attempt counts, so a job that kills its worker every time
-- runs out of attempts instead of crash-looping the fleet.
UPDATE job_queue
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN now() END,
    last_error = %(error)s,
    locked_by = NULL,
    lease_expires_at = NULL
WHERE locked_by = ANY(%(claimants)s::text[])
  AND state = 'running'
  AND id = ANY(%(ids)s::bigint[])
RETURNING id, state;

-- states_of_jobs --
-- Where the rows of a dead worker's written outcomes stand: its supervisor
-- counts in the fleet's metrics the runs the worker wrote but was killed
-- before counting.
SELECT id, state, kind
FROM job_queue
WHERE id = ANY(%(ids)s::bigint[]);

-- expire_stale_leases --
-- Any number of supervisors run this at once: SKIP LOCKED hands each batch to
-- one of them, and nobody waits on a lock another reaper holds.
WITH stale AS MATERIALIZED (
    SELECT id
    FROM job_queue
    WHERE state = 'running'
      AND lease_expires_at < now()
    ORDER BY lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE job_queue AS j
SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                 WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                       THEN now() END,
    last_error = 'lease of ' || j.locked_by || ' expired at ' || j.lease_expires_at::text,
    locked_by = NULL,
    lease_expires_at = NULL
FROM stale
WHERE j.id = stale.id
RETURNING j.id, j.state;

-- enqueue_jobs --
-- Any number of jobs in one statement (db.enqueue_jobs), in whatever
-- transaction the caller's connection is in; each array holds one value a
-- job. Each (queue, unique key) comes once (enqueue_jobs sends a key once),
-- so a keyed row is found in the result by its key.
--
-- A unique key another pending or running job of the queue holds inserts
-- nothing, and that job is missing from the result; any other conflict is
-- still an error. A holder not committed yet makes the statement wait for
-- its transaction, as with any unique index: it conflicts once the holder
-- commits, and inserts if the holder rolls back.
--
-- An INSERT ... SELECT cannot say DEFAULT for some of its rows only, so a
-- job without max_attempts gets the column's default as the catalog holds
-- it: the schema stays the one home of that number.
--
-- The rows draw their ids in the order given (an INSERT ... SELECT ...
-- ORDER BY draws identity values in that order: SQLAlchemy's bulk inserts
-- rely on it too), and the result is sorted by id, so its n-th row without
-- a unique key belongs to the n-th such job given. A delay counts from
-- statement_timestamp(), not now(): in a transaction that has been open for
-- a while, from the enqueue rather than from BEGIN.
WITH inserted AS (
    INSERT INTO job_queue (kind, payload, queue, run_at, priority, unique_key, max_attempts)
    SELECT j.kind, j.payload, j.queue,
           coalesce(j.run_at, statement_timestamp() + make_interval(secs => j.delay_seconds)),
           j.priority, j.unique_key,
           coalesce(j.max_attempts,
                    (SELECT pg_get_expr(d.adbin, d.adrelid)::integer
                     FROM pg_attrdef AS d
                     JOIN pg_attribute AS a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                     WHERE d.adrelid = 'job_queue'::regclass AND a.attname = 'max_attempts'))
    FROM unnest(%(kind)s::text[], %(payload)s::jsonb[], %(queue)s::text[],
                %(run_at)s::timestamptz[], %(delay_seconds)s::float8[],
                %(priority)s::smallint[], %(unique_key)s::text[], %(max_attempts)s::integer[])
         WITH ORDINALITY AS j(kind, payload, queue, run_at, delay_seconds, priority, unique_key,
                              max_attempts, position)
    ORDER BY j.position
    ON CONFLICT (queue, unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING id, queue, unique_key
)
SELECT id, queue, unique_key FROM inserted ORDER BY id;

-- jobs_holding_unique_keys --
-- The pending or running job holding each (queue, unique key), for the jobs
-- enqueue_jobs skipped. A key missing from the result was freed meanwhile
-- (its holder finished): enqueue_jobs inserts that job again.
SELECT k.queue, k.unique_key, j.id
FROM unnest(%(queue)s::text[], %(unique_key)s::text[]) AS k(queue, unique_key)
JOIN job_queue AS j
  ON j.queue = k.queue AND j.unique_key = k.unique_key AND j.state IN ('pending', 'running');

-- database_now --
SELECT clock_timestamp();

-- enqueue_scheduled --
-- One scheduled instant of a kind, enqueued by whichever supervisor gets
-- here first: the upsert advances the kind's row only to a later instant,
-- and a second supervisor with the same instant waits on the row's lock,
-- then finds it advanced and inserts nothing. A kind seen for the first time
-- gets its row and no job (the upsert inserted rather than updated: xmax is
-- 0): it starts with its next instant, not with one that passed before it
-- was deployed.
WITH advanced AS (
    INSERT INTO job_queue_schedules AS s (kind, spec, last_instant)
    VALUES (%(kind)s, %(spec)s, %(instant)s)
    ON CONFLICT (kind) DO UPDATE
        SET last_instant = excluded.last_instant, spec = excluded.spec, updated_at = now()
        WHERE s.last_instant < excluded.last_instant
    RETURNING kind, xmax = 0 AS first_sight
)
INSERT INTO job_queue (kind, payload, unique_key)
SELECT %(kind)s, jsonb_build_object('scheduled_for', %(instant_text)s::text),
       'schedule:' || %(kind)s || ':' || %(instant_text)s
FROM advanced
WHERE NOT first_sight
ON CONFLICT (queue, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
RETURNING id;

-- schedules --
SELECT kind, spec, last_instant FROM job_queue_schedules ORDER BY kind;

-- limits --
SELECT kind, max_running FROM job_queue_limits ORDER BY kind;

-- lock_limits_sync --
-- Workers of every supervisor write the limits of their registry when they
-- start (db.JobStore.sync_limits); one at a time, and one that finds
-- another at it does not wait (it looks again later). READ COMMITTED, so
-- that the reroute's statements see what committed while they waited.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT pg_try_advisory_xact_lock(hashtext('motir_supervisor.limits_sync'));

-- lock_job_queue_for_routing --
-- Before a kind changes lanes (its limit appears or goes): SHARE ROW
-- EXCLUSIVE waits for every transaction writing job_queue to end and keeps
-- new writes out until the reroute commits. So no insert can route a row by
-- the limits as they were and commit after the reroute read the rows: one
-- that committed before is rerouted, one after reads the new limits. It
-- holds the fleet's claims for as long as the reroute takes (one UPDATE of
-- that kind's pending and running rows), which happens once per change of
-- a limit's existence, not per start. While the lock request waits, every
-- write to job_queue queues behind it, claims and outcomes included; so it
-- waits at most 100 ms for a transaction that keeps job_queue locked (one
-- left idle in a transaction after an insert), and the worker tries again
-- later, backing off.
SET LOCAL lock_timeout = '100ms';
LOCK TABLE job_queue IN SHARE ROW EXCLUSIVE MODE;

-- set_limit --
INSERT INTO job_queue_limits (kind, max_running) VALUES (%(kind)s, %(max_running)s)
ON CONFLICT (kind) DO UPDATE SET max_running = excluded.max_running, updated_at = now()
WHERE job_queue_limits.max_running <> excluded.max_running;

-- drop_limit --
DELETE FROM job_queue_limits WHERE kind = %(kind)s;

-- analyze_limits --
-- The table is a few rows, too few ever to reach autovacuum's threshold:
-- without statistics the planner takes it for some thousand rows, and on
-- that estimate compiles claim_limited_jobs with JIT, which takes far
-- longer than the claim itself. Its writer refreshes them.
ANALYZE job_queue_limits;

-- route_kind --
-- The update names neither state nor kind: no trigger of job_queue fires.
UPDATE job_queue
SET limited = %(limited)s
WHERE kind = %(kind)s
  AND state IN ('pending', 'running')
  AND limited <> %(limited)s;

-- status_limits --
SELECT l.kind, l.max_running,
       (SELECT count(*) FROM job_queue AS r
        WHERE r.state = 'running' AND r.limited AND r.kind = l.kind)
FROM job_queue_limits AS l
ORDER BY l.kind;

-- cancel_job --
-- Pending or failed: cancelled now. Running: flagged, so that its worker
-- stops it (see migrations/0002). Returns the state the job was in, so the
-- command can say what happened; nothing for an unknown id.
WITH target AS (
    SELECT id, state FROM job_queue WHERE id = %(id)s FOR UPDATE
), changed AS (
    UPDATE job_queue AS j
    SET state = CASE WHEN t.state = 'running' THEN 'running' ELSE 'cancelled' END,
        finished_at = CASE WHEN t.state = 'running' THEN j.finished_at ELSE now() END,
        cancel_requested = (t.state = 'running')
    FROM target AS t
    WHERE j.id = t.id AND t.state IN ('pending', 'failed', 'running')
    RETURNING j.id
)
SELECT t.state, EXISTS (SELECT 1 FROM changed) FROM target AS t;

-- retry_job --
-- A failed or cancelled job gets a fresh set of attempts, due now, unless
-- another pending or running job holds its unique key: that one's id comes
-- back instead (the unique index would refuse the update anyway).
WITH target AS (
    SELECT id, state, queue, unique_key FROM job_queue WHERE id = %(id)s FOR UPDATE
), holder AS (
    SELECT o.id
    FROM job_queue AS o, target AS t
    WHERE t.unique_key IS NOT NULL AND o.queue = t.queue AND o.unique_key = t.unique_key
      AND o.state IN ('pending', 'running') AND o.id <> t.id
), changed AS (
    UPDATE job_queue AS j
    SET state = 'pending', run_at = now(), attempts = 0, finished_at = NULL,
        cancel_requested = false
    FROM target AS t
    WHERE j.id = t.id AND t.state IN ('failed', 'cancelled')
      AND NOT EXISTS (SELECT FROM holder)
    RETURNING j.id
)
SELECT t.state, EXISTS (SELECT 1 FROM changed), (SELECT id FROM holder LIMIT 1)
FROM target AS t;

-- retry_failed_of_kind --
-- A failed job whose unique key a newer job holds stays failed: that newer
-- job is the one to run (and the unique index would refuse the update). A
-- job enqueued with the key while this runs makes it fail on the index:
-- the command says so, and nothing is changed.
UPDATE job_queue AS j
SET state = 'pending', run_at = now(), attempts = 0, finished_at = NULL,
    cancel_requested = false
WHERE j.kind = %(kind)s AND j.state = 'failed'
  AND (j.unique_key IS NULL OR (
      NOT EXISTS (SELECT FROM job_queue AS o
                  WHERE o.queue = j.queue AND o.unique_key = j.unique_key
                    AND o.state IN ('pending', 'running'))
      -- Of several failed jobs with one key, only the newest is retried.
      AND j.id = (SELECT max(o.id) FROM job_queue AS o
                  WHERE o.queue = j.queue AND o.unique_key = j.unique_key
                    AND o.kind = j.kind AND o.state = 'failed')))
RETURNING j.id;

-- pause_queue --
INSERT INTO job_queue_paused (queue) VALUES (%(queue)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- resume_queue --
-- A trigger (migrations/0003) wakes the workers.
DELETE FROM job_queue_paused WHERE queue = %(queue)s RETURNING queue;

-- paused_queues --
SELECT queue, extract(epoch FROM now() - paused_at)
FROM job_queue_paused
ORDER BY queue;

-- prune_finished --
-- One small batch per statement: retention never holds many row locks or
-- runs long, and SKIP LOCKED keeps concurrent pruners out of each other's way.
DELETE FROM job_queue
WHERE id IN (
    SELECT id FROM job_queue
    WHERE state IN ('succeeded', 'cancelled')
      AND finished_at < now() - make_interval(secs => %(older_than_seconds)s)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- status_counts --
SELECT queue, state, count(*)
FROM job_queue
GROUP BY queue, state
ORDER BY queue, state;

-- status_oldest_due --
-- Each priority of the regular lane through the claim's index, as
-- seconds_until_next_due walks it; the limited lane is read whole (it is
-- the index of a few kinds' rows).
WITH priorities AS (
    SELECT priority FROM job_queue_priorities
)
SELECT extract(epoch FROM now() - least(
    (SELECT min((SELECT min(q.run_at) FROM job_queue AS q
                 WHERE q.state = 'pending' AND NOT q.limited AND q.priority = p.priority
                   AND q.run_at <= now()))
     FROM priorities AS p WHERE p.priority IS NOT NULL),
    (SELECT min(run_at) FROM job_queue
     WHERE state = 'pending' AND limited AND run_at <= now())));

-- status_running --
SELECT id, queue, kind, attempts, locked_by,
       extract(epoch FROM lease_expires_at - now()) AS lease_left
FROM job_queue
WHERE state = 'running'
ORDER BY started_at, id;

-- status_expired_leases --
SELECT count(*)
FROM job_queue
WHERE state = 'running' AND lease_expires_at < now();

-- lock_migrations --
-- Two deploys migrating at once: the second waits here, then finds the work done.
SELECT pg_advisory_lock(hashtext('motir_supervisor.migrate'));

-- unlock_migrations --
SELECT pg_advisory_unlock(hashtext('motir_supervisor.migrate'));

-- create_migrations_table --
CREATE TABLE IF NOT EXISTS motir_schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- applied_migrations --
SELECT version FROM motir_schema_migrations ORDER BY version;

-- schema_version --
SELECT coalesce(max(version), 0) FROM motir_schema_migrations;

-- record_migration --
INSERT INTO motir_schema_migrations (version, name) VALUES (%(version)s, %(name)s);
