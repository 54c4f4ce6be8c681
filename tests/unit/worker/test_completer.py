"""worker.completer: the successes of one write go in more than one
statement (those with outputs, those without); each group is settled as
soon as its statement returns, so a failure of the next leaves only its own
runs to write again, and none is taken for lost."""

import json
import types

import psycopg2

from motir_supervisor import db, outcomes, registry
from motir_supervisor.ipc import ledger
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.claims import Claim, Run
from motir_supervisor.worker.completer import Completer
from motir_supervisor.worker.holdings import Holdings


class FencedStore:
    """record_successes as its SQL fences it: a row is written once, then it
    is no longer the claimant's. The first plain statement breaks, as a
    connection lost between two statements does."""

    def __init__(self):
        self.ours = set()
        self.broke = False

    def record_successes(self, claimant, ids, outputs=None):
        if outputs is None and not self.broke:
            self.broke = True
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        written = self.ours & set(ids)
        self.ours -= written
        return written


def test_a_statement_that_breaks_leaves_the_runs_written_before_it_settled(monkeypatch):
    counted = []
    monkeypatch.setattr("motir_supervisor.metrics.record_run",
                        lambda kind, outcome, *rest: counted.append(outcome))
    store, entries = FencedStore(), ledger.Ledger(8)
    registration = registry.Registration("k", lambda j: None, None)
    runs = []
    for job_id, output in ((1, '{"a":1}'), (2, None)):
        run = Run(db.ClaimedJob(job_id, "default", "k", json.dumps(None), 1, 5, None, 0),
                  Claim(0.0, 1, 1), entries.claim(job_id), registration)
        run.decision, run.output_json, run.ended = outcomes.SUCCESS, output, True
        store.ours.add(job_id)
        runs.append(run)
    completer = Completer(types.SimpleNamespace(concurrency=1, queues=()), "me", 1, store,
                          types.SimpleNamespace(busy=False, finished_since=lambda: None),
                          Holdings(entries, 100), RoundTrips())
    completer.add_ended(runs, 0.0)
    try:
        completer.write_finished(now_or_never=True)
    except psycopg2.OperationalError:
        pass  # the worker reconnects, and writes what is left
    assert [run.written for run in runs] == [True, False]
    completer.write_finished(now_or_never=True)
    assert counted == ["succeeded", "succeeded"] and not completer.has_unwritten()


def test_runs_completed_in_their_transaction_are_settled_once_and_nothing_is_sent(monkeypatch):
    counted = []
    monkeypatch.setattr("motir_supervisor.metrics.record_run",
                        lambda kind, outcome, *rest: counted.append(outcome))
    # A store that takes no statement: a completed run needs none.
    entries = ledger.Ledger(4)
    registration = registry.Registration("k", lambda j: None, None)
    run = Run(db.ClaimedJob(1, "default", "k", json.dumps(None), 1, 5, None, 0),
              Claim(0.0, 1, 1), entries.claim(1), registration)
    run.decision, run.ended, run.completed = outcomes.SUCCESS, True, True
    completer = Completer(types.SimpleNamespace(concurrency=1, queues=()), "me", 1, object(),
                          types.SimpleNamespace(busy=False, finished_since=lambda: None),
                          Holdings(entries, 100), RoundTrips())
    completer.add_ended([run], 0.0)
    completer.write_finished(now_or_never=True)
    assert counted == ["succeeded"] and not completer.has_unwritten()
    # Its ledger entry was freed once: the next claims get entries of their own.
    assert entries.free_entries() == 4
    assert len({entries.claim(job_id) for job_id in (10, 11, 12, 13)}) == 4
