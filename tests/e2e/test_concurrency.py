"""Many jobs at once in one worker: threads, the event loop, and what a crash re-runs.

Real supervisors against PostgreSQL; every run is recorded by the handlers
of tests/apps/sample.py in test_executions.
"""

import os
import random
import signal
import time

import pytest

from tests.helpers import enqueue, executions_per_job, state_of, wait_until
from tests.supervisors import title_of


def starts(sql, ids):
    return sql.rows("SELECT pid, started_at FROM test_executions WHERE job_id = ANY(%s)",
                    (ids,))


@pytest.mark.parametrize("kind", ["record", "async_record"])
def test_one_worker_runs_its_slots_at_once(executions, start_supervisor, kind):
    start_supervisor("--workers", "1", "--concurrency", "8")
    ids = enqueue(executions, kind, '{"sleep": 1}', count=8)
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in ids), 10)
    rows = starts(executions, ids)
    assert len({pid for pid, _ in rows}) == 1
    spread = (max(t for _, t in rows) - min(t for _, t in rows)).total_seconds()
    assert spread < 0.5, spread  # one after the other would take 7 s
    finished = executions.value("SELECT max(finished_at) - min(started_at)"
                                " FROM test_executions")
    assert finished.total_seconds() < 2.5


def test_sync_and_async_jobs_share_a_worker_s_slots(executions, start_supervisor):
    start_supervisor("--workers", "1", "--concurrency", "4")
    ids = (enqueue(executions, "record", '{"sleep": 1}', count=3)
           + enqueue(executions, "async_record", '{"sleep": 1}', count=3))
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in ids), 10)
    # Six jobs of one second in four slots: never more than four at once.
    most = executions.value(
        "SELECT max(c) FROM (SELECT (SELECT count(*) FROM test_executions o"
        " WHERE o.started_at <= e.started_at AND o.finished_at > e.started_at) AS c"
        " FROM test_executions e) AS at_each_start")
    assert most == 4


def test_a_killed_worker_spends_exactly_the_attempts_of_its_running_jobs(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--concurrency", "6", "--lease-seconds",
                                  "60")
    running = enqueue(executions, "record", '{"sleep": 30}', count=4, max_attempts=1)
    wait_until(lambda: len(starts(executions, running)) == 4, 10)
    # The two other slots go on running short jobs beside them.
    quick = enqueue(executions, "record", count=20)
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in quick), 10)
    [pid] = {pid for pid, _ in starts(executions, running)}
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: all(state_of(executions, j) == "failed" for j in running), 10)
    assert all("killed by SIGKILL" in executions.value(
        "SELECT last_error FROM job_queue WHERE id = %s", (j,)) for j in running)
    assert set(executions_per_job(executions).values()) == {1}
    supervisor.wait_for_workers(1)


def test_a_drain_lets_every_job_in_flight_finish(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--concurrency", "6", "--drain-seconds", "20")
    ids = (enqueue(executions, "record", '{"sleep": 1.5}', count=3)
           + enqueue(executions, "async_record", '{"sleep": 1.5}', count=3))
    wait_until(lambda: len(starts(executions, ids)) == 6, 10)
    supervisor.signal(signal.SIGTERM)
    waiting = enqueue(executions, "record", count=10)
    assert supervisor.wait(20) == 0
    assert all(state_of(executions, j) == "succeeded" for j in ids)
    assert all(state_of(executions, j) == "pending" for j in waiting)
    assert executions.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 0


def test_a_sync_timeout_replaces_the_worker_after_its_other_jobs_finish(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--concurrency", "4")
    [first_pid] = supervisor.wait_for_workers(1)
    others = enqueue(executions, "record", '{"sleep": 1.5}', count=3)
    [hang] = enqueue(executions, "hang", max_attempts=1)
    wait_until(lambda: state_of(executions, hang) == "failed", 10)
    assert "timeout" in executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                                         (hang,))
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in others), 10)
    assert executions.value("SELECT max(attempts) FROM job_queue WHERE id = ANY(%s)",
                            (others,)) == 1
    wait_until(lambda: first_pid not in supervisor.wait_for_workers(1), 10)
    [after] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, after) == "succeeded", 10)


def test_an_async_timeout_cancels_the_task_and_keeps_the_worker(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--concurrency", "4")
    [pid] = supervisor.wait_for_workers(1)
    [hang] = enqueue(executions, "async_hang", max_attempts=1)
    mates = enqueue(executions, "async_record", '{"sleep": 0.2}', count=3)
    wait_until(lambda: state_of(executions, hang) == "failed", 10)
    assert "timeout" in executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                                         (hang,))
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in mates), 10)
    assert supervisor.worker_pids() == [pid]


