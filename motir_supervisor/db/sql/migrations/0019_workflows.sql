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
--     one off each child's count in the ending transaction. The row lock on
--     the count orders parents that end at the same instant: the later
--     writer waits for the earlier one's commit and counts from its result,
--     so exactly one of them sees zero and releases.
--   * A child's insert locks its parents and marks them (has_dependents) in
--     its own transaction, and counts only the parents not yet ended. A
--     parent ending concurrently either committed first (the insert sees it
--     ended and does not count it) or waits for the insert's commit and then
--     finds the new edge. A parent that ends in a REPEATABLE READ
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
    sealed_at   timestamptz
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

-- The edges, counts and batch memberships of the rows an INSERT wrote, once
-- per statement (a fan-out of thousands locks and marks its parent once).
CREATE FUNCTION job_queue_wire_inserted() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
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

    -- In id order, as the completer's writes lock them: no deadlock between
    -- an insert and the write that ends some of its parents.
    PERFORM FROM job_queue
    WHERE id IN (SELECT p FROM inserted_rows, unnest(depends_on) AS p)
    ORDER BY id
    FOR NO KEY UPDATE;
    UPDATE job_queue SET has_dependents = true
    WHERE id IN (SELECT p FROM inserted_rows, unnest(depends_on) AS p);

    INSERT INTO job_queue_edges (parent_id, child_id)
    SELECT DISTINCT p, r.id
    FROM inserted_rows AS r, unnest(r.depends_on) AS p
    WHERE r.state = 'waiting';

    INSERT INTO job_queue_waits (job_id, unended, cancelled_by)
    SELECT e.child_id,
           count(*) FILTER (WHERE p.state NOT IN ('succeeded', 'failed', 'cancelled')),
           min(p.id) FILTER (WHERE p.state IN ('failed', 'cancelled'))
    FROM job_queue_edges AS e
    JOIN job_queue AS p ON p.id = e.parent_id
    WHERE e.child_id IN (SELECT id FROM inserted_rows WHERE state = 'waiting'
                                                       AND cardinality(depends_on) > 0)
    GROUP BY e.child_id;

    -- A parent that already failed: cancelled at once, or released with
    -- the others if this row runs whatever its parents did.
    UPDATE job_queue AS c
    SET state = 'cancelled', finished_at = now(),
        last_error = format('parent job %s ended %s', w.cancelled_by, p.state)
    FROM job_queue_waits AS w, job_queue AS p
    WHERE c.id IN (SELECT id FROM inserted_rows WHERE state = 'waiting')
      AND w.job_id = c.id AND w.cancelled_by IS NOT NULL AND p.id = w.cancelled_by
      AND c.on_parent_failure = 'cancel' AND c.state = 'waiting';
    PERFORM job_queue_release(ARRAY(
        SELECT w.job_id FROM job_queue_waits AS w
        WHERE w.job_id IN (SELECT id FROM inserted_rows WHERE state = 'waiting')
          AND w.unended = 0));

    PERFORM job_queue_add_members(ARRAY(SELECT id FROM inserted_rows
                                        WHERE batch_id IS NOT NULL ORDER BY id));
    RETURN NULL;
END;
$$;

-- job_queue_notify_inserted notifies for the rows inserted pending; a row
-- this releases is notified by job_queue_release.
CREATE TRIGGER job_queue_wire_inserted AFTER INSERT ON job_queue
REFERENCING NEW TABLE AS inserted_rows
FOR EACH STATEMENT EXECUTE FUNCTION job_queue_wire_inserted();

