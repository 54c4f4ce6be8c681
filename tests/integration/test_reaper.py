"""The reaper's single passes against PostgreSQL: retention prunes old
finished rows in batches, and only stale leases are expired."""

from motir_supervisor.maintenance.reaper import Reaper


def test_retention_prunes_old_finished_rows_in_batches(store, sql):
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) SELECT 'x', 'succeeded',"
             " now() - interval '10 days' FROM generate_series(1, 2500)")
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) VALUES"
             " ('x', 'succeeded', now()), ('x', 'failed', now() - interval '10 days')")
    reaper = Reaper(store, every_seconds=60, retention_hours=24)
    assert reaper.run_once().pruned == 2500
    assert sql.value("SELECT count(*) FROM job_queue") == 2
    assert Reaper(store, every_seconds=60, retention_hours=0).prune_finished() == 0


def test_the_reaper_expires_only_stale_leases(store, sql):
    sql.rows("INSERT INTO job_queue (kind, state, locked_by, lease_expires_at, attempts,"
             " max_attempts) VALUES ('x', 'running', 'a', now() - interval '1 s', 1, 3),"
             " ('x', 'running', 'b', now() - interval '1 s', 3, 3),"
             " ('x', 'running', 'c', now() + interval '1 min', 1, 3)")
    assert Reaper(store, 60, 0).run_once().expired == 2
    assert sql.rows("SELECT locked_by IS NULL, state FROM job_queue ORDER BY id") == [
        (True, "pending"), (True, "failed"), (False, "running")]
