-- Every job's row is updated twice, at its claim and at its outcome, and
-- these two updates are most of what the server does per job. Two things
-- made each of them write more than it needs to.
--
-- A row-level BEFORE UPDATE trigger makes PostgreSQL lock each row it
-- updates before the update itself, whatever the trigger's WHEN says: one
-- more WAL record and tuple-header write per row for every outcome written
-- (the claim's rows are locked already by its FOR UPDATE). That trigger was
-- job_queue_route_revived (migrations/0004). It becomes an AFTER trigger
-- that routes a revived row with a second update, on the rare path where
-- its lane is wrong: a retried finished job, or a row whose kind changed.
-- An AFTER trigger's WHEN is checked on the versions the update already
-- holds: a claim or an outcome that does not match it pays for that test
-- alone.
-- The row's lane is right before its transaction commits, which is when
-- any claim can first see it (the reviving statement's own RETURNING still
-- shows the lane it had); the table lock of a reroute (see
-- lock_job_queue_for_routing in queries.sql) still orders it against limit
-- changes, since the second update runs inside the same transaction.
DROP TRIGGER job_queue_route_revived ON job_queue;

CREATE FUNCTION job_queue_reroute() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Names neither state nor kind: no trigger of job_queue fires again.
    UPDATE job_queue
    SET limited = EXISTS (SELECT FROM job_queue_limits WHERE kind = NEW.kind)
    WHERE id = NEW.id
      AND limited IS DISTINCT FROM EXISTS (SELECT FROM job_queue_limits WHERE kind = NEW.kind);
    RETURN NULL;
END;
$$;

CREATE TRIGGER job_queue_route_revived
    AFTER UPDATE ON job_queue
    FOR EACH ROW
    WHEN (NEW.kind IS DISTINCT FROM OLD.kind
          OR (NEW.state = 'pending' AND OLD.state NOT IN ('pending', 'running')))
    EXECUTE FUNCTION job_queue_reroute();

-- Neither update can be HOT (state is in the partial indexes' predicates),
-- but each still puts the row's new version on the same page when there is
-- room. On pages filled to the brim by the inserts there is none: every
-- claim and every outcome would move its row to another page, which costs a
-- second row lock in the WAL (heap_update marks the old version locked
-- while it looks for the other page) and a record naming both pages. Inserts
-- fill 40 % of a page, leaving room for the claim's version of each row
-- even when that is half as large again (it adds the claimant, the lease and
-- the start); the inserted version is pruned from the page once the claim
-- has committed, which makes room for the outcome's. Fuller pages still move
-- some of the rows, and moved versions take new pages, so a churning table
-- does not even end larger at 40 %. Only new pages follow the setting; rows
-- already in the table stay put.
-- The price is room: a table that keeps many finished rows holds them about
-- 40 % to a page once vacuum has cleared the versions they replaced, so up
-- to 2.5 times the pages, and what reads the whole table (status counts,
-- retry of every failed job of a kind) reads that much more. In return each
-- job touches fewer pages, and fewer are written whole into the WAL after a
-- checkpoint.
ALTER TABLE job_queue SET (fillfactor = 40);
