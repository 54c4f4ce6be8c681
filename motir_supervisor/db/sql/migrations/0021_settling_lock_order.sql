-- What a commit settles (migrations/0019), made to take its locks in one
-- order, and batch members that ended before they joined.
--
-- Each round of job_queue_settle takes every lock it needs before it
-- changes anything: the batches its rows join or it sealed, the job rows it
-- writes (the parents of the rows it inserted, every row whose count it
-- changes, and the descendants a failure's walk cancels or a retry brings
-- back), then their counts, the callbacks' of its batches included.
-- Taken later in the round, as job_queue_wire and job_queue_add_members
-- took them, a commit that ended one job and inserted a child of another,
-- or a member of another batch, held counts while it waited for a row that
-- another committing writer held while it waited for those counts: a
-- deadlock.
--
-- A member joins its batch as the transaction that inserted it commits.
-- One that transaction had already ended (inserted and cancelled before the
-- commit, or inserted ended) is not counted as a member still to end; one
-- that ended failed or cancelled also cancels the batch's on_success, as
-- its end would have after joining, and is named as what holds it, so that
-- retrying it brings on_success back. A retry of the member that held
-- on_success takes the same count first: it either committed before (and
-- on_success is seen waiting again, and cancelled for this one) or waits,
-- and then finds this one's edge and hands the hold to it.

DROP FUNCTION job_queue_wire(bigint[]);

