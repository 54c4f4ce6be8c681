-- Every statement the package runs, as named blocks: a line "-- name --"
-- starts a block. Python code looks them up by name (see db/statements.py)
-- and never builds SQL text. Parameters are psycopg2 %(name)s placeholders;
-- the columns a statement returns are read by their names.
--
-- After its name, a block's first line may declare how it is sent, in parts
-- separated by ";" (as "-- claim_limited_jobs -- prepared; after: ..."):
--   prepared      each worker connection prepares it on first use (none
--                 does under --no-listen);
--   after: a, b   the blocks a and b go before it, in the same query
--                 string, hence in the same implicit transaction (a
--                 prepared statement cannot hold two statements);
--   plan: a       once prepared, its plan is made at once by an EXPLAIN of
--                 it sent after the block a (see generic_plan).
-- Nothing else is sent with a statement.

-- listen --
-- Workers hear the job_queue triggers' wake-ups on this channel (see
-- migrations/0001; db.WAKEUP_CHANNEL names it for tests and tools).
LISTEN motir_job_queue;

-- no_jit --
SET jit = off;

-- read_committed --
-- Sent before each statement that ends runs, and before a queue's pause and
-- resume, in one query string (their headers say so): the triggers a freed
-- slot and a pause or resume fire (migrations/0008 and 0011) look again,
-- after the claims' lock, at what a claim committed meanwhile, which a
-- transaction's single snapshot under REPEATABLE READ (a role's or
-- database's default) would not show, and the hand-on locks rows that
-- claims may have changed since its snapshot.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;

-- claim_due_jobs -- prepared
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
              j.priority, j.run_at, j.trace_context
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
           ) AS left_over) AS more_due,
       -- How long it had been due when claimed (the wait an SLO watches).
       extract(epoch FROM statement_timestamp() - run_at)::float8 AS waited, trace_context,
       -- Regular jobs have no limits, hence no generation of them.
       NULL::bigint AS generation
FROM claimed
ORDER BY priority, run_at, id;

-- seconds_until_next_due -- prepared
-- How long until the earliest pending job of these queues is due (negative
-- when one is due already): an idle worker sleeps no longer than that. The
-- database's clock decides, so a skewed worker clock does not matter. A
-- paused queue's jobs are not waited for: `resume` wakes the workers. Nor
-- are the jobs of a limited kind at its max_running, nor those of a full
-- key (parked, or among the first rows of the kind's lane): a slot of
-- either that frees wakes the workers (migrations/0004), and the claim
-- then walks past the full keys' rows to any key with room behind them
-- (see claim_limited_jobs). A rate-limited kind's jobs are waited for until
-- its next allowance, when the oldest start that keeps it full leaves its
-- window. Both lanes are walked one priority at a time, as the claims do:
-- the earliest run_at of each priority is the first entry of its range of
-- the index. The second column says whether any kind is limited, so that a
-- worker knows whether to run claim_limited_jobs at all.
WITH RECURSIVE priorities AS (
    SELECT priority FROM job_queue_priorities
), allowances AS (
    -- When a rate-limited kind may start again: NULL while it may now.
    SELECT l.kind,
           (SELECT s.started_at + make_interval(secs => l.rate_seconds)
            FROM job_queue_starts AS s
            WHERE s.kind = l.kind
              AND s.started_at > clock_timestamp() - make_interval(secs => l.rate_seconds)
            ORDER BY s.started_at DESC
            OFFSET l.rate_limit - 1
            LIMIT 1) AS allowed_at
    FROM job_queue_limits AS l
    WHERE l.rate_limit IS NOT NULL
), lanes AS (
    SELECT l.kind, l.max_running_per_key AS per_key,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND NOT q.parked AND q.kind = l.kind) AS priority,
           (SELECT a.allowed_at FROM allowances AS a WHERE a.kind = l.kind) AS allowed_at
    FROM job_queue_limits AS l
    WHERE l.max_running IS NULL
       OR l.max_running > (SELECT count(*) FROM job_queue AS r
                           WHERE r.state = 'running' AND r.limited AND r.kind = l.kind)
    UNION ALL
    SELECT lanes.kind, lanes.per_key,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND NOT q.parked AND q.kind = lanes.kind
              AND q.priority > lanes.priority),
           lanes.allowed_at
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
           (SELECT min((SELECT greatest(CASE WHEN bool_or(first.room)
                                                   THEN min(first.run_at) FILTER (WHERE first.room)
                                                   -- Due rows of full keys and no more: a
                                                   -- claim parks those whose runs have
                                                   -- settled, and walks past the others
                                                   -- to any key with room behind them
                                                   -- (see claim_limited_jobs): the second
                                                   -- here is its `settled` one.
                                                   WHEN count(*) FILTER (
                                                            WHERE first.run_at <= now()) = 64
                                                   THEN greatest(min(first.settles_at), now())
                                                   END,
                                              lanes.allowed_at)
                        FROM (SELECT q.run_at,
                                     lanes.per_key IS NULL OR q.concurrency_key IS NULL
                                     OR lanes.per_key > (SELECT count(*) FROM job_queue AS r
                                                         WHERE r.state = 'running'
                                                           AND r.concurrency_key IS NOT NULL
                                                           AND r.kind = lanes.kind
                                                           AND r.concurrency_key = q.concurrency_key)
                                         AS room,
                                     (SELECT max(r.started_at) FROM job_queue AS r
                                      WHERE r.state = 'running' AND r.concurrency_key IS NOT NULL
                                        AND r.kind = lanes.kind
                                        AND r.concurrency_key = q.concurrency_key)
                                     + interval '1 second' AS settles_at
                              FROM job_queue AS q
                              WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                                AND q.kind = lanes.kind AND q.priority = lanes.priority
                                AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
                                AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                                     OR q.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
                              ORDER BY q.run_at, q.id
                              LIMIT 64) AS first
                        HAVING bool_or(first.room) OR count(*) FILTER (
                                   WHERE first.run_at <= now()) = 64))
            FROM lanes
            WHERE lanes.priority IS NOT NULL),
           -- Parked rows of a kind out of allowance: when it comes back (a
           -- key with room that frees up notifies; an allowance does not).
           (SELECT min(a.allowed_at) FROM allowances AS a
            WHERE EXISTS (SELECT FROM job_queue AS q
                          WHERE q.state = 'pending' AND q.parked AND q.kind = a.kind)))
       - clock_timestamp())::float8 AS seconds,
       EXISTS (SELECT FROM job_queue_limits) AS any_limited;

-- lock_limited_claims --
-- Sent with claim_limited_jobs, before it, in one query string: PostgreSQL
-- runs the statements as one transaction, and the claim's snapshot is taken
-- after this lock is held (see there). Under READ COMMITTED whatever the
-- role's or database's default: under REPEATABLE READ the transaction's one
-- snapshot would be taken by the first statement, before the lock, and two
-- claims waiting on it would both count the same free slot. No JIT, as for
-- every worker session (db.Session.open), also on a --no-listen one. The
-- claim's generic plan from its first run (see generic_plan).
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SET LOCAL jit = off;
SET LOCAL plan_cache_mode = force_generic_plan;
SELECT pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));

