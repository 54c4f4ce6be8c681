"""The reaper's single passes against PostgreSQL: retention prunes old
finished rows in batches, and old failed rows by their own age, each
through a partial index; and only stale leases are expired."""

import pytest

from motir_supervisor import db
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


def _ended(sql, *rows):
    """Insert (state, days since it finished) rows; their ids."""
    return [sql.value("INSERT INTO job_queue (kind, state, finished_at) VALUES"
                      " ('x', %s, now() - make_interval(days => %s)) RETURNING id", row)
            for row in rows]


def _left(sql):
    return [r[0] for r in sql.rows("SELECT id FROM job_queue ORDER BY id")]


def test_failed_rows_are_pruned_by_their_own_age(store, sql):
    old_failed, new_failed, succeeded, cancelled = _ended(
        sql, ("failed", 40), ("failed", 10), ("succeeded", 10), ("cancelled", 40))
    # Finished rows past retention go; failed ones stay with no age of their own.
    assert Reaper(store, 60, retention_hours=24 * 30).run_once().pruned == 1
    assert _left(sql) == [old_failed, new_failed, succeeded]
    assert Reaper(store, 60, retention_hours=0, keep_failed_hours=24 * 30).run_once().pruned == 1
    assert _left(sql) == [new_failed, succeeded]
    assert Reaper(store, 60, retention_hours=24 * 5, keep_failed_hours=24 * 5).prune_finished() == 2
    assert _left(sql) == []


def test_failed_rows_are_pruned_first_within_the_pass_budget(store, sql, monkeypatch):
    # A pass whose budget runs out after one statement: a backlog of finished
    # rows must not keep the failed ones for ever.
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) SELECT 'x', 'succeeded',"
             " now() - interval '10 days' FROM generate_series(1, 1500)")
    [failed] = _ended(sql, ("failed", 40))
    monkeypatch.setattr("motir_supervisor.maintenance.reaper.PRUNE_BUDGET_SECONDS", 0.0)
    assert Reaper(store, 60, retention_hours=24, keep_failed_hours=24).prune_finished() == 0
    monkeypatch.setattr("motir_supervisor.maintenance.reaper.PRUNE_BATCH", 1)
    monkeypatch.setattr("motir_supervisor.maintenance.reaper.PRUNE_BUDGET_SECONDS", 60.0)
    reaper = Reaper(store, 60, retention_hours=24, keep_failed_hours=24)
    calls = []
    real = store.prune_finished
    monkeypatch.setattr(store, "prune_finished",
                        lambda states, *args: calls.append(states) or real(states, *args))
    assert reaper.prune_finished() == 1501
    assert calls[0] == ("failed",) and failed not in _left(sql)


@pytest.mark.parametrize("states, index", [
    (["succeeded", "cancelled"], "job_queue_finished"),
    (["failed"], "job_queue_ended_badly"),
])
def test_each_retention_batch_walks_its_partial_index(sql, states, index):
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) SELECT 'x', 'succeeded',"
             " now() - make_interval(mins => n) FROM generate_series(1, 20000) AS n")
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) SELECT 'x', 'failed',"
             " now() - make_interval(mins => n) FROM generate_series(1, 2000) AS n")
    sql.rows("ANALYZE job_queue")

    def plan(states):
        return "\n".join(r[0] for r in sql.rows("EXPLAIN " + db.QUERIES["prune_finished"], {
            "states": states, "older_than_seconds": 3600, "limit": 1000}))
    # The batch's rows are found through the index, by age, not by a read
    # of every row.
    assert index in plan(states) and "Seq Scan on job_queue job_queue_1" not in plan(states)
    # The negative control: states of two groups are no one index's rows.
    assert "Seq Scan on job_queue job_queue_1" in plan(["succeeded", "failed"])
