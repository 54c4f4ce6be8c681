-- The schema of motir-supervisor as the migrations (sql/migrations/) leave it:
-- every table, index, trigger and function body as it stands now, in one
-- place. For reading: a database is created and upgraded by
-- `motir-supervisor migrate`, never from this file. Written by bin/schema from
-- pg_dump of a freshly migrated database; a test checks that the migrations
-- produce exactly this.

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
-- Name: job_queue_notify_inserted(); Type: FUNCTION; Schema: public
--

CREATE FUNCTION public.job_queue_notify_inserted() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('motir_job_queue', q.queue)
    FROM (SELECT DISTINCT queue FROM inserted_rows WHERE state = 'pending') AS q;
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
    CONSTRAINT job_queue_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT job_queue_claim_consistent CHECK (((state = 'running'::text) = ((locked_by IS NOT NULL) AND (lease_expires_at IS NOT NULL)))),
    CONSTRAINT job_queue_concurrency_key_not_empty CHECK ((concurrency_key <> ''::text)),
    CONSTRAINT job_queue_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT job_queue_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_threshold='1000', autovacuum_vacuum_insert_scale_factor='0.01', autovacuum_analyze_scale_factor='0.02', autovacuum_vacuum_cost_delay='0', fillfactor='40');
ALTER TABLE ONLY public.job_queue ALTER COLUMN errors SET COMPRESSION lz4;

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
-- Name: job_queue_starts; Type: TABLE; Schema: public
--

CREATE TABLE public.job_queue_starts (
    kind text NOT NULL,
    started_at timestamp with time zone NOT NULL
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
-- Name: motir_schema_migrations motir_schema_migrations_pkey; Type: CONSTRAINT; Schema: public
--

ALTER TABLE ONLY public.motir_schema_migrations
    ADD CONSTRAINT motir_schema_migrations_pkey PRIMARY KEY (version);

--
-- Name: job_queue_claim; Type: INDEX; Schema: public
--

CREATE INDEX job_queue_claim ON public.job_queue USING btree (priority, run_at, id) WHERE ((state = 'pending'::text) AND (NOT limited));

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
-- Name: job_queue job_queue_kind_defaults; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_kind_defaults BEFORE INSERT ON public.job_queue FOR EACH ROW WHEN (((new.max_attempts IS NULL) OR (new.queue IS NULL) OR (new.priority IS NULL))) EXECUTE FUNCTION public.job_queue_kind_defaults();

--
-- Name: job_queue_limits job_queue_limits_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_limits_changed BEFORE UPDATE OF max_running, max_running_per_key, rate_limit, rate_seconds ON public.job_queue_limits FOR EACH ROW WHEN (((((old.max_running IS DISTINCT FROM new.max_running) OR (old.max_running_per_key IS DISTINCT FROM new.max_running_per_key)) OR (old.rate_limit IS DISTINCT FROM new.rate_limit)) OR (old.rate_seconds IS DISTINCT FROM new.rate_seconds))) EXECUTE FUNCTION public.job_queue_limits_new_generation();

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

CREATE TRIGGER job_queue_notify_requeued AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN (((new.state = 'pending'::text) AND (old.state IS DISTINCT FROM 'pending'::text))) EXECUTE FUNCTION public.job_queue_notify_requeued();

--
-- Name: job_queue job_queue_notify_slot_freed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_notify_slot_freed AFTER UPDATE OF state ON public.job_queue FOR EACH ROW WHEN ((old.limited AND (old.state = 'running'::text) AND (new.state <> 'running'::text) AND new.limited)) EXECUTE FUNCTION public.job_queue_slot_freed();

--
-- Name: job_queue_paused job_queue_pause_changed; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_pause_changed AFTER INSERT OR DELETE ON public.job_queue_paused FOR EACH ROW EXECUTE FUNCTION public.job_queue_pause_changed();

--
-- Name: job_queue_paused job_queue_pause_changing; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_pause_changing BEFORE INSERT OR DELETE ON public.job_queue_paused FOR EACH STATEMENT EXECUTE FUNCTION public.job_queue_lock_limited_claims();

--
-- Name: job_queue job_queue_route_inserted; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_route_inserted BEFORE INSERT ON public.job_queue FOR EACH ROW EXECUTE FUNCTION public.job_queue_route();

--
-- Name: job_queue job_queue_route_revived; Type: TRIGGER; Schema: public
--

CREATE TRIGGER job_queue_route_revived AFTER UPDATE ON public.job_queue FOR EACH ROW WHEN (((new.kind IS DISTINCT FROM old.kind) OR (new.concurrency_key IS DISTINCT FROM old.concurrency_key) OR ((new.state = 'pending'::text) AND (old.state <> ALL (ARRAY['pending'::text, 'running'::text]))))) EXECUTE FUNCTION public.job_queue_reroute();
