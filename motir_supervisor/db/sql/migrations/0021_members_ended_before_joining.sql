-- A member joins its batch as the transaction that inserted it commits
-- (migrations/0019). One that transaction had already ended (inserted and
-- cancelled before the commit, or inserted ended) is not counted as a member
-- still to end, as before; one that ended failed or cancelled now also
-- cancels the batch's on_success, as its end would have after joining, and
-- is named as what holds it, so that retrying it brings on_success back.
--
-- The callbacks' counts are locked first, in job order, as every commit
-- that ends or brings back a member locks them before their rows: a member
-- of the batch ending meanwhile and this join wait for each other on the
-- first count rather than each holding what the other needs, and a retry of
-- the member that holds on_success either committed first (on_success is
-- seen waiting again, and cancelled for this one) or waits, and then finds
-- this one's edge and hands the hold to it.
CREATE OR REPLACE FUNCTION job_queue_add_members(members bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    failed record;
BEGIN
    IF cardinality(members) = 0 THEN
        RETURN;
    END IF;
    -- A seal takes the batch's row for update: it waits for these members'
    -- commit, or they see it sealed.
    PERFORM FROM job_queue_batches
    WHERE id IN (SELECT batch_id FROM job_queue WHERE id = ANY(members))
    ORDER BY id
    FOR SHARE;
    PERFORM job_queue_refuse_closed_batches(members, true);
    PERFORM FROM job_queue_waits
    WHERE job_id IN (SELECT c.callback
                     FROM job_queue_batches AS b,
                     LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
                     WHERE b.id IN (SELECT batch_id FROM job_queue WHERE id = ANY(members)))
    ORDER BY job_id
    FOR UPDATE;

    INSERT INTO job_queue_edges (parent_id, child_id)
    SELECT j.id, c.callback
    FROM job_queue AS j
    JOIN job_queue_batches AS b ON b.id = j.batch_id,
    LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
    WHERE j.id = ANY(members) AND c.callback IS NOT NULL;

    UPDATE job_queue_waits AS w
    SET unended = w.unended + n.members
    FROM (SELECT c.callback, count(*) AS members
          FROM job_queue AS j
          JOIN job_queue_batches AS b ON b.id = j.batch_id,
          LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
          WHERE j.id = ANY(members) AND c.callback IS NOT NULL
            AND j.state NOT IN ('succeeded', 'failed', 'cancelled')
          GROUP BY c.callback) AS n
    WHERE w.job_id = n.callback;

    FOR failed IN
        SELECT j.id, j.state, b.on_success
        FROM job_queue AS j
        JOIN job_queue_batches AS b ON b.id = j.batch_id
        WHERE j.id = ANY(members) AND j.state IN ('failed', 'cancelled')
          AND b.on_success IS NOT NULL
        ORDER BY j.id
    LOOP
        UPDATE job_queue
        SET state = 'cancelled', finished_at = now(),
            last_error = format('parent job %s ended %s', failed.id, failed.state)
        WHERE id = failed.on_success AND state = 'waiting';
        IF FOUND THEN
            UPDATE job_queue_waits SET cancelled_by = failed.id WHERE job_id = failed.on_success;
        END IF;
    END LOOP;
END;
$$;
