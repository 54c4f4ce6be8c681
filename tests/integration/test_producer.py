"""A worker's producer against PostgreSQL, one slot claiming from a backlog:
a job claimed ahead of the backlog keeps the next claims short, and a
claim that emptied the queue leaves them whole."""

import signal
import time

import pytest

from motir_supervisor import db, registry
from motir_supervisor.config import Config
from motir_supervisor.ipc.ledger import Ledger
from motir_supervisor.worker import batching as sizing
from motir_supervisor.worker.batching import RoundTrips
from motir_supervisor.worker.completer import Completer
from motir_supervisor.worker.executor import Executor
from motir_supervisor.worker.leases import Leases
from motir_supervisor.worker.producer import Producer
from tests.helpers import wait_until


@registry.job("model_quick")
def _quick(j):
    return None


@pytest.fixture
def one_slot_producer(database_url):
    """A worker's own claims, as its main thread makes them, with one slot:
    a claim for it takes a whole batch (--batch-size 512)."""
    config = Config(database_url=database_url, concurrency=1, batch_size=512)
    entries = Ledger(config.ledger_entries)
    executor = Executor(1, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)
    store = db.JobStore(database_url)
    held: dict = {}
    round_trips = RoundTrips()
    completer = Completer(config, "model:1", 1, store, executor, entries, held, round_trips)
    leases = Leases(config, "model:1", 1, store, executor, held)
    producer = Producer(config, "model:1", 1, store, executor, entries, held, completer, leases,
                        None, round_trips)
    producer.batch_size = 512

    def write_finished() -> None:
        producer.collect_finished()
        completer.write_finished(now_or_never=True)
    yield producer, write_finished
    signal.setitimer(signal.ITIMER_REAL, 0)  # the lease alarm its claims armed
    store.close()


@pytest.mark.parametrize("urgent", [True, False])
def test_a_job_claimed_ahead_of_a_backlog_keeps_the_next_claims_short(one_slot_producer, sql,
                                                                      urgent):
    producer, write_finished = one_slot_producer

    def claim_and_run() -> int:
        count, _ = producer.claim(1)
        wait_until(lambda: all(run.ended for run in producer.held.values()), 10)
        return count

    sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'model_quick', 10"
             " FROM generate_series(1, 3000)")
    assert claim_and_run() == 512
    write_finished()
    if urgent:
        sql.rows("INSERT INTO job_queue (kind, priority) VALUES ('model_quick', -1)")
    assert claim_and_run() == 512
    first = min(producer.held.values(), key=lambda run: run.started).claimed.priority
    assert first == (-1 if urgent else 10)
    write_finished()
    # After a job that came ahead of the backlog, more may follow: short
    # claims. Otherwise whole batches, as before.
    size = sizing.URGENT_CLAIM_ROWS if urgent else 512
    assert claim_and_run() == size
    # A short claim is recorded at its own size: the batch size grows
    # from what its few jobs took, not from what 512 would have.
    assert {run.claim.size for run in producer.held.values()} == {size}
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
        wait_until(lambda: all(run.ended for run in producer.held.values()), 10)
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
