"""End to end: real supervisors forking real workers against PostgreSQL.

Every test here starts `motir-supervisor run` as a separate process, acts on
it the way production does (signals, kills, a database restart) and checks
each job's executions in the database.
"""

import os
import signal
import time

import psycopg2
import pytest

from testbed.pgserver import ThrowawayPostgres
from tests.helpers import (EXECUTIONS_TABLE, Sql, enqueue, executions_per_job, running_job,
                           state_of, wait_until)
from tests.supervisors import (NAIVE_CLAIM_CLI, RunningSupervisor,
                               assert_sigterm_releases_at_the_deadline, title_of)


def db_now(sql):
    return sql.value("SELECT clock_timestamp()")


# -- exactly once under concurrency --------------------------------------------

#: The workers connected to the test's database, each by its own connection.
CONNECTED_WORKERS = ("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                     " AND application_name ~ '^motir-supervisor worker [0-9]+$'")


def run_two_fleets(executions, start_supervisor, entry=None, until=None):
    fleets = [start_supervisor("--workers", "4", entry=entry) for _ in range(2)]
    # The work arrives once all eight workers are connected, so both fleets
    # claim it at once however much slower one of them started.
    wait_until(lambda: executions.value(CONNECTED_WORKERS) == 8, 30, message="8 workers connected")
    enqueue(executions, "record", count=2000)
    # More work arrives while both fleets run.
    for _ in range(5):
        enqueue(executions, "record", count=200)
    wait_until(until or (lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE state NOT IN ('succeeded', 'failed')") == 0),
        120, interval=0.2, message="3000 jobs finished")
    return fleets


def test_two_supervisors_run_every_job_exactly_once(executions, start_supervisor):
    fleets = run_two_fleets(executions, start_supervisor)
    per_job = executions_per_job(executions)
    assert len(per_job) == 3000
    assert {count for count in per_job.values()} == {1}
    assert executions.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'"
                            " AND attempts = 1") == 3000
    # Both fleets took part, through several of their workers.
    claimants = executions.value("SELECT count(DISTINCT pid) FROM test_executions")
    assert claimants > 4
    for fleet in fleets:
        assert fleet.process.poll() is None


def test_negative_control_a_naive_claim_runs_jobs_twice(executions, start_supervisor):
    # The same run, watched the same way, but stopped at the first job seen
    # twice: the naive claim also puts finished rows back to running, so
    # waiting for the whole queue to empty would only make the suite slower.
    def seen_twice():
        per_job = executions_per_job(executions)
        return per_job and max(per_job.values()) > 1
    try:
        run_two_fleets(executions, start_supervisor, entry=NAIVE_CLAIM_CLI, until=seen_twice)
    except AssertionError:
        raise AssertionError("no double execution seen: the test cannot catch one") from None


# -- dying workers, dying machines ---------------------------------------------

def test_a_killed_worker_is_replaced_and_its_job_rerun_at_once(executions, start_supervisor):
    # A dead worker's job waits its kind's retry delay: the fleet's, here
    # a fifth of a second (see tests/e2e/test_kind_policies.py).
    supervisor = start_supervisor("--workers", "2", "--lease-seconds", "60",
                                  "--retry-base-seconds", "0.2")
    supervisor.wait_for_workers(2)
    [job_id] = enqueue(executions, "record", '{"sleep": 2}')
    pid, _ = wait_until(lambda: running_job(executions, job_id), 10)
    assert f"running job {job_id} record" in title_of(pid)
    killed_at = db_now(executions)
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 15)
    rerun = executions.rows("SELECT pid, started_at FROM test_executions WHERE job_id = %s"
                            " ORDER BY execution_id", (job_id,))
    assert len(rerun) == 2 and rerun[1][0] != pid
    assert (rerun[1][1] - killed_at).total_seconds() < 1.5  # far inside the 60 s lease
    assert executions.value("SELECT attempts FROM job_queue WHERE id = %s", (job_id,)) == 2
    new_pids = supervisor.wait_for_workers(2)
    assert pid not in new_pids
    assert "was killed by SIGKILL" in supervisor.output()


