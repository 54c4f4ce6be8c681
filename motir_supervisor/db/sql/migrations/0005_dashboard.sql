-- What the dashboard (motir-supervisor web) reads beyond what the workers
-- need. Jobs that ended badly are what an operator looks for, and there are
-- few of them among the succeeded rows, which neither the primary key nor
-- job_queue_finished (succeeded and cancelled) finds without reading them
-- all: the jobs page filtered on failed or cancelled, and the failures of
-- the throughput chart. Partial, so a job that succeeds never enters it:
-- the workers' writes do not pay for it.
CREATE INDEX job_queue_ended_badly ON job_queue (finished_at)
    WHERE state IN ('failed', 'cancelled');
