-- The dashboard's statements (motir_supervisor/web/dashboard), named blocks as
-- in queries.sql and loaded beside them. Reads for people, not for the
-- workers: none of them is on a claim's path.

-- dashboard_session --
-- On each connection of the dashboard (dashboard.reads.DashboardStore).
SELECT set_config('statement_timeout', %(timeout)s, false);

-- dashboard_queues --
-- Every queue with unfinished, failed or cancelled jobs, or a pause: its
-- depth by state, the oldest due job and whether it is paused. Succeeded
-- rows are left out: they are most of the table, and counting them reads
-- it all; each branch here is a partial index, of rows that are few unless
-- a backlog is deep. The throughput chart shows what succeeded lately.
WITH unfinished AS (
    SELECT queue, state, run_at FROM job_queue WHERE state = 'pending' AND NOT limited
    UNION ALL
    SELECT queue, state, run_at FROM job_queue WHERE state = 'pending' AND limited AND NOT parked
    UNION ALL
    SELECT queue, state, run_at FROM job_queue WHERE state = 'pending' AND parked
    UNION ALL
    SELECT queue, state, run_at FROM job_queue WHERE state = 'running'
    UNION ALL
    SELECT queue, state, run_at FROM job_queue WHERE state IN ('failed', 'cancelled')
    UNION ALL
    -- A waiting row depends on others, and each such row has its count in
    -- job_queue_waits (migrations/0019): found from there, by a table of
    -- dependent rows only, which is empty where no job has parents.
    SELECT j.queue, j.state, j.run_at
    FROM job_queue_waits AS w JOIN job_queue AS j ON j.id = w.job_id
    WHERE j.state = 'waiting'
), counts AS (
    SELECT queue,
           count(*) FILTER (WHERE state = 'waiting') AS waiting,
           count(*) FILTER (WHERE state = 'pending' AND run_at <= now()) AS due,
           count(*) FILTER (WHERE state = 'pending' AND run_at > now()) AS scheduled,
           count(*) FILTER (WHERE state = 'running') AS running,
           count(*) FILTER (WHERE state = 'failed') AS failed,
           count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
           extract(epoch FROM now() - min(run_at) FILTER (
               WHERE state = 'pending' AND run_at <= now())) AS oldest_due_seconds
    FROM unfinished
    GROUP BY queue
)
SELECT coalesce(c.queue, p.queue) AS queue,
       coalesce(c.waiting, 0) AS waiting,
       coalesce(c.due, 0) AS due, coalesce(c.scheduled, 0) AS scheduled,
       coalesce(c.running, 0) AS running, coalesce(c.failed, 0) AS failed,
       coalesce(c.cancelled, 0) AS cancelled, c.oldest_due_seconds,
       p.paused_at IS NOT NULL AS paused,
       extract(epoch FROM now() - p.paused_at) AS paused_seconds
FROM counts AS c
FULL JOIN job_queue_paused AS p ON p.queue = c.queue
ORDER BY 1;

-- dashboard_ended --
-- Jobs that succeeded or failed in each minute since %(since)s, by queue,
-- each half through its partial index (job_queue_finished,
-- job_queue_ended_badly): a range of recent rows. A fleet that ends 1,000
-- jobs a second ends 60,000 a minute, so the dashboard counts a minute
-- once it is over and keeps the figure (dashboard.reads.EndedPerMinute).
SELECT queue, minute, sum(succeeded)::bigint AS succeeded, sum(failed)::bigint AS failed
FROM (
    SELECT queue, date_trunc('minute', finished_at) AS minute, 1 AS succeeded, 0 AS failed
    FROM job_queue
    WHERE state = 'succeeded' AND finished_at >= %(since)s
    UNION ALL
    SELECT queue, date_trunc('minute', finished_at), 0, 1
    FROM job_queue
    WHERE state = 'failed' AND finished_at >= %(since)s
) AS ended
GROUP BY queue, minute;

-- dashboard_oldest_transaction --
-- When the oldest transaction of another client of this database began,
-- if one is open: what it stamps with its now() is not visible before it
-- commits, so no minute since then is settled (dashboard.reads). Only the
-- sessions this role may see have a start here.
SELECT min(xact_start) AS began
FROM pg_stat_activity
WHERE datname = current_database() AND backend_type = 'client backend'
  AND pid <> pg_backend_pid();

