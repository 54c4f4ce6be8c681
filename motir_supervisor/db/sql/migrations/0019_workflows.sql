-- Jobs that wait for other jobs: dependencies from any producer, workflows
-- of named steps, and batches with callbacks.
--
-- A row that names jobs in `depends_on` is inserted `waiting` and is never
-- claimed. The database releases it (to `pending`, which wakes the workers
-- as any new row does) inside the transaction that ends its last parent,
-- whoever ends it: a worker, the reaper, `cancel`, a DELETE. Nothing polls.
--
-- How a release happens exactly once:
--   * job_queue_edges holds every edge (parent, child); job_queue_waits holds,
--     for each dependent row, how many of its parents have not ended.
--   * A parent's end (its state entering succeeded/failed/cancelled) takes
--     one off each child's count as its transaction commits (see
--     job_queue_settle). The row lock on the count orders parents that end
--     at the same instant: the later writer waits for the earlier one's
--     commit and counts from its result, so exactly one of them sees zero
--     and releases. A commit locks all the counts it changes in job order,
--     which every committing writer shares: no two of them deadlock.
--   * A child's insert locks its parents and marks them (has_dependents) as
--     its transaction commits, and counts only the parents not yet ended. A
--     parent ending concurrently either committed first (the insert sees it
--     ended and does not count it) or waits for the insert's commit and
--     then finds the new edge. A parent that ends in a REPEATABLE READ
--     transaction after the mark is refused a serialization failure rather
--     than ending with a stale view of its children.
--   * Only rows with has_dependents fire the end trigger (its WHEN clause is
--     evaluated without calling anything), so jobs without dependents pay
--     for none of this.
-- A parent that fails (or is cancelled, or deleted unended) cancels its
-- waiting descendants whose on_parent_failure is 'cancel', all in one
-- statement however deep the graph, recording which job's end did it
-- (cancelled_by); one whose on_parent_failure is 'run' is released as after
-- a success. When that job comes back (retry, by hand or by any UPDATE to
-- pending), the descendants its end cancelled come back to waiting.
--
-- A job may depend only on jobs inserted before it (a smaller id), which
-- the sequence gives every insert: no cycle can be written.

ALTER TABLE job_queue
    ADD COLUMN depends_on bigint[],
    ADD COLUMN on_parent_failure text NOT NULL DEFAULT 'cancel'
        CONSTRAINT job_queue_on_parent_failure_check CHECK (on_parent_failure IN ('cancel', 'run')),
    ADD COLUMN workflow_id bigint,
    ADD COLUMN step text,
    ADD COLUMN batch_id bigint,
    ADD COLUMN has_dependents boolean NOT NULL DEFAULT false,
    DROP CONSTRAINT job_queue_state_check,
    ADD CONSTRAINT job_queue_state_check
        CHECK (state IN ('waiting', 'pending', 'running', 'succeeded', 'failed', 'cancelled'));

