-- The running rows had three partial indexes: by lease (the reaper), by
-- kind (a kind's max_running) and by kind and key (a key's
-- max_running_per_key). A row that starts running enters each of those
-- that holds it, and for a job limited per key that was three index
-- entries beside the primary key's, at every start: with the row's own
-- version, most of what a key's slot handed on writes. One index serves
-- all three:
-- * a kind's running rows are a range of it (its first column);
-- * a key's are a range within that (its first two);
-- * the reaper reads the running rows with their leases in the index, and
--   visits the table only for those that expired. It reads every running
--   row to find them, a few thousand in a large fleet, once per pass.
CREATE INDEX job_queue_running ON job_queue (kind, concurrency_key, lease_expires_at)
    WHERE state = 'running';

DROP INDEX job_queue_leases;
DROP INDEX job_queue_limited_running;
DROP INDEX job_queue_key_running;
