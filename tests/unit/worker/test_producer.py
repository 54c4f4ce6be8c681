"""worker.producer: a limited claim that comes back empty saying more is
due is followed by the regular claim, and is tried again at once only a
few times in a row; then it waits for a wake-up or the backstop, so that
a row another transaction holds cannot spin the worker."""

import types

from motir_supervisor.config import Config
from motir_supervisor.ipc import ledger
from motir_supervisor.worker import producer as producing
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.producer import Producer


class Store:
    """Limited claims that always find more due and take nothing (their
    rows held elsewhere); a regular lane with nothing in it."""

    def __init__(self):
        self.limited_claims = 0
        self.regular_claims = 0

    def claim_limited_jobs(self, claimant, limit, lease_seconds, queues, free):
        self.limited_claims += 1
        return [], True

    def claim_due_jobs(self, claimant, limit, lease_seconds, queues):
        self.regular_claims += 1
        return [], False


class Executor:
    """Four free slots, nothing running, nothing ended."""

    run_seconds = None
    busy = False

    def free_slots(self):
        return 4

    def finished_since(self):
        return None

    def take_finished(self):
        return []


class Poller:
    def __init__(self):
        self.may_have_work = True
        self.limited_may_have_work = True

    def kick(self):
        pass

    def claimed(self):
        pass


def _producer(store):
    config = Config(database_url="postgresql:///unused")
    producer = Producer(config, "c", 0, store, Executor(), ledger.Ledger(64), {},
                        completer=types.SimpleNamespace(), leases=types.SimpleNamespace(),
                        poller=Poller(), round_trips=RoundTrips())
    producer.limits_exist = True
    return producer


def test_an_empty_limited_claim_saying_more_is_due_gives_way_then_waits():
    store = Store()
    producer = _producer(store)
    passes = []
    # The worker's loop: a pass that is not idle is followed by another at once.
    while len(passes) < 20:
        producer.poller.may_have_work = True
        idle = producer.claim_while_room(lambda: False)
        passes.append(idle)
        if idle:
            break
    # Each limited claim was followed by the regular one, so regular jobs
    # never wait behind it; after a few in a row it stopped saying more is
    # due, and the worker went idle until a wake-up or the backstop.
    assert store.regular_claims == len(passes)
    assert store.limited_claims == producing.EMPTY_LIMITED_CLAIMS + 1
    assert passes[-1] is True and not producer.poller.limited_may_have_work
    # The backstop brings one more, not a run of them.
    producer._next_limited_claim = 0.0
    producer.poller.may_have_work = True
    assert producer.claim_while_room(lambda: False) is True
    assert store.limited_claims == producing.EMPTY_LIMITED_CLAIMS + 2
