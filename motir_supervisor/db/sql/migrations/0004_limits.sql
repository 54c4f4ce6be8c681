-- Fleet-wide limits per kind: `@job("kind", max_running=N)`.
--
-- The limit lives in the database, so that every worker of every supervisor
-- reads the same number. Workers write it from their registry (see
-- sync_limits in queries.sql); any client may read it.
CREATE TABLE job_queue_limits (
    kind        text PRIMARY KEY,
    max_running integer NOT NULL CHECK (max_running >= 1),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- Jobs of a limited kind take a lane of their own. The regular claim walks
-- only the rows that are not limited, so a deep backlog of a kind that is at
-- its limit is never in its way: a claim that skipped those rows by a filter
-- on kind would still read every one of them; its index holds none. The
-- limited claim (claim_limited_jobs) has the index of its own below.
--
-- A constant default: adding the column rewrites nothing.
ALTER TABLE job_queue ADD COLUMN limited boolean NOT NULL DEFAULT false;

-- Whoever inserts the row (Prisma, psql, the Python API), the database
-- decides its lane; a client's own value is overwritten, at the price of
-- one lookup per inserted row. A finished row that is retried, or a row
-- whose kind changes, is routed again, since the limits may have changed
-- meanwhile.
-- sync_limits reroutes the pending and running rows of a kind whose limit
-- appears or goes.
CREATE FUNCTION job_queue_route() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.limited := EXISTS (SELECT FROM job_queue_limits WHERE kind = NEW.kind);
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_queue_route_inserted
    BEFORE INSERT ON job_queue
    FOR EACH ROW EXECUTE FUNCTION job_queue_route();

CREATE TRIGGER job_queue_route_revived
    BEFORE UPDATE ON job_queue
    FOR EACH ROW
    WHEN (NEW.kind IS DISTINCT FROM OLD.kind
          OR (NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'running')))
    EXECUTE FUNCTION job_queue_route();

-- The regular claim's index, without the limited rows. job_queue_due
-- (run_at, id) goes: the claim, its more_due and the idle worker's wait all
-- walk job_queue_claim one priority at a time. Kept beside it,
-- job_queue_due is the planner's pick for the claim of one priority when
-- the statistics show the backlog at a single priority, and an urgent job
-- is then found by reading the whole backlog.
DROP INDEX job_queue_claim;
CREATE INDEX job_queue_claim ON job_queue (priority, run_at, id)
    WHERE state = 'pending' AND NOT limited;
DROP INDEX job_queue_due;

-- The distinct priorities of the regular lane's pending rows, smallest
-- first, one index probe each (a loose index scan): the claim, its
-- more_due, the idle worker's wait and `status` walk the lane one priority
-- at a time through these (see claim_due_jobs in queries.sql).
CREATE VIEW job_queue_priorities AS
WITH RECURSIVE priorities AS (
    (SELECT priority FROM job_queue WHERE state = 'pending' AND NOT limited
     ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT q.priority FROM job_queue AS q
            WHERE q.state = 'pending' AND NOT q.limited AND q.priority > p.priority
            ORDER BY q.priority LIMIT 1)
    FROM priorities AS p
    WHERE p.priority IS NOT NULL
)
SELECT priority FROM priorities WHERE priority IS NOT NULL;

-- The limited claim walks each limited kind's pending rows by priority, and
-- counts each limited kind's running rows.
CREATE INDEX job_queue_limited ON job_queue (kind, priority, run_at, id)
    WHERE state = 'pending' AND limited;
CREATE INDEX job_queue_limited_running ON job_queue (kind)
    WHERE state = 'running' AND limited;

-- A slot of a limited kind that frees wakes the workers, as a new job
-- would: its next job may be waiting for it, however the run ended (an
-- outcome, a dead worker settled, an expired lease, a drain). The next job
-- of the kind may be in any queue, so the payload is '*', which every
-- worker heeds whatever --queue it serves. So does a change of the limits
-- (a limit raised or gone may free slots).
CREATE FUNCTION job_queue_notify_limits() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('motir_job_queue', '*');
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_notify_slot_freed
    AFTER UPDATE OF state ON job_queue
    FOR EACH ROW
    WHEN (OLD.limited AND OLD.state = 'running' AND NEW.state <> 'running')
    EXECUTE FUNCTION job_queue_notify_limits();

CREATE TRIGGER job_queue_notify_limits_changed
    AFTER INSERT OR UPDATE OR DELETE ON job_queue_limits
    FOR EACH STATEMENT EXECUTE FUNCTION job_queue_notify_limits();

-- Statistics for the two small tables the claims read (see analyze_limits
-- in queries.sql): empty, as they start.
ANALYZE job_queue_limits, job_queue_paused;
