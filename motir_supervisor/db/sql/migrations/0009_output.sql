-- A succeeded run's return value, as its handler returned it (NULL for
-- None, and for a value JSON cannot hold or past the size the worker
-- stores: see outcomes.output_json). Nullable with no default, so adding it
-- rewrites no row.
ALTER TABLE job_queue ADD COLUMN output jsonb;
