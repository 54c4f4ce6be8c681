-- The schema of motir-supervisor as the migrations (sql/migrations/) leave it:
-- every table, index, trigger and function body as it stands now, in one
-- place. For reading: a database is created and upgraded by
-- `motir-supervisor migrate`, never from this file. Written by bin/schema from
-- pg_dump of a freshly migrated database; a test checks that the migrations
-- produce exactly this.

--
-- Name: job_queue_add_members(bigint[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_add_members(members bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_batch(text, jsonb, jsonb, jsonb); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch(name text, members jsonb, on_success jsonb DEFAULT NULL::jsonb, on_complete jsonb DEFAULT NULL::jsonb) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
DECLARE
    created bigint;
BEGIN
    created := job_queue_batch_open(name, on_success, on_complete);
    PERFORM job_queue_insert_steps(members, NULL, created);
    PERFORM job_queue_batch_seal(created);
    RETURN created;
END;
$$;

--
-- Name: job_queue_batch_add(bigint, jsonb); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch_add(batch bigint, members jsonb) RETURNS TABLE(ref text, job_id bigint)
    LANGUAGE sql
    AS $$
    SELECT * FROM job_queue_insert_steps(members, NULL, batch)
$$;

--
-- Name: job_queue_batch_callback(jsonb, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch_callback(spec jsonb, policy text) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_batch_open(text, jsonb, jsonb); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch_open(name text, on_success jsonb DEFAULT NULL::jsonb, on_complete jsonb DEFAULT NULL::jsonb) RETURNS bigint
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_batch_seal(bigint); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch_seal(batch bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_batch_sealed(bigint); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_batch_sealed(batch bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_errors_with(jsonb, integer, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_errors_with(history jsonb, attempt_no integer, failure text) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN failure IS NULL THEN history
        ELSE CASE WHEN jsonb_typeof(history) IS DISTINCT FROM 'array' THEN '[]'::jsonb
                  WHEN jsonb_array_length(history) >= 20 THEN history - 1
                  ELSE history END
             || jsonb_build_array(jsonb_build_object(
                    'attempt', attempt_no,
                    'at', now(),
                    'error', split_part(failure, E'\nTraceback (innermost last):\n', 1),
                    'traceback', nullif(split_part(
                        failure, E'\nTraceback (innermost last):\n', 2), '')))
    END
$$;

--
-- Name: job_queue_insert_steps(jsonb, bigint, bigint); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_insert_steps(steps jsonb, workflow bigint, batch bigint) RETURNS TABLE(ref text, job_id bigint)
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_key_lane_rows(text, text, bigint, text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_lane_rows(of_kind text, of_key text, room bigint, served text[]) RETURNS TABLE(id bigint, priority smallint, run_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT id, priority, run_at
    FROM job_queue
    WHERE state = 'pending'
      AND limited
      AND NOT parked
      AND concurrency_key IS NOT NULL
      AND kind = of_kind
      AND concurrency_key = of_key
      AND run_at <= now()
      AND (served IS NULL OR queue = ANY(served))
      AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
           OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
    ORDER BY priority, run_at, id
    LIMIT room
$$;

--
-- Name: job_queue_key_next_rows(text, text, bigint, boolean, text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_next_rows(of_kind text, of_key text, room bigint, any_parked boolean, served text[]) RETURNS TABLE(id bigint, priority smallint, run_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT next.id, next.priority, next.run_at
    FROM (SELECT * FROM job_queue_key_lane_rows(of_kind, of_key, room, served)
          UNION ALL
          SELECT *
          FROM job_queue_key_parked_rows(of_kind, of_key,
                                         CASE WHEN any_parked THEN room ELSE 0 END,
                                         served)) AS next
    ORDER BY next.priority, next.run_at, next.id
    LIMIT room
$$;

--
-- Name: job_queue_key_parked_rows(text, text, bigint, text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_parked_rows(of_kind text, of_key text, room bigint, served text[]) RETURNS TABLE(id bigint, priority smallint, run_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT id, priority, run_at
    FROM job_queue
    WHERE state = 'pending'
      AND parked
      AND kind = of_kind
      AND concurrency_key = of_key
      AND run_at <= now()
      AND (served IS NULL OR queue = ANY(served))
      AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
           OR queue <> ALL (ARRAY(SELECT queue FROM job_queue_paused)))
    ORDER BY priority, run_at, id
    LIMIT room
$$;

--
-- Name: job_queue_key_runs(text, text, bigint); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_runs(of_kind text, of_key text, up_to bigint) RETURNS TABLE(started_at timestamp with time zone)
    LANGUAGE sql STABLE
    AS $$
    SELECT started_at
    FROM job_queue
    WHERE state = 'running' AND concurrency_key IS NOT NULL
      AND kind = of_kind AND concurrency_key = of_key
    LIMIT up_to
$$;

--
-- Name: job_queue_key_slots_freed(text[], text[], integer[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_slots_freed(kinds text[], keys text[], slots integer[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_key_takeable(text, text, bigint, boolean, text[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_key_takeable(of_kind text, of_key text, room bigint, lane_too boolean, served text[]) RETURNS TABLE(takeable boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT room > 0 AND of_key IS NOT NULL AND (
               EXISTS (SELECT
                       FROM (SELECT q.run_at, q.queue FROM job_queue AS q
                             WHERE q.state = 'pending' AND q.parked
                               AND q.kind = of_kind AND q.concurrency_key = of_key
                             ORDER BY q.priority, q.run_at, q.id
                             LIMIT 16) AS first
                       WHERE first.run_at <= now()
                         AND (served IS NULL OR first.queue = ANY(served))
                         AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                              OR first.queue <> ALL (ARRAY(SELECT queue
                                                           FROM job_queue_paused))))
               OR lane_too AND EXISTS (
                       SELECT
                       FROM (SELECT q.run_at, q.queue FROM job_queue AS q
                             WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                               AND q.concurrency_key IS NOT NULL
                               AND q.kind = of_kind AND q.concurrency_key = of_key
                             ORDER BY q.priority, q.run_at, q.id
                             LIMIT 16) AS first
                       WHERE first.run_at <= now()
                         AND (served IS NULL OR first.queue = ANY(served))
                         AND ((SELECT NOT EXISTS (SELECT FROM job_queue_paused))
                              OR first.queue <> ALL (ARRAY(SELECT queue
                                                           FROM job_queue_paused)))))
$$;

--
-- Name: job_queue_kind_defaults(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_kind_defaults() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    policy job_queue_kinds;
BEGIN
    SELECT * INTO policy FROM job_queue_kinds WHERE kind = NEW.kind;
    NEW.max_attempts := coalesce(NEW.max_attempts, policy.max_attempts, 25);
    NEW.queue := coalesce(NEW.queue, policy.queue, 'default');
    NEW.priority := coalesce(NEW.priority, policy.priority, 0);
    RETURN NEW;
END;
$$;

--
-- Name: job_queue_limited(text, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_limited(job_kind text, job_key text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce((SELECT l.max_running IS NOT NULL OR l.rate_limit IS NOT NULL
                            OR (l.max_running_per_key IS NOT NULL AND job_key IS NOT NULL)
                     FROM job_queue_limits AS l WHERE l.kind = job_kind), false)
$$;

--
-- Name: job_queue_limits_new_generation(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_limits_new_generation() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.generation := nextval('job_queue_limits_generation');
    RETURN NEW;
END;
$$;

--
-- Name: job_queue_lock_limited_claims(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_lock_limited_claims() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('motir_supervisor.limited_claims'));
    RETURN NULL;
END;
$$;

--
-- Name: job_queue_mark_dependent(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_mark_dependent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_notify_inserted(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_notify_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_notify_limits(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_notify_limits() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('motir_job_queue', '*');
    RETURN NULL;
END;
$$;

--
-- Name: job_queue_notify_requeued(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_notify_requeued() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('motir_job_queue', NEW.queue);
    RETURN NULL;
END;
$$;

--
-- Name: job_queue_parent_changed(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_parent_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_parent_ended(bigint, text, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_parent_ended(parent bigint, parent_state text, how text) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
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

--
-- Name: job_queue_parent_revived(bigint); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_parent_revived(parent bigint) RETURNS void
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
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

--
-- Name: job_queue_pause_changed(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_pause_changed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_refuse_closed_batches(bigint[], boolean); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_refuse_closed_batches(members bigint[], at_commit boolean) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_refuse_rewiring(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_refuse_rewiring() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF NEW.depends_on IS DISTINCT FROM OLD.depends_on THEN
        RAISE EXCEPTION 'job %: depends_on is set when a job is inserted and cannot be changed;'
                        ' insert a new job that waits for the others', NEW.id
            USING ERRCODE = 'check_violation';
    END IF;
    RAISE EXCEPTION 'job %: batch_id is set when a job is inserted and cannot be changed;'
                    ' insert a new member (job_queue_batch_add, or an INSERT with batch_id)', NEW.id
        USING ERRCODE = 'check_violation';
END;
$$;

--
-- Name: job_queue_release(bigint[], boolean); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_release(candidates bigint[], after_failure boolean DEFAULT false) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_reroute(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_reroute() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_retry_delay(text, integer); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_retry_delay(job_kind text, attempt integer) RETURNS interval
    LANGUAGE sql
    AS $$
    SELECT make_interval(secs => least(coalesce(
        (SELECT k.retry_delays[least(greatest(attempt, 1), cardinality(k.retry_delays))]
                * (1 - k.retry_jitter * random())
         FROM job_queue_kinds AS k
         WHERE k.kind = job_kind),
        least(3600, 5 * 2 ^ least(greatest(attempt - 1, 0), 32)) * (1 - 0.5 * random())),
        3153600000))
$$;

--
-- Name: job_queue_retry_dependent(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_retry_dependent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM job_queue_settle_later(NEW.id, 'retried');
    RETURN NULL;
END;
$$;

--
-- Name: job_queue_route(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_route() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.limited := job_queue_limited(NEW.kind, NEW.concurrency_key);
    NEW.parked := false;
    RETURN NEW;
END;
$$;

--
-- Name: job_queue_settle(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_settle() RETURNS trigger
    LANGUAGE plpgsql
    SET enable_seqscan TO 'off'
    SET jit TO 'off'
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

--
-- Name: job_queue_settle_at_commit(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_settle_at_commit() RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF current_setting('motir.settling', true) IS DISTINCT FROM txid_current()::text THEN
        INSERT INTO job_queue_settle_at_commit (txid) VALUES (txid_current())
        ON CONFLICT DO NOTHING;
        PERFORM set_config('motir.settling', txid_current()::text, true);
    END IF;
END;
$$;

--
-- Name: job_queue_settle_later(bigint, text); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_settle_later(job bigint, what text) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO job_queue_settling (txid, job_id, event) VALUES (txid_current(), job, what);
    PERFORM job_queue_settle_at_commit();
END;
$$;

--
-- Name: job_queue_slot_freed(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_slot_freed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_walk_next_key(text, text, text, boolean, boolean); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_walk_next_key(of_kind text, after text, start text, second_lap boolean, lane_too boolean) RETURNS TABLE(key text, wrapped boolean)
    LANGUAGE sql STABLE
    AS $$
    SELECT coalesce(next.key, CASE WHEN NOT second_lap THEN least(
               (SELECT min(p.concurrency_key) FROM job_queue AS p
                WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                  AND p.concurrency_key <= start),
               CASE WHEN lane_too THEN (
                   SELECT min(q.concurrency_key) FROM job_queue AS q
                   WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                     AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                     AND q.concurrency_key <= start) END) END) AS key,
           second_lap OR next.key IS NULL AS wrapped
    FROM (SELECT CASE WHEN second_lap THEN least(
                     (SELECT min(p.concurrency_key) FROM job_queue AS p
                      WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                        AND p.concurrency_key > after AND p.concurrency_key <= start),
                     CASE WHEN lane_too THEN (
                         SELECT min(q.concurrency_key) FROM job_queue AS q
                         WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                           AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                           AND q.concurrency_key > after AND q.concurrency_key <= start) END)
                 ELSE least(
                     (SELECT min(p.concurrency_key) FROM job_queue AS p
                      WHERE p.state = 'pending' AND p.parked AND p.kind = of_kind
                        AND p.concurrency_key > after),
                     CASE WHEN lane_too THEN (
                         SELECT min(q.concurrency_key) FROM job_queue AS q
                         WHERE q.state = 'pending' AND q.limited AND NOT q.parked
                           AND q.concurrency_key IS NOT NULL AND q.kind = of_kind
                           AND q.concurrency_key > after) END) END AS key
          OFFSET 0) AS next
    OFFSET 0
$$;

--
-- Name: job_queue_wire(bigint[], bigint[]); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_wire(inserted_ids bigint[], parents bigint[]) RETURNS void
    LANGUAGE plpgsql
    AS $$
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

--
-- Name: job_queue_workflow(text, jsonb); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_workflow(name text, steps jsonb) RETURNS TABLE(workflow_id bigint, ref text, job_id bigint)
    LANGUAGE plpgsql
    AS $$
DECLARE
    created bigint;
BEGIN
    INSERT INTO job_queue_workflows (name) VALUES (name) RETURNING id INTO created;
    RETURN QUERY SELECT created, s.ref, s.job_id FROM job_queue_insert_steps(steps, created, NULL) AS s;
END;
$$;

--
-- Name: job_queue; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue (
    id bigint NOT NULL,
    queue text NOT NULL,
    kind text NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    state text DEFAULT 'pending'::text NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer NOT NULL,
    locked_by text,
    lease_expires_at timestamp with time zone,
    last_error text,
    checkpoint jsonb,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    cancel_requested boolean DEFAULT false NOT NULL,
    priority smallint NOT NULL,
    unique_key text,
    limited boolean DEFAULT false NOT NULL,
    concurrency_key text,
    parked boolean DEFAULT false NOT NULL,
    output jsonb,
    trace_context jsonb,
    errors jsonb,
    depends_on bigint[],
    on_parent_failure text DEFAULT 'cancel'::text NOT NULL,
    workflow_id bigint,
    step text,
    batch_id bigint,
    has_dependents boolean DEFAULT false NOT NULL,
    CONSTRAINT job_queue_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT job_queue_claim_consistent CHECK (((state = 'running'::text) = ((locked_by IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT job_queue_concurrency_key_not_empty CHECK ((concurrency_key <> ''::text)),
    CONSTRAINT job_queue_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_queue_on_parent_failure_check CHECK ((on_parent_failure = ANY (ARRAY['cancel'::text, 'run'::text]))),
    CONSTRAINT job_queue_state_check CHECK ((state = ANY (ARRAY['waiting'::text, 'pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.01', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0', fillfactor='40');
ALTER TABLE ONLY public.job_queue ALTER COLUMN errors SET COMPRESSION lz4;

--
-- Name: job_queue_batches; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_batches (
    id bigint NOT NULL,
    name text,
    on_success bigint,
    on_complete bigint,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    sealed_at timestamp with time zone,
    sealed_by bigint
);

--
-- Name: job_queue_batches_id_seq; Type: SEQUENCE; Schema: public
--

ALTER TABLE public.job_queue_batches ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.job_queue_batches_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: job_queue_edges; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_edges (
    parent_id bigint NOT NULL,
    child_id bigint NOT NULL
);

--
-- Name: job_queue_id_seq; Type: SEQUENCE; Schema: public
--

ALTER TABLE public.job_queue ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.job_queue_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: job_queue_kinds; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_kinds (
    kind text NOT NULL,
    max_attempts integer,
    queue text,
    priority smallint,
    retry_delays double precision[] NOT NULL,
    retry_jitter double precision DEFAULT 0 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_queue_kinds_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_queue_kinds_queue_check CHECK ((queue <> ''::text)),
    CONSTRAINT job_queue_kinds_retry_delays_check CHECK ((cardinality(retry_delays) >= 1)),
    CONSTRAINT job_queue_kinds_retry_jitter_check CHECK (((retry_jitter >= (0)::double precision) AND (retry_jitter <= (1)::double precision)))
);

--
-- Name: job_queue_limits_generation; Type: SEQUENCE; Schema: public
--

CREATE SEQUENCE public.job_queue_limits_generation
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

--
-- Name: job_queue_limits; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_limits (
    kind text NOT NULL,
    max_running integer,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    max_running_per_key integer,
    rate_limit integer,
    rate_seconds double precision,
    key_cursor text,
    generation bigint DEFAULT nextval('public.job_queue_limits_generation'::regclass) NOT NULL,
    CONSTRAINT job_queue_limits_max_running_check CHECK ((max_running >= 1)),
    CONSTRAINT job_queue_limits_max_running_per_key_check CHECK ((max_running_per_key >= 1)),
    CONSTRAINT job_queue_limits_rate_limit_check CHECK ((rate_limit >= 1)),
    CONSTRAINT job_queue_limits_rate_seconds_check CHECK ((rate_seconds > (0)::double precision)),
    CONSTRAINT job_queue_limits_rate_whole CHECK (((rate_limit IS NULL) = (rate_seconds IS NULL))),
    CONSTRAINT job_queue_limits_some CHECK (((max_running IS NOT NULL) OR (max_running_per_key IS NOT NULL) OR (rate_limit IS NOT NULL)))
);

--
-- Name: job_queue_paused; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_paused (
    queue text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: job_queue_priorities; Type: VIEW; Schema: public
--

CREATE VIEW public.job_queue_priorities AS
 WITH RECURSIVE priorities AS (
        ( SELECT job_queue.priority
           FROM public.job_queue
          WHERE ((job_queue.state = 'pending'::text) AND (NOT job_queue.limited))
          ORDER BY job_queue.priority
         LIMIT 1)
        UNION ALL
         SELECT ( SELECT q.priority
                   FROM public.job_queue q
                  WHERE ((q.state = 'pending'::text) AND (NOT q.limited) AND (q.priority > p.priority))
                  ORDER BY q.priority
                 LIMIT 1) AS priority
           FROM priorities p
          WHERE (p.priority IS NOT NULL)
        )
 SELECT priorities.priority
   FROM priorities
  WHERE (priorities.priority IS NOT NULL);

--
-- Name: job_queue_schedules; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_schedules (
    kind text NOT NULL,
    spec text NOT NULL,
    last_instant timestamp with time zone NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    tz text
);

--
-- Name: job_queue_settle_at_commit; Type: TABLE; Schema: public
--

CREATE UNLOGGED TABLE public.job_queue_settle_at_commit (
    txid bigint NOT NULL
);

--
-- Name: job_queue_settling; Type: TABLE; Schema: public
--

CREATE UNLOGGED TABLE public.job_queue_settling (
    txid bigint NOT NULL,
    seq bigint NOT NULL,
    job_id bigint NOT NULL,
    event text NOT NULL
);

--
-- Name: job_queue_settling_seq_seq; Type: SEQUENCE; Schema: public
--

ALTER TABLE public.job_queue_settling ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.job_queue_settling_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: job_queue_starts; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_starts (
    kind text NOT NULL,
    started_at timestamp with time zone NOT NULL
);

--
-- Name: job_queue_waits; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_waits (
    job_id bigint NOT NULL,
    unended integer NOT NULL,
    cancelled_by bigint
);

--
-- Name: job_queue_workflows; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_workflows (
    id bigint NOT NULL,
    name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT job_queue_workflows_name_check CHECK ((name <> ''::text))
);

--
-- Name: job_queue_workflows_id_seq; Type: SEQUENCE; Schema: public
--

ALTER TABLE public.job_queue_workflows ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.job_queue_workflows_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

--
-- Name: motir_schema_migrations; Type: TABLE; Schema: public
--

CREATE TABLE public.motir_schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);

--
-- Name: job_queue_batches job_queue_batches_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_batches
    ADD CONSTRAINT job_queue_batches_pkey PRIMARY KEY (id);

--
-- Name: job_queue_edges job_queue_edges_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_edges
    ADD CONSTRAINT job_queue_edges_pkey PRIMARY KEY (parent_id, child_id);

--
-- Name: job_queue_kinds job_queue_kinds_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_kinds
    ADD CONSTRAINT job_queue_kinds_pkey PRIMARY KEY (kind);

--
-- Name: job_queue_limits job_queue_limits_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_limits
    ADD CONSTRAINT job_queue_limits_pkey PRIMARY KEY (kind);

--
-- Name: job_queue_paused job_queue_paused_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_paused
    ADD CONSTRAINT job_queue_paused_pkey PRIMARY KEY (queue);

--
-- Name: job_queue job_queue_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue
    ADD CONSTRAINT job_queue_pkey PRIMARY KEY (id);

--
-- Name: job_queue_schedules job_queue_schedules_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_schedules
    ADD CONSTRAINT job_queue_schedules_pkey PRIMARY KEY (kind);

--
-- Name: job_queue_settle_at_commit job_queue_settle_at_commit_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_settle_at_commit
    ADD CONSTRAINT job_queue_settle_at_commit_pkey PRIMARY KEY (txid);

--
-- Name: job_queue_settling job_queue_settling_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_settling
    ADD CONSTRAINT job_queue_settling_pkey PRIMARY KEY (txid, seq);

--
-- Name: job_queue_waits job_queue_waits_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_waits
    ADD CONSTRAINT job_queue_waits_pkey PRIMARY KEY (job_id);

--
-- Name: job_queue_workflows job_queue_workflows_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.job_queue_workflows
    ADD CONSTRAINT job_queue_workflows_pkey PRIMARY KEY (id);

--
-- Name: motir_schema_migrations motir_schema_migrations_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.motir_schema_migrations
    ADD CONSTRAINT motir_schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: job_queue_batch; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_batch ON public.job_queue USING btree (batch_id, state) WHERE (batch_id IS NOT NULL);

--
-- Name: job_queue_batches_on_complete; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_batches_on_complete ON public.job_queue_batches USING btree (on_complete) WHERE (on_complete IS NOT NULL);

--
-- Name: job_queue_batches_on_success; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_batches_on_success ON public.job_queue_batches USING btree (on_success) WHERE (on_success IS NOT NULL);

--
-- Name: job_queue_claim; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_claim ON public.job_queue USING btree (priority, run_at, id) WHERE ((state = 'pending'::text) AND (NOT limited));

--
-- Name: job_queue_edges_child; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_edges_child ON public.job_queue_edges USING btree (child_id);

--
-- Name: job_queue_ended_badly; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_ended_badly ON public.job_queue USING btree (finished_at) WHERE (state = ANY (ARRAY['failed'::text, 'cancelled'::text]));

--
-- Name: job_queue_finished; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_finished ON public.job_queue USING btree (finished_at) WHERE (state = ANY (ARRAY['succeeded'::text, 'cancelled'::text]));

--
-- Name: job_queue_key_lane; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_key_lane ON public.job_queue USING btree (kind, concurrency_key, priority, run_at, id) WHERE ((state = 'pending'::text) AND limited AND (NOT parked) AND (concurrency_key IS NOT NULL));

--
-- Name: job_queue_limited; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_limited ON public.job_queue USING btree (kind, priority, run_at, id) WHERE ((state = 'pending'::text) AND limited AND (NOT parked));

--
-- Name: job_queue_parked; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_parked ON public.job_queue USING btree (kind, concurrency_key, priority, run_at, id) WHERE ((state = 'pending'::text) AND parked);

--
-- Name: job_queue_running; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_running ON public.job_queue USING btree (kind, concurrency_key, lease_expires_at) WHERE (state = 'running'::text);

--
-- Name: job_queue_running_unlimited; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_running_unlimited ON public.job_queue USING btree (kind) WHERE ((state = 'running'::text) AND (NOT limited) AND (concurrency_key IS NOT NULL));

--
-- Name: job_queue_starts_kind; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_starts_kind ON public.job_queue_starts USING btree (kind, started_at);

--
-- Name: job_queue_unique_key; Type: INDEX; Schema: public
--

CREATE UNIQUE INDEX job_queue_unique_key ON public.job_queue USING btree (queue, unique_key) WHERE ((unique_key IS NOT NULL) AND (state = ANY (ARRAY['pending'::text, 'running'::text])));

--
-- Name: job_queue_waits_cancelled_by; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_waits_cancelled_by ON public.job_queue_waits USING btree (cancelled_by) WHERE (cancelled_by IS NOT NULL);

--
-- Name: job_queue_workflow; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_workflow ON public.job_queue USING btree (workflow_id) WHERE (workflow_id IS NOT NULL);

--
-- Name: job_queue job_queue_dependent_deleted; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_dependent_deleted AFTER DELETE ON public.job_queue FOR EACH ROW WHEN ((old.has_dependents OR (old.depends_on IS NOT NULL) OR (old.state = 'waiting'::text))) EXECUTE FUNCTION public.job_queue_parent_changed();

--
-- Name: job_queue job_queue_kind_defaults; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_kind_defaults BEFORE INSERT ON public.job_queue FOR EACH ROW WHEN (((new.max_attempts IS NULL) OR (new.queue IS NULL) OR (new.priority IS NULL))) EXECUTE FUNCTION public.job_queue_kind_defaults();

--
-- Name: job_queue_limits job_queue_limits_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_limits_changed BEFORE UPDATE OF max_running, max_running_per_key, rate_limit, rate_seconds ON public.job_queue_limits FOR EACH ROW WHEN (((((old.max_running IS DISTINCT FROM new.max_running) OR (old.max_running_per_key IS DISTINCT FROM new.max_running_per_key)) OR (old.rate_limit IS DISTINCT FROM new.rate_limit)) OR (old.rate_seconds IS DISTINCT FROM new.rate_seconds))) EXECUTE FUNCTION public.job_queue_limits_new_generation();

--
-- Name: job_queue job_queue_mark_dependent; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_mark_dependent BEFORE INSERT ON public.job_queue FOR EACH ROW WHEN (((cardinality(new.depends_on) > 0) OR (new.batch_id IS NOT NULL))) EXECUTE FUNCTION public.job_queue_mark_dependent();

--
-- Name: job_queue job_queue_notify_inserted; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_notify_inserted AFTER INSERT ON public.job_queue REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION public.job_queue_notify_inserted();

--
-- Name: job_queue_limits job_queue_notify_limits_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_notify_limits_changed AFTER INSERT OR DELETE OR UPDATE OF max_running, max_running_per_key, rate_limit, rate_seconds ON public.job_queue_limits FOR EACH STATEMENT EXECUTE FUNCTION public.job_queue_notify_limits();

--
-- Name: job_queue job_queue_notify_requeued; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_notify_requeued AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN (((new.state = 'pending'::text) AND (old.state <> ALL (ARRAY['pending'::text, 'waiting'::text])))) EXECUTE FUNCTION public.job_queue_notify_requeued();

--
-- Name: job_queue job_queue_notify_slot_freed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_notify_slot_freed AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN ((old.limited AND (old.state = 'running'::text) AND (new.state <> 'running'::text) AND new.limited)) EXECUTE FUNCTION public.job_queue_slot_freed();

--
-- Name: job_queue job_queue_parent_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_parent_changed AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN ((new.has_dependents AND ((old.state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text])) IS DISTINCT FROM (new.state = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text]))))) EXECUTE FUNCTION public.job_queue_parent_changed();

--
-- Name: job_queue_paused job_queue_pause_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_pause_changed AFTER INSERT OR DELETE ON public.job_queue_paused FOR EACH ROW EXECUTE FUNCTION public.job_queue_pause_changed();

--
-- Name: job_queue_paused job_queue_pause_changing; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_pause_changing BEFORE INSERT OR DELETE ON public.job_queue_paused FOR EACH STATEMENT EXECUTE FUNCTION public.job_queue_lock_limited_claims();

--
-- Name: job_queue job_queue_refuse_rewiring; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_refuse_rewiring AFTER UPDATE OF depends_on, batch_id ON public.job_queue FOR EACH ROW WHEN (((new.depends_on IS DISTINCT FROM old.depends_on) OR (new.batch_id IS DISTINCT FROM old.batch_id))) EXECUTE FUNCTION public.job_queue_refuse_rewiring();

--
-- Name: job_queue job_queue_retry_dependent; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_retry_dependent AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN (((new.state = 'pending'::text) AND (old.state = ANY (ARRAY['failed'::text, 'cancelled'::text])) AND (new.depends_on IS NOT NULL))) EXECUTE FUNCTION public.job_queue_retry_dependent();

--
-- Name: job_queue job_queue_route_inserted; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_route_inserted BEFORE INSERT ON public.job_queue FOR EACH ROW EXECUTE FUNCTION public.job_queue_route();

--
-- Name: job_queue job_queue_route_revived; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_route_revived AFTER UPDATE ON public.job_queue FOR EACH ROW WHEN (((new.kind IS DISTINCT FROM old.kind) OR (new.concurrency_key IS DISTINCT FROM old.concurrency_key) OR ((new.state = 'pending'::text) AND (old.state <> ALL (ARRAY['pending'::text, 'running'::text, 'waiting'::text]))))) EXECUTE FUNCTION public.job_queue_reroute();

--
-- Name: job_queue_settle_at_commit job_queue_settle; Type: TRIGGER; Schema: public
--

CREATE CONSTRAINT TRIGGER job_queue_settle AFTER INSERT ON public.job_queue_settle_at_commit DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.job_queue_settle();
