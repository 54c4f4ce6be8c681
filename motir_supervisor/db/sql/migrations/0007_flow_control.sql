-- Flow control: `@job("kind", max_running_per_key=N)` (at most N jobs of a
-- kind with one concurrency_key running at once) and `@job("kind",
-- rate_limit=(N, S))` (at most N starts of a kind in any S seconds), both
-- fleet-wide, both kept by claim_limited_jobs (queries.sql), which says why
-- neither can overshoot.

-- The key a per-key limit counts by; any producer sets it. NULL: the row is
-- not limited per key. Not empty: the claim walks keys from where its last
-- walk stopped, and '' is where a walk starts.
ALTER TABLE job_queue ADD COLUMN concurrency_key text
    CONSTRAINT job_queue_concurrency_key_not_empty CHECK (concurrency_key <> '');

-- A pending row of a key without room, set aside by a claim that found
-- the key's rows clogging the lane. It leaves the limited lane's index for
-- one that groups it by its key, so that a key with a deep backlog is not
-- read again and again by every claim walking the lane in due order; a
-- claim finds it through its key once the key has room (see
-- claim_limited_jobs). Only due rows are parked, and a row that runs is
-- never parked again.
ALTER TABLE job_queue ADD COLUMN parked boolean NOT NULL DEFAULT false;

-- A kind may have any of the three limits; a row here has at least one.
ALTER TABLE job_queue_limits ALTER COLUMN max_running DROP NOT NULL;
ALTER TABLE job_queue_limits
    ADD COLUMN max_running_per_key integer CHECK (max_running_per_key >= 1),
    ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
    ADD COLUMN rate_seconds double precision CHECK (rate_seconds > 0),
    -- Where the claim's next walk of this kind's parked keys starts (the
    -- last key the previous one looked at), so that every key gets its turn.
    ADD COLUMN key_cursor text,
    ADD CONSTRAINT job_queue_limits_rate_whole CHECK ((rate_limit IS NULL) = (rate_seconds IS NULL)),
    ADD CONSTRAINT job_queue_limits_some CHECK (
        max_running IS NOT NULL OR max_running_per_key IS NOT NULL OR rate_limit IS NOT NULL);

-- Whether a row of this kind with this key is claimed by the limited claim:
-- any limit on the kind as a whole, or a per-key limit and a key. A kind
-- with only a per-key limit leaves its rows without a key in the regular
-- lane, at the regular claim's speed.
CREATE FUNCTION job_queue_limited(job_kind text, job_key text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT l.max_running IS NOT NULL OR l.rate_limit IS NOT NULL
                            OR (l.max_running_per_key IS NOT NULL AND job_key IS NOT NULL)
                     FROM job_queue_limits AS l WHERE l.kind = job_kind), false)
$$;

-- A row enters the lane unparked, whoever inserts it; claims park it.
CREATE OR REPLACE FUNCTION job_queue_route() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.limited := job_queue_limited(NEW.kind, NEW.concurrency_key);
    NEW.parked := false;
    RETURN NEW;
END;
$$;

-- A revived row, a row whose kind changed, or one whose key changed is
-- routed again, and leaves the parked rows.
CREATE OR REPLACE FUNCTION job_queue_reroute() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Names neither state, kind nor key: no trigger of job_queue fires again.
    UPDATE job_queue
    SET limited = job_queue_limited(NEW.kind, NEW.concurrency_key),
        parked = false
    WHERE id = NEW.id
      AND (parked OR limited IS DISTINCT FROM job_queue_limited(NEW.kind, NEW.concurrency_key));
    RETURN NULL;
END;
$$;

DROP TRIGGER job_queue_route_revived ON job_queue;
CREATE TRIGGER job_queue_route_revived
    AFTER UPDATE ON job_queue
    FOR EACH ROW
    WHEN (NEW.kind IS DISTINCT FROM OLD.kind
          OR NEW.concurrency_key IS DISTINCT FROM OLD.concurrency_key
          OR (NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'running')))
    EXECUTE FUNCTION job_queue_reroute();

-- The limited lane, in due order, without the parked rows.
DROP INDEX job_queue_limited;
CREATE INDEX job_queue_limited ON job_queue (kind, priority, run_at, id)
    WHERE state = 'pending' AND limited AND NOT parked;

-- The parked rows by kind and key: the claim hops from one key to the next
-- (one probe each) and takes a key's rows in due order.
CREATE INDEX job_queue_parked ON job_queue (kind, concurrency_key, priority, run_at, id)
    WHERE state = 'pending' AND parked;

-- The lane rows of each key, which a claim parks together.
CREATE INDEX job_queue_key_lane ON job_queue (kind, concurrency_key)
    WHERE state = 'pending' AND limited AND NOT parked AND concurrency_key IS NOT NULL;

-- The running rows of each key, which the claim counts. Its predicate
-- leaves out `limited`, so that no plan takes job_queue_limited_running
-- (every running row of the kind) for a count of one key's.
CREATE INDEX job_queue_key_running ON job_queue (kind, concurrency_key)
    WHERE state = 'running' AND concurrency_key IS NOT NULL;

-- The starts of rate-limited kinds within their window (older ones are
-- deleted by the claim): a sliding log, one row per start.
CREATE TABLE job_queue_starts (
    kind       text        NOT NULL,
    started_at timestamptz NOT NULL
);
CREATE INDEX job_queue_starts_kind ON job_queue_starts (kind, started_at);

-- The claim writes key_cursor under its lock; only a change of a limit
-- wakes the workers.
DROP TRIGGER job_queue_notify_limits_changed ON job_queue_limits;
CREATE TRIGGER job_queue_notify_limits_changed
    AFTER INSERT OR DELETE OR UPDATE OF max_running, max_running_per_key, rate_limit, rate_seconds
    ON job_queue_limits
    FOR EACH STATEMENT EXECUTE FUNCTION job_queue_notify_limits();

ANALYZE job_queue_limits, job_queue_starts;