-- claim_limited_jobs -- prepared; after: lock_limited_claims; plan: generic_plan
-- The claim of the jobs of limited kinds (migrations/0004 and 0007): never
-- more than a kind's max_running running at once, never more than its
-- max_running_per_key running at once with one concurrency_key, and never
-- more than its rate_limit starts in any window of its rate_seconds, across
-- every worker of every supervisor. docs/internals.md ("Limited claims")
-- gives the argument; here it rests on four things:
-- * The snapshot. Only this statement claims a limited job (but for a
--   key's slot handed on, which replaces a running row with the next in one
--   transaction), and it runs after lock_limited_claims, an earlier
--   statement of its transaction, under READ COMMITTED: limited claims run
--   one at a time, fleet-wide, and this one's snapshot sees every earlier
--   one committed. The lock could not be taken inside this statement: its
--   snapshot would be older than the lock, and miss a claim committed while
--   it waited.
-- * Slots and starts counted in that snapshot (kinds): a slot is a running
--   row, of the kind or of the key; a start is a row of job_queue_starts,
--   stamped with one clock reading taken after the lock (clock) and written
--   with the claim. A retry is a new claim, hence a start.
-- * Rows of one key ranked together (ranked), so that the claim takes no
--   more than the key's room, whichever way it found them.
-- * Rows read without locks, and only those taken locked and checked again
--   (locked): one the claim cannot lock, or that changed, is left out; the
--   claim takes fewer, never others. Locking only these does not make the
--   lock needless: a row that falls due or comes in ahead between two
--   claims' snapshots sends them to different rows, each counting the same
--   free slots. The negative controls of tests/integration/test_limits.py
--   and tests/e2e/test_limits.py run this claim without the lock, or with
--   it inside, locking rows as it reads them, and it overshoots.
--
-- Workers run it only when a limited job may be due (see
-- Producer.claim_while_room). A kind with max_running or a rate limit is
-- claimed only for the worker's free slots (%(free)s): one waiting in a
-- worker's reserve would hold a slot of the whole kind, or a start, while
-- it does not run. A kind limited per key only is claimed for the reserve
-- too (up to %(limit)s): such a job holds only its own key's slot.
--
-- The steps, in order (-> the steps that read each):
--   clock       the claim's one clock reading -> kinds, head, the writes
--   kinds       each limited kind's limits, generation and slots (what it
--               may still start, fleet-wide) -> every step after it
--   lanes       each kind's priorities with pending rows, ascending -> head
--   head        the lane's head: each kind's first due rows, one priority
--               at a time, with their key's room -> walk, candidates, more
--   walk        the walk of a kind limited per key, one row per key, from
--               its key_cursor round to it (job_queue_walk_next_key, its
--               room, job_queue_key_takeable) -> candidates, moved, more
--   candidates  the head's rows, and each key the walk found: its rows up
--               to its room (job_queue_key_parked_rows and
--               job_queue_key_lane_rows) -> ranked
--   ranked      the candidates numbered within their key -> eligible, clogged
--   eligible    those within their key's room and their kind's slots ->
--               chosen, more
--   chosen      those taken: by priority, run_at and id, up to %(limit)s,
--               of strict kinds up to %(free)s -> locked, clogged, parked_now
--   locked      the chosen rows locked and checked again -> claimed, more
--   clogged     the full keys whose rows leave the lane -> parked_now
--   parked_now  (write) their rows parked -> more
--   claimed     (write) the claim, as claim_due_jobs writes it
--   started     (write) the rate limit's starts
--   forgotten   (write) the starts that left their window deleted
--   moved       (write) each kind's key_cursor where its walk stopped
--   more        more_due -> the result
-- The result: the jobs claimed, in due order, each with the generation of
-- its kind's limits in this snapshot (migrations/0013; the worker hands it
-- back when the run ends: see record_successes_handing_on), and more_due
-- in every row: one row of NULLs with it when nothing was claimed.
WITH RECURSIVE clock AS MATERIALIZED (
    SELECT clock_timestamp() AS now
), kinds AS MATERIALIZED (
    -- slots: what the kind may still start, fleet-wide; more than the
    -- claim could take for a kind limited per key only.
    SELECT l.kind, l.max_running_per_key AS per_key, l.key_cursor, l.rate_limit,
           l.rate_seconds, l.max_running IS NOT NULL OR l.rate_limit IS NOT NULL AS strict,
           l.generation,
           coalesce(least(l.max_running - (SELECT count(*) FROM job_queue AS r
                                           WHERE r.state = 'running' AND r.limited
                                             AND r.kind = l.kind),
                          l.rate_limit - (SELECT count(*) FROM job_queue_starts AS s, clock AS c
                                          WHERE s.kind = l.kind
                                            AND s.started_at > c.now - make_interval(
                                                secs => l.rate_seconds))),
                    %(limit)s::integer + 1) AS slots
    FROM job_queue_limits AS l
), lanes AS (
    -- One hop from each priority to the next, one index probe each.
    SELECT k.kind, k.slots, k.per_key,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND NOT q.parked AND q.kind = k.kind) AS priority
    FROM kinds AS k
    WHERE k.slots > 0
    UNION ALL
    SELECT lanes.kind, lanes.slots, lanes.per_key,
           (SELECT min(q.priority) FROM job_queue AS q
            WHERE q.state = 'pending' AND q.limited AND NOT q.parked AND q.kind = lanes.kind
              AND q.priority > lanes.priority)
    FROM lanes
    WHERE lanes.priority IS NOT NULL
), head AS MATERIALIZED (
    -- The lane's head, each kind one priority at a time in due order, up
    -- to what the kind may take and one more (more_due), twice that for a
    -- kind limited per key, whose rows of full keys are passed over. Read
    -- without locks: see locked. key_room: NULL where no per-key limit
    -- applies (no limit, or no key). settled: the key's runs all started
    -- a second ago or more (see clogged; seconds_until_next_due comes back
    -- when that second is up).
    SELECT due.id, lanes.kind, due.concurrency_key AS key, due.priority, due.run_at,
           CASE WHEN lanes.per_key IS NOT NULL AND due.concurrency_key IS NOT NULL THEN
               lanes.per_key - running.count
           END AS key_room,
           running.latest IS NULL
               OR running.latest <= (SELECT now FROM clock) - interval '1 second' AS settled
    FROM lanes
    CROSS JOIN LATERAL (
        SELECT id, concurrency_key, priority, run_at
        FROM job_queue
        WHERE state = 'pending'
          AND limited
          AND NOT parked
          AND kind = lanes.kind
          AND priority = lanes.priority
          AND run_at <= now()
          AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
          AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
               OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
        ORDER BY run_at, id
        LIMIT least(lanes.slots, %(limit)s) * CASE WHEN lanes.per_key IS NULL THEN 1 ELSE 2 END + 1
    ) AS due
    CROSS JOIN LATERAL (
        SELECT count(*) AS count, max(r.started_at) AS latest
        FROM job_queue_key_runs(lanes.kind, due.concurrency_key, lanes.per_key) AS r
        WHERE lanes.per_key IS NOT NULL
    ) AS running
    WHERE lanes.priority IS NOT NULL
), walk AS (
    -- One row per key looked at: from the key after the kind's key_cursor
    -- to the last, then from the first to the cursor (the second lap, when
    -- `wrapped`), each key once; the next claim goes on where this one
    -- stopped (moved), so every key gets its turn. The keys of the parked
    -- rows; and when the lane's head showed the kind nothing to take
    -- (`lane_too`: its rows are all of full keys), the keys of the lane's
    -- rows too, so that a key with room behind them is reached without
    -- reading them again. A full key costs a few probes, one with room no
    -- more than its first rows (job_queue_walk_next_key and
    -- job_queue_key_takeable, migrations/0015). A key counts as found when
    -- it has room and a row this claim may take (due, of a queue it
    -- serves, not paused). The walk stops once the keys found fill what the
    -- kind may take, or a few dozen keys later (a few hundred past a head
    -- of full keys). It starts from a row of no key (visits 0)
    -- at the cursor, or at '' (before every key: a key is never empty) when
    -- there is none.
    SELECT k.kind, k.per_key, k.slots, k.key_cursor AS start,
           coalesce(k.key_cursor, '') AS key, false AS wrapped, 0::bigint AS room,
           false AS took, 0 AS found, 0 AS passed, 0 AS visits, lane_too.lane_too,
           least(k.slots, %(limit)s) + CASE WHEN lane_too.lane_too THEN 256 ELSE 32 END AS budget
    FROM kinds AS k
    CROSS JOIN LATERAL (
        SELECT NOT EXISTS (SELECT FROM head AS h
                           WHERE h.kind = k.kind AND (h.key_room IS NULL OR h.key_room > 0))
                   AS lane_too
    ) AS lane_too
    WHERE k.slots > 0 AND k.per_key IS NOT NULL
    UNION ALL
    SELECT w.kind, w.per_key, w.slots, w.start, step.key, step.wrapped, room.room,
           take.takeable, w.found + take.takeable::integer,
           -- Passed: a key with room and nothing this claim may take among
           -- its parked rows (of a queue paused or not served, say); keys
           -- of the lane alone are not counted (see more).
           w.passed + (room.room > 0 AND NOT take.takeable AND (
               NOT w.lane_too OR EXISTS (SELECT FROM job_queue AS p
                                         WHERE p.state = 'pending' AND p.parked
                                           AND p.kind = w.kind
                                           AND p.concurrency_key = step.key)))::integer,
           w.visits + 1, w.lane_too, w.budget
    FROM walk AS w
    CROSS JOIN LATERAL job_queue_walk_next_key(w.kind, w.key, w.start, w.wrapped,
                                               w.lane_too) AS step
    CROSS JOIN LATERAL (
        -- A step of its own too (see job_queue_walk_next_key).
        SELECT w.per_key - (SELECT count(*) FROM job_queue_key_runs(w.kind, step.key, w.per_key))
                   AS room
        OFFSET 0
    ) AS room
    CROSS JOIN LATERAL job_queue_key_takeable(w.kind, step.key, room.room, w.lane_too,
                                              %(queues)s::text[]) AS take
    WHERE w.key IS NOT NULL
      AND w.found < least(w.slots, %(limit)s)
      AND w.visits < w.budget
), candidates AS (
    SELECT h.id, h.kind, h.key, h.priority, h.run_at, false AS was_parked, h.key_room, h.settled
    FROM head AS h
    UNION ALL
    -- A key the walk found: its rows in due order, as many as its room,
    -- from the parked rows and, past a head of full keys, from the lane.
    SELECT due.id, w.kind, w.key, due.priority, due.run_at, true, w.room, false
    FROM walk AS w
    CROSS JOIN LATERAL job_queue_key_parked_rows(w.kind, w.key, w.room, %(queues)s::text[]) AS due
    WHERE w.took
    UNION ALL
    SELECT due.id, w.kind, w.key, due.priority, due.run_at, false, w.room, false
    FROM walk AS w
    CROSS JOIN LATERAL job_queue_key_lane_rows(w.kind, w.key, w.room, %(queues)s::text[]) AS due
    WHERE w.took AND w.lane_too
), ranked AS MATERIALIZED (
    -- Each key's rows numbered together, whichever way they were found:
    -- the walk's rows of a key are never the head's (the walk takes the
    -- lane's rows only when the head's keys are all full).
    SELECT c.id, c.kind, c.key, c.priority, c.run_at, c.was_parked, k.slots, k.strict,
           c.key_room, c.settled,
           row_number() OVER (PARTITION BY c.kind, c.key
                              ORDER BY c.priority, c.run_at, c.id) AS key_place
    FROM candidates AS c
    JOIN kinds AS k ON k.kind = c.kind
), eligible AS (
    SELECT id, kind, key, priority, run_at, strict
    FROM (SELECT id, kind, key, priority, run_at, strict, slots,
                 row_number() OVER (PARTITION BY kind ORDER BY priority, run_at, id) AS place
          FROM ranked
          WHERE key_room IS NULL OR key_place <= key_room) AS by_kind
    WHERE place <= slots
), chosen AS MATERIALIZED (
    -- The worker's free slots are shared by the strict kinds' rows.
    SELECT id, kind, key
    FROM (SELECT id, kind, key, priority, run_at, strict,
                 row_number() OVER (PARTITION BY strict ORDER BY priority, run_at, id) AS place
          FROM eligible) AS e
    WHERE NOT strict OR place <= %(free)s
    ORDER BY priority, run_at, id
    LIMIT %(limit)s
), locked AS MATERIALIZED (
    -- The rows were read without locks, and only the ones taken are locked,
    -- so that the claim never holds the rows of full keys it read past,
    -- which those keys' hand-ons take next. Once locked, a row is checked
    -- again as the read chose it (its latest version: still pending, due,
    -- of a queue served and not paused, of the same kind and key, whose
    -- room the claim counted); one that changed, or that another statement
    -- holds, is left for the next claim.
    SELECT c.id
    FROM chosen AS c
    JOIN LATERAL (SELECT FROM job_queue AS q
                  WHERE q.id = c.id AND q.state = 'pending' AND q.limited
                    AND q.kind = c.kind AND q.concurrency_key IS NOT DISTINCT FROM c.key
                    AND q.run_at <= now()
                    AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
                    AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                         OR q.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
                  FOR UPDATE SKIP LOCKED) AS still ON true
), clogged AS (
    -- Keys without room with many rows in what the lane showed this claim:
    -- a deep backlog of one key, which every claim would read again. Their
    -- rows leave the lane, all of them at once (up to a bound per claim),
    -- and are found by key once it has room (the walk), and the key's
    -- first parked row comes back to the lane when its slot frees
    -- (migrations/0008).
    SELECT DISTINCT r.kind, r.key
    FROM ranked AS r
    WHERE NOT r.was_parked AND r.key_place > r.key_room + 16
      -- Full once this claim's rows run: a key with room left (its rows
      -- crowded out by others) stays in the lane, where it is found.
      AND r.key_room <= (SELECT count(*) FROM chosen AS c JOIN ranked AS o ON o.id = c.id
                         WHERE o.kind = r.kind AND o.key = r.key)
    UNION
    -- A claim that found nothing to take in the head parks the full keys
    -- it passed over whose runs have all gone on for a second (`settled`),
    -- each with all its rows: the claims after it read past them. A key
    -- whose run started since is left in the lane: its runs follow each
    -- other (a key's slot handed on takes its next row from the lane), and
    -- setting its rows aside would cost a write per row for nothing; the
    -- walk of the lane's keys reaches any key with room behind it.
    SELECT r.kind, r.key
    FROM ranked AS r
    WHERE NOT r.was_parked AND r.key_place > r.key_room AND r.settled
      AND NOT EXISTS (SELECT FROM ranked AS o
                      WHERE NOT o.was_parked
                        AND (o.key_room IS NULL OR o.key_place <= o.key_room))
), parked_now AS (
    UPDATE job_queue
    SET parked = true
    WHERE id = ANY(ARRAY(
        SELECT q.id
        FROM clogged AS c
        CROSS JOIN LATERAL (
            SELECT id FROM job_queue
            WHERE state = 'pending' AND limited AND NOT parked
              AND concurrency_key IS NOT NULL
              AND kind = c.kind AND concurrency_key = c.key AND run_at <= now()
              AND id <> ALL (ARRAY(SELECT id FROM chosen))
            LIMIT 10000
            FOR UPDATE SKIP LOCKED
        ) AS q
        LIMIT 10000))
    RETURNING id
), claimed AS (
    -- The claim's write, as in claim_due_jobs; started_at is the start the
    -- rate limit counted.
    UPDATE job_queue AS j
    SET state = 'running',
        parked = false,
        locked_by = %(claimant)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
        attempts = j.attempts + 1,
        started_at = (SELECT now FROM clock)
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts, j.checkpoint,
              j.priority, j.run_at, j.trace_context
), started AS (
    INSERT INTO job_queue_starts (kind, started_at)
    SELECT c.kind, clock.now
    FROM claimed AS c
    JOIN kinds AS k ON k.kind = c.kind
    CROSS JOIN clock
    WHERE k.rate_limit IS NOT NULL
), forgotten AS (
    -- Starts that left their window count no more.
    DELETE FROM job_queue_starts AS s
    USING kinds AS k, clock
    WHERE s.kind = k.kind AND k.rate_limit IS NOT NULL
      AND s.started_at <= clock.now - make_interval(secs => k.rate_seconds)
), moved AS (
    UPDATE job_queue_limits AS l
    SET key_cursor = last.key
    FROM (SELECT DISTINCT ON (kind) kind, key FROM walk ORDER BY kind, visits DESC) AS last
    WHERE l.kind = last.kind AND l.key_cursor IS DISTINCT FROM last.key
), more AS (
    -- More could run than this claim took, or it parked rows, or cut its
    -- walk of the keys short, or took rows and passed over full keys in a
    -- head whose lane's keys it did not walk. Rows chosen, not those
    -- locked: a row another statement holds is not looked for again at once.
    SELECT (SELECT count(*) FROM eligible) > (SELECT count(*) FROM chosen)
           OR EXISTS (SELECT FROM parked_now)
           -- A walk that stopped before it had been round every key, with
           -- keys found, or parked keys passed with room: more such keys
           -- may follow. One that met only full keys goes on at the next
           -- wake-up: a full key's slot that frees brings its first row
           -- back to the lane (migrations/0008) and wakes the workers, and
           -- the idle wait comes back for rows of full keys at the head of a
           -- lane (see seconds_until_next_due). Keys of the lane alone with
           -- room and nothing to take (not due yet, of a queue paused or not
           -- served) are not counted: a walk past hundreds of them would
           -- say more is due at every claim.
           OR EXISTS (SELECT FROM walk AS w
                      WHERE w.key IS NOT NULL AND (w.found > 0 OR w.passed > 0)
                        AND NOT EXISTS (SELECT FROM walk AS later
                                        WHERE later.kind = w.kind AND later.visits > w.visits))
           -- Rows taken, and rows of full keys passed over in a head that
           -- also had rows to take, so that its lane's keys were not walked:
           -- a key with room may wait behind them.
           OR EXISTS (SELECT FROM locked)
              AND EXISTS (SELECT FROM head AS f
                          WHERE f.key_room <= 0
                            AND EXISTS (SELECT FROM head AS t
                                        WHERE t.kind = f.kind
                                          AND (t.key_room IS NULL OR t.key_room > 0)))
           AS more_due
)
SELECT c.id, c.queue, c.kind, c.payload, c.attempts, c.max_attempts, c.checkpoint, c.priority,
       m.more_due, extract(epoch FROM (SELECT now FROM clock) - c.run_at)::float8 AS waited,
       c.trace_context, (SELECT k.generation FROM kinds AS k WHERE k.kind = c.kind)
