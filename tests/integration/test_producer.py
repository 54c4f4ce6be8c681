"""A worker's producer against PostgreSQL: one slot claiming from a
backlog (a job claimed ahead of it keeps the next claims short, a claim
that emptied the queue leaves them whole), a stop landing during a claim,
a recycling worker's timers, and the limited lane's own claim sizes."""

import signal
import sys
import time

import pytest

from motir_supervisor import db, registry
from motir_supervisor.config import Config
from motir_supervisor.ipc.ledger import Ledger
from motir_supervisor.worker import batching
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.claims import Claim
from motir_supervisor.worker.completer import Completer
from motir_supervisor.worker.executor import Executor
from motir_supervisor.worker.holdings import Holdings
from motir_supervisor.worker.leases import Leases
from motir_supervisor.worker.poller import Poller
from motir_supervisor.worker.producer import LIMITED_CLAIM_ROWS, Producer
from motir_supervisor.worker.title import WorkerTitle
from tests.helpers import wait_until


@registry.job("model_quick")
def _quick(j):
    return None


def worker_roles(database_url, claimant, concurrency, batch_size, stop_check=lambda: False):
    """A producer wired as a worker wires it: its executor, completer,
    leases and poller, on a store of its own."""
    config = Config(database_url=database_url, concurrency=concurrency, batch_size=batch_size)
    entries = Ledger(config.ledger_entries)
    executor = Executor(concurrency, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)
    store = db.JobStore(database_url)
    holdings = Holdings(entries, sys.maxsize)
    round_trips = RoundTrips()
    completer = Completer(config, claimant, 1, store, executor, holdings, round_trips,
                          stop_check=stop_check)
    leases = Leases(config, claimant, 1, store, executor, holdings)
    poller = Poller(config, 1, store, executor, WorkerTitle(1), None, None)
    producer = Producer(config, claimant, 1, store, executor, holdings, completer, leases,
                        poller, round_trips, stop_check=stop_check)
    return producer, completer, executor


@pytest.fixture
def one_slot_producer(database_url):
    """A worker's own claims, as its main thread makes them, with one slot:
    a claim for it takes a whole batch (--batch-size 512)."""
    producer, completer, _ = worker_roles(database_url, "model:1", 1, 512)
    producer.batch_size = 512

    def write_finished() -> None:
        producer.collect_finished()
        completer.write_finished(now_or_never=True)
        producer.start_handed_on()
    yield producer, write_finished
    signal.setitimer(signal.ITIMER_REAL, 0)  # the lease alarm its claims armed
    producer.store.close()


@pytest.mark.parametrize("urgent", [True, False])
def test_a_job_claimed_ahead_of_a_backlog_keeps_the_next_claims_short(one_slot_producer, sql,
                                                                      urgent):
    producer, write_finished = one_slot_producer

    def claim_and_run() -> int:
        count, _ = producer.claim(1)
        wait_until(lambda: all(run.ended for run in producer.holdings.runs()), 10)
        return count

    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 3000)")
    assert claim_and_run() == 512
    write_finished()
    if urgent:
        sql.rows("INSERT INTO job_queue (kind, priority) VALUES ('model_quick', -1)")
    assert claim_and_run() == 512
    first = min(producer.holdings.runs(), key=lambda run: run.started).claimed.priority
    assert first == (-1 if urgent else 10)
    write_finished()
    # After a job that came ahead of the backlog, more may follow: short
    # claims. Otherwise whole batches, as before.
    size = batching.URGENT_CLAIM_ROWS if urgent else 512
    assert claim_and_run() == size
    # A short claim is recorded at its own size: the batch size grows
    # from what its few jobs took, not from what 512 would have.
    assert {run.claim.size for run in producer.holdings.runs()} == {size}
    assert claim_and_run() == size
    write_finished()
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == (
        1024 + 2 * size)
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 0


def test_an_urgent_job_with_no_backlog_behind_it_leaves_claims_whole(one_slot_producer, sql):
    """The watch is for a backlog: a claim that emptied the queue (or a job
    given back) before a more urgent one arrived arms nothing."""
    producer, write_finished = one_slot_producer

    def claim_and_run() -> int:
        count, _ = producer.claim(1)
        wait_until(lambda: all(run.ended for run in producer.holdings.runs()), 10)
        write_finished()
        return count

    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 100)")
    assert claim_and_run() == 100  # the queue ran dry
    producer.batch_size = 512
    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 3000)")
    sql.rows("INSERT INTO job_queue (kind, priority) VALUES ('model_quick', -1)")
    assert claim_and_run() == 512
    assert not producer.watching_for_urgent(time.monotonic())
    assert claim_and_run() == 512


@pytest.fixture
def stoppable_producer(database_url):
    """A producer of two slots whose worker's stop lands during a claim: its
    stop check sets the flag the claim loop reads."""
    stopped = []
    executors = []

    def stop_lands() -> bool:
        # As the worker's begin_stop does: nothing more starts.
        stopped.append(True)
        executors[0].stop_starting()
        return True
    producer, completer, executor = worker_roles(database_url, "stop:1", 2, 100, stop_lands)
    executors.append(executor)
    yield producer, completer, stopped
    signal.setitimer(signal.ITIMER_REAL, 0)
    producer.store.close()


