"""worker.producer and worker.poller: a limited claim is followed by the
regular claim; one that comes back empty saying more is due is tried again
at once only a few times in a row, and a job said due that claims keep not
taking is looked for less and less often, so that a row another
transaction holds cannot spin the worker."""

import sys
import types

from motir_supervisor.config import Config
from motir_supervisor.ipc import ledger
from motir_supervisor.worker import poller as polling
from motir_supervisor.worker import producer as producing
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.holdings import Holdings
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

    def ran_dry(self):
        self.may_have_work = False

    def limited_work_pending(self, pending):
        self.limited_may_have_work = pending


def _producer(store):
    config = Config(database_url="postgresql:///unused")
    producer = Producer(config, "c", 0, store, Executor(), Holdings(ledger.Ledger(64), sys.maxsize),
                        completer=types.SimpleNamespace(), leases=types.SimpleNamespace(),
                        poller=Poller(), round_trips=RoundTrips())
    producer.note_limits(True)
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


class BusyLimitedStore(Store):
    """Limited claims that each take a job and find more due, five times;
    then nothing."""

    def claim_limited_jobs(self, claimant, limit, lease_seconds, queues, free):
        self.limited_claims += 1
        if self.limited_claims > 5:
            return [], False
        return [types.SimpleNamespace(id=self.limited_claims, priority=0)], True


def test_the_regular_claim_takes_its_turn_after_each_limited_claim_that_took_jobs():
    store = BusyLimitedStore()
    producer = _producer(store)
    producer._take = lambda jobs, claim: None  # what was taken runs elsewhere
    assert producer.claim_while_room(lambda: False) is False
    # One limited claim, then the regular one, before the next limited one:
    # a backlog of limited jobs does not hold the other jobs back.
    assert (store.limited_claims, store.regular_claims) == (1, 1)
    assert producer.poller.limited_may_have_work


def _poller():
    config = Config(database_url="postgresql:///unused")
    return polling.Poller(config, 0, store=None, executor=None, title=None, token=None,
                          kicks=None)


def test_a_job_said_due_that_claims_keep_not_taking_is_looked_for_less_and_less_often():
    poller = _poller()
    assert poller.until_due(0.3) == 0.3
    # Due now right after an empty claim: once at once (a job may have
    # fallen due between the two), then after waits that double.
    waits = [poller.until_due(-0.01) for _ in range(8)]
    assert waits[0] == 0.0
    assert waits[1:] == sorted(waits[1:]) and waits[1] > 0
    assert waits[-1] == polling.DUE_BACKOFF_MAX_SECONDS
    # A claim that found jobs starts it over.
    poller.claimed()
    assert poller.until_due(-0.01) == 0.0
