-- A generation of a kind's limits: a new one whenever they change, and
-- never one used before, even for a kind whose row was dropped and written
-- again. A claim tells the worker the generation of each job it starts,
-- and the worker hands it back when the run ends: a key's slot handed on
-- by a run that started under the generation still in force needs no
-- count of the key's running rows (see record_successes_handing_on).
CREATE SEQUENCE job_queue_limits_generation;
ALTER TABLE job_queue_limits
    ADD COLUMN generation bigint NOT NULL DEFAULT nextval('job_queue_limits_generation');

CREATE FUNCTION job_queue_limits_new_generation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.generation := nextval('job_queue_limits_generation');
    RETURN NEW;
END;
$$;

CREATE TRIGGER job_queue_limits_changed
    BEFORE UPDATE OF max_running, max_running_per_key, rate_limit, rate_seconds
    ON job_queue_limits
    FOR EACH ROW
    WHEN ((OLD.max_running, OLD.max_running_per_key, OLD.rate_limit, OLD.rate_seconds)
          IS DISTINCT FROM
          (NEW.max_running, NEW.max_running_per_key, NEW.rate_limit, NEW.rate_seconds))
    EXECUTE FUNCTION job_queue_limits_new_generation();

-- The running rows with a key that no limited claim started: jobs of kinds
-- without a limit, and the rare row routed by limits its transaction's
-- snapshot no longer showed (a REPEATABLE READ transaction that began
-- before the limit appeared), which the regular claim then ran uncounted.
-- A kind limited per key with such a row is counted at every hand-on
-- until it ends, whatever the generation says.
CREATE INDEX job_queue_running_unlimited ON job_queue (kind)
    WHERE state = 'running' AND NOT limited AND concurrency_key IS NOT NULL;
