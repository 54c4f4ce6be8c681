"""Fleet-wide limits per kind through real motir-supervisor processes: a
worker of another queue takes the slot a run freed at once, and two fleets
keep the limit, unique keys and schedules through worker kills and a
rolling restart, with a negative control that counts without the lock."""

import os
import signal
import threading
import time

import pytest

from tests.apps.limited import THROTTLED_MAX_RUNNING
from tests.helpers import (TRANSITIONS_TABLE, Sql, alive, most_at_once, running_spans,
                           wait_for_limits, wait_until)
from tests.supervisors import NAIVE_LIMIT_CLI, cli


def test_a_worker_of_another_queue_takes_the_slot_a_run_freed(
        database_url, executions, start_supervisor):
    # The kind's every slot is taken by runs in queue "b"; the next job
    # waits in "a", served by another fleet with a long poll.
    a = start_supervisor("--workers", "1", "--queue", "a", "--poll-seconds", "30",
                         "--app", "tests.apps.limited")
    b = start_supervisor("--workers", "1", "--concurrency", str(THROTTLED_MAX_RUNNING),
                         "--queue", "b", "--app", "tests.apps.limited")
    a.wait_for_workers(1)
    b.wait_for_workers(1)
    wait_for_limits(executions, "throttled")
    executions.rows("INSERT INTO job_queue (kind, queue, payload)"
                    " SELECT 'throttled', 'b', '{\"sleep\": 1.0}' FROM generate_series(1, %s)",
                    (THROTTLED_MAX_RUNNING,))
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions")
               == THROTTLED_MAX_RUNNING, 10, message="the runs in b")
    executions.rows("INSERT INTO job_queue (kind, queue) VALUES ('throttled', 'a')")
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions")
               == THROTTLED_MAX_RUNNING + 1, 10, message="the run in a")
    first_end, last_start = executions.rows(
        "SELECT min(finished_at), max(started_at) FROM test_executions")[0]
    assert first_end is not None and first_end <= last_start
    assert (last_start - first_end).total_seconds() < 2  # not the 30 s poll


# -- two fleets ------------------------------------------------------------------

FLEET = ("--workers", "4", "--concurrency", "2",
         "--app", "tests.apps.limited", "--app", "tests.apps.scheduled")
THROTTLED_JOBS = 150
OTHER_JOBS = 300
KEYS = 5


class KeyedProducer(threading.Thread):
    """Enqueues jobs of a few unique keys as fast as it can, as racing web
    requests would: most inserts find the key taken."""

    def __init__(self, url):
        super().__init__(daemon=True)
        self.url = url
        self.tries = 0
        self.done = threading.Event()

    def run(self):
        sql = Sql(self.url)
        while not self.done.is_set():
            sql.rows("INSERT INTO job_queue (kind, unique_key) VALUES ('keyed', %s)"
                     " ON CONFLICT DO NOTHING", (f"k{self.tries % KEYS}",))
            self.tries += 1
            time.sleep(0.002)
        sql.close()


def _spans(sql, kind, killed_at):
    """(start, end) of every run of ``kind``: a run its worker's SIGKILL cut
    short ended at the kill, which the test records once the process is gone."""
    rows = sql.rows("SELECT e.started_at, e.finished_at, e.pid, j.unique_key"
                    " FROM test_executions AS e JOIN job_queue AS j ON j.id = e.job_id"
                    " WHERE j.kind = %s", (kind,))
    spans = []
    for start, end, pid, key in rows:
        if end is None:
            assert pid in killed_at, f"a run of {kind} in pid {pid} never ended"
            end = max(killed_at[pid], start)
        spans.append((start, end, key))
    return spans


def _kill(sql, pids, killed_at):
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not any(alive(pid) for pid in pids), 5, message="killed workers gone")
    now = sql.value("SELECT clock_timestamp()")
    killed_at.update({pid: now for pid in pids})


def _succeeded(sql, kind):
    return sql.value("SELECT count(*) FROM job_queue WHERE kind = %s AND state = 'succeeded'",
                     (kind,))