CREATE FUNCTION job_queue_wire(inserted_ids bigint[], parents bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    IF cardinality(inserted_ids) = 0 THEN
        RETURN;
    END IF;
    -- The parents are locked (job_queue_settle): one deleted meanwhile (by
    -- hand, by retention) is gone, and the row is refused rather than left
    -- waiting for a job that no longer is.
    SELECT r.id, p.parent INTO bad
    FROM job_queue AS r, unnest(r.depends_on) AS p(parent)
    WHERE r.id = ANY(inserted_ids)
      AND NOT EXISTS (SELECT FROM job_queue AS j WHERE j.id = p.parent)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: depends_on names job %, which does not exist', bad.id, bad.parent
            USING ERRCODE = 'foreign_key_violation';
    END IF;
    UPDATE job_queue SET has_dependents = true WHERE id = ANY(parents);

    INSERT INTO job_queue_edges (parent_id, child_id)
    SELECT DISTINCT p, r.id
    FROM job_queue AS r, unnest(r.depends_on) AS p
    WHERE r.id = ANY(inserted_ids)
    ON CONFLICT DO NOTHING;

    INSERT INTO job_queue_waits (job_id, unended, cancelled_by)
    SELECT e.child_id,
           count(*) FILTER (WHERE p.state NOT IN ('succeeded', 'failed', 'cancelled')),
           min(p.id) FILTER (WHERE p.state IN ('failed', 'cancelled'))
    FROM job_queue_edges AS e
    JOIN job_queue AS p ON p.id = e.parent_id
    WHERE e.child_id = ANY(inserted_ids)
    GROUP BY e.child_id
    ON CONFLICT (job_id) DO NOTHING;

    -- Members join their batches first, so that one cancelled here (a
    -- parent that already failed) counts as a member that did not succeed.
    PERFORM job_queue_add_members(ARRAY(SELECT id FROM job_queue
                                        WHERE id = ANY(inserted_ids) AND batch_id IS NOT NULL
                                        ORDER BY id));

    -- A parent that already failed: cancelled at once, or released with
    -- the others if this row runs whatever its parents did.
    UPDATE job_queue AS c
    SET state = 'cancelled', finished_at = now(),
        last_error = format('parent job %s ended %s', w.cancelled_by, p.state)
    FROM job_queue_waits AS w, job_queue AS p
    WHERE c.id = ANY(inserted_ids)
      AND w.job_id = c.id AND w.cancelled_by IS NOT NULL AND p.id = w.cancelled_by
      AND c.on_parent_failure = 'cancel' AND c.state = 'waiting';
    PERFORM job_queue_release(ARRAY(
        SELECT w.job_id FROM job_queue_waits AS w
        WHERE w.job_id = ANY(inserted_ids) AND w.unended = 0
        ORDER BY w.job_id));
END;
$$;

CREATE OR REPLACE FUNCTION job_queue_add_members(members bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    failed record;
BEGIN
    IF cardinality(members) = 0 THEN
        RETURN;
    END IF;
    -- Their batches and the callbacks' counts are locked (job_queue_settle).
    PERFORM job_queue_refuse_closed_batches(members, true);

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

CREATE OR REPLACE FUNCTION job_queue_settle() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    me bigint := txid_current();
    events job_queue_settling[];
    event job_queue_settling;
    parents bigint[];
    children bigint[];
    ends bigint[];
    counts bigint[];
    ready bigint[];
    inserted bigint[];
    wired bigint[];
    batches bigint[];
    below bigint[];
BEGIN
    LOOP
        WITH taken AS (DELETE FROM job_queue_settling WHERE txid = me RETURNING *)
        SELECT array_agg(taken ORDER BY taken.seq) INTO events FROM taken;
        EXIT WHEN events IS NULL;

        parents := ARRAY(SELECT u.job_id FROM unnest(events) AS u
                         WHERE u.event NOT IN ('inserted', 'retried', 'sealed'));
        -- Through the edges' key one parent at a time (LATERAL): the edges of
        -- a workflow inserted a moment ago have no statistics yet, and an
        -- = ANY(...) over them, or a join, is planned as a scan of every edge
        -- (OFFSET 0 keeps the subquery from being folded into one).
        SELECT array_agg(child_id ORDER BY child_id), array_agg(ended ORDER BY child_id)
        INTO children, ends
        FROM (SELECT e.child_id, count(*) AS ended
              FROM unnest(parents) AS p(id),
              LATERAL (SELECT child_id FROM job_queue_edges WHERE parent_id = p.id OFFSET 0) AS e
              GROUP BY e.child_id) AS per_child;
        inserted := ARRAY(SELECT u.job_id FROM unnest(events) AS u
                          WHERE u.event = 'inserted' ORDER BY u.job_id);
        -- Once, as an array: an IN over the rows' arrays carries a fan-in's
        -- whole array with each of its ids through a hash (gigabytes of
        -- temporary files for a fan-in of 10,000).
        wired := ARRAY(SELECT DISTINCT p FROM job_queue AS r, unnest(r.depends_on) AS p
                       WHERE r.id = ANY(inserted));
        batches := ARRAY(SELECT j.batch_id FROM job_queue AS j
                         WHERE j.id = ANY(inserted) AND j.batch_id IS NOT NULL
                         UNION
                         SELECT u.job_id FROM unnest(events) AS u WHERE u.event = 'sealed');
        counts := ARRAY(
            SELECT unnest(children)
            UNION
            SELECT c.callback
            FROM job_queue_batches AS b,
            LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
            WHERE b.id = ANY(batches));
        -- A failure's cancellation walk, and the rounds settling what it
        -- cancels, write descendants deeper than the children; a revival
        -- writes those its end cancelled.
        below := '{}';
        IF EXISTS (SELECT FROM unnest(events) AS u
                   WHERE u.event IN ('failed', 'cancelled', 'deleted', 'revived')) THEN
            below := ARRAY(
                WITH RECURSIVE descendants (id) AS (
                    SELECT e.child_id
                    FROM unnest(events) AS u,
                    LATERAL (SELECT child_id FROM job_queue_edges WHERE parent_id = u.job_id
                             OFFSET 0) AS e
                    WHERE u.event IN ('failed', 'cancelled', 'deleted')
                  UNION
                    SELECT e.child_id
                    FROM descendants AS d,
                    LATERAL (SELECT child_id FROM job_queue_edges WHERE parent_id = d.id
                             OFFSET 0) AS e
                )
                SELECT id FROM descendants
                UNION
                SELECT w.job_id
                FROM unnest(events) AS u
                JOIN job_queue_waits AS w ON w.cancelled_by = u.job_id
                WHERE u.event = 'revived');
        END IF;
        -- Every lock the round takes, before it changes anything, in one
        -- order every committing writer shares:
        --   the batches joined or sealed (a seal holds its batch's row from
        --   its statement on: the members joining wait for its commit, or
        --   see it sealed);
        --   the job rows it writes: the parents of the rows inserted (a
        --   parent ending meanwhile is seen ended, or waits for this commit
        --   and then finds the new edge), the rows whose counts change
        --   (released or cancelled here) and the descendants above;
        --   their counts.
        -- A commit waiting here holds nothing another commit needs, but the
        -- rows its own statements wrote.
        PERFORM FROM job_queue_batches WHERE id = ANY(batches) ORDER BY id FOR SHARE;
        PERFORM FROM job_queue WHERE id = ANY(wired || counts || below)
        ORDER BY id FOR NO KEY UPDATE;
        PERFORM FROM job_queue_waits WHERE job_id = ANY(counts || below)
        ORDER BY job_id FOR UPDATE;

        IF NOT EXISTS (SELECT FROM unnest(events) AS u
                       WHERE u.event NOT IN ('succeeded', 'inserted', 'sealed')) THEN
            -- Only successes (the common case): each child counts all of
            -- this transaction's parents of it at once.
            WITH counted AS (
                UPDATE job_queue_waits AS w
                SET unended = w.unended - d.ended
                FROM unnest(children, ends) AS d(job_id, ended)
                WHERE w.job_id = d.job_id
                RETURNING w.job_id, w.unended
            )
            SELECT array_agg(job_id ORDER BY job_id) INTO ready FROM counted WHERE unended = 0;
            IF ready IS NOT NULL THEN
                PERFORM job_queue_release(ready);
            END IF;
        ELSE
            FOREACH event IN ARRAY events LOOP
                CASE event.event
                    WHEN 'succeeded', 'failed', 'cancelled' THEN
                        PERFORM job_queue_parent_ended(event.job_id, event.event,
                                                       'ended ' || event.event);
                    WHEN 'deleted' THEN
                        PERFORM job_queue_parent_ended(event.job_id, 'cancelled', 'was deleted');
                    WHEN 'revived' THEN
                        PERFORM job_queue_parent_revived(event.job_id);
                    ELSE
                        NULL;
                END CASE;
                IF event.event IN ('deleted', 'gone') THEN
                    DELETE FROM job_queue_edges WHERE parent_id = event.job_id;
                END IF;
            END LOOP;
            FOREACH event IN ARRAY events LOOP
                IF event.event = 'retried' THEN
                    UPDATE job_queue_waits SET cancelled_by = NULL WHERE job_id = event.job_id;
                    UPDATE job_queue SET state = 'waiting'
                    WHERE id = event.job_id AND state = 'pending'
                      AND EXISTS (SELECT FROM job_queue_waits
                                  WHERE job_id = event.job_id AND unended > 0);
                END IF;
            END LOOP;
        END IF;

        PERFORM job_queue_wire(inserted, wired);
        FOREACH event IN ARRAY events LOOP
            IF event.event = 'sealed' THEN
                PERFORM job_queue_batch_sealed(event.job_id);
            END IF;
        END LOOP;
    END LOOP;
    DELETE FROM job_queue_settle_at_commit WHERE txid = me;
    PERFORM set_config('motir.settling', '', true);
    RETURN NULL;
END;
$$;
