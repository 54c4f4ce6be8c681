"""Keyed runs that return values, written by the worker's completer through
the hand-on against PostgreSQL: values the database refuses cost only
their own runs' outputs, and a connection that breaks while runs are
written one by one leaves those written counted as written."""

import types

import psycopg2
import pytest

from motir_supervisor import db, outcomes, registry
from motir_supervisor.ipc import ledger
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.claims import Claim, Run
from motir_supervisor.worker.completer import Completer
from motir_supervisor.worker.holdings import Holdings

PER_KEY = db.Limits(max_running_per_key=1)


def _nested(depth):
    return "[" * depth + "]" * depth


def _keyed(sql, store, keys):
    """One claimed run of kind "a" (limited per key) per key, each key with
    a next job waiting; the claimed jobs by id."""
    store.sync_limits({"a": PER_KEY})
    sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
             " SELECT 'a', k FROM unnest(%s::text[]) AS k, generate_series(1, 2)", (keys,))
    jobs, _ = store.claim_limited_jobs("c", len(keys), 30, None)
    assert len(jobs) == len(keys)
    return sorted(jobs, key=lambda j: j.id)


def _completer(store):
    """The completer with the worker's holdings, as a worker wires them: its
    hand-on holds what it claims (which nothing starts here)."""
    entries = ledger.Ledger(16)
    config = types.SimpleNamespace(concurrency=1, database_url=store.dsn, lease_seconds=30,
                                   queues=())
    completer = Completer(config, "c", 1, store,
                          types.SimpleNamespace(busy=False, finished_since=lambda: None),
                          Holdings(entries, 100), RoundTrips())
    return completer, entries


def _ended(entries, job, value, limited=True):
    run = Run(job, Claim(0.0, 1, 1, limited=limited), entries.claim(job.id),
              registry.Registration(job.kind, lambda j: None, None))
    run.decision, run.output_json, run.ended = outcomes.SUCCESS, value, True
    return run


def test_a_lost_runs_value_costs_the_others_nothing(sql, store):
    lost, ours = _keyed(sql, store, ["x", "y"])
    sql.rows("UPDATE job_queue SET locked_by = 'reaper' WHERE id = %s", (lost.id,))
    # The lost run's value is never read: its row is not this worker's.
    written, handed = store.record_successes_handing_on(
        "c", [lost.id, ours.id], 2, 30, None, [_nested(100_000), '{"ok": 1}'])
    assert written == {ours.id} and len(handed) == 1
    assert sql.value("SELECT output FROM job_queue WHERE id = %s", (ours.id,)) == {"ok": 1}


def _refused_by_the_hand_on(sql, store, depth):
    """Whether the hand-on refuses a value nested ``depth`` deep (a refusal
    writes nothing, so the run stays claimed; one written is replaced)."""
    [job] = _keyed(sql, store, [f"probe-{depth}"])
    try:
        store.record_successes_handing_on("c", [job.id], 1, 30, None, [_nested(depth)])
    except psycopg2.Error as exc:
        assert exc.pgcode == "54001", exc
        return True
    return False


def test_a_value_the_hand_on_refuses_is_still_stored_by_the_plain_write(sql, store):
    # The hand-on's statement runs deeper on the server's stack than the
    # plain write of outputs: the shallowest value it refuses, found here.
    low, high = 1_000, 100_000
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if _refused_by_the_hand_on(sql, store, middle) else (middle, high)
    [plain] = [j for j in _keyed(sql, store, ["plain"])]
    try:
        store.record_successes("c", [plain.id], [_nested(high)])
    except psycopg2.Error:
        pytest.skip(f"this server refuses a value nested {high} deep in both writes")
    [job] = _keyed(sql, store, ["z"])
    completer, entries = _completer(store)
    completer.add_ended([_ended(entries, job, _nested(high))], 0.0)
    completer.write_finished(now_or_never=True)
    assert sql.value("SELECT state = 'succeeded' AND output IS NOT NULL FROM job_queue"
                     " WHERE id = %s", (job.id,))


def test_runs_written_one_by_one_are_settled_as_each_is_written(sql, store, monkeypatch):
    counted = []
    monkeypatch.setattr("motir_supervisor.metrics.record_run",
                        lambda kind, outcome, *rest: counted.append((kind, outcome)))
    refused, first, broken = _keyed(sql, store, ["x", "y", "z"])
    completer, entries = _completer(store)
    runs = [_ended(entries, refused, _nested(100_000)),
            _ended(entries, first, '{"ok": 1}'), _ended(entries, broken, '{"ok": 2}')]
    real = store.record_successes_handing_on
    breaks = [[broken.id]]

    def breaking(claimant, ids, *rest):
        # The connection breaks at the last run's own statement, once.
        if ids in breaks:
            breaks.remove(ids)
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return real(claimant, ids, *rest)
    monkeypatch.setattr(store, "record_successes_handing_on", breaking)
    completer.add_ended(runs, 0.0)
    with pytest.raises(psycopg2.OperationalError):
        completer.write_finished(now_or_never=True)
    # What was written before the break is settled; only the last is left.
    assert [run.written for run in runs] == [True, True, False]
    completer.write_finished(now_or_never=True)
    assert counted == [("a", "succeeded")] * 3
    assert sql.rows("SELECT state, output FROM job_queue WHERE id = ANY(%s) ORDER BY id",
                    ([refused.id, first.id, broken.id],)) == [
        ("succeeded", None), ("succeeded", {"ok": 1}), ("succeeded", {"ok": 2})]