FROM more AS m
LEFT JOIN claimed AS c ON true
ORDER BY c.priority, c.run_at, c.id;

-- renew_leases -- prepared
-- Fenced on the claimant: a lease another process took over is not renewed,
-- and the ids missing from the result tell the worker it lost them. A row
-- with a claimant and a lease is running (the table's CHECK
-- job_queue_claim_consistent), and the fence says so without naming the
-- state: with `state = 'running'` the prepared statement's generic plan
-- could read job_queue_running, every running row of every worker, and
-- compare each with every id of the array (see record_successes).
UPDATE job_queue
SET lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s)
WHERE id = ANY(%(ids)s::bigint[])
  AND locked_by = %(claimant)s
  AND lease_expires_at IS NOT NULL
RETURNING id, cancel_requested;

-- record_successes -- prepared; after: read_committed
-- record_outcomes below, for the runs of a batch that returned (the others
-- go there). Without the per-row decision and its join, and with far less to
-- plan, the server spends much less on each job than the general statement
-- does. Fenced as renew_leases is, on the claimant and a lease rather than
-- on the state: the statistics of a table whose rows were all pending when
-- last analysed put the running rows at one, and a generic plan fenced on
-- the state takes job_queue_running for the cheapest path to them, reading
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

-- record_successes_with_output -- after: read_committed
-- record_successes for runs that returned a value: each row's output is
-- written with its success. A statement of its own, so that the runs that
-- return nothing (most of them) keep the plain one.
UPDATE job_queue AS j
SET state = 'succeeded',
    finished_at = now(),
    last_error = NULL,
    locked_by = NULL,
    lease_expires_at = NULL,
    output = o.output::jsonb
