-- What teams ask of a job queue: priorities, unique keys and
-- paused queues, each enforced by the database, so that a plain INSERT from
-- the web app (Prisma, psql) gets the same rules as the Python API.

-- Smaller runs first among due jobs; 0 unless the producer says otherwise.
-- A constant default: adding the column rewrites nothing.
ALTER TABLE job_queue ADD COLUMN priority smallint NOT NULL DEFAULT 0;

-- At most one pending or running job per (queue, unique_key). The partial
-- unique index decides, whatever the interleaving of two racing inserts:
-- the second waits for the first to commit, then conflicts (INSERT ... ON
-- CONFLICT DO NOTHING skips it). A job that finished leaves the index and
-- frees its key.
ALTER TABLE job_queue ADD COLUMN unique_key text;
CREATE UNIQUE INDEX job_queue_unique_key ON job_queue (queue, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('pending', 'running');

-- The claim walks due rows by priority, then as they fell due. Only pending
-- rows are in it, so its size is the backlog's, not the history's; with a
-- backlog of low-priority rows, a higher-priority one is the first entry.
-- job_queue_due (run_at, id) stays for the earliest run_at an idle worker
-- sleeps until.
CREATE INDEX job_queue_claim ON job_queue (priority, run_at, id) WHERE state = 'pending';

-- `motir-supervisor pause QUEUE` adds a row, `resume` deletes it (so can any
-- client). The claim reads this table once per statement: nothing of a
-- paused queue is claimed, on any machine, until it is resumed; jobs already
-- running finish.
CREATE TABLE job_queue_paused (
    queue     text PRIMARY KEY,
    paused_at timestamptz NOT NULL DEFAULT now()
);

-- Idle workers do not wait for a paused queue's jobs, so a resume, however
-- it is made, wakes them as a new job would.
CREATE FUNCTION job_queue_notify_resumed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('motir_job_queue', OLD.queue);
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_notify_resumed
    AFTER DELETE ON job_queue_paused
    FOR EACH ROW EXECUTE FUNCTION job_queue_notify_resumed();

-- Periodic jobs (see maintenance/scheduler.py): the latest instant enqueued
-- of each scheduled kind, and the schedule as the supervisor that wrote it
-- read it (what `status` shows). The scheduler advances last_instant and inserts
-- the job in one statement, so an instant is enqueued once in all.
CREATE TABLE job_queue_schedules (
    kind         text PRIMARY KEY,
    spec         text NOT NULL,
    last_instant timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL DEFAULT now()
);
