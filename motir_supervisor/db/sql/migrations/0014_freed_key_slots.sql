-- A slot of a kind limited per key only (no max_running, no rate limit)
-- makes room for its own key's rows alone: it wakes the workers only when
-- the key has a row waiting. A key that ran dry would otherwise send every
-- worker of the fleet into a limited claim that finds nothing, once for
-- each of its last runs. The look comes after the claims' lock, as the
-- return of the key's first parked row does (migrations/0008): a row
-- committed before it is seen, and one committed after woke the workers
-- itself (an insert, a retry, a resume and a row given the key notify),
-- whose claims take the lock, and their snapshot, only once this
-- transaction has committed. A row not due yet counts as waiting: the idle
-- wait looks past the rows of full keys, and comes back to it once woken.
-- The look is a fresh one only under READ COMMITTED, as the package sends
-- the statements that end runs: a transaction of one's own under
-- REPEATABLE READ would look with its first snapshot, and miss a row
-- committed since, so there the workers are woken whatever it sees. The
-- slot of a kind with a max_running or a rate limit wakes them as ever,
-- since any row of the kind may take it. The look is written out here and
-- in job_queue_key_slots_freed rather than shared as an SQL function: one
-- called from a trigger is planned anew at each call, which would make every end
-- of a run an order of magnitude dearer.
CREATE OR REPLACE FUNCTION job_queue_slot_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    key_only boolean;
BEGIN
    IF OLD.concurrency_key IS NOT NULL THEN
        SELECT max_running IS NULL AND rate_limit IS NULL INTO key_only
        FROM job_queue_limits
        WHERE kind = OLD.kind AND max_running_per_key IS NOT NULL;
    END IF;
    IF key_only IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));
        UPDATE job_queue
        SET parked = false
        WHERE id = (SELECT id FROM job_queue
                    WHERE state = 'pending' AND parked
                      AND kind = OLD.kind AND concurrency_key = OLD.concurrency_key
                      AND queue NOT IN (SELECT queue FROM job_queue_paused)
                    ORDER BY priority, run_at, id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED);
        IF key_only AND NOT FOUND
           AND current_setting('transaction_isolation') = 'read committed'
           AND NOT EXISTS (SELECT FROM job_queue
                           WHERE state = 'pending' AND limited AND NOT parked
                             AND concurrency_key IS NOT NULL
                             AND kind = OLD.kind AND concurrency_key = OLD.concurrency_key)
           AND NOT EXISTS (SELECT FROM job_queue
                           WHERE state = 'pending' AND parked
                             AND kind = OLD.kind AND concurrency_key = OLD.concurrency_key) THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM pg_notify('motir_job_queue', '*');
    RETURN NULL;
END;
$$;

-- The slots a hand-on frees (record_successes_handing_on). Its runs leave
-- running with `limited` false, so the trigger above fires for none of
-- them; for all the keys whose ended runs outnumber the jobs it handed on,
-- it calls this once (slots: how many of each key's freed), which does what
-- the trigger does for each of those slots: under the claims' lock, up to
-- that many of the key's first parked rows back to the lane, and the
-- workers woken if any came back or the key has another row waiting.
CREATE FUNCTION job_queue_key_slots_freed(kinds text[], keys text[], slots integer[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    returned integer;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));
    UPDATE job_queue
    SET parked = false
    WHERE id IN (SELECT first.id
                 FROM unnest(kinds, keys, slots) AS freed(kind, key, slots)
                 CROSS JOIN LATERAL (
                     SELECT id FROM job_queue
                     WHERE state = 'pending' AND parked
                       AND kind = freed.kind AND concurrency_key = freed.key
                       AND queue NOT IN (SELECT queue FROM job_queue_paused)
                     ORDER BY priority, run_at, id
                     LIMIT freed.slots
                     FOR UPDATE SKIP LOCKED) AS first);
    GET DIAGNOSTICS returned = ROW_COUNT;
    IF returned > 0 OR current_setting('transaction_isolation') <> 'read committed'
       OR EXISTS (SELECT
                  FROM unnest(kinds, keys) AS freed(kind, key)
                  WHERE EXISTS (SELECT FROM job_queue
                                WHERE state = 'pending' AND limited AND NOT parked
                                  AND concurrency_key IS NOT NULL
                                  AND kind = freed.kind AND concurrency_key = freed.key)
                     OR EXISTS (SELECT FROM job_queue
                                WHERE state = 'pending' AND parked
                                  AND kind = freed.kind AND concurrency_key = freed.key)) THEN
        PERFORM pg_notify('motir_job_queue', '*');
    END IF;
END;
$$;

-- A pending row given another kind or key is a new job for the claims, in
-- whichever lane it now takes: it wakes the workers of its queue, as an
-- insert does (and a freed slot's look above relies on it). Otherwise as
-- in migrations/0011.
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
    IF NEW.state = 'pending' AND (NEW.kind IS DISTINCT FROM OLD.kind
                                  OR NEW.concurrency_key IS DISTINCT FROM OLD.concurrency_key) THEN
        PERFORM pg_notify('motir_job_queue', NEW.queue);
    END IF;
    RETURN NULL;
END;
$$;