FROM unnest(%(ids)s::bigint[], %(outputs)s::text[]) AS o(id, output)
WHERE j.id = o.id
  AND j.id = ANY(%(ids)s::bigint[])
  AND j.locked_by = %(claimant)s
  AND j.lease_expires_at IS NOT NULL
RETURNING j.id, j.state, j.kind;

-- default_search_path --
-- Sent before record_success_in_transaction: the handler's block may have
-- set a search_path of its own, and the success goes to the session's
-- default one's table.
SET LOCAL search_path TO DEFAULT;

-- record_success_in_transaction -- after: default_search_path
-- record_successes, fenced the same way, for the job of the transaction its
-- handler opened with j.transaction() (worker/transactions.py), so that
-- the handler's writes and the job's success commit together.
UPDATE job_queue
SET state = 'succeeded',
    finished_at = now(),
    last_error = NULL,
    locked_by = NULL,
    lease_expires_at = NULL
WHERE id = ANY(%(ids)s::bigint[])
  AND locked_by = %(claimant)s
  AND lease_expires_at IS NOT NULL
RETURNING id;

-- reset_session --
-- A kept connection of j.transaction() made as new before its next block:
-- whatever the block before set for its session is gone.
DISCARD ALL;

-- generic_plan --
-- Sent before record_successes_handing_on, in one query string, after
-- read_committed, and before the EXPLAIN that makes claim_limited_jobs'
-- plan when a connection prepares it (their headers say so). The server plans a prepared statement afresh for each of
-- its first five runs and keeps doing so while the plans it makes look
-- cheaper than the generic one; planning this statement, or
-- claim_limited_jobs, costs more than running it (5 ms against 4 for a
-- hundred rows), and its generic plan is the one it is written for.
SET LOCAL plan_cache_mode = force_generic_plan;