-- dashboard_jobs --
-- One page of jobs, newest first, after the id %(before)s (keyset paging:
-- a page deep in a million rows costs what the first one does, where an
-- OFFSET would read every row before it). An absent filter is NULL; psycopg2
-- sends the values inline, so the planner folds those tests away and picks
-- the index the filters that remain call for.
SELECT id, queue, kind, state, priority, attempts, max_attempts, run_at,
       created_at, finished_at, cancel_requested,
       split_part(last_error, E'\n', 1) AS error_line
FROM job_queue
WHERE (%(queue)s::text IS NULL OR queue = %(queue)s)
  AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(state)s::text IS NULL OR state = %(state)s)
  AND (%(before)s::bigint IS NULL OR id < %(before)s)
ORDER BY id DESC
LIMIT %(limit)s;

-- dashboard_job --
SELECT id, queue, kind, state, priority, unique_key, attempts, max_attempts,
       jsonb_pretty(payload) AS payload, jsonb_pretty(checkpoint) AS checkpoint,
       jsonb_pretty(output) AS output, concurrency_key,
       last_error, locked_by, cancel_requested, limited,
       created_at, run_at, started_at, finished_at, lease_expires_at,
       extract(epoch FROM lease_expires_at - now()) AS lease_left,
       extract(epoch FROM run_at - now()) AS due_in,
       workflow_id, step, batch_id, on_parent_failure,
       (SELECT w.name FROM job_queue_workflows AS w WHERE w.id = j.workflow_id) AS workflow_name,
       (SELECT count(*) FROM job_queue_edges AS e WHERE e.parent_id = j.id) AS dependents,
       -- A batch's callback waits for its members: the batch of one of them.
       (SELECT b.id FROM job_queue_batches AS b
        WHERE j.id IN (b.on_success, b.on_complete)
          AND b.id = (SELECT p.batch_id FROM job_queue_edges AS e
                      JOIN job_queue AS p ON p.id = e.parent_id
                      WHERE e.child_id = j.id AND p.batch_id IS NOT NULL LIMIT 1)
       ) AS callback_of
FROM job_queue AS j
WHERE id = %(id)s;

-- dashboard_job_errors --
-- A job's error history (migrations/0017), oldest first, one row an entry;
-- none where a client wrote something other than a list there.
SELECT (e.entry->>'attempt')::integer AS attempt, (e.entry->>'at')::timestamptz AS at,
       e.entry->>'error' AS error, split_part(e.entry->>'error', E'\n', 1) AS error_line,
       e.entry->>'traceback' AS traceback
FROM job_queue AS j,
     jsonb_array_elements(CASE WHEN jsonb_typeof(j.errors) = 'array' THEN j.errors END)
         WITH ORDINALITY AS e(entry, n)
WHERE j.id = %(id)s
ORDER BY e.n;

-- dashboard_running --
-- What runs now and who claimed it, oldest first.
SELECT id, queue, kind, 'running' AS state, attempts, max_attempts, locked_by, started_at,
       cancel_requested, extract(epoch FROM now() - started_at) AS running_seconds,
       extract(epoch FROM lease_expires_at - now()) AS lease_left
FROM job_queue
WHERE state = 'running'
ORDER BY started_at, id
LIMIT %(limit)s;