def test_a_lost_machine_s_jobs_come_back_when_the_lease_expires(executions, start_supervisor):
    lost = start_supervisor("--workers", "1", "--lease-seconds", "6")
    [job_id] = enqueue(executions, "record", '{"sleep": 30}')
    wait_until(lambda: running_job(executions, job_id), 10)
    # Freeze the whole tree first so that nobody can react, as when a machine vanishes.
    tree = [lost.pid, *lost.worker_pids()]
    for pid in tree:
        os.kill(pid, signal.SIGSTOP)
    for pid in tree:
        os.kill(pid, signal.SIGKILL)
    lost.wait(5)
    lease_end = executions.value("SELECT lease_expires_at FROM job_queue WHERE id = %s",
                                 (job_id,))
    executions.rows("UPDATE job_queue SET payload = '{}' WHERE id = %s", (job_id,))
    rescuer = start_supervisor("--workers", "1", "--lease-seconds", "6")
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 20)
    second_start = executions.value("SELECT max(started_at) FROM test_executions"
                                    " WHERE job_id = %s", (job_id,))
    assert second_start >= lease_end
    assert f"reaper: job {job_id} had an expired lease; now pending" in rescuer.output()


def test_a_poison_job_ends_failed_and_the_fleet_keeps_running(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "2")
    [poison] = enqueue(executions, "crash", max_attempts=3)
    wait_until(lambda: state_of(executions, poison) == "failed", 30)
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id = %s",
                            (poison,)) == 3
    assert "killed by SIGKILL" in executions.value(
        "SELECT last_error FROM job_queue WHERE id = %s", (poison,))
    healthy = enqueue(executions, "record", count=5)
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in healthy), 20)
    supervisor.wait_for_workers(2)


# -- shutdown --------------------------------------------------------------------

def test_sigterm_lets_in_flight_jobs_finish_and_starts_nothing_new(executions,
                                                                   start_supervisor):
    supervisor = start_supervisor("--workers", "3", "--drain-seconds", "20")
    in_flight = enqueue(executions, "record", '{"sleep": 1.5}', count=3)
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions") == 3, 10)
    signalled_at = db_now(executions)
    supervisor.signal(signal.SIGTERM)
    # A signal lands when the kernel next runs the supervisor, which on a
    # loaded machine can be after this test's next INSERT; once the
    # supervisor has taken it, no worker may start anything.
    wait_until(lambda: "SIGTERM: draining" in supervisor.output(), 10)
    waiting = enqueue(executions, "record", count=20)
    assert supervisor.wait(20) == 0
    assert all(state_of(executions, j) == "succeeded" for j in in_flight)
    late = executions.rows("SELECT job_id, started_at FROM test_executions"
                           " WHERE started_at > %s", (signalled_at,))
    assert not late, (late, signalled_at, supervisor.output())
    assert all(state_of(executions, j) == "pending" for j in waiting)
    assert executions.value("SELECT count(*) FROM job_queue WHERE state = 'running'") == 0
    assert not supervisor.worker_pids()