def test_worker_kills_rerun_only_the_jobs_that_were_running(executions, start_supervisor):
    """Finished work never runs again because its worker died: after each
    SIGKILL, only jobs whose run had not finished may run a second time."""
    supervisor = start_supervisor("--workers", "2", "--concurrency", "4",
                                  "--lease-seconds", "60")
    ids = enqueue(executions, "record", '{"sleep": 0.02}', count=1600)
    kills = 0
    rng = random.Random(4)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and executions.value(
            "SELECT count(*) FROM job_queue WHERE state <> 'succeeded'") > 160:
        pids = supervisor.worker_pids()
        if len(pids) == 2:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills += 1
        time.sleep(0.4)  # deliberate: let the fleet run between kills
    wait_until(lambda: all(s == "succeeded" for s, in executions.rows(
        "SELECT state FROM job_queue")), 60, interval=0.1)
    assert kills >= 4
    per_job = executions_per_job(executions)
    assert len(per_job) == len(ids) and min(per_job.values()) == 1
    # At most the jobs running in the killed worker run again: four slots.
    repeats = sum(per_job.values()) - len(per_job)
    assert repeats <= kills * 4, (repeats, kills)
    # A run that had recorded its end can only have been in the few
    # microseconds between that and its handler returning: at most one such
    # per kill (before the ledger, every run of the last 0.2 s ran again).
    rerun_after_finishing = executions.value(
        "SELECT count(*) FROM test_executions e WHERE finished_at IS NOT NULL"
        " AND EXISTS (SELECT FROM test_executions l WHERE l.job_id = e.job_id"
        " AND l.execution_id > e.execution_id)")
    assert rerun_after_finishing <= kills, (rerun_after_finishing, kills)


def listener_of(supervisor):
    """The worker holding the listener token: its POSIX lock names its pid."""
    workers = set(supervisor.worker_pids())
    holders = {int(line.split()[4]) for line in open("/proc/locks")
               if line.split()[1] == "POSIX"}
    found = workers & holders
    return found.pop() if len(found) == 1 else None


def test_a_listener_killed_loses_no_wake_up(executions, start_supervisor):
    # A long poll: only a wake-up can start these jobs within seconds.
    supervisor = start_supervisor("--workers", "3", "--poll-seconds", "30")
    supervisor.wait_for_workers(3)
    [first] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, first) == "succeeded", 5)
    for _ in range(3):
        listener = wait_until(lambda: listener_of(supervisor), 5, message="a listener")
        os.kill(listener, signal.SIGKILL)
        # Inserted while nobody listens: the worker that takes the token over
        # claims once before it waits, and finds it.
        [job_id] = enqueue(executions, "record")
        wait_until(lambda: state_of(executions, job_id) == "succeeded", 5,
                   message="the job inserted while the listener was dead")
        assert listener not in supervisor.worker_pids()
        supervisor.wait_for_workers(3)


def test_a_fleet_busy_from_its_start_still_has_a_listener(executions, start_supervisor):
    """Without an empty claim no worker went idle, and only idle workers took
    the listener's token: a fleet started on a backlog heard no notification
    (a freed slot of a limited kind among them) until one ran dry."""
    jobs = enqueue(executions, "record", '{"sleep": 6}', count=2)
    supervisor = start_supervisor("--workers", "2", "--concurrency", "1")
    supervisor.wait_for_workers(2)
    wait_until(lambda: len(starts(executions, jobs)) == 2, 5, message="both jobs running")
    wait_until(lambda: listener_of(supervisor), 3, message="a listener among busy workers")
    assert all(state_of(executions, job_id) == "running" for job_id in jobs)


def test_a_busy_listener_hands_its_wake_ups_on(executions, start_supervisor):
    # One slot per worker and a long poll: a job the busy listener hears of
    # must reach the other worker through the kick pipe within milliseconds.
    supervisor = start_supervisor("--workers", "2", "--concurrency", "1",
                                  "--poll-seconds", "30")
    pids = supervisor.wait_for_workers(2)
    listener = wait_until(lambda: listener_of(supervisor), 5, message="a listener")
    # Both past their first look at the queue: a worker still booting would
    # claim the job below before the listener heard of it.
    wait_until(lambda: all(title_of(pid).endswith("idle") for pid in pids), 5,
               message="two idle workers")
    # In an idle fleet the listener hears a new job first and claims it itself.
    [long_job] = enqueue(executions, "record", '{"sleep": 3}')
    wait_until(lambda: starts(executions, [long_job]), 5)
    assert starts(executions, [long_job])[0][0] == listener
    [quick] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, quick) == "succeeded", 2,
               message="the job the busy listener heard of")
    pid, waited = executions.rows(
        "SELECT e.pid, extract(epoch FROM e.started_at - j.created_at) FROM test_executions e"
        " JOIN job_queue j ON j.id = e.job_id WHERE j.id = %s", (quick,))[0]
    assert pid != listener and waited < 1.0, (pid, waited)
    assert state_of(executions, long_job) == "running"
