"""The job model through real motir-supervisor processes: priorities and
unique keys on the command line, retries that never make a second holder
of a key, a snoozed job, a paused queue, and two fleets that enqueue each
scheduled instant once through worker kills and a rolling restart."""

import datetime
import os
import signal

from tests.helpers import state_of, wait_until
from tests.supervisors import cli


# -- priorities ----------------------------------------------------------------


def test_enqueue_takes_a_priority(database_url, sql):
    result = cli(database_url, "enqueue", "x", "--priority", "-3")
    assert result.returncode == 0, result.stderr
    assert sql.value("SELECT priority FROM job_queue WHERE id = %s",
                     (int(result.stdout),)) == -3


# -- unique keys ----------------------------------------------------------------


def test_enqueue_with_a_taken_key_prints_the_existing_id_and_says_so(database_url):
    first = cli(database_url, "enqueue", "x", "--unique-key", "report:7")
    again = cli(database_url, "enqueue", "x", "--unique-key", "report:7")
    assert first.returncode == again.returncode == 0, again.stderr
    assert again.stdout == first.stdout
    assert "already pending or running" in again.stderr
    assert "nothing was inserted" in again.stderr


def test_a_retry_never_makes_a_second_holder_of_a_key(database_url, sql):
    failed = sql.value("INSERT INTO job_queue (kind, unique_key, state, finished_at)"
                       " VALUES ('x', 'k', 'failed', now()) RETURNING id")
    holder = sql.value("INSERT INTO job_queue (kind, unique_key) VALUES ('x', 'k') RETURNING id")
    result = cli(database_url, "retry", str(failed))
    assert result.returncode == 1
    assert f"job {holder} holds its unique key" in result.stderr
    result = cli(database_url, "retry", "--kind", "x")
    assert result.returncode == 0, result.stderr
    assert "0 failed x jobs are pending again" in result.stdout
    assert state_of(sql, failed) == "failed"
    # Several failed jobs with one free key: the newest alone is retried.
    sql.rows("UPDATE job_queue SET state = 'failed', finished_at = now() WHERE id = %s",
             (holder,))
    result = cli(database_url, "retry", "--kind", "x")
    assert "1 failed x jobs are pending again" in result.stdout, result.stderr
    assert sql.rows("SELECT id, state FROM job_queue ORDER BY id") == [
        (failed, "failed"), (holder, "pending")]


# -- snooze -----------------------------------------------------------------------


def test_a_snoozed_job_comes_back_later_without_spending_an_attempt(executions,
                                                                    start_supervisor):
    supervisor = start_supervisor("--workers", "1")
    job_id = executions.value(
        "INSERT INTO job_queue (kind, payload, max_attempts)"
        " VALUES ('snooze', '{\"seconds\": 0.3, \"times\": 2}', 1) RETURNING id")
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 15)
    runs = executions.rows("SELECT attempt, started_at FROM test_executions"
                           " WHERE job_id = %s ORDER BY started_at", (job_id,))
    # Three runs of a job allowed one attempt: the snoozes spent none.
    assert [attempt for attempt, _ in runs] == [1, 1, 1]
    assert executions.value("SELECT attempts FROM job_queue WHERE id = %s", (job_id,)) == 1
    gaps = [(b - a).total_seconds() for (_, a), (_, b) in zip(runs, runs[1:])]
    assert min(gaps) >= 0.3, gaps
    assert supervisor.output().count(f"job {job_id} snooze attempt 1/1 snoozed") == 2


# -- pause and resume --------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_until_resumed(database_url, executions,
                                                     start_supervisor):
    assert "is paused" in cli(database_url, "pause", "reports").stdout
    assert "paused already" in cli(database_url, "pause", "reports").stdout
    # A long poll: only the resume's wake-up can start the paused job soon.
    start_supervisor("--workers", "2", "--poll-seconds", "30")
    held = executions.value("INSERT INTO job_queue (kind, queue) VALUES ('record', 'reports')"
                            " RETURNING id")
    other = executions.value("INSERT INTO job_queue (kind) VALUES ('record') RETURNING id")
    wait_until(lambda: state_of(executions, other) == "succeeded", 10)
    assert state_of(executions, held) == "pending"
    assert "paused queues: reports" in cli(database_url, "status").stdout
    assert "running again" in cli(database_url, "resume", "reports").stdout
    wait_until(lambda: state_of(executions, held) == "succeeded", 5)
    assert "was not paused" in cli(database_url, "resume", "reports").stdout
    assert "paused queues: none" in cli(database_url, "status").stdout


# -- periodic jobs --------------------------------------------------------------


def test_two_fleets_enqueue_every_instant_once_through_kills_and_a_restart(
        database_url, executions, start_supervisor):
    options = ("--workers", "2", "--concurrency", "2", "--app", "tests.apps.scheduled")
    first = start_supervisor(*options)
    second = start_supervisor(*options)
    first.wait_for_workers(2)
    second.wait_for_workers(2)

    def ticks():
        return executions.value("SELECT count(*) FROM job_queue WHERE kind = 'tick'"
                                " AND state = 'succeeded'")
    wait_until(lambda: ticks() >= 2, 10, message="two ticks")
    for pid in first.worker_pids():  # whichever of them schedules
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: ticks() >= 4, 10, message="ticks after the kills")
    third = start_supervisor(*options)  # a rolling restart of the second fleet
    third.wait_for_workers(2)
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0
    wait_until(lambda: ticks() >= 6, 10, message="ticks after the restart")
    instants = [datetime.datetime.fromisoformat(text) for text, in executions.rows(
        "SELECT payload ->> 'scheduled_for' FROM job_queue WHERE kind = 'tick'"
        " ORDER BY 1")]
    assert len(instants) == len(set(instants)), instants
    # Each instant at most once, and none skipped but when both fleets'
    # schedulers were away at once (a start-up on a busy machine): then the
    # next look enqueues the latest one missed.
    gaps = [(b - a).total_seconds() for a, b in zip(instants, instants[1:])]
    assert set(gaps) <= {1.0, 2.0} and gaps.count(2.0) <= 1, instants
    assert "tick" in cli(database_url, "status").stdout