CREATE TABLE job_queue_edges (
    parent_id bigint NOT NULL,
    child_id  bigint NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX job_queue_edges_child ON job_queue_edges (child_id);

CREATE TABLE job_queue_waits (
    job_id       bigint PRIMARY KEY,
    -- Parents (and, for a batch callback, the open batch) not yet ended.
    unended      integer NOT NULL,
    -- The job whose end cancelled this one, which brings it back if retried.
    cancelled_by bigint
);
CREATE INDEX job_queue_waits_cancelled_by ON job_queue_waits (cancelled_by)
    WHERE cancelled_by IS NOT NULL;

CREATE TABLE job_queue_workflows (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name       text NOT NULL CHECK (name <> ''),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE job_queue_batches (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text,
    on_success  bigint,
    on_complete bigint,
    created_at  timestamptz NOT NULL DEFAULT now(),
    sealed_at   timestamptz,
    -- The transaction that sealed it, whose own members join at its commit.
    sealed_by   bigint
);
CREATE INDEX job_queue_batches_on_success ON job_queue_batches (on_success) WHERE on_success IS NOT NULL;
CREATE INDEX job_queue_batches_on_complete ON job_queue_batches (on_complete) WHERE on_complete IS NOT NULL;

CREATE INDEX job_queue_workflow ON job_queue (workflow_id) WHERE workflow_id IS NOT NULL;
CREATE INDEX job_queue_batch ON job_queue (batch_id, state) WHERE batch_id IS NOT NULL;

-- A row with parents starts waiting; a batch's member is its callbacks'
-- parent from the start (no later write of its own row needed).
CREATE FUNCTION job_queue_mark_dependent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(NEW.depends_on) > 0 AND NEW.state = 'pending' THEN
        NEW.state := 'waiting';
    END IF;
    IF NEW.batch_id IS NOT NULL THEN
        NEW.has_dependents := true;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_queue_mark_dependent BEFORE INSERT ON job_queue
FOR EACH ROW WHEN (cardinality(NEW.depends_on) > 0 OR NEW.batch_id IS NOT NULL)
EXECUTE FUNCTION job_queue_mark_dependent();

-- Rows released: pending, in the lane their kind's limits say now (they
-- may have changed while the rows waited), and the workers of their queues
-- woken once per queue. The triggers that do both for a row coming back to
-- pending one by one leave a row that waited to this.
CREATE FUNCTION job_queue_release(candidates bigint[], after_failure boolean DEFAULT false)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    queues text[];
BEGIN
    WITH released AS (
        UPDATE job_queue
        SET state = 'pending', limited = job_queue_limited(kind, concurrency_key), parked = false
        WHERE id = ANY(candidates) AND state = 'waiting'
          AND (NOT after_failure OR on_parent_failure = 'run')
        RETURNING queue
    )
    SELECT array_agg(DISTINCT queue) INTO queues FROM released;
    PERFORM pg_notify('motir_job_queue', q) FROM unnest(queues) AS q;
END;
$$;

DROP TRIGGER job_queue_route_revived ON job_queue;
CREATE TRIGGER job_queue_route_revived
    AFTER UPDATE ON job_queue
    FOR EACH ROW
    WHEN (NEW.kind IS DISTINCT FROM OLD.kind
          OR NEW.concurrency_key IS DISTINCT FROM OLD.concurrency_key
          OR (NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'running', 'waiting')))
    EXECUTE FUNCTION job_queue_reroute();

DROP TRIGGER job_queue_notify_requeued ON job_queue;
CREATE TRIGGER job_queue_notify_requeued
    AFTER UPDATE OF state ON job_queue
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'waiting'))
    EXECUTE FUNCTION job_queue_notify_requeued();

