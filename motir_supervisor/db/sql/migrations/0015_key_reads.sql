-- The reads of one key's rows that the limited claim (claim_limited_jobs)
-- and the hand-on (record_successes_handing_on) are made of, each named for
-- what it finds. Each is an SQL function of one SELECT, STABLE and not
-- STRICT, called from a FROM list: the planner then writes its body into
-- the calling statement, whose plan is the one the text written out there
-- would have, made once for all its runs. A function the planner cannot
-- inline (VOLATILE, STRICT, with a SET clause or more statements) would be
-- planned and run apart at every call, key by key: test_schema.py checks
-- that the statements' plans call none of them. Parameters are named apart
-- from columns: in an SQL function's body a column of the same name wins.

-- A key's due rows in the kind's lane, in due order, at most `room`: of a
-- queue served (every queue when `served` is NULL) and not paused.
CREATE FUNCTION job_queue_key_lane_rows(of_kind text, of_key text, room bigint, served text[])
RETURNS TABLE (id bigint, priority smallint, run_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT id, priority, run_at
    FROM job_queue
    WHERE state = 'pending'
      AND limited
      AND NOT parked
      AND concurrency_key IS NOT NULL
      AND kind = of_kind
      AND concurrency_key = of_key
      AND run_at <= now()
      AND (served IS NULL OR queue = ANY(served))
      AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
           OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
    ORDER BY priority, run_at, id
    LIMIT room
$$;

-- The same among the key's parked rows (migrations/0007).
CREATE FUNCTION job_queue_key_parked_rows(of_kind text, of_key text, room bigint, served text[])
RETURNS TABLE (id bigint, priority smallint, run_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT id, priority, run_at
    FROM job_queue
    WHERE state = 'pending'
      AND parked
      AND kind = of_kind
      AND concurrency_key = of_key
      AND run_at <= now()
      AND (served IS NULL OR queue = ANY(served))
      AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
           OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
    ORDER BY priority, run_at, id
    LIMIT room
$$;

-- A key's next due rows, at most `room`, as the hand-on takes them: from
-- the lane and, where the kind has parked rows at all (`any_parked`),
-- among them too, the two merged in due order. None are read among the
-- parked rows of a kind without any.
CREATE FUNCTION job_queue_key_next_rows(of_kind text, of_key text, room bigint,
                                        any_parked boolean, served text[])
RETURNS TABLE (id bigint, priority smallint, run_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT next.id, next.priority, next.run_at
    FROM (SELECT * FROM job_queue_key_lane_rows(of_kind, of_key, room, served)
          UNION ALL
          SELECT *
          FROM job_queue_key_parked_rows(of_kind, of_key,
                                         CASE WHEN any_parked THEN room ELSE 0 END,
                                         served)) AS next
    ORDER BY next.priority, next.run_at, next.id
    LIMIT room
$$;

-- A key's running rows, at most `up_to`, each with its start: what counts
-- against its limit.
CREATE FUNCTION job_queue_key_runs(of_kind text, of_key text, up_to bigint)
RETURNS TABLE (started_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT started_at
    FROM job_queue
    WHERE state = 'running' AND concurrency_key IS NOT NULL
      AND kind = of_kind AND concurrency_key = of_key
    LIMIT up_to
$$;

-- The limited claim's walk of a kind's keys goes from key to key in order:
-- the key after `after` among the kind's parked rows' keys and, with
-- `lane_too`, its lane's keys; past the last key, round to the first
-- (`wrapped`), and on that second lap no further than `start`, where the
-- walk began. Each lap is a range of each index (an OR of the two would be
-- a filter); least() passes over the NULL of an index without a further
-- key. OFFSET 0 keeps each of the two lookups a step of its own, computed
-- once a key: pulled up, the next key's lookups would be copied into every
-- expression that names it, and run again there.
CREATE FUNCTION job_queue_walk_next_key(of_kind text, after text, start text,
                                        second_lap boolean, lane_too boolean)
RETURNS TABLE (key text, wrapped boolean)
LANGUAGE sql STABLE AS $$
    SELECT coalesce(next.key, CASE WHEN NOT second_lap THEN least(
               (SELECT min(p.concurrency_key) FROM job_queue AS p
                WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                  AND p.concurrency_key <= start),
               CASE WHEN lane_too THEN (
                   SELECT min(q.concurrency_key) FROM job_queue AS q
                   WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                     AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                     AND q.concurrency_key <= start) END) END) AS key,
           second_lap OR next.key IS NULL AS wrapped
    FROM (SELECT CASE WHEN second_lap THEN least(
                     (SELECT min(p.concurrency_key) FROM job_queue AS p
                      WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                        AND p.concurrency_key > after AND p.concurrency_key <= start),
                     CASE WHEN lane_too THEN (
                         SELECT min(q.concurrency_key) FROM job_queue AS q
                         WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                           AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                           AND q.concurrency_key > after AND q.concurrency_key <= start) END)
                 ELSE least(
                     (SELECT min(p.concurrency_key) FROM job_queue AS p
                      WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                        AND p.concurrency_key > after),
                     CASE WHEN lane_too THEN (
                         SELECT min(q.concurrency_key) FROM job_queue AS q
                         WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                           AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                           AND q.concurrency_key > after) END) END AS key
          OFFSET 0) AS next
    OFFSET 0
$$;

-- Whether the limited claim can take a key the walk reached: it has room,
-- and a row the claim may take (due, of a queue served, not paused) among
-- its first rows in due order, in either index. Its first rows only: a
-- key whose backlog is not due yet, or in a queue paused or not served,
-- would otherwise be read through at every visit.
CREATE FUNCTION job_queue_key_takeable(of_kind text, of_key text, room bigint,
                                       lane_too boolean, served text[])
RETURNS TABLE (takeable boolean)
LANGUAGE sql STABLE AS $$
    SELECT room > 0 AND of_key IS NOT NULL AND (
               EXISTS (SELECT
                       FROM (SELECT q.run_at, q.queue FROM job_queue AS q
                             WHERE q.state = 'pending' AND q.parked
                               AND q.kind = of_kind AND q.concurrency_key = of_key
                             ORDER BY q.priority, q.run_at, q.id
                             LIMIT 16) AS first
                       WHERE first.run_at <= now()
                         AND (served IS NULL OR first.queue = ANY(served))
                         AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                              OR first.queue <> ALL (ARRAY(SELECT queue
                                                           FROM job_queue_paused))))
               OR lane_too AND EXISTS (
                       SELECT
                       FROM (SELECT q.run_at, q.queue FROM job_queue AS q
                             WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                               AND q.concurrency_key IS NOT NULL
                               AND q.kind = of_kind AND q.concurrency_key = of_key
                             ORDER BY q.priority, q.run_at, q.id
                             LIMIT 16) AS first
                       WHERE first.run_at <= now()
                         AND (served IS NULL OR first.queue = ANY(served))
                         AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                              OR first.queue <> ALL (ARRAY(SELECT queue
                                                           FROM job_queue_paused)))))
$$;
