-- Each kind's policy: `@job("kind", max_attempts=N, retry=..., queue=...,
-- priority=...)`, for every row of the kind that does not say otherwise,
-- whoever inserts it (Prisma, psql, the Python API).
--
-- Workers write a row for each kind of their registry when they start
-- (see set_kind_policy in queries.sql): what its policy says, and the
-- fleet's values (its retry delays the supervisor's options) where it says
-- none. Any client may read them. A kind without a row, or a column left
-- NULL, follows the fleet's policy.
CREATE TABLE job_queue_kinds (
    kind         text PRIMARY KEY,
    max_attempts integer CHECK (max_attempts >= 1),
    queue        text CHECK (queue <> ''),
    priority     smallint,
    -- The delay after failed attempt n, in seconds before jitter, is the
    -- n-th; a later attempt waits as the last.
    retry_delays double precision[] NOT NULL CHECK (cardinality(retry_delays) >= 1),
    -- The share of a delay taken off at random (see policy.Retry).
    retry_jitter double precision NOT NULL DEFAULT 0 CHECK (retry_jitter BETWEEN 0 AND 1),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

-- A row that leaves a column unset must be told from one that set it, so
-- the columns default to nothing: the trigger below fills them, and NOT
-- NULL is checked after it.
ALTER TABLE job_queue
    ALTER COLUMN max_attempts DROP DEFAULT,
    ALTER COLUMN queue DROP DEFAULT,
    ALTER COLUMN priority DROP DEFAULT;

-- What a row left unset, from its kind's policy, else the fleet's: 25
-- attempts (policy.DEFAULT_MAX_ATTEMPTS), the default queue, priority 0.
-- Fired only for a row that left one unset; before the routing trigger
-- (job_queue_route_inserted: BEFORE triggers fire in the order of their
-- names), though the lane depends on none of these columns. A kind's queue
-- is filled in before the row is checked against the unique keys of that
-- queue, and a paused queue holds the row as any other of it.
CREATE FUNCTION job_queue_kind_defaults() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    policy job_queue_kinds;
BEGIN
    SELECT * INTO policy FROM job_queue_kinds WHERE kind = NEW.kind;
    NEW.max_attempts := coalesce(NEW.max_attempts, policy.max_attempts, 25);
    NEW.queue := coalesce(NEW.queue, policy.queue, 'default');
    NEW.priority := coalesce(NEW.priority, policy.priority, 0);
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_queue_kind_defaults
    BEFORE INSERT ON job_queue
    FOR EACH ROW
    WHEN (NEW.max_attempts IS NULL OR NEW.queue IS NULL OR NEW.priority IS NULL)
    EXECUTE FUNCTION job_queue_kind_defaults();

-- The delay before a job whose worker died running attempt `attempt` (or
-- whose lease lapsed) runs again: its kind's, as the workers wrote it (the
-- fleet's delays for a kind without its own), so that a job that kills its
-- worker does not take down one worker after another in a quick loop. A
-- kind no worker wrote waits the fleet's default delays: 5 s doubling up
-- to an hour, jitter over the upper half (policy.Retry). No delay is longer
-- than a century (policy.MAX_DELAY_SECONDS), so run_at stays a time.
CREATE FUNCTION job_queue_retry_delay(job_kind text, attempt integer) RETURNS interval
LANGUAGE sql VOLATILE AS $$
    SELECT make_interval(secs => least(coalesce(
        (SELECT k.retry_delays[least(greatest(attempt, 1), cardinality(k.retry_delays))]
                * (1 - k.retry_jitter * random())
         FROM job_queue_kinds AS k
         WHERE k.kind = job_kind),
        least(3600, 5 * 2 ^ least(greatest(attempt - 1, 0), 32)) * (1 - 0.5 * random())),
        3153600000))
$$;

ANALYZE job_queue_kinds;