-- record_successes_handing_on -- prepared; after: read_committed, generic_plan
-- record_successes for runs some of which came from a limited claim: each
-- key of a kind limited per key only (no max_running, no rate limit) whose
-- run succeeded hands its slot straight to the key's next due row, which
-- this statement claims for the same worker (up to %(room)s rows, each key
-- no more than the runs of it that ended). A key's next job then waits for
-- no limited claim, and keys with backlogs run back to back.
--
-- docs/internals.md ("Hand-on") gives the argument why no limit can
-- overshoot; here it rests on the ended run and the next one changing state
-- in one transaction (every snapshot counts the same running rows on either
-- side), on the runs written first, fenced as in record_successes, so that
-- a key's room is the runs of it written (ended), on the next row locked as
-- any claim locks it and checked again once locked (locked), and on a key
-- handing on only the room its other running rows leave it, as this
-- snapshot counts them (keys). That count is skipped for a key whose ended
-- runs all started under the generation of their kind's limits this
-- snapshot shows (migrations/0013; %(kinds)s and %(generations)s: each
-- kind's generation as the claims of its runs gave it, NULL where they
-- differ or none did), while no run of the kind started outside a limited
-- claim (`limited` false): its room is then those runs.
--
-- The runs of such kinds leave running with `limited` false, which keeps
-- the slot-freed trigger (migrations/0008) from firing for them; a key
-- whose ended runs outnumber the jobs handed on gets what the trigger does
-- from job_queue_key_slots_freed (migrations/0014), called once for all
-- such keys after the next jobs are written.
--
-- %(outputs)s: each id's return value as JSON text, NULL where the run
-- returned none, as record_successes_with_output stores them. Each is read
-- as jsonb only by the write of its own row: a value the database refuses
-- fails the whole statement, which then writes nothing (the worker writes
-- the runs again one by one, the refused value without its output; see
-- worker/completer.py).
--
-- The steps, in order (-> the steps that read each):
--   handing  the kinds that hand on, each with its generation, whether its
--            keys' runs need counting, and whether it has parked rows -> all
--   ended    (write) the runs succeeded, fenced on the claim -> keys, result
--   keys     each key whose runs ended: how many, and its room -> chosen,
--            freed
--   chosen   each key's next due rows up to its room
--            (job_queue_key_next_rows), in due order, up to %(room)s -> locked
--   locked   the chosen rows locked and checked again -> handed, freed
--   handed   (write) the next jobs claimed for this worker -> result
--   freed    the slots of keys that handed on fewer jobs than runs ended,
--            freed (job_queue_key_slots_freed) once handed is written
-- The result: the ids written, as one array in a first row, then the jobs
-- claimed in the order they start, each with its kind's generation, as a
-- claim's.
WITH handing AS MATERIALIZED (
    SELECT l.kind, l.max_running_per_key AS per_key, l.generation,
           coalesce(l.generation = g.generation, false)
               AND NOT EXISTS (SELECT FROM job_queue AS u
                               WHERE u.state = 'running' AND NOT u.limited
                                 AND u.concurrency_key IS NOT NULL AND u.kind = l.kind)
               AS current,
           EXISTS (SELECT FROM job_queue AS p
                   WHERE p.state = 'pending' AND p.parked AND p.kind = l.kind) AS any_parked
    FROM job_queue_limits AS l
    LEFT JOIN unnest(%(kinds)s::text[], %(generations)s::bigint[]) AS g(kind, generation)
        ON g.kind = l.kind
    WHERE l.max_running_per_key IS NOT NULL AND l.max_running IS NULL AND l.rate_limit IS NULL
), ended AS (
    UPDATE job_queue AS j
    SET state = 'succeeded',
        finished_at = now(),
        last_error = NULL,
        locked_by = NULL,
        lease_expires_at = NULL,
        -- Whether any run returned a value is asked once, for the batch.
        output = CASE WHEN (SELECT bool_or(o IS NOT NULL) FROM unnest(%(outputs)s::text[]) AS o)
                      THEN coalesce(((%(outputs)s::text[])[
                                        array_position(%(ids)s::bigint[], j.id)])::jsonb,
                                    j.output)
                      ELSE j.output END,
        limited = j.limited AND NOT (j.concurrency_key IS NOT NULL
                                     AND j.kind = ANY (ARRAY(SELECT kind FROM handing)))
    WHERE j.id = ANY(%(ids)s::bigint[])
      AND j.locked_by = %(claimant)s
      AND j.lease_expires_at IS NOT NULL
    RETURNING j.id, j.kind, j.concurrency_key AS key
), keys AS MATERIALIZED (
    SELECT k.kind, k.key, k.ended, h.any_parked,
           CASE WHEN h.current THEN k.ended
                ELSE least(k.ended, h.per_key + k.ended - (
                         SELECT count(*)
                         FROM job_queue_key_runs(k.kind, k.key, h.per_key + k.ended))) END
               AS room
    FROM (SELECT kind, key, count(*) AS ended
          FROM ended
          WHERE key IS NOT NULL
          GROUP BY kind, key) AS k
    JOIN handing AS h ON h.kind = k.kind
), chosen AS MATERIALIZED (
    -- Read without locks, then locked: only the rows taken are held, so
    -- that a freed slot's trigger skips none it could have brought back.
    SELECT due.id, k.kind, k.key
    FROM keys AS k
    CROSS JOIN LATERAL job_queue_key_next_rows(k.kind, k.key, k.room, k.any_parked,
                                               %(queues)s::text[]) AS due
    WHERE k.room > 0
    ORDER BY due.priority, due.run_at, due.id
    LIMIT %(room)s
), locked AS MATERIALIZED (
    -- Checked again once locked, as the read chose it (its latest version:
    -- still pending, due, of a queue served and not paused, of the same
    -- kind and key, whose room was counted).
    SELECT c.id, c.kind, c.key
    FROM chosen AS c
    JOIN LATERAL (SELECT FROM job_queue AS q
                  WHERE q.id = c.id AND q.state = 'pending' AND q.limited
                    AND q.kind = c.kind AND q.concurrency_key = c.key
                    AND q.run_at <= now()
                    AND (%(queues)s::text[] IS NULL OR q.queue = ANY(%(queues)s::text[]))
                    AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                         OR q.queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
                  FOR UPDATE SKIP LOCKED) AS still ON true
), handed AS (
    UPDATE job_queue AS j
    SET state = 'running',
        parked = false,
        locked_by = %(claimant)s,
        lease_expires_at = clock_timestamp() + make_interval(secs => %(lease_seconds)s),
        attempts = j.attempts + 1,
        started_at = clock_timestamp()
    WHERE j.id = ANY(ARRAY(SELECT id FROM locked))
    RETURNING j.id, j.queue, j.kind, j.payload::text AS payload, j.attempts, j.max_attempts,
              j.checkpoint, j.priority, j.run_at,
              extract(epoch FROM clock_timestamp() - j.run_at)::float8 AS waited,
              j.trace_context
), freed AS MATERIALIZED (
    -- Each key's ended runs less its jobs handed on, asked for only when
    -- they differ in all; after the jobs handed on are written (the count
    -- of them, which the function waits for, is not used), so that the
    -- parked rows it brings back are ones still waiting.
    SELECT job_queue_key_slots_freed(array_agg(f.kind), array_agg(f.key), array_agg(f.slots))
    FROM (SELECT kind, key, sum(n)::integer AS slots
          FROM (SELECT kind, key, ended AS n FROM keys
                UNION ALL
                SELECT kind, key, -1 FROM locked) AS each_
          GROUP BY kind, key
          HAVING sum(n) > 0) AS f
    WHERE (SELECT sum(ended) FROM keys) > (SELECT count(*) FROM locked)
    HAVING count(*) > 0 AND (SELECT count(*) FROM handed) >= 0
)
SELECT ARRAY(SELECT id FROM ended) AS written, NULL::bigint AS id, NULL AS queue,
       NULL AS kind, NULL AS payload, NULL::integer AS attempts,
       NULL::integer AS max_attempts, NULL::jsonb AS checkpoint, NULL::integer AS priority,
       NULL::float8 AS waited, NULL::jsonb AS trace_context, NULL::bigint AS generation
