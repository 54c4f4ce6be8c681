"""Worker recycling (--max-jobs-per-worker, --max-worker-memory) with real
supervisors against PostgreSQL: workers are replaced without a crash, and
every job runs exactly once, here or in the replacement, never both."""

import re

from tests.helpers import enqueue, executions_per_job, running_job, state_of, wait_until
from tests.supervisors import assert_sigterm_releases_at_the_deadline, title_of

#: What the supervisor says of a worker that died or left claims behind.
CRASH_WORDS = ("settling its claims", "keep dying", "released unfinished jobs",
               "drain deadline passed")


def runs_per_pid(sql):
    return dict(sql.rows("SELECT pid, count(*) FROM test_executions GROUP BY pid"))


def recycled_lines(output):
    """{pid: reason} of the supervisor's lines for recycled workers."""
    return dict((int(pid), why) for pid, why in re.findall(
        r"worker \d+ \(pid (\d+)\) recycled (.+?); a fresh worker runs in its place", output))


def run_until_workers_recycled(sql, supervisor, count):
    """Wait for the ``count`` jobs enqueued to a supervisor of 2 workers;
    check each ran once, on its first attempt; return the runs per pid, the
    pids gone and the supervisor's log once it has said why each went."""
    wait_until(lambda: sql.value(
        "SELECT count(*) FROM job_queue WHERE state <> 'succeeded'") == 0, 60, interval=0.1,
        message=f"{count} jobs succeeded")
    assert sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'"
                     " AND attempts = 1") == count
    assert set(executions_per_job(sql).values()) == {1}
    pids = runs_per_pid(sql)
    gone = set(pids) - set(supervisor.wait_for_workers(2))
    output = wait_until(lambda: gone <= set(recycled_lines(supervisor.output()))
                        and supervisor.output(), 10, message="every gone worker recycled")
    # No crash, and nothing left to the supervisor to give back.
    assert not [word for word in CRASH_WORDS if word in output], output
    assert " ERROR " not in output and "WARNING" not in output, output
    return pids, gone, output


def test_a_leaking_worker_is_replaced_once_it_outgrows_its_limit(executions,
                                                                 start_supervisor):
    # A worker is about 25 MB after booting; 8 MB a run passes 60 MB within
    # a handful of runs, and the size is read once a second.
    supervisor = start_supervisor("--workers", "2", "--concurrency", "1",
                                  "--max-worker-memory", "60", "--app", "tests.apps.leaky")
    enqueue(executions, "leak", '{"mb": 8, "sleep": 0.1}', count=40)
    pids, gone, output = run_until_workers_recycled(executions, supervisor, 40)
    assert len(gone) >= 2, pids  # two workers could not have run 320 MB of leaks each
    for pid in gone:
        size = int(re.fullmatch(r"at (\d+) MB", recycled_lines(output)[pid]).group(1))
        assert size > 60
    assert supervisor.process.poll() is None


def test_workers_recycle_after_their_own_number_of_jobs(executions, start_supervisor):
    # One slot each, so that batches hold jobs not started yet: a recycle
    # runs those too (one that gave them back would run fewer than it
    # says), and its count is exact.
    supervisor = start_supervisor("--workers", "2", "--concurrency", "1",
                                  "--max-jobs-per-worker", "10")
    enqueue(executions, "record", count=60)
    pids, gone, output = run_until_workers_recycled(executions, supervisor, 60)
    assert len(pids) >= 6, pids  # 60 jobs at most 11 a worker
    recycled = recycled_lines(output)
    for pid in gone:
        # Each drew its own limit in 10 ± 1, and ran exactly that many.
        assert recycled[pid] == f"after {pids[pid]} jobs", (pid, pids, recycled)
        assert 9 <= pids[pid] <= 11
    assert all(count <= 11 for count in pids.values())
    # Batches of 8 for one slot: recycles began holding jobs not started yet.
    assert re.search(r"recycling after \d+ jobs; .* [1-9]\d* of them not started yet", output)


def recycling_during_a_job(sql, start_supervisor, seconds, *options):
    """One worker with a limit of one job, running one of ``seconds``:
    (the supervisor, the worker's pid, the job) once the worker recycles."""
    supervisor = start_supervisor("--workers", "1", "--max-jobs-per-worker", "1", *options)
    [old] = supervisor.wait_for_workers(1)
    [job_id] = enqueue(sql, "record", f'{{"sleep": {seconds}}}')
    wait_until(lambda: running_job(sql, job_id), 10)
    assert "worker 1 recycling after 1 job, " in wait_until(
        lambda: "recycling" in title_of(old) and title_of(old), 5)
    return supervisor, old, job_id


def test_the_replacement_claims_while_the_recycling_worker_finishes(executions,
                                                                    start_supervisor):
    supervisor, old, slow = recycling_during_a_job(executions, start_supervisor, 5,
                                                   "--poll-seconds", "30")
    [quick] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, quick) == "succeeded", 10)
    # The replacement ran it while the old worker, claiming nothing, still ran its last job.
    assert state_of(executions, slow) == "running"
    assert running_job(executions, slow)[0] == old
    assert executions.value("SELECT pid FROM test_executions WHERE job_id = %s",
                            (quick,)) != old
    wait_until(lambda: state_of(executions, slow) == "succeeded", 10)
    wait_until(lambda: old in recycled_lines(supervisor.output()), 5)
    assert old not in supervisor.wait_for_workers(1)


def test_a_sigterm_during_a_recycle_still_drains_by_the_deadline(executions,
                                                                 start_supervisor):
    supervisor, _, job_id = recycling_during_a_job(executions, start_supervisor, 30,
                                                   "--drain-seconds", "1")
    # Given back at the deadline, not waited for, and not spent.
    assert_sigterm_releases_at_the_deadline(supervisor, executions, job_id)
