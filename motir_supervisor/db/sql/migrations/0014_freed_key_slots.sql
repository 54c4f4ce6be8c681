-- Whether a key has a row waiting: in the lane or parked, due or not.
CREATE FUNCTION job_queue_key_waits(wanted_kind text, wanted_key text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT FROM job_queue
                   WHERE state = 'pending' AND limited AND NOT parked
                     AND concurrency_key IS NOT NULL
                     AND kind = wanted_kind AND concurrency_key = wanted_key)
        OR EXISTS (SELECT FROM job_queue
                   WHERE state = 'pending' AND parked
                     AND kind = wanted_kind AND concurrency_key = wanted_key)
$$;

-- Slots of keys that freed (slots: how many of each key's), as a run's end
-- frees its own (the trigger below) and as a hand-on frees those it did
-- not hand on (record_successes_handing_on: its runs leave running with
-- `limited` false, so the trigger fires for none of them, and it calls
-- this once for all such keys). Under the claims' lock, up to that many of
-- each key's first parked rows back to the lane (migrations/0008), and the
-- workers woken if any came back or the key has another row waiting. The
-- look is a fresh one only under READ COMMITTED, as the package sends the
-- statements that end runs: a transaction of one's own under REPEATABLE
-- READ would look with its first snapshot, and miss a row committed since,
-- so there the workers are woken whatever it sees.
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
       OR EXISTS (SELECT FROM unnest(kinds, keys) AS freed(kind, key)
                  WHERE job_queue_key_waits(freed.kind, freed.key)) THEN
        PERFORM pg_notify('motir_job_queue', '*');
    END IF;
END;
$$;

-- A slot of a kind limited per key only (no max_running, no rate limit)
-- makes room for its own key's rows alone: it wakes the workers only when
-- the key has a row waiting. A key that ran dry would otherwise send every
-- worker of the fleet into a limited claim that finds nothing, once for
-- each of its last runs. The look comes after the claims' lock, as the
-- return of the key's first parked row does (migrations/0008): a row
-- committed before it is seen, and one committed after woke the workers
-- itself (an insert, a retry, a resume and a row given the key notify),
-- whose claims take the lock, and their snapshot, only once this
-- transaction has committed. A
-- row not due yet counts as waiting: the idle wait looks past the rows of
-- full keys, and comes back to it once woken. The slot of a kind with a
-- max_running or a rate limit wakes them as ever, since any row of the kind
-- may take it.
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
        PERFORM job_queue_key_slots_freed(ARRAY[OLD.kind], ARRAY[OLD.concurrency_key], ARRAY[1]);
        IF key_only THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM pg_notify('motir_job_queue', '*');
    RETURN NULL;
END;
$$;

-- A pending row given another kind or key is a new job for the claims, in
-- whichever lane it now takes: it wakes the workers, as an insert does
-- (and a freed slot's look relies on it: see above). Otherwise as in
-- migrations/0011.
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
    IF NEW.state = 'pending' THEN
        PERFORM pg_notify('motir_job_queue', '*');
    END IF;
    RETURN NULL;
END;
$$;