FROM (SELECT count(*) FROM freed) AS woken
UNION ALL
SELECT *
FROM (SELECT NULL::bigint[], h.id, h.queue, h.kind, h.payload, h.attempts, h.max_attempts,
             h.checkpoint, h.priority, h.waited, h.trace_context, g.generation
      FROM handed AS h
      JOIN handing AS g ON g.kind = h.kind
      ORDER BY h.priority, h.run_at, h.id) AS h;

-- record_outcomes -- prepared; after: read_committed
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
    errors = CASE WHEN d.snoozed THEN j.errors
                  ELSE job_queue_errors_with(j.errors, j.attempts, d.error) END,
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

-- release_claims_of -- after: read_committed
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

-- release_claims_not_held -- after: read_committed
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

-- fail_claims_of_dead -- after: read_committed
-- The claimant died running these jobs (killed, out of memory, crashed,
-- timed out). The attempt counts, so a job that kills its worker every time
-- runs out of attempts instead of crash-looping the fleet, and it waits its
-- kind's retry delay (migrations/0016), so that it does not take down one
-- worker after another in a quick loop meanwhile.
UPDATE job_queue
SET state = CASE WHEN cancel_requested THEN 'cancelled'
                 WHEN attempts >= max_attempts THEN 'failed' ELSE 'pending' END,
    run_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN run_at
                  ELSE now() + job_queue_retry_delay(kind, attempts) END,
    finished_at = CASE WHEN cancel_requested OR attempts >= max_attempts THEN now() END,
    last_error = %(error)s,
    errors = job_queue_errors_with(errors, attempts, %(error)s),
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

