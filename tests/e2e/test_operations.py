"""What an operator uses, through real motir-supervisor processes: the web
process's health and queue metrics, the fleet's metrics summed over its
workers, the admin commands (migrate, enqueue, status, retry, cancel,
prune), cancelling a running job, poll-only mode and JSON logs."""

import json
import os
import signal
import subprocess
import urllib.error
import sys
import urllib.request
from pathlib import Path

import port_for
import pytest

from tests.helpers import ROOT, metric, state_of, wait_until
from tests.supervisors import CLI, cli


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return None, ""


@pytest.fixture
def web(database_url):
    port = port_for.select_random()
    process = subprocess.Popen([*CLI, "web", "--port", str(port), "--host", "127.0.0.1"],
                               env={**os.environ, "DATABASE_URL": database_url},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    wait_until(lambda: fetch(base + "/healthz")[0], 10, message="web to listen")
    yield base
    process.send_signal(signal.SIGTERM)
    process.wait(10)


def test_web_reports_health_and_queue_metrics(web, sql):
    assert fetch(web + "/healthz") == (200, "ok\n")
    sql.rows("INSERT INTO job_queue (kind, queue) SELECT 'x', 'mail' FROM generate_series(1, 7)")
    sql.rows("INSERT INTO job_queue (kind, state, locked_by, lease_expires_at)"
             " VALUES ('x', 'running', 'gone', now() - interval '1 minute')")
    status, text = fetch(web + "/metrics")
    assert status == 200
    assert metric(text, "motir_queue_jobs", queue="mail", state="pending") == 7
    assert metric(text, "motir_queue_jobs", queue="default", state="running") == 1
    assert metric(text, "motir_queue_expired_leases") == 1
    assert metric(text, "motir_queue_oldest_due_seconds") >= 0
    assert fetch(web + "/nothing")[0] == 404


def test_web_health_fails_while_the_schema_is_behind(web, sql):
    sql.rows("DELETE FROM motir_schema_migrations"
             " WHERE version = (SELECT max(version) FROM motir_schema_migrations)")
    status, body = fetch(web + "/healthz")
    assert status == 503 and "migrate" in body


def test_the_fleet_exports_metrics_summed_over_its_workers(executions, start_supervisor):
    port = port_for.select_random()
    supervisor = start_supervisor("--workers", "2", "--concurrency", "1",
                                  "--metrics-port", str(port), "--retry-base-seconds", "60")
    executions.rows("INSERT INTO job_queue (kind) SELECT 'record' FROM generate_series(1, 30)")
    executions.rows("INSERT INTO job_queue (kind) VALUES ('fail')")
    executions.rows("INSERT INTO job_queue (kind, max_attempts) VALUES ('crash', 1)")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE attempts > 0 AND state <> 'running'") == 32, 20)
    url = f"http://127.0.0.1:{port}/metrics"

    def scraped():
        text = fetch(url)[1]
        done = metric(text, "motir_jobs_finished_total", kind="record", outcome="succeeded")
        # The kill may land between a worker's freeing a run's ledger entry
        # and counting the run, a few statements apart: that one is lost.
        return text if done is not None and done >= 29 else None
    text = wait_until(scraped, 10, message="metrics of 30 succeeded jobs")
    assert metric(text, "motir_jobs_finished_total", kind="record", outcome="succeeded") <= 30
    # Every run counts at most once, whether its worker wrote the outcome or
    # the supervisor did because the crashing job killed that worker first.
    assert (metric(text, "motir_jobs_finished_total", kind="fail", outcome="retried")
            or 0) <= 1, supervisor.output()
    assert executions.rows("SELECT state, attempts FROM job_queue WHERE kind = 'fail'") == [
        ("pending", 1)]
    assert 29 <= metric(text, "motir_job_duration_seconds_count", kind="record") <= 30
    assert metric(text, "motir_worker_restarts_total", reason="died") == 1
    assert metric(text, "motir_claims_released_total", reason="dead_worker") == 1
    # A batch-mate of the crashing job may have been given back and claimed again.
    assert metric(text, "motir_jobs_claimed_total", queue="default") >= 32
    supervisor.wait_for_workers(2)


def test_retry_cancel_and_prune_commands(database_url, sql):
    failed = sql.value("INSERT INTO job_queue (kind, state, attempts, finished_at)"
                       " VALUES ('x', 'failed', 5, now()) RETURNING id")
    pending = sql.value("INSERT INTO job_queue (kind) VALUES ('x') RETURNING id")
    done = sql.value("INSERT INTO job_queue (kind, state, finished_at)"
                     " VALUES ('x', 'succeeded', now() - interval '3 hours') RETURNING id")

    result = cli(database_url, "retry", str(failed))
    assert result.returncode == 0, result.stderr
    assert sql.rows("SELECT state, attempts FROM job_queue WHERE id = %s",
                    (failed,)) == [("pending", 0)]
    result = cli(database_url, "retry", str(pending))
    assert result.returncode == 1 and "only failed or cancelled" in result.stderr
    assert cli(database_url, "retry", "999999").stderr.strip() == "Error: no job 999999"

    assert cli(database_url, "cancel", str(pending)).returncode == 0
    assert state_of(sql, pending) == "cancelled"
    result = cli(database_url, "cancel", str(done))
    assert result.returncode == 1 and "already succeeded" in result.stderr

    sql.rows("UPDATE job_queue SET state = 'failed', finished_at = now() WHERE id = %s",
             (failed,))
    sql.rows("INSERT INTO job_queue (kind, state, finished_at) VALUES ('y', 'failed', now())")
    result = cli(database_url, "retry", "--kind", "x")
    assert result.stdout.strip() == "1 failed x jobs are pending again"

    result = cli(database_url, "prune", "--older-than", "2")
    assert result.stdout.strip() == "deleted 1 finished jobs"
    assert state_of(sql, done) is None
    assert state_of(sql, pending) == "cancelled"  # finished just now: kept


def test_failed_jobs_are_pruned_by_hand_and_by_runs_retention(database_url, sql,
                                                              start_supervisor):
    def ended(state, hours):
        return sql.value("INSERT INTO job_queue (kind, state, finished_at) VALUES"
                         " ('x', %s, now() - make_interval(hours => %s)) RETURNING id",
                         (state, hours))
    old_failed, new_failed, old_succeeded = ended("failed", 5), ended("failed", 1), ended(
        "succeeded", 5)
    result = cli(database_url, "prune", "--state", "failed", "--older-than", "2")
    assert result.stdout.strip() == "deleted 1 failed jobs"
    assert [state_of(sql, i) for i in (old_failed, new_failed, old_succeeded)] == [
        None, "failed", "succeeded"]
    result = cli(database_url, "prune", "--state", "pending", "--older-than", "2")
    assert result.returncode == 2 and "'pending' is not one of" in result.stderr

    # run's reaper deletes the failed jobs past --keep-failed-hours at its
    # first pass, and keeps the others.
    old_failed = ended("failed", 5)
    start_supervisor("--workers", "1", "--keep-failed-hours", "2")
    wait_until(lambda: state_of(sql, old_failed) is None, 15,
               message="the old failed job to be pruned")
    assert [state_of(sql, i) for i in (new_failed, old_succeeded)] == ["failed", "succeeded"]


def test_cancelling_a_running_job_stops_it(executions, start_supervisor, database_url):
    start_supervisor("--workers", "1", "--lease-seconds", "6")
    job_id = executions.value("INSERT INTO job_queue (kind, payload) VALUES"
                              " ('steps', '{\"steps\": 300, \"step_seconds\": 0.1}') RETURNING id")
    wait_until(lambda: state_of(executions, job_id) == "running", 10)
    result = cli(database_url, "cancel", str(job_id))
    assert result.returncode == 0 and "is running" in result.stdout
    # The worker renews every third of the 3 s lease and sees the request.
    wait_until(lambda: state_of(executions, job_id) == "cancelled", 5)
    assert executions.value("SELECT locked_by FROM job_queue WHERE id = %s", (job_id,)) is None


def test_poll_only_mode_still_runs_jobs(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--no-listen", "--poll-seconds", "0.2")
    supervisor.wait_for_workers(1)
    job_id = executions.value("INSERT INTO job_queue (kind) VALUES ('record') RETURNING id")
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 5)
    assert "polling only" in supervisor.output()
    assert "listening" not in supervisor.output()


def test_json_logs_are_one_object_per_line(database_url, sql, executions):
    sql.rows("INSERT INTO job_queue (kind, max_attempts) VALUES ('record', 5)")
    process = subprocess.Popen(
        [*CLI, "--log-format", "json", "--workers", "1", "--app", "tests.apps.sample"],
        env={**os.environ, "DATABASE_URL": database_url, "PYTHONPATH": str(ROOT)},
        stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wait_until(lambda: sql.value("SELECT state FROM job_queue") == "succeeded", 10)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=15)
    entries = [json.loads(line) for line in stderr.splitlines()]
    assert any("record attempt 1/5 succeeded" in e["message"] for e in entries)
    assert {"time", "level", "pid", "logger", "message"} <= set(entries[0])


def test_migrate_enqueue_and_status_commands(database_url, sql):
    assert cli(database_url, "migrate").stdout.strip() == "schema is up to date"
    result = cli(database_url, "enqueue", "send_email", "--payload", '{"to": "a@b.c"}',
                 "--delay", "60", "--queue", "mail", "--max-attempts", "3")
    job_id = int(result.stdout)
    assert sql.rows("SELECT kind, payload, queue, max_attempts, run_at > now() + interval '50 s'"
                    " FROM job_queue WHERE id = %s", (job_id,)) == [
        ("send_email", {"to": "a@b.c"}, "mail", 3, True)]
    default = int(cli(database_url, "enqueue", "x").stdout)
    assert sql.value("SELECT max_attempts FROM job_queue WHERE id = %s", (default,)) == 25
    sql.rows("INSERT INTO job_queue (kind, state, locked_by, lease_expires_at, started_at)"
             " VALUES ('report', 'running', 'host:1:ab/w1:2', now() - interval '1 s', now())")
    report = cli(database_url, "status").stdout
    assert "mail                 pending             1" in report
    assert "oldest due job: waiting" in report
    assert "report (default) attempt 0 by host:1:ab/w1:2, lease expired" in report
    assert "expired leases: 1" in report


def test_commands_report_an_unreachable_database_in_one_line():
    url = "postgresql://app:hunter2-secret@127.0.0.1:1/motir"
    for args in (["migrate"], ["status"], ["enqueue", "x"], ["cancel", "1"]):
        result = cli(url, *args)
        assert result.returncode == 1
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "hunter2" not in result.stderr and "app@127.0.0.1:1/motir" in result.stderr


def test_the_fleet_exports_each_runs_wait_from_due_to_start(executions, start_supervisor):
    port = port_for.select_random()
    start_supervisor("--workers", "1", "--metrics-port", str(port))
    executions.rows("INSERT INTO job_queue (kind, queue, run_at) VALUES"
                    " ('record', 'late', now() - interval '60 seconds'),"
                    " ('record', 'prompt', now())")
    url = f"http://127.0.0.1:{port}/metrics"

    def scraped():
        text = fetch(url)[1]
        counted = [metric(text, "motir_job_wait_seconds_count", queue=queue)
                   for queue in ("late", "prompt")]
        return text if counted == [1, 1] else None
    text = wait_until(scraped, 10, message="the waits of both runs")
    # By queue, from due to the handler's start: a minute late, and at once.
    assert 60 <= metric(text, "motir_job_wait_seconds_sum", queue="late") < 70
    assert metric(text, "motir_job_wait_seconds_sum", queue="prompt") < 5
    assert "motir_job_wait_seconds_bucket{le=\"60.0\",queue=\"late\"} 0.0" in text


def test_an_app_module_in_the_working_directory_runs_without_pythonpath(database_url, sql,
                                                                        tmp_path):
    # The console script, as a newcomer types it: `python -m` would put the
    # working directory on the path by itself.
    (tmp_path / "quickstart_jobs.py").write_text(
        "from motir_supervisor import job\n\n\n"
        "@job('greet_here')\n"
        "def greet_here(j):\n"
        "    return {'greeted': j.payload['name']}\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("motir-supervisor")), "--app", "quickstart_jobs",
         "--workers", "1"], env={**env, "DATABASE_URL": database_url}, cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        [(job_id,)] = sql.rows("INSERT INTO job_queue (kind, payload)"
                               " VALUES ('greet_here', '{\"name\": \"here\"}') RETURNING id")
        wait_until(lambda: process.poll() is not None or state_of(sql, job_id) == "succeeded",
                   15, message="the job to succeed")
        assert process.poll() is None, process.stdout.read()
        assert sql.value("SELECT output FROM job_queue WHERE id = %s", (job_id,)) == {
            "greeted": "here"}
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)