-- dashboard_job_parents --
-- The jobs job %(id)s waits for (job_queue_edges, migrations/0019), at most
-- %(limit)s of them (a batch's callback has one per member), with how many
-- there are in all. A parent pruned since is no row here.
SELECT p.id, p.step, p.kind, p.state, count(*) OVER () AS parents
FROM job_queue_edges AS e
JOIN job_queue AS p ON p.id = e.parent_id
WHERE e.child_id = %(id)s
ORDER BY p.id
LIMIT %(limit)s;

-- dashboard_workflows --
-- The newest workflows, before the id %(before)s (keyset paging), or the one
-- of %(id)s, each with its steps counted by state ({state: count}).
SELECT w.id, w.name, w.created_at, c.step_count, c.states
FROM job_queue_workflows AS w
CROSS JOIN LATERAL (
    SELECT coalesce(sum(n), 0)::bigint AS step_count,
           coalesce(jsonb_object_agg(state, n), '{}') AS states
    FROM (SELECT state, count(*) AS n FROM job_queue
          WHERE workflow_id = w.id GROUP BY state) AS by_state
) AS c
WHERE (%(before)s::bigint IS NULL OR w.id < %(before)s)
  AND (%(id)s::bigint IS NULL OR w.id = %(id)s)
ORDER BY w.id DESC
LIMIT %(limit)s;

-- dashboard_workflow_steps --
-- The steps of workflow %(id)s the page shows: the first and the last
-- %(ends)s by id (to be drawn: a workflow's steps are inserted in order, so
-- these are its start and its end), and up to %(failed)s failed steps
-- between them (listed, so that each can be retried). The workflow's ids
-- are read through its index first: ordered by id straight away, the
-- planner may walk the primary key through the whole table instead. Errors
-- and outputs are cut at a few thousand characters (the job's page has
-- them whole); cancelled_by is the job whose end cancelled the step.
WITH ids AS MATERIALIZED (
    SELECT id, state FROM job_queue WHERE workflow_id = %(id)s
), shown AS (
    (SELECT id, true AS drawn FROM ids ORDER BY id LIMIT %(ends)s)
    UNION ALL
    (SELECT id, true FROM ids ORDER BY id DESC LIMIT %(ends)s)
    UNION ALL
    (SELECT id, false FROM ids WHERE state = 'failed' ORDER BY id LIMIT %(failed)s)
), steps AS (
    SELECT id, bool_or(drawn) AS drawn FROM shown GROUP BY id
)
SELECT j.id, j.step, j.kind, j.queue, j.state, j.attempts, j.max_attempts,
       j.cancel_requested, j.on_parent_failure, j.finished_at,
       split_part(j.last_error, E'\n', 1) AS error_line,
       left(j.last_error, 4000) AS last_error,
       left(jsonb_pretty(j.output), 4000) AS output, s.drawn, w.cancelled_by
FROM steps AS s
JOIN job_queue AS j ON j.id = s.id
LEFT JOIN job_queue_waits AS w ON w.job_id = j.id
ORDER BY j.id;

-- dashboard_workflow_edges --
-- The edges between the steps %(ids)s; an edge to or from a step of
-- workflow %(workflow)s that is not among them comes with that end NULL,
-- once per step drawn (the page draws those to a box standing for the
-- steps it leaves out).
SELECT e.parent_id, e.child_id
FROM job_queue_edges AS e
WHERE e.child_id = ANY (%(ids)s::bigint[]) AND e.parent_id = ANY (%(ids)s::bigint[])
UNION ALL
SELECT s.id, NULL
FROM unnest(%(ids)s::bigint[]) AS s(id)
WHERE EXISTS (SELECT FROM job_queue_edges AS e JOIN job_queue AS c ON c.id = e.child_id
              WHERE e.parent_id = s.id AND c.workflow_id = %(workflow)s
                AND e.child_id <> ALL (%(ids)s::bigint[]))
UNION ALL
SELECT NULL, s.id
FROM unnest(%(ids)s::bigint[]) AS s(id)
WHERE EXISTS (SELECT FROM job_queue_edges AS e JOIN job_queue AS p ON p.id = e.parent_id
              WHERE e.child_id = s.id AND p.workflow_id = %(workflow)s
                AND e.parent_id <> ALL (%(ids)s::bigint[]));

-- dashboard_batches --
-- The newest batches, before the id %(before)s (keyset paging): their
-- members counted by state ({state: count}) and their callbacks' states
-- (NULL for a callback pruned since, or none asked for).
SELECT b.id, b.name, b.created_at, b.sealed_at,
       b.on_success, s.state AS on_success_state,
       b.on_complete, c.state AS on_complete_state,
       m.members, m.states
FROM job_queue_batches AS b
LEFT JOIN job_queue AS s ON s.id = b.on_success
LEFT JOIN job_queue AS c ON c.id = b.on_complete
CROSS JOIN LATERAL (
    SELECT coalesce(sum(n), 0)::bigint AS members,
           coalesce(jsonb_object_agg(state, n), '{}') AS states
    FROM (SELECT state, count(*) AS n FROM job_queue
          WHERE batch_id = b.id GROUP BY state) AS by_state
) AS m
WHERE (%(before)s::bigint IS NULL OR b.id < %(before)s)
  AND (%(id)s::bigint IS NULL OR b.id = %(id)s)
ORDER BY b.id DESC
LIMIT %(limit)s;