def test_a_stop_that_lands_during_a_claim_ends_the_claim_loop(stoppable_producer, sql):
    """The loop asks whether the worker is stopping before every claim, so
    the claim the stop landed in is the last: its jobs go back, and no
    other job is taken only to be given back."""
    producer, completer, stopped = stoppable_producer
    sql.rows("INSERT INTO job_queue (kind) SELECT 'model_quick' FROM generate_series(1, 500)")
    claims = []
    claim_due_jobs = producer.store.claim_due_jobs

    def counted(*args, **kwargs):
        jobs, more_due = claim_due_jobs(*args, **kwargs)
        claims.append(len(jobs))
        return jobs, more_due
    producer.store.claim_due_jobs = counted
    producer.claim_while_room(lambda: bool(stopped))
    assert claims == [2]
    completer.release_withdrawn()
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'pending'") == 500


def test_a_recycling_worker_keeps_no_timer_for_its_slow_claims(one_slot_producer):
    """A recycling worker gives no slow claim back, so it must not wake for
    one either: a timer already past would spin its loop until the claim
    ends."""
    producer, _ = one_slot_producer
    producer.holdings.hold([], Claim(time.monotonic() - 60, 1, 1, open=1))
    assert producer.next_timer() < time.monotonic()
    producer.keep_unstarted()
    assert producer.next_timer() == float("inf")


def test_the_limited_lane_sizes_its_claims_apart_from_the_regular_one(database_url, sql):
    """Keyed claims grow while they fill; a limited claim short because its
    keys are full, or an empty regular claim, leaves the other lane's size
    alone."""
    producer, completer, _ = worker_roles(database_url, "keys:1", 8, 512)
    try:
        producer.store.sync_limits({"model_quick": db.Limits(max_running_per_key=1)})
        sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
                 " SELECT 'model_quick', 'k' || g FROM generate_series(1, 2000) AS g")
        sizes = []
        for _ in range(6):
            count, _ = producer.claim_limited(0)
            wait_until(lambda: all(run.ended for run in producer.holdings.runs()), 10)
            producer.collect_finished()
            completer.write_finished(now_or_never=True)
            sizes.append((count, producer.limited_batch_size))
            assert producer.claim(1) == (0, False)  # the regular lane is empty
        counts = [count for count, _ in sizes]
        # From the free slots up to the most a limited claim takes.
        assert counts[0] == 8 and counts[-1] == LIMITED_CLAIM_ROWS > 8, sizes
        assert producer.batch_size == 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        producer.store.close()


@registry.job("model_slow_limited")
def _slow_limited(j):
    time.sleep(0.5)


def test_a_worker_with_no_free_slot_does_not_retry_a_limited_claim_at_once(database_url, sql):
    """A kind with max_running is claimed only for free slots: with the one
    slot busy and room for a reserve, the claim finds its backlog but takes
    none, and the worker goes on to the regular lane, then idles, rather
    than come straight back to the limited claim."""
    producer, completer, executor = worker_roles(database_url, "busy:1", 1, 512)
    try:
        producer.store.sync_limits({"model_slow_limited": db.Limits(max_running=10)})
        sql.rows("INSERT INTO job_queue (kind) SELECT 'model_slow_limited'"
                 " FROM generate_series(1, 5)")
        assert producer.claim_limited(1) == (1, True)
        wait_until(lambda: executor.free_slots() == 0 and producer.holdings, 5)
        producer.room = lambda: 1  # a reserve's worth of room, no free slot
        producer.note_limits(True)
        assert producer.claim_while_room(lambda: False) is True
        assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 1
    finally:
        wait_until(lambda: all(run.ended for run in producer.holdings.runs()), 10)
        signal.setitimer(signal.ITIMER_REAL, 0)
        producer.store.close()


def test_the_next_jobs_a_success_hands_on_are_held_and_started(database_url, sql):
    """A keyed success's write claims its key's next job: the completer
    gives it to the holdings and the producer starts it, so a key's backlog
    runs through with no claim of the producer's after the first."""
    producer, completer, _ = worker_roles(database_url, "hand:1", 2, 512)
    try:
        producer.store.sync_limits({"model_quick": db.Limits(max_running_per_key=1)})
        sql.rows("INSERT INTO job_queue (kind, concurrency_key)"
                 " SELECT 'model_quick', 'k' FROM generate_series(1, 3)")
        assert producer.claim_limited(0)[0] == 1
        for _ in range(3):
            wait_until(lambda: all(run.ended for run in producer.holdings.runs()), 10)
            producer.collect_finished()
            completer.write_finished(now_or_never=True)
            producer.start_handed_on()
        assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'") == 3
        assert not producer.holdings
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        producer.store.close()