def test_two_fleets_keep_limits_unique_keys_and_schedules_through_kills_and_a_restart(
        database_url, executions, start_supervisor):
    first, second = start_supervisor(*FLEET), start_supervisor(*FLEET)
    first.wait_for_workers(4)
    second.wait_for_workers(4)
    sql = executions
    wait_for_limits(sql, "throttled")
    sql.rows(TRANSITIONS_TABLE)
    sql.rows("INSERT INTO job_queue (kind) SELECT 'throttled' FROM generate_series(1, %s)",
             (THROTTLED_JOBS,))
    sql.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, %s)",
             (OTHER_JOBS,))
    producer = KeyedProducer(database_url)
    producer.start()
    killed_at = {}
    try:
        wait_until(lambda: _succeeded(sql, "throttled") >= 40, 30, message="40 throttled")
        # Kill two workers while they run throttled jobs: their slots free
        # when the supervisor settles them. A run may end between the read
        # and the kill (they last ~20 ms): then two others, until a kill
        # has cut a run short.
        for _ in range(10):
            running = wait_until(lambda: sql.value(
                "SELECT array_agg(DISTINCT e.pid) FROM test_executions AS e"
                " JOIN job_queue AS j ON j.id = e.job_id"
                " WHERE j.kind = 'throttled' AND e.finished_at IS NULL"
                " AND e.pid <> ALL(%s)", ([*killed_at, 0],)), 10,
                message="throttled jobs running")
            _kill(sql, running[:2], killed_at)
            if sql.value("SELECT count(*) FROM test_executions AS e"
                         " JOIN job_queue AS j ON j.id = e.job_id"
                         " WHERE j.kind = 'throttled' AND e.pid = ANY(%s)"
                         " AND e.finished_at IS NULL", (running[:2],)):
                break
        wait_until(lambda: _succeeded(sql, "throttled") >= 90, 30, message="90 throttled")
        third = start_supervisor(*FLEET)  # a rolling restart of the second fleet
        third.wait_for_workers(4)
        second.signal(signal.SIGTERM)
        assert second.wait(30) == 0
        restarted = third.worker_pids()
        wait_until(lambda: _succeeded(sql, "throttled") == THROTTLED_JOBS, 30,
                   message="every throttled job")
    finally:
        producer.done.set()
        producer.join(10)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state <> 'succeeded'"
                                 " AND kind <> 'tick'") == 0, 30, message="every job done")
    # The new fleet took its share after the restart.
    assert sql.value("SELECT count(*) FROM test_executions WHERE pid = ANY(%s)", (restarted,)) > 0
    # The limit held at every instant, and the fleets used all of it.
    throttled = _spans(sql, "throttled", killed_at)
    assert len(throttled) > THROTTLED_JOBS  # runs the kills cut short ran again
    most = most_at_once([(start, end) for start, end, _ in running_spans(sql, "throttled")])
    assert most <= THROTTLED_MAX_RUNNING
    assert most == THROTTLED_MAX_RUNNING
    # Other kinds flowed past the limited backlog: all done before it was.
    assert (sql.value("SELECT max(finished_at) FROM job_queue WHERE kind = 'record'")
            < max(start for start, _, _ in throttled))
    # Never two jobs of one unique key running at once (a job's own runs are
    # the claim's business), and most inserts were refused.
    key_of = dict(sql.rows("SELECT id, unique_key FROM job_queue WHERE kind = 'keyed'"))
    keyed = running_spans(sql, "keyed")
    for key in set(key_of.values()):
        runs = sorted((start, end, job) for start, end, job in keyed if key_of[job] == key)
        assert all(a_end <= b_start or a_job == b_job
                   for (_, a_end, a_job), (b_start, _, b_job) in zip(runs, runs[1:])), key
    rows = sql.value("SELECT count(*) FROM job_queue WHERE kind = 'keyed'")
    assert 0 < rows < producer.tries
    # Every scheduled instant at most once.
    instants = [text for text, in sql.rows(
        "SELECT payload ->> 'scheduled_for' FROM job_queue WHERE kind = 'tick'")]
    assert instants and len(instants) == len(set(instants))
    status = cli(database_url, "status").stdout
    assert f"throttled            0 running of at most {THROTTLED_MAX_RUNNING}, 0 waiting" in status


def test_negative_control_two_fleets_with_a_claim_that_counts_without_the_lock_overshoot(
        database_url, executions, start_supervisor):
    fleets = [start_supervisor(*FLEET, entry=NAIVE_LIMIT_CLI) for _ in range(2)]
    for fleet in fleets:
        fleet.wait_for_workers(4)
    # The claim overshoots, not rows enqueued before the limit was written.
    wait_for_limits(executions, "throttled")
    executions.rows(TRANSITIONS_TABLE)
    for _ in range(3):
        executions.rows("TRUNCATE test_transitions")
        executions.rows("INSERT INTO job_queue (kind) SELECT 'throttled'"
                        " FROM generate_series(1, 60)")
        wait_until(lambda: executions.value(
            "SELECT count(*) FROM job_queue WHERE kind = 'throttled' AND state <> 'succeeded'")
            == 0, 30, message="the throttled jobs")
        spans = [(start, end) for start, end, _ in running_spans(executions, "throttled")]
        if most_at_once(spans) > THROTTLED_MAX_RUNNING:
            return
    pytest.fail("three runs of two naive fleets without an overshoot: the test cannot catch one")