-- expire_stale_leases -- after: read_committed
-- Any number of supervisors run this at once: SKIP LOCKED hands each batch to
-- one of them, and nobody waits on a lock another reaper holds. The batch
-- is taken in the order of job_queue_running (migrations/0012), which holds
-- the leases: the scan stops at the limit, where an order by lease alone
-- would read and sort every expired row for each batch, over and over once
-- a whole fleet's leases have lapsed. A retry waits its kind's delay, as
-- after a dead worker (see fail_claims_of_dead).
WITH stale AS MATERIALIZED (
    SELECT id
    FROM job_queue
    WHERE state = 'running'
      AND lease_expires_at < now()
    ORDER BY kind, concurrency_key, lease_expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE job_queue AS j
SET state = CASE WHEN j.cancel_requested THEN 'cancelled'
                 WHEN j.attempts >= j.max_attempts THEN 'failed' ELSE 'pending' END,
    finished_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts
                       THEN now() END,
    run_at = CASE WHEN j.cancel_requested OR j.attempts >= j.max_attempts THEN j.run_at
                  ELSE now() + job_queue_retry_delay(j.kind, j.attempts) END,
    last_error = 'lease of ' || j.locked_by || ' expired at ' || j.lease_expires_at::text,
    errors = job_queue_errors_with(j.errors, j.attempts, 'lease of ' || j.locked_by
                                   || ' expired at ' || j.lease_expires_at::text),
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
-- What a job leaves NULL (max_attempts, queue, priority) is its kind's
-- policy, as for a plain INSERT that leaves it out (migrations/0016). The
-- statement reads job_queue_kinds once, in one join, so that the insert
-- trigger, which looks the kind up row by row, is not called for a kind
-- the workers wrote; it fills in the fleet's defaults for any other. An
-- INSERT ... SELECT cannot say DEFAULT for some of its rows only, so a job
-- without max_attempts gets the column's default as the catalog holds it
-- first, as a plain INSERT would: none, unless an operator set one.
--
-- The rows draw their ids in the order given (an INSERT ... SELECT ...
-- ORDER BY draws identity values in that order: SQLAlchemy's bulk inserts
-- rely on it too), and the result is sorted by id, so its n-th row without
-- a unique key belongs to the n-th such job given. A delay counts from
-- statement_timestamp(), not now(): in a transaction that has been open for
-- a while, from the enqueue rather than from BEGIN.
WITH inserted AS (
    INSERT INTO job_queue (kind, payload, queue, run_at, priority, unique_key, max_attempts,
                           concurrency_key, trace_context)
    SELECT j.kind, j.payload, coalesce(j.queue, k.queue),
           coalesce(j.run_at, statement_timestamp() + make_interval(secs => j.delay_seconds)),
           coalesce(j.priority, k.priority), j.unique_key,
           coalesce(j.max_attempts,
                    (SELECT pg_get_expr(d.adbin, d.adrelid)::integer
                     FROM pg_attrdef AS d
                     JOIN pg_attribute AS a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
                     WHERE d.adrelid = 'job_queue'::regclass AND a.attname = 'max_attempts'),
                    k.max_attempts),
           j.concurrency_key, %(trace_context)s::jsonb
    FROM unnest(%(kind)s::text[], %(payload)s::jsonb[], %(queue)s::text[],
                %(run_at)s::timestamptz[], %(delay_seconds)s::float8[],
                %(priority)s::smallint[], %(unique_key)s::text[], %(max_attempts)s::integer[],
                %(concurrency_key)s::text[])
         WITH ORDINALITY AS j(kind, payload, queue, run_at, delay_seconds, priority, unique_key,
                              max_attempts, concurrency_key, position)
    LEFT JOIN job_queue_kinds AS k ON k.kind = j.kind
    ORDER BY j.position
    ON CONFLICT (queue, unique_key)
        WHERE unique_key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
    RETURNING id, queue, unique_key
)
SELECT id, queue, unique_key FROM inserted ORDER BY id;

-- queues_of_kinds --
-- The queue a job of each kind lands in when its producer names none, as
-- job_queue_kind_defaults (migrations/0016) fills it in: enqueue_jobs looks
-- it up for a job with a unique key, which is unique within its queue.
SELECT k.kind, coalesce(p.queue, 'default') AS queue
FROM unnest(%(kinds)s::text[]) AS k(kind)
LEFT JOIN job_queue_kinds AS p ON p.kind = k.kind;

-- jobs_holding_unique_keys --
-- The pending or running job holding each (queue, unique key), for the jobs
-- enqueue_jobs skipped. A key missing from the result was freed meanwhile
-- (its holder finished): enqueue_jobs inserts that job again.
SELECT k.queue, k.unique_key, j.id
FROM unnest(%(queue)s::text[], %(unique_key)s::text[]) AS k(queue, unique_key)
JOIN job_queue AS j
  ON j.queue = k.queue AND j.unique_key = k.unique_key AND j.state IN ('pending', 'running');

-- database_now --
SELECT clock_timestamp() AS now;

-- enqueue_scheduled --
-- One scheduled instant of a kind, enqueued by whichever supervisor gets
-- here first: the upsert advances the kind's row only to a later instant,
-- and a second supervisor with the same instant waits on the row's lock,
-- then finds it advanced and inserts nothing. A kind seen for the first time
-- gets its row and no job (the upsert inserted rather than updated: xmax is
-- 0): it starts with its next instant, not with one that passed before it
-- was deployed. The job is the schedule's: its payload (an object) with the
-- instant added, its queue and priority.
WITH advanced AS (
    INSERT INTO job_queue_schedules AS s (kind, spec, tz, last_instant)
    VALUES (%(kind)s, %(spec)s, %(tz)s, %(instant)s)
    ON CONFLICT (kind) DO UPDATE
        SET last_instant = excluded.last_instant, spec = excluded.spec, tz = excluded.tz,
            updated_at = now()
        WHERE s.last_instant < excluded.last_instant
    RETURNING kind, xmax = 0 AS first_sight
)
INSERT INTO job_queue (kind, queue, priority, payload, unique_key)
SELECT %(kind)s, %(queue)s, %(priority)s,
       %(payload)s::jsonb || jsonb_build_object('scheduled_for', %(instant_text)s::text),
       'schedule:' || %(kind)s || ':' || %(instant_text)s
FROM advanced
WHERE NOT first_sight
ON CONFLICT (queue, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('pending', 'running') DO NOTHING
RETURNING id;

-- schedules --
SELECT kind, spec, tz, last_instant FROM job_queue_schedules ORDER BY kind;

-- limits --
SELECT kind, max_running, max_running_per_key, rate_limit, rate_seconds
FROM job_queue_limits
ORDER BY kind;

-- kind_policies --
SELECT kind, max_attempts, queue, priority, retry_delays, retry_jitter
FROM job_queue_kinds
ORDER BY kind;

-- set_kind_policy --
-- Workers write their registry's policies when they start (db.JobStore.
-- sync_kind_policies): a row changes only when the policy does.
INSERT INTO job_queue_kinds AS k (kind, max_attempts, queue, priority, retry_delays,
                                  retry_jitter)
VALUES (%(kind)s, %(max_attempts)s, %(queue)s, %(priority)s, %(retry_delays)s::float8[],
        %(retry_jitter)s)
ON CONFLICT (kind) DO UPDATE
    SET max_attempts = excluded.max_attempts, queue = excluded.queue,
        priority = excluded.priority, retry_delays = excluded.retry_delays,
        retry_jitter = excluded.retry_jitter, updated_at = now()
    WHERE (k.max_attempts, k.queue, k.priority, k.retry_delays, k.retry_jitter)
          IS DISTINCT FROM (excluded.max_attempts, excluded.queue, excluded.priority,
                            excluded.retry_delays, excluded.retry_jitter);

-- drop_kind_policy --
DELETE FROM job_queue_kinds WHERE kind = %(kind)s;

-- lock_limits_sync --
-- Workers of every supervisor write the limits of their registry when they
-- start (db.JobStore.sync_limits); one at a time, and one that finds
-- another at it does not wait (it looks again later). READ COMMITTED, so
-- that the reroute's statements see what committed while they waited.
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
SELECT pg_try_advisory_xact_lock(hashtext('motir_supervisor.limits_sync')) AS locked;

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
INSERT INTO job_queue_limits AS l (kind, max_running, max_running_per_key, rate_limit, rate_seconds)
VALUES (%(kind)s, %(max_running)s, %(max_running_per_key)s, %(rate_limit)s, %(rate_seconds)s)
ON CONFLICT (kind) DO UPDATE
    SET max_running = excluded.max_running, max_running_per_key = excluded.max_running_per_key,
        rate_limit = excluded.rate_limit, rate_seconds = excluded.rate_seconds,
        updated_at = now()
    WHERE (l.max_running, l.max_running_per_key, l.rate_limit, l.rate_seconds)
          IS DISTINCT FROM (excluded.max_running, excluded.max_running_per_key,
                            excluded.rate_limit, excluded.rate_seconds);

-- drop_limit --
DELETE FROM job_queue_limits WHERE kind = %(kind)s;

-- analyze_limits --
-- The table is a few rows, too few ever to reach autovacuum's threshold:
-- without statistics the planner takes it for some thousand rows, and on
-- that estimate compiles claim_limited_jobs with JIT, which takes far
-- longer than the claim itself. Its writer refreshes them.
ANALYZE job_queue_limits;

-- route_kind --
-- After the kind's limits changed (in this transaction): each waiting,
-- pending and running row of the kind in the lane they now say, none of
-- them parked. The update names neither state, kind nor key: no trigger of
-- job_queue fires.
UPDATE job_queue
SET limited = job_queue_limited(kind, concurrency_key),
    parked = false
WHERE kind = %(kind)s
  AND state IN ('waiting', 'pending', 'running')
  AND (parked OR limited <> job_queue_limited(kind, concurrency_key));

-- status_limits --
-- Each limited kind: its limits, its running and waiting jobs, its starts
-- in the rate limit's window, and its busiest keys (the five with the most
-- running, then waiting, jobs). Each count reads one partial index.
SELECT l.kind, l.max_running, l.max_running_per_key, l.rate_limit, l.rate_seconds,
       (SELECT count(*) FROM job_queue AS r
        WHERE r.state = 'running' AND r.limited AND r.kind = l.kind) AS running,
       (SELECT count(*) FROM job_queue AS w
        WHERE w.state = 'pending' AND w.limited AND NOT w.parked AND w.kind = l.kind)
       + (SELECT count(*) FROM job_queue AS w
          WHERE w.state = 'pending' AND w.parked AND w.kind = l.kind) AS waiting,
       (SELECT count(*) FROM job_queue_starts AS s
        WHERE s.kind = l.kind
          AND s.started_at > now() - make_interval(secs => l.rate_seconds)) AS recent_starts,
       ARRAY(SELECT ARRAY[k.key, k.running::text, k.waiting::text]
             FROM (SELECT key, count(*) FILTER (WHERE running) AS running,
                          count(*) FILTER (WHERE NOT running) AS waiting
                   FROM (SELECT concurrency_key AS key, true AS running FROM job_queue
                         WHERE state = 'running' AND concurrency_key IS NOT NULL
                           AND kind = l.kind
                         UNION ALL
                         SELECT concurrency_key, false FROM job_queue
                         WHERE state = 'pending' AND limited AND NOT parked
                           AND concurrency_key IS NOT NULL AND kind = l.kind
                         UNION ALL
                         SELECT concurrency_key, false FROM job_queue
                         WHERE state = 'pending' AND parked AND kind = l.kind) AS rows
                   WHERE l.max_running_per_key IS NOT NULL
                   GROUP BY key
                   ORDER BY running DESC, waiting DESC, key
                   LIMIT 5) AS k) AS busiest_keys
