-- A run of a kind limited per key only that succeeds hands its key's slot
-- straight to the key's next due row (record_successes_handing_on), which
-- it looks for in the lane and among the parked rows: in the lane too, a
-- key's rows are now in due order.
DROP INDEX job_queue_key_lane;
CREATE INDEX job_queue_key_lane ON job_queue (kind, concurrency_key, priority, run_at, id)
    WHERE state = 'pending' AND limited AND NOT parked AND concurrency_key IS NOT NULL;

-- A slot that frees wakes the workers (migrations/0004); a key's slot also
-- brings the key's first parked row back to the lane, where the next claim
-- finds it in due order rather than by walking the keys. Under the limited
-- claims' lock (see claim_limited_jobs), taken before the row is looked
-- for: a claim that parked the key's rows, seeing the run still going, has
-- committed by then, and under READ COMMITTED the look sees them parked
-- (the package sends the statements that end runs under it, whatever the
-- default). The lock is held until the transaction ends: SQL of one's own
-- that ends a run of such a kind is best its own short transaction. A row
-- of a paused queue is passed over, and a locked one is skipped: whoever
-- holds it is claiming it. A run that hands its slot on frees none: its row
-- leaves running with `limited` false, and the trigger does not fire.
CREATE FUNCTION job_queue_slot_freed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.concurrency_key IS NOT NULL AND EXISTS (
            SELECT FROM job_queue_limits
            WHERE kind = OLD.kind AND max_running_per_key IS NOT NULL) THEN
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
    END IF;
    PERFORM pg_notify('motir_job_queue', '*');
    RETURN NULL;
END;
$$;

DROP TRIGGER job_queue_notify_slot_freed ON job_queue;
CREATE TRIGGER job_queue_notify_slot_freed
    AFTER UPDATE OF state ON job_queue
    FOR EACH ROW
    WHEN (OLD.limited AND OLD.state = 'running' AND NEW.state <> 'running' AND NEW.limited)
    EXECUTE FUNCTION job_queue_slot_freed();
