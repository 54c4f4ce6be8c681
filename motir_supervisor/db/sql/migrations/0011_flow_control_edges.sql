-- Two more cases of flow control the database keeps, whoever writes.

-- A running job's kind and key are the ones its slot was counted for: a
-- change would move the slot to another key behind the limited claims'
-- back (that key then running one more than its limit) and leave the old
-- key's slot freed without a wake-up. Refused while the row runs; any
-- change of a row not running is routed again, as before.
CREATE OR REPLACE FUNCTION job_queue_reroute() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.state = 'running' AND NEW.state = 'running' THEN
        RAISE EXCEPTION 'job % is running: its kind and concurrency_key cannot change until it ends',
            NEW.id USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    -- Names neither state, kind nor key: no trigger of job_queue fires again.
    UPDATE job_queue
    SET limited = job_queue_limited(NEW.kind, NEW.concurrency_key),
        parked = false
    WHERE id = NEW.id
      AND (parked OR limited IS DISTINCT FROM job_queue_limited(NEW.kind, NEW.concurrency_key));
    RETURN NULL;
END;
$$;

-- A queue paused or resumed changes which of its keys' rows a claim may
-- take. For each key with room that has waiting rows in the queue, the
-- first of its parked rows in a queue not paused comes back to the lane, as
-- a freed slot brings back its key's (migrations/0008): a key whose slot
-- freed while the queue was paused has nothing running and nothing in the
-- lane, and a key whose row in the lane was of the queue now paused has
-- nothing there a claim may take; the claims' walk of the parked keys would
-- reach either only a few hundred keys a claim. Under the limited claims'
-- lock, as the slot-freed trigger takes it, here taken before the row of
-- job_queue_paused is written (a statement trigger): two transactions
-- pausing queues each wait for the lock before they hold a row the other
-- may want. Under READ COMMITTED, as the package sends it, the look after
-- the lock sees what a claim committed meanwhile. A resume then wakes the
-- workers, as before.
CREATE FUNCTION job_queue_lock_limited_claims() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));
    RETURN NULL;
END;
$$;

CREATE FUNCTION job_queue_pause_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    changed text := CASE WHEN TG_OP = 'DELETE' THEN OLD.queue ELSE NEW.queue END;
BEGIN
    IF EXISTS (SELECT FROM job_queue
               WHERE state = 'pending' AND limited AND concurrency_key IS NOT NULL
                 AND queue = changed) THEN
        UPDATE job_queue
        SET parked = false
        WHERE id = ANY(ARRAY(
            SELECT first.id
            FROM (SELECT DISTINCT kind, concurrency_key
                  FROM job_queue
                  WHERE state = 'pending' AND limited AND concurrency_key IS NOT NULL
                    AND queue = changed) AS k
            JOIN job_queue_limits AS l ON l.kind = k.kind
            CROSS JOIN LATERAL (
                SELECT id FROM job_queue
                WHERE state = 'pending' AND parked
                  AND kind = k.kind AND concurrency_key = k.concurrency_key
                  AND queue NOT IN (SELECT queue FROM job_queue_paused)
                ORDER BY priority, run_at, id
                LIMIT 1
                FOR UPDATE SKIP LOCKED) AS first
            WHERE l.max_running_per_key IS NULL
               OR l.max_running_per_key > (
                      SELECT count(*) FROM job_queue AS r
                      WHERE r.state = 'running' AND r.concurrency_key IS NOT NULL
                        AND r.kind = k.kind AND r.concurrency_key = k.concurrency_key)));
    END IF;
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('motir_job_queue', OLD.queue);
    END IF;
    RETURN NULL;
END;
$$;

DROP TRIGGER job_queue_notify_resumed ON job_queue_paused;
DROP FUNCTION job_queue_notify_resumed();
CREATE TRIGGER job_queue_pause_changing
    BEFORE INSERT OR DELETE ON job_queue_paused
    FOR EACH STATEMENT EXECUTE FUNCTION job_queue_lock_limited_claims();
CREATE TRIGGER job_queue_pause_changed
    AFTER INSERT OR DELETE ON job_queue_paused
    FOR EACH ROW EXECUTE FUNCTION job_queue_pause_changed();