FROM job_queue_limits AS l
ORDER BY l.kind;

-- find_jobs --
-- The jobs the Python API shows (db/jobs.py), filtered by id, kind, state
-- and queue (a NULL array filters nothing), newest or oldest first. psycopg2
-- sends the parameters as literals, so the planner folds away the filters
-- left NULL and the order not asked for: a look-up by id reads the primary
-- key, and a find walks it from the end it starts at.
SELECT j.id, j.kind, j.queue, j.state, j.payload, j.priority, j.attempts, j.max_attempts,
       j.run_at, j.created_at, j.started_at, j.finished_at, j.last_error, j.output,
       j.errors, j.unique_key, j.concurrency_key, j.cancel_requested
FROM job_queue AS j
WHERE (%(ids)s::bigint[] IS NULL OR j.id = ANY (%(ids)s::bigint[]))
  AND (%(kinds)s::text[] IS NULL OR j.kind = ANY (%(kinds)s::text[]))
  AND (%(states)s::text[] IS NULL OR j.state = ANY (%(states)s::text[]))
  AND (%(queues)s::text[] IS NULL OR j.queue = ANY (%(queues)s::text[]))
ORDER BY CASE WHEN %(newest_first)s THEN j.id END DESC, j.id
LIMIT %(limit)s;

-- cancel_job --
-- Waiting, pending or failed: cancelled now (a waiting job's descendants
-- follow as their on_parent_failure says; see migrations/0019). Running: flagged, so that its worker
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
    WHERE j.id = t.id AND t.state IN ('waiting', 'pending', 'failed', 'running')
    RETURNING j.id
)
SELECT t.state AS state_before, EXISTS (SELECT 1 FROM changed) AS changed FROM target AS t;

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
SELECT t.state AS state_before, EXISTS (SELECT 1 FROM changed) AS changed,
       (SELECT id FROM holder LIMIT 1) AS key_holder
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

-- pause_queue -- after: read_committed
INSERT INTO job_queue_paused (queue) VALUES (%(queue)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue;

-- resume_queue -- after: read_committed
-- A trigger (migrations/0011) wakes the workers.
DELETE FROM job_queue_paused WHERE queue = %(queue)s RETURNING queue;

-- paused_queues --
SELECT queue, extract(epoch FROM now() - paused_at) AS paused_seconds
FROM job_queue_paused
ORDER BY queue;

-- prune_finished --
-- One small batch per statement: retention never holds many row locks or
-- runs long, and SKIP LOCKED keeps concurrent pruners out of each other's way.
-- The states are one group of db.PRUNED_TOGETHER, each a partial index's
-- rows (migrations/0002 and 0005), which the batch walks by age.
--
-- A job stays while a job that depends on it has not ended (which may
-- still read its output, or wait for a retry of it), and so does a batch's
-- member until its callbacks ended; a workflow's jobs go together
-- (prune_workflows). Rows without dependents pass both tests on their own
-- columns.
DELETE FROM job_queue
WHERE id IN (
    SELECT id FROM job_queue
    WHERE state = ANY(%(states)s::text[])
      AND finished_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND workflow_id IS NULL
      -- A scalar subquery, run for a parent's row only: an EXISTS here
      -- is planned as a hash of every unended row's parents.
      AND (NOT has_dependents OR (
          SELECT c.id FROM job_queue_edges AS e
          JOIN job_queue AS c ON c.id = e.child_id
          WHERE e.parent_id = job_queue.id
            AND c.state NOT IN ('succeeded', 'failed', 'cancelled')
          LIMIT 1) IS NULL)
    ORDER BY finished_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- prune_workflows --
-- Whole workflows: every job of one ended, the last of them long enough
-- ago (a failed one as long as failed jobs are kept, and never when
-- %(failed_older_than_seconds)s is NULL), and no job outside it waiting on
-- one of its jobs. The workflows' rows go with their jobs.
WITH gone AS (
    SELECT w.id FROM job_queue_workflows AS w
    WHERE w.created_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND NOT EXISTS (
          SELECT FROM job_queue AS j
          WHERE j.workflow_id = w.id
            AND (j.state NOT IN ('succeeded', 'failed', 'cancelled')
                 OR (j.state = 'failed' AND %(failed_older_than_seconds)s::float8 IS NULL)
                 OR j.finished_at >= now() - make_interval(secs => CASE
                        WHEN j.state = 'failed' THEN coalesce(%(failed_older_than_seconds)s, 0)
                        ELSE %(older_than_seconds)s END)))
      AND NOT EXISTS (
          SELECT FROM job_queue AS j
          JOIN job_queue_edges AS e ON e.parent_id = j.id
          JOIN job_queue AS c ON c.id = e.child_id
          WHERE j.workflow_id = w.id AND j.has_dependents
            AND c.state NOT IN ('succeeded', 'failed', 'cancelled'))
    ORDER BY w.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), jobs AS (
    DELETE FROM job_queue AS j USING gone WHERE j.workflow_id = gone.id RETURNING j.id
), workflows AS (
    DELETE FROM job_queue_workflows AS w USING gone WHERE w.id = gone.id
)
SELECT count(*) AS deleted FROM jobs;

-- prune_batches --
-- A sealed batch's row, once its members and callbacks are gone.
DELETE FROM job_queue_batches
WHERE id IN (
    SELECT b.id FROM job_queue_batches AS b
    WHERE b.sealed_at < now() - make_interval(secs => %(older_than_seconds)s)
      AND NOT EXISTS (SELECT FROM job_queue AS j WHERE j.batch_id = b.id)
      AND NOT EXISTS (SELECT FROM job_queue AS j WHERE j.id IN (b.on_success, b.on_complete))
    ORDER BY b.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
);

-- status_counts --
SELECT queue, state, count(*) AS jobs
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
     WHERE state = 'pending' AND limited AND NOT parked AND run_at <= now()),
    (SELECT min(run_at) FROM job_queue WHERE state = 'pending' AND parked)))
    AS oldest_due_seconds;

-- status_running --
SELECT id, queue, kind, attempts, locked_by,
       extract(epoch FROM lease_expires_at - now()) AS lease_left
FROM job_queue
WHERE state = 'running'
ORDER BY started_at, id;

-- status_expired_leases --
SELECT count(*) AS expired_leases
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

-- migrations_applied --
-- For migrate --status and --sql, which write nothing: it fails where the
-- table was never created.
SELECT version, name, applied_at FROM motir_schema_migrations ORDER BY version;

-- schema_version --
SELECT coalesce(max(version), 0) AS version FROM motir_schema_migrations;

-- record_migration --
INSERT INTO motir_schema_migrations (version, name) VALUES (%(version)s, %(name)s);