-- New members of open batches become parents of the batches' callbacks.
CREATE FUNCTION job_queue_add_members(members bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
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
    SELECT j.id, j.batch_id, b.sealed_at INTO bad
    FROM job_queue AS j LEFT JOIN job_queue_batches AS b ON b.id = j.batch_id
    WHERE j.id = ANY(members) AND (b.id IS NULL OR b.sealed_at IS NOT NULL)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'job %: batch % %', bad.id, bad.batch_id,
            CASE WHEN bad.sealed_at IS NULL THEN 'does not exist'
                 ELSE 'is sealed: no member can be added to it' END
            USING ERRCODE = 'foreign_key_violation';
    END IF;

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
LANGUAGE plpgsql AS $$
DECLARE
    revived bigint[];
    held record;
BEGIN
    UPDATE job_queue_waits AS w
    SET unended = w.unended + 1
    FROM job_queue_edges AS e
    WHERE e.parent_id = parent AND w.job_id = e.child_id;

    revived := ARRAY(SELECT w.job_id FROM job_queue_waits AS w
                     JOIN job_queue AS c ON c.id = w.job_id
                     WHERE w.cancelled_by = parent AND c.state = 'cancelled');
    LOOP
        SELECT e.child_id, min(q.id) AS holder INTO held
        FROM job_queue_edges AS e
        JOIN job_queue AS q ON q.id = e.parent_id
        WHERE e.child_id = ANY(revived) AND q.id <> parent AND NOT q.id = ANY(revived)
          AND q.state IN ('failed', 'cancelled')
        GROUP BY e.child_id
        LIMIT 1;
        EXIT WHEN NOT FOUND;
        UPDATE job_queue_waits SET cancelled_by = held.holder WHERE job_id = held.child_id;
        revived := array_remove(revived, held.child_id);
    END LOOP;

    UPDATE job_queue_waits SET cancelled_by = NULL WHERE job_id = ANY(revived);
    UPDATE job_queue
    SET state = 'waiting', finished_at = NULL, last_error = NULL
    WHERE id = ANY(revived) AND state = 'cancelled';
END;
$$;

-- A parent ended (its state entered succeeded, failed or cancelled, or it
-- was deleted unended, which counts as cancelled): each child counts it,
-- the children it was the last for are released, and, unless it succeeded,
-- the waiting descendants that would not run after a failure are
-- cancelled. Their own ends fire this again one level down, where they
-- count for their children (a 'run' child among them is released) and find
-- nothing more to cancel: the recursion is two deep whatever the graph.
-- A parent that came back from its end is job_queue_parent_revived's. One
-- function for the update and the delete, so that the common end (a
-- success) calls nothing more.
CREATE FUNCTION job_queue_parent_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    parent bigint;
    parent_state text;
    how text;
    ready bigint[];
BEGIN
    IF TG_OP = 'DELETE' THEN
        parent := OLD.id;
        IF OLD.has_dependents AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled') THEN
            parent_state := 'cancelled';
            how := 'was deleted';
        END IF;
    ELSIF NEW.state IN ('succeeded', 'failed', 'cancelled') THEN
        parent := NEW.id;
        parent_state := NEW.state;
        how := 'ended ' || NEW.state;
    ELSE
        PERFORM job_queue_parent_revived(NEW.id);
        RETURN NULL;
    END IF;

    IF parent_state IS NOT NULL THEN
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

        IF parent_state <> 'succeeded' THEN
            WITH RECURSIVE doomed (id, cause) AS (
                SELECT c.id, parent
                FROM job_queue_edges AS e
                JOIN job_queue AS c ON c.id = e.child_id
                WHERE e.parent_id = parent AND c.state = 'waiting' AND c.on_parent_failure = 'cancel'
              UNION
                SELECT c.id, d.id
                FROM doomed AS d
                JOIN job_queue_edges AS e ON e.parent_id = d.id
                JOIN job_queue AS c ON c.id = e.child_id
                WHERE c.state = 'waiting' AND c.on_parent_failure = 'cancel'
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
    END IF;

    IF TG_OP = 'DELETE' THEN
        DELETE FROM job_queue_edges WHERE parent_id = OLD.id;
        DELETE FROM job_queue_edges WHERE child_id = OLD.id;
        DELETE FROM job_queue_waits WHERE job_id = OLD.id;
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

-- A dependent row retried by hand waits for the parents it still has. An
-- AFTER trigger, as every row trigger on an update of job_queue is (a
-- BEFORE one would lock every row each write touches): the row is put back
-- to waiting before its transaction commits, so no worker can see it
-- pending.
CREATE FUNCTION job_queue_retry_dependent() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE job_queue_waits SET cancelled_by = NULL WHERE job_id = NEW.id;
    IF EXISTS (SELECT FROM job_queue_waits WHERE job_id = NEW.id AND unended > 0) THEN
        UPDATE job_queue SET state = 'waiting' WHERE id = NEW.id AND state = 'pending';
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_retry_dependent AFTER UPDATE OF state ON job_queue
FOR EACH ROW
WHEN (NEW.state = 'pending' AND OLD.state IN ('failed', 'cancelled') AND NEW.depends_on IS NOT NULL)
EXECUTE FUNCTION job_queue_retry_dependent();

-- A deleted row: an unended parent counts as cancelled; its edges and its
-- count go with it.
CREATE TRIGGER job_queue_dependent_deleted AFTER DELETE ON job_queue
FOR EACH ROW
WHEN (OLD.has_dependents OR OLD.depends_on IS NOT NULL OR OLD.state = 'waiting')
EXECUTE FUNCTION job_queue_parent_changed();

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
-- that ended, so a sealed batch whose members all ended (or that has none)
-- releases them here. Sealing a sealed batch does nothing.
CREATE FUNCTION job_queue_batch_seal(batch bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    sealed job_queue_batches;
    ready bigint[];
BEGIN
    UPDATE job_queue_batches SET sealed_at = now()
    WHERE id = batch AND sealed_at IS NULL
    RETURNING * INTO sealed;
    IF NOT FOUND THEN
        IF NOT EXISTS (SELECT FROM job_queue_batches WHERE id = batch) THEN
            RAISE EXCEPTION 'batch % does not exist', batch USING ERRCODE = 'no_data_found';
        END IF;
        RETURN;
    END IF;
    WITH counted AS (
        UPDATE job_queue_waits
        SET unended = unended - 1
        WHERE job_id IN (sealed.on_success, sealed.on_complete)
        RETURNING job_id, unended
    )
    SELECT array_agg(job_id) INTO ready FROM counted WHERE unended = 0;
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
