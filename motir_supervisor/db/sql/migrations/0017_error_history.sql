-- Every failed attempt's error, oldest first, as a JSON array of objects
--   {"attempt": 3, "at": "2026-...+00:00", "error": "ValueError: ...",
--    "traceback": "  File ..."}
-- ("traceback" null when the failure had none: a dead worker, a lapsed
-- lease). last_error keeps the latest error's whole text; a success clears
-- last_error and keeps the history, and so does a retry. NULL until the
-- first failure, and with no default, so adding it rewrites no row and a
-- job that never fails carries nothing.
ALTER TABLE job_queue ADD COLUMN errors jsonb;

-- A long history is rewritten whole at each failure: lz4 compresses it
-- several times faster than the default pglz. A server built without lz4
-- keeps pglz.
DO $$
BEGIN
    EXECUTE 'ALTER TABLE job_queue ALTER COLUMN errors SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END
$$;

-- The history after one more failed attempt: `history` with an entry for
-- attempt `attempt_no`, which failed now with `failure` (NULL: no failure,
-- the history unchanged). `failure` is the text last_error stores, bounded
-- by its writer (outcomes.MAX_ERROR_CHARS): the error, then the innermost
-- frames after a line "Traceback (innermost last):" (see
-- outcomes.describe_failure).
-- The list keeps the first entry and the latest 19: the first failure is
-- often the cause and the later ones its echoes (a half-done effect met
-- again), and a job that keeps failing for days must not grow its row
-- without end.
-- A history that is not a list (a JSON null or an object some client
-- wrote) starts afresh: a failure is written whatever the column holds,
-- or the row would stay running and fail every batch it is met in.
-- One SELECT of one expression, STABLE: the planner writes it into the
-- statements that call it (record_outcomes, fail_claims_of_dead and
-- expire_stale_leases in queries.sql) rather than calling it row by row.
CREATE FUNCTION job_queue_errors_with(history jsonb, attempt_no integer, failure text)
RETURNS jsonb
LANGUAGE sql STABLE AS $$
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
