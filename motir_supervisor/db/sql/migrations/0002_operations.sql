-- What operating the queue needs: cancelling running jobs, pruning finished
-- rows, and vacuum settings for a table that is mostly churn.

-- `motir-supervisor cancel` on a running job sets this; the worker sees it at
-- its next lease renewal, tells the handler through j.stopping, and the job
-- ends `cancelled` unless the handler completes it anyway.
ALTER TABLE job_queue ADD COLUMN cancel_requested boolean NOT NULL DEFAULT false;

-- Retention deletes finished rows by age in small batches; this index keeps
-- each batch an index range scan instead of a walk over the whole table.
CREATE INDEX job_queue_finished ON job_queue (finished_at)
    WHERE state IN ('succeeded', 'cancelled');

-- Every job is inserted, updated two or three times and later deleted, so
-- dead row versions pile up fast, and the claim's partial index is the first
-- to suffer from them. The defaults wait for 20 % of the table to be dead
-- before vacuuming, which on a table holding a million finished rows means
-- 200,000 dead tuples between runs. Vacuum after 1 % (plus 1,000 rows), never
-- throttle it (the table is small and hot, the work short), and refresh the
-- planner's statistics as often, since the mix of states changes by the minute.
ALTER TABLE job_queue SET (
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.01,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