-- What a transaction leaves to settle when it commits: parents that ended
-- or came back, rows retried by hand, rows inserted with parents or into a
-- batch, batches sealed. Every count is changed there, at commit, by one
-- function that locks all the counts it changes in one order every
-- committing writer shares: no two writes deadlock however their parents'
-- children cross, and a count stays locked only while its writer commits,
-- so a producer's open transaction never holds up the worker ending a
-- parent. UNLOGGED: a row lives only until the commit of the transaction
-- that wrote it, which a crash aborts anyway.
CREATE UNLOGGED TABLE job_queue_settling (
    txid   bigint NOT NULL,
    seq    bigint GENERATED ALWAYS AS IDENTITY,
    job_id bigint NOT NULL,
    -- succeeded, failed, cancelled, deleted (unended), gone (ended),
    -- revived, retried, inserted; sealed (job_id is then the batch's id)
    event  text NOT NULL,
    PRIMARY KEY (txid, seq)
);

-- A row for each transaction with something to settle: its deferred
-- trigger runs job_queue_settle once, at commit.
CREATE UNLOGGED TABLE job_queue_settle_at_commit (txid bigint PRIMARY KEY);

CREATE FUNCTION job_queue_settle_later(job bigint, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_queue_settling (txid, job_id, event) VALUES (txid_current(), job, what);
    PERFORM job_queue_settle_at_commit();
END;
$$;

-- The transaction's marker row, written once: a setting local to the
-- transaction (undone with a rolled-back savepoint, as the row is) says it
-- is there, which costs far less than a second insert meeting the key.
CREATE FUNCTION job_queue_settle_at_commit() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('motir.settling', true) IS DISTINCT FROM txid_current()::text THEN
        INSERT INTO job_queue_settle_at_commit (txid) VALUES (txid_current())
        ON CONFLICT DO NOTHING;
        PERFORM set_config('motir.settling', txid_current()::text, true);
    END IF;
END;
$$;

-- Members of a batch that does not exist or is sealed are refused: at the
-- INSERT (any seal), and again at commit under the batch's lock, where a
-- seal by the members' own transaction, written after them, lets them in.
CREATE FUNCTION job_queue_refuse_closed_batches(members bigint[], at_commit boolean)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    SELECT j.id, j.batch_id, b.sealed_at INTO bad
    FROM job_queue AS j LEFT JOIN job_queue_batches AS b ON b.id = j.batch_id
    WHERE j.id = ANY(members)
      AND (b.id IS NULL OR (b.sealed_at IS NOT NULL
                            AND NOT (at_commit AND b.sealed_by = txid_current())))
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: batch % %', bad.id, bad.batch_id,
            CASE WHEN bad.sealed_at IS NULL THEN 'does not exist'
                 ELSE 'is sealed: no member can be added to it' END
            USING ERRCODE = 'foreign_key_violation';
    END IF;
END;
$$;

-- The wake-up for the rows an INSERT wrote pending (migrations/0001); then,
-- for those that name jobs or a batch, what can be refused at once (the
-- same is checked again under locks at commit), and their wiring left to
-- the commit. One statement trigger for both: a second would be called for
-- every INSERT, a statement trigger having no WHEN that looks at its rows.
CREATE OR REPLACE FUNCTION job_queue_notify_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    PERFORM pg_notify('motir_job_queue', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted_rows WHERE state = 'pending') AS q;
    IF NOT EXISTS (SELECT FROM inserted_rows
                   WHERE cardinality(depends_on) > 0 OR batch_id IS NOT NULL) THEN
        RETURN NULL;
    END IF;

    SELECT r.id, p.parent, EXISTS (SELECT FROM job_queue AS j WHERE j.id = p.parent) AS present
    INTO bad
    FROM inserted_rows AS r, unnest(r.depends_on) AS p(parent)
    WHERE p.parent IS NULL OR p.parent >= r.id
       OR NOT EXISTS (SELECT FROM job_queue AS j WHERE j.id = p.parent)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: depends_on names job %, which %', bad.id, bad.parent,
            CASE WHEN bad.parent IS NULL THEN 'is NULL'
                 WHEN NOT bad.present THEN 'does not exist'
                 ELSE 'was not inserted before it' END
            USING ERRCODE = 'foreign_key_violation';
    END IF;

    -- The unique index holds pending and running rows: two waiting rows
    -- with one key could not both be released, and the write that ended
    -- their parent would fail.
    SELECT r.id INTO bad FROM inserted_rows AS r
    WHERE cardinality(r.depends_on) > 0 AND r.unique_key IS NOT NULL
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: a job that waits for others cannot have a unique_key', bad.id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    PERFORM job_queue_refuse_closed_batches(
        ARRAY(SELECT id FROM inserted_rows WHERE batch_id IS NOT NULL), false);

    INSERT INTO job_queue_settling (txid, job_id, event)
    SELECT txid_current(), id, 'inserted' FROM inserted_rows
    WHERE cardinality(depends_on) > 0 OR batch_id IS NOT NULL;
    PERFORM job_queue_settle_at_commit();
    RETURN NULL;
END;
$$;

-- At commit: the edges and counts of rows inserted with parents, and the
-- memberships of rows inserted into batches.
CREATE FUNCTION job_queue_wire(inserted_ids bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
    parents bigint[];
BEGIN
    IF cardinality(inserted_ids) = 0 THEN
        RETURN;
    END IF;
    -- Once, as an array: an IN over the rows' arrays carries a fan-in's
    -- whole array with each of its ids through a hash (gigabytes of
    -- temporary files for a fan-in of 10,000).
    parents := ARRAY(SELECT DISTINCT p FROM job_queue AS r, unnest(r.depends_on) AS p
                     WHERE r.id = ANY(inserted_ids));
    -- In id order, as the completer's writes lock them: no deadlock between
    -- an insert and the write that ends some of its parents. A parent
    -- deleted meanwhile (by hand, by retention) is gone once locked, and the
    -- row is refused rather than left waiting for a job that no longer is.
    PERFORM FROM job_queue WHERE id = ANY(parents) ORDER BY id FOR NO KEY UPDATE;
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

-- New members of open batches become parents of the batches' callbacks.
CREATE FUNCTION job_queue_add_members(members bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
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
END;
$$;

-- A parent came back from its end (a retry): each child counts it again,
-- and the descendants its end cancelled wait again, but for those that
-- another failed job still holds (which then brings them back instead).
CREATE FUNCTION job_queue_parent_revived(parent bigint) RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    revived bigint[];
    held record;
BEGIN
    UPDATE job_queue_waits AS w
    SET unended = w.unended + 1
    FROM job_queue_edges AS e
    WHERE e.parent_id = parent AND w.job_id = e.child_id;

    -- Their counts first, in job order: a failure of another of their
    -- parents settling meanwhile locks the same counts, so whichever comes
    -- second sees the other's result (this one: that parent failed, and
    -- holds the row; that one: the row waiting, which it cancels again).
    PERFORM FROM job_queue_waits
    WHERE cancelled_by = parent
    ORDER BY job_id
    FOR UPDATE;
    revived := ARRAY(SELECT w.job_id FROM job_queue_waits AS w
                     JOIN job_queue AS c ON c.id = w.job_id
                     WHERE w.cancelled_by = parent AND c.state = 'cancelled');
    -- A parent deleted since counts as cancelled, and holds for good.
    FOR held IN
        SELECT c.id AS child_id, min(p.parent) AS holder
        FROM job_queue AS c, unnest(c.depends_on) AS p(parent)
        WHERE c.id = ANY(revived)
          AND NOT EXISTS (SELECT FROM job_queue AS q WHERE q.id = p.parent)
        GROUP BY c.id
    LOOP
        UPDATE job_queue_waits SET cancelled_by = held.holder WHERE job_id = held.child_id;
        UPDATE job_queue SET last_error = format('parent job %s was deleted', held.holder)
        WHERE id = held.child_id;
        revived := array_remove(revived, held.child_id);
    END LOOP;
    LOOP
        SELECT e.child_id, min(q.id) AS holder INTO held
        FROM job_queue_edges AS e
        JOIN job_queue AS q ON q.id = e.parent_id
        WHERE e.child_id = ANY(revived) AND q.id <> parent AND NOT q.id = ANY(revived)
          AND q.state IN ('failed', 'cancelled')
        GROUP BY e.child_id
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        -- Named as the job that holds it now, whose retry brings it back.
        UPDATE job_queue_waits SET cancelled_by = held.holder WHERE job_id = held.child_id;
        UPDATE job_queue AS c
        SET last_error = format('parent job %s ended %s', q.id, q.state)
        FROM job_queue AS q
        WHERE c.id = held.child_id AND q.id = held.holder;
        revived := array_remove(revived, held.child_id);
    END LOOP;

    UPDATE job_queue_waits SET cancelled_by = NULL WHERE job_id = ANY(revived);
    UPDATE job_queue
    SET state = 'waiting', finished_at = NULL, last_error = NULL
    WHERE id = ANY(revived) AND state = 'cancelled';
END;
$$;

-- A parent ended (its state entered succeeded, failed or cancelled, or it
-- was deleted unended, which counts as cancelled), as its transaction
-- commits: each child counts it, the children it was the last for are
-- released, and, unless it succeeded, the waiting descendants that would
-- not run after a failure are cancelled, all in one statement however deep
-- the graph. Their own ends are settled in turn, where they count for their
-- children (a 'run' child among them is released) and find nothing more to
-- cancel.
--
-- Its statements are planned for no particular parent, from statistics that
-- a fan-out of thousands can dominate: a parent is taken for one with
-- thousands of children, and the plans would read every edge and every
-- waiting row, and compile themselves (JIT), each time a parent with one
-- child fails. Through the indexes instead: a job's edges and its children
-- by their ids.
CREATE FUNCTION job_queue_parent_ended(parent bigint, parent_state text, how text)
RETURNS void
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    ready bigint[];
BEGIN
    WITH counted AS (
        UPDATE job_queue_waits AS w
        SET unended = w.unended - 1
        FROM job_queue_edges AS e
        WHERE e.parent_id = parent AND w.job_id = e.child_id
        RETURNING w.job_id, w.unended
    )
    SELECT array_agg(job_id) INTO ready FROM counted WHERE unended = 0;
    IF ready IS NOT NULL THEN
        PERFORM job_queue_release(ready, parent_state <> 'succeeded');
    END IF;

    -- Each child is looked up by its id (a subquery, not a join), and the
    -- walk runs only where a child is left to cancel: the descendants it
    -- cancels come back here, settled in turn, and find none.
    IF parent_state <> 'succeeded' AND EXISTS (
        SELECT FROM job_queue_edges AS e
        WHERE e.parent_id = parent
          AND (SELECT c.state = 'waiting' AND c.on_parent_failure = 'cancel'
               FROM job_queue AS c WHERE c.id = e.child_id))
    THEN
        WITH RECURSIVE doomed (id, cause) AS (
            SELECT e.child_id, parent
            FROM job_queue_edges AS e
            WHERE e.parent_id = parent
              AND (SELECT c.state = 'waiting' AND c.on_parent_failure = 'cancel'
                   FROM job_queue AS c WHERE c.id = e.child_id)
          UNION
            SELECT e.child_id, d.id
            FROM doomed AS d
            -- OFFSET 0 keeps the subquery a lookup per row of the walk.
            CROSS JOIN LATERAL (SELECT child_id FROM job_queue_edges
                                WHERE parent_id = d.id OFFSET 0) AS e
            WHERE (SELECT c.state = 'waiting' AND c.on_parent_failure = 'cancel'
                   FROM job_queue AS c WHERE c.id = e.child_id)
        ), first_cause AS (
            SELECT DISTINCT ON (id) id, cause FROM doomed ORDER BY id, cause
        ), recorded AS (
            UPDATE job_queue_waits AS w
            SET cancelled_by = parent
            FROM first_cause AS f
            WHERE w.job_id = f.id
        )
        UPDATE job_queue AS c
        SET state = 'cancelled', finished_at = now(),
            last_error = CASE WHEN f.cause = parent THEN format('parent job %s %s', parent, how)
                              ELSE format('parent job %s was cancelled: job %s %s', f.cause, parent, how)
                         END
        FROM first_cause AS f
        WHERE c.id = f.id AND c.state = 'waiting';
    END IF;
END;
$$;

-- The triggers that leave a row's change to be settled at commit. Each
-- fires only for rows in a workflow's or batch's graph (has_dependents, a
-- depends_on): its WHEN is evaluated without calling anything.
CREATE FUNCTION job_queue_parent_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Its own edges and count go now; those to its children when the
        -- children have counted its end.
        DELETE FROM job_queue_edges WHERE child_id = OLD.id;
        DELETE FROM job_queue_waits WHERE job_id = OLD.id;
        IF OLD.has_dependents THEN
            PERFORM job_queue_settle_later(OLD.id, CASE
                WHEN OLD.state IN ('succeeded', 'failed', 'cancelled') THEN 'gone'
                ELSE 'deleted' END);
        END IF;
    ELSIF NEW.state IN ('succeeded', 'failed', 'cancelled') THEN
        INSERT INTO job_queue_settling (txid, job_id, event)
        VALUES (txid_current(), NEW.id, NEW.state);
        IF current_setting('motir.settling', true) IS DISTINCT FROM txid_current()::text THEN
            PERFORM job_queue_settle_at_commit();
        END IF;
    ELSE
        PERFORM job_queue_settle_later(NEW.id, 'revived');
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_parent_changed AFTER UPDATE OF state ON job_queue
FOR EACH ROW
WHEN (NEW.has_dependents
      AND (OLD.state IN ('succeeded', 'failed', 'cancelled'))
          IS DISTINCT FROM (NEW.state IN ('succeeded', 'failed', 'cancelled')))
EXECUTE FUNCTION job_queue_parent_changed();

CREATE TRIGGER job_queue_dependent_deleted AFTER DELETE ON job_queue
FOR EACH ROW
WHEN (OLD.has_dependents OR OLD.depends_on IS NOT NULL OR OLD.state = 'waiting')
EXECUTE FUNCTION job_queue_parent_changed();

-- A dependent row retried by hand waits for the parents it still has,
-- counted at commit with whatever else the transaction changed. An AFTER
-- trigger, as every row trigger on an update of job_queue is (a BEFORE one
-- would lock every row each write touches); the row is back to waiting
-- before its transaction commits, so no worker sees it pending.
CREATE FUNCTION job_queue_retry_dependent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM job_queue_settle_later(NEW.id, 'retried');
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_retry_dependent AFTER UPDATE OF state ON job_queue
FOR EACH ROW
WHEN (NEW.state = 'pending' AND OLD.state IN ('failed', 'cancelled') AND NEW.depends_on IS NOT NULL)
EXECUTE FUNCTION job_queue_retry_dependent();

-- Everything a transaction left to settle, as it commits; again until
-- nothing is left (a cancellation here is a parent's end to settle too).
-- Each round first locks every count its ends change, in job order: a
-- commit that settles ends of parents sharing children with another's waits
-- for it on the first shared count, holding none the other needs.
CREATE FUNCTION job_queue_settle() RETURNS trigger
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
        counts := ARRAY(
            SELECT unnest(children)
            UNION
            SELECT c.callback
            FROM unnest(events) AS u
            JOIN job_queue_batches AS b ON b.id = u.job_id,
            LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
            WHERE u.event = 'sealed');
        PERFORM FROM job_queue_waits WHERE job_id = ANY(counts) ORDER BY job_id FOR UPDATE;

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

        PERFORM job_queue_wire(ARRAY(SELECT u.job_id FROM unnest(events) AS u
                                     WHERE u.event = 'inserted' ORDER BY u.job_id));
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

CREATE CONSTRAINT TRIGGER job_queue_settle AFTER INSERT ON job_queue_settle_at_commit
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW EXECUTE FUNCTION job_queue_settle();

-- Rows from JSON, for workflows and batches from any client (psql, Prisma's
-- $queryRaw): an array of {ref?, kind, payload?, after?: [refs of steps
-- listed before], depends_on?: [ids of existing jobs], queue?, priority?,
-- max_attempts?, run_at?, unique_key?, concurrency_key?, on_parent_failure?},
-- inserted by one statement with ids in the order listed. Anything amiss is
-- one line naming the step, and nothing is inserted.
CREATE FUNCTION job_queue_insert_steps(steps jsonb, workflow bigint, batch bigint)
RETURNS TABLE (ref text, job_id bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    bad record;
    new_ids bigint[];
BEGIN
    IF jsonb_typeof(steps) IS DISTINCT FROM 'array' THEN
        RAISE EXCEPTION 'steps must be a JSON array of objects, not %', coalesce(jsonb_typeof(steps), 'null')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT n, problem INTO bad
    FROM (SELECT s.n,
                 CASE WHEN jsonb_typeof(s.e) <> 'object' THEN 'is not a JSON object'
                      WHEN jsonb_typeof(s.e -> 'kind') IS DISTINCT FROM 'string' OR s.e ->> 'kind' = ''
                          THEN 'has no kind'
                      WHEN s.e ? 'ref' AND jsonb_typeof(s.e -> 'ref') <> 'string'
                          THEN 'has a ref that is not a string'
                      WHEN s.e ? 'after' AND jsonb_typeof(s.e -> 'after') <> 'array'
                          THEN 'has an after that is not an array of refs'
                      WHEN s.e ? 'depends_on' AND jsonb_typeof(s.e -> 'depends_on') <> 'array'
                          THEN 'has a depends_on that is not an array of job ids'
                      ELSE (SELECT format('has an unknown field "%s"', k)
                            FROM jsonb_object_keys(s.e) AS k
                            WHERE k NOT IN ('ref', 'kind', 'payload', 'after', 'depends_on', 'queue',
                                            'priority', 'max_attempts', 'run_at', 'unique_key',
                                            'concurrency_key', 'on_parent_failure')
                            LIMIT 1)
                 END AS problem
          FROM jsonb_array_elements(steps) WITH ORDINALITY AS s(e, n)) AS checked
    WHERE problem IS NOT NULL
    ORDER BY n
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'step %: %', bad.n, bad.problem USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT s.e ->> 'ref' AS ref INTO bad
    FROM jsonb_array_elements(steps) AS s(e)
    WHERE s.e ? 'ref'
    GROUP BY s.e ->> 'ref'
    HAVING count(*) > 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'step "%": two steps have this ref', bad.ref
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- An after must name a step listed before: then no cycle can be written.
    WITH s AS (SELECT e, n FROM jsonb_array_elements(steps) WITH ORDINALITY AS s(e, n)),
         refs AS (SELECT e ->> 'ref' AS ref, n FROM s WHERE e ? 'ref')
    SELECT coalesce(s.e ->> 'ref', s.n::text) AS step, a.ref AS named, r.n IS NOT NULL AS later
    INTO bad
    FROM s
    CROSS JOIN LATERAL jsonb_array_elements_text(coalesce(s.e -> 'after', '[]')) AS a(ref)
    LEFT JOIN refs AS r ON r.ref = a.ref
    WHERE r.n IS NULL OR r.n >= s.n
    ORDER BY s.n
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'step "%": after names "%", %', bad.step, bad.named,
            CASE WHEN bad.later THEN 'which is not listed before it (a step comes after the steps it waits for)'
                 ELSE 'which is no step of it' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    new_ids := ARRAY(SELECT nextval(pg_get_serial_sequence('job_queue', 'id'))
                 FROM generate_series(1, jsonb_array_length(steps)));
    WITH s AS (SELECT e, n FROM jsonb_array_elements(steps) WITH ORDINALITY AS s(e, n)),
         refs AS (SELECT e ->> 'ref' AS ref, n FROM s WHERE e ? 'ref'),
         parents AS (
             SELECT s.n, array_agg(new_ids[r.n] ORDER BY r.n) AS parent_ids
             FROM s
             CROSS JOIN LATERAL jsonb_array_elements_text(s.e -> 'after') AS a(ref)
             JOIN refs AS r ON r.ref = a.ref
             GROUP BY s.n)
    INSERT INTO job_queue (id, kind, payload, queue, priority, max_attempts, run_at, unique_key,
                           concurrency_key, on_parent_failure, depends_on, workflow_id, step, batch_id)
    SELECT new_ids[s.n], s.e ->> 'kind', coalesce(s.e -> 'payload', '{}'), s.e ->> 'queue',
           (s.e ->> 'priority')::smallint, (s.e ->> 'max_attempts')::integer,
           coalesce((s.e ->> 'run_at')::timestamptz, now()), s.e ->> 'unique_key',
           s.e ->> 'concurrency_key', coalesce(s.e ->> 'on_parent_failure', 'cancel'),
           nullif(coalesce(p.parent_ids, '{}')
                  || ARRAY(SELECT d::bigint FROM jsonb_array_elements_text(coalesce(s.e -> 'depends_on', '[]')) AS d),
                  '{}'),
           workflow, CASE WHEN workflow IS NOT NULL THEN coalesce(s.e ->> 'ref', s.e ->> 'kind') END,
           batch
    FROM s LEFT JOIN parents AS p ON p.n = s.n
    ORDER BY s.n;

    RETURN QUERY
    SELECT coalesce(s.e ->> 'ref', s.n::text), new_ids[s.n]
    FROM jsonb_array_elements(steps) WITH ORDINALITY AS s(e, n)
    ORDER BY s.n;
END;
$$;

-- A workflow in one call: its row, then every step, in the caller's
-- transaction. Each step's id comes back with its ref.
CREATE FUNCTION job_queue_workflow(name text, steps jsonb)
RETURNS TABLE (workflow_id bigint, ref text, job_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    created bigint;
BEGIN
    INSERT INTO job_queue_workflows (name) VALUES (name) RETURNING id INTO created;
    RETURN QUERY SELECT created, s.ref, s.job_id FROM job_queue_insert_steps(steps, created, NULL) AS s;
END;
$$;

-- A batch's callback: a job waiting for the batch's members and for its
-- seal (the 1 it starts counting). NULL for none.
CREATE FUNCTION job_queue_batch_callback(spec jsonb, policy text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    created bigint;
BEGIN
    IF spec IS NULL OR spec = 'null' THEN
        RETURN NULL;
    END IF;
    IF jsonb_typeof(spec) <> 'object' OR jsonb_typeof(spec -> 'kind') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'a batch callback must be a JSON object with a kind, not %', spec
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- depends_on is empty, not NULL: its parents are its edges, which a
    -- delete of the row removes with it.
    INSERT INTO job_queue (kind, payload, queue, priority, max_attempts, state,
                           depends_on, on_parent_failure)
    VALUES (spec ->> 'kind', coalesce(spec -> 'payload', '{}'), spec ->> 'queue',
            (spec ->> 'priority')::smallint, (spec ->> 'max_attempts')::integer, 'waiting',
            '{}', policy)
    RETURNING id INTO created;
    INSERT INTO job_queue_waits (job_id, unended) VALUES (created, 1);
    RETURN created;
END;
$$;

-- A batch open for members: INSERT rows with its batch_id, or call
-- job_queue_batch_add, until job_queue_batch_seal. on_success runs once
-- every member succeeded (it is cancelled if one fails, and comes back if
-- that one is retried); on_complete once every member ended.
CREATE FUNCTION job_queue_batch_open(name text, on_success jsonb DEFAULT NULL,
                                     on_complete jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    created bigint;
BEGIN
    INSERT INTO job_queue_batches (name) VALUES (name) RETURNING id INTO created;
    UPDATE job_queue_batches
    SET on_success = job_queue_batch_callback(job_queue_batch_open.on_success, 'cancel'),
        on_complete = job_queue_batch_callback(job_queue_batch_open.on_complete, 'run')
    WHERE id = created;
    RETURN created;
END;
$$;

CREATE FUNCTION job_queue_batch_add(batch bigint, members jsonb)
RETURNS TABLE (ref text, job_id bigint)
LANGUAGE sql AS $$
    SELECT * FROM job_queue_insert_steps(members, NULL, batch)
$$;

-- No member can be added after; the callbacks count the seal as a parent
-- that ended (at commit, after the members this transaction added), so a
-- sealed batch whose members all ended (or that has none) releases them
-- then. Sealing a sealed batch does nothing.
CREATE FUNCTION job_queue_batch_seal(batch bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_queue_batches SET sealed_at = now(), sealed_by = txid_current()
    WHERE id = batch AND sealed_at IS NULL;
    IF FOUND THEN
        PERFORM job_queue_settle_later(batch, 'sealed');
    ELSIF NOT EXISTS (SELECT FROM job_queue_batches WHERE id = batch) THEN
        RAISE EXCEPTION 'batch % does not exist', batch USING ERRCODE = 'no_data_found';
    END IF;
END;
$$;

CREATE FUNCTION job_queue_batch_sealed(batch bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    ready bigint[];
BEGIN
    WITH counted AS (
        UPDATE job_queue_waits
        SET unended = unended - 1
        WHERE job_id IN (SELECT c.callback
                         FROM job_queue_batches AS b,
                         LATERAL (VALUES (b.on_success), (b.on_complete)) AS c(callback)
                         WHERE b.id = batch)
        RETURNING job_id, unended
    )
    SELECT array_agg(job_id ORDER BY job_id) INTO ready FROM counted WHERE unended = 0;
    PERFORM job_queue_release(ready);
END;
$$;

-- Open, add, seal: a whole batch in one call.
CREATE FUNCTION job_queue_batch(name text, members jsonb, on_success jsonb DEFAULT NULL,
                                on_complete jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    created bigint;
BEGIN
    created := job_queue_batch_open(name, on_success, on_complete);
    PERFORM job_queue_insert_steps(members, NULL, created);
    PERFORM job_queue_batch_seal(created);
    RETURN created;
END;
$$;