def test_a_job_longer_than_the_drain_is_released_at_the_deadline(executions,
                                                                 start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--drain-seconds", "1")
    [job_id] = enqueue(executions, "record", '{"sleep": 30}')
    wait_until(lambda: running_job(executions, job_id), 10)
    assert_sigterm_releases_at_the_deadline(supervisor, executions, job_id)
    assert executions.value("SELECT run_at <= now() FROM job_queue WHERE id = %s", (job_id,))


def test_a_drained_job_resumes_from_its_checkpoint(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--drain-seconds", "10")
    [job_id] = enqueue(executions, "steps", '{"steps": 40, "step_seconds": 0.1}')
    wait_until(lambda: running_job(executions, job_id), 10)
    # Some progress first, so that the checkpoint holds some.
    wait_until(lambda: executions.value(
        "SELECT clock_timestamp() - started_at > interval '0.5 s' FROM test_executions"
        " WHERE job_id = %s", (job_id,)), 5)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0
    saved = executions.value("SELECT checkpoint FROM job_queue WHERE id = %s", (job_id,))
    assert state_of(executions, job_id) == "pending" and 0 < saved["step"] < 40
    start_supervisor("--workers", "1")
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 20)
    resumed_from = executions.value("SELECT checkpoint FROM test_executions WHERE job_id = %s"
                                    " ORDER BY execution_id DESC LIMIT 1", (job_id,))
    assert resumed_from == saved


def test_a_second_signal_releases_at_once(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--drain-seconds", "60")
    [job_id] = enqueue(executions, "record", '{"sleep": 30}')
    wait_until(lambda: running_job(executions, job_id), 10)
    started = time.monotonic()
    supervisor.signal(signal.SIGTERM)
    # Two signals sent together would merge into one: wait until the first is seen.
    wait_until(lambda: "master draining" in title_of(supervisor.pid), 5)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(10) == 0
    assert time.monotonic() - started < 5
    assert state_of(executions, job_id) == "pending"


def test_sigquit_alone_gives_back_at_once_and_reports_its_drain(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--drain-seconds", "60")
    [done] = enqueue(executions, "record", '{"sleep": 1}')
    wait_until(lambda: state_of(executions, done) == "succeeded", 10)  # up for over a second
    [job_id] = enqueue(executions, "record", '{"sleep": 30}')
    wait_until(lambda: running_job(executions, job_id), 10)
    supervisor.signal(signal.SIGQUIT)
    assert supervisor.wait(10) == 0
    assert state_of(executions, job_id) == "pending"
    [line] = [line for line in supervisor.output().splitlines() if "drain finished in" in line]
    seconds = float(line.split("drain finished in ")[1].rstrip("s"))
    assert seconds < 1.0, line  # the drain's length, not the supervisor's age


def test_workers_stop_when_their_supervisor_is_killed(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "2", "--drain-seconds", "5")
    [job_id] = enqueue(executions, "record", '{"sleep": 1}')
    workers = supervisor.wait_for_workers(2)
    wait_until(lambda: running_job(executions, job_id), 10)
    os.kill(supervisor.pid, signal.SIGKILL)
    supervisor.wait(5)

    def all_gone():
        return not any(os.path.exists(f"/proc/{pid}") and "motir" in title_of(pid)
                       for pid in workers)
    wait_until(all_gone, 10, message="orphaned workers to exit")
    # The running job finished inside the drain rather than being abandoned.
    assert state_of(executions, job_id) == "succeeded"


def test_ttin_and_ttou_change_the_number_of_workers(executions, start_supervisor):
    supervisor = start_supervisor("--workers", "2")
    supervisor.wait_for_workers(2)
    supervisor.signal(signal.SIGTTIN)
    supervisor.wait_for_workers(3)
    # One at a time: the kernel merges identical signals that arrive together.
    supervisor.signal(signal.SIGTTOU)
    supervisor.wait_for_workers(2)
    supervisor.signal(signal.SIGTTOU)
    supervisor.wait_for_workers(1)
    assert "master running, 1/1 workers" in wait_until(
        lambda: "1/1" in title_of(supervisor.pid) and title_of(supervisor.pid), 5)


# -- configuration and the database ------------------------------------------------

def test_an_app_that_cannot_import_stops_the_supervisor_with_one_line(start_supervisor):
    missing = start_supervisor("--app", "tests.apps.no_such_module")
    assert missing.wait(10) != 0
    assert "cannot import --app module 'tests.apps.no_such_module'" in missing.output()
    broken = start_supervisor("--app", "tests.apps.broken", "--workers", "3")
    assert broken.wait(15) != 0
    lines = [line for line in broken.output().splitlines() if "tests.apps.broken" in line]
    assert lines and "RuntimeError: settings.MAIL_HOST is not set" in lines[0]
    assert "Traceback" not in broken.output()


def test_an_unreachable_database_is_one_line_without_the_password(start_supervisor, pg):
    url = "postgresql://app:hunter2-secret@127.0.0.1:1/motir"
    supervisor = start_supervisor(env={"DATABASE_URL": url})
    assert supervisor.wait(15) != 0
    output = supervisor.output()
    assert "hunter2-secret" not in output
    assert "app@127.0.0.1:1/motir" in output
    assert len([line for line in output.splitlines() if line.strip()]) == 1


def test_no_password_in_logs_or_titles(pg, database_url, sql, start_supervisor):
    # The test server trusts local connections, so any password gets in.
    url = database_url.replace("postgres@", "postgres:hunter2-secret@")
    supervisor = start_supervisor("--workers", "1", env={"DATABASE_URL": url})
    pids = supervisor.wait_for_workers(1)
    [job_id] = enqueue(sql, "nobody_handles_this", max_attempts=1)
    wait_until(lambda: state_of(sql, job_id) == "failed", 10)
    titles = [title_of(pid) for pid in [supervisor.pid, *pids]]
    assert all(t.startswith("motir-supervisor: ") for t in titles), titles
    assert all("hunter2" not in t for t in titles)
    supervisor.signal(signal.SIGTERM)
    supervisor.wait(10)
    assert "postgres@127.0.0.1" in supervisor.output()
    assert "hunter2" not in supervisor.output()


@pytest.fixture
def own_server():
    """A server of this test's own, free to be restarted."""
    with ThrowawayPostgres() as server:
        yield server


def _connected(url):
    """A connection, or None while the server still says it is starting up."""
    try:
        return Sql(url)
    except psycopg2.OperationalError:
        return None


def _cpu_ticks(pid):
    """User and system clock ticks a process has used."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return int(fields[11]) + int(fields[12])


def test_a_database_restart_loses_nothing(own_server, migrated_template):
    from motir_supervisor import db

    url = own_server.create_database("motir")
    store = db.JobStore(url)
    store.migrate()
    store.close()
    sql = Sql(url)
    sql.rows(EXECUTIONS_TABLE)
    enqueue(sql, "record", '{"sleep": 0.02}', count=400)
    supervisor = RunningSupervisor(url, "--workers", "4", "--retry-base-seconds", "0.2")
    try:
        wait_until(lambda: sql.value(
            "SELECT count(*) FROM job_queue WHERE state = 'succeeded'") > 50, 30)
        sql.close()
        own_server.executor.stop()
        # An outage, during which workers fail to reach it and hold outcomes
        # they cannot write: they wait for their next try, without spinning.
        time.sleep(0.5)
        workers = supervisor.worker_pids()
        before = {pid: _cpu_ticks(pid) for pid in workers}
        time.sleep(1.5)
        busiest = max(_cpu_ticks(pid) - before[pid] for pid in workers)
        assert busiest / os.sysconf("SC_CLK_TCK") < 0.1 * 1.5, busiest
        restarted = time.monotonic()
        own_server.executor.start()
        sql = wait_until(lambda: _connected(url), 10, message="the restarted server")
        wait_until(lambda: sql.value(
            "SELECT count(*) FROM job_queue WHERE state <> 'succeeded'") == 0, 60,
            interval=0.1, message="every job succeeded after the restart")
        recovery = time.monotonic() - restarted
        assert recovery < 30
        assert supervisor.process.poll() is None
        assert supervisor.worker_pids()
    finally:
        supervisor.stop()
        sql.close()


@pytest.mark.parametrize("code", [0, 4, 5, 6])  # 6: as a recycled worker exits
def test_a_handler_ending_its_process_spends_attempts_whatever_the_exit_code(
        executions, start_supervisor, code):
    supervisor = start_supervisor("--workers", "1")
    [job_id] = enqueue(executions, "exit_with", f'{{"code": {code}}}', max_attempts=2)
    wait_until(lambda: state_of(executions, job_id) == "failed", 20)
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id = %s",
                            (job_id,)) == 2
    assert supervisor.process.poll() is None
    # A death, whatever the code says: the supervisor trusts its own records.
    assert f"exited with code {code} after" in supervisor.output()
    [after] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, after) == "succeeded", 10)


def test_interrupted_without_a_stop_request_is_a_failed_attempt(executions, start_supervisor):
    start_supervisor("--workers", "1", "--retry-base-seconds", "0.1")
    [job_id] = enqueue(executions, "interrupt_anyway", max_attempts=2)
    wait_until(lambda: state_of(executions, job_id) == "failed", 10)
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id = %s",
                            (job_id,)) == 2


def test_a_worker_killed_by_a_nameless_signal_is_handled_like_any_death(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", "--lease-seconds", "60")
    [job_id] = enqueue(executions, "record", '{"sleep": 30}', max_attempts=1)
    pid, _ = wait_until(lambda: running_job(executions, job_id), 10)
    os.kill(pid, signal.SIGRTMIN + 6)
    wait_until(lambda: state_of(executions, job_id) == "failed", 10)
    assert "signal" in executions.value("SELECT last_error FROM job_queue WHERE id = %s",
                                        (job_id,))
    supervisor.wait_for_workers(1)
    assert supervisor.process.poll() is None


def test_jobs_batched_with_a_crashing_one_keep_their_attempts(executions, start_supervisor):
    # Fast jobs first, so that the worker's batches have grown when the
    # crashing job comes up among more fast ones.
    # Claims of 1, 8, 16, 16 and 16 jobs: the crasher is the fifth of its claim.
    first = enqueue(executions, "record", count=45)
    [crasher] = enqueue(executions, "crash", max_attempts=1)
    rest = enqueue(executions, "record", count=20)
    supervisor = start_supervisor("--workers", "1", "--concurrency", "1", "--batch-size", "16")
    wait_until(lambda: executions.value(
        "SELECT count(*) FROM job_queue WHERE state IN ('succeeded', 'failed')") == 66, 30)
    assert state_of(executions, crasher) == "failed"
    assert executions.value("SELECT max(attempts) FROM job_queue WHERE id = ANY(%s)",
                            (first + rest,)) == 1
    # The batches did grow: the crasher died holding batch-mates, unstarted or
    # finished but not yet written.
    wait_until(lambda: "released unfinished jobs" in supervisor.output()
               or "outcome written for exited worker" in supervisor.output(), 5,
               message="the supervisor settling the crasher's batch-mates")
    # And no batch-mate that had finished ran again, written or not.
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id <> %s",
                            (crasher,)) == 65


def test_a_worker_cut_off_from_the_database_stops_before_its_lease_runs_out(
        executions, start_supervisor, database_url):
    """A network partition: renewals fail, another supervisor may take the job
    over once the lease has expired, so the cut-off run must be over by then."""
    role = f"cut_off_{os.getpid()}"
    executions.rows(f"CREATE ROLE {role} LOGIN SUPERUSER")
    try:
        cut_off_url = database_url.replace("postgres@", f"{role}@")
        lonely = start_supervisor("--workers", "1", "--lease-seconds", "6",
                                  env={"DATABASE_URL": cut_off_url})
        [job_id] = enqueue(executions, "record", '{"sleep": 30}')
        pid, _ = wait_until(lambda: running_job(executions, job_id), 10)
        executions.rows(f"ALTER ROLE {role} NOLOGIN")
        executions.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE usename = %s", (role,))
        lease_end = executions.value("SELECT lease_expires_at FROM job_queue WHERE id = %s",
                                     (job_id,))
        wait_until(lambda: not os.path.exists(f"/proc/{pid}") or "worker" not in title_of(pid),
                   12, message="the cut-off worker to end its run")
        gone_at = db_now(executions)
        # The run ended before anyone could have taken the job over.
        assert gone_at < lease_end
        assert "without a renewal" in lonely.output()
        executions.rows("UPDATE job_queue SET payload = '{}' WHERE id = %s", (job_id,))
        start_supervisor("--workers", "1", "--lease-seconds", "6")
        wait_until(lambda: state_of(executions, job_id) == "succeeded", 20)
        rerun_start = executions.value("SELECT max(started_at) FROM test_executions"
                                       " WHERE job_id = %s", (job_id,))
        assert rerun_start >= gone_at
        lonely.kill()
    finally:
        executions.rows("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                        " WHERE usename = %s", (role,))
        executions.rows(f"DROP OWNED BY {role}")
        executions.rows(f"DROP ROLE {role}")


def test_each_lifecycle_line_is_logged_once(start_supervisor):
    # Buffered log lines must not cross a fork and be written again by a child.
    supervisor = start_supervisor("--workers", "3")
    supervisor.wait_for_workers(3)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(15) == 0
    output = supervisor.output()
    assert output.count("starting 3 workers") == 1
    for index in (1, 2, 3):
        assert output.count(f"worker {index} started") == 1
