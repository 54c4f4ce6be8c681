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
), counts AS (
    SELECT queue,
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
       extract(epoch FROM run_at - now()) AS due_in
FROM job_queue
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
