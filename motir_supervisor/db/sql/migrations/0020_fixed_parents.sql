-- A job's parents and its batch are wired as the row that names them
-- commits (migrations/0019): an edge, a count, a membership. An UPDATE that
-- changes depends_on or batch_id afterwards would wire nothing, and the row
-- would claim parents or a batch that never wait for it or count it. It is
-- refused in one line instead, and the row stays as it was. An AFTER trigger,
-- as every row trigger on an update of job_queue is; `UPDATE OF` and its
-- WHEN keep it from being called for any write that leaves both alone.
CREATE FUNCTION job_queue_refuse_rewiring() RETURNS trigger
LANGUAGE plpgsql AS $$
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

CREATE TRIGGER job_queue_refuse_rewiring AFTER UPDATE OF depends_on, batch_id ON job_queue
FOR EACH ROW
WHEN (NEW.depends_on IS DISTINCT FROM OLD.depends_on OR NEW.batch_id IS DISTINCT FROM OLD.batch_id)
EXECUTE FUNCTION job_queue_refuse_rewiring();
