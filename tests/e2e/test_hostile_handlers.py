"""Whatever a handler does, it costs only its own job: a misbehaving job
runs in a worker with `--concurrency 8` beside bystander jobs, and the test
asserts the misbehaving job's outcome and last_error, that every bystander
succeeded on its first attempt, and that one worker process ran them all.

Real supervisors against PostgreSQL; the handlers are tests/apps/hostile.py's
and tests/apps/sample.py's.
"""

import json

import pytest

from tests.helpers import alive, enqueue, state_of, wait_until

HOSTILE_APP = ("--app", "tests.apps.hostile")

#: (kind, the bystanders' kind, the state it ends in, what its last_error must say)
MISBEHAVIOURS = [
    # An exception whose __str__ and __repr__ raise.
    ("hostile_unprintable", "record", "failed", ["Unprintable", "could not be rendered"]),
    # A plain handler that returns a coroutine: its body never ran.
    ("hostile_forgot_async", "record", "failed",
     ["returned coroutine without awaiting it", "async def"]),
    # An async handler that blocks the loop past its timeout: the async
    # bystanders wait for it, then finish.
    ("hostile_blocks_the_loop", "async_record", "failed",
     ["TimeoutError", "timeout of its kind (1s)", "held the event loop for 2.", "could not be"]),
    # Forks, and the child returns from the handler too: the child ends
    # there, and the worker writes the one success.
    ("hostile_forks", "record", "succeeded", []),
    # Changes the process's working directory.
    ("hostile_chdir", "record", "succeeded", []),
    # Tries to change a signal's disposition: only the main thread may.
    ("hostile_signal", "record", "failed", ["ValueError", "main thread"]),
    # Recurses without end.
    ("hostile_recursion", "record", "failed", ["RecursionError"]),
    # Leaves an object whose finalizer raises.
    ("hostile_del", "record", "succeeded", []),
]


@pytest.mark.parametrize("kind, bystander, ends, says", MISBEHAVIOURS,
                         ids=[m[0] for m in MISBEHAVIOURS])
def test_a_misbehaving_handler_costs_only_its_own_job(executions, start_supervisor, kind,
                                                      bystander, ends, says):
    supervisor = start_supervisor("--workers", "1", "--concurrency", "8", *HOSTILE_APP)
    bystanders = enqueue(executions, bystander, '{"sleep": 0.5}', count=6)
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions") == 6, 10)
    [hostile] = enqueue(executions, kind, max_attempts=1)
    wait_until(lambda: state_of(executions, hostile) == ends, 10)
    error = executions.value("SELECT last_error FROM job_queue WHERE id = %s", (hostile,))
    assert all(words in (error or "") for words in says), error
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in bystanders), 10)
    attempts = executions.rows("SELECT attempts FROM job_queue WHERE id = ANY(%s)", (bystanders,))
    assert {a for (a,) in attempts} == {1}
    # One process ran every job, and is still the supervisor's worker.
    pids = {pid for (pid,) in executions.rows("SELECT pid FROM test_executions")}
    assert len(pids) == 1 and pids == set(supervisor.worker_pids()), (pids, supervisor.output())
    assert "exited with code" not in supervisor.output()


def test_a_coroutine_a_plain_handler_returned_is_closed(executions, start_supervisor):
    """Closed, not left for the garbage collector to warn about: the worker's
    log says nothing of a coroutine never awaited."""
    supervisor = start_supervisor("--workers", "1", "--concurrency", "1", *HOSTILE_APP)
    [job_id] = enqueue(executions, "hostile_forgot_async", max_attempts=1)
    wait_until(lambda: state_of(executions, job_id) == "failed", 10)
    # The next job of the one slot starts after the coroutine was let go.
    [after] = enqueue(executions, "record")
    wait_until(lambda: state_of(executions, after) == "succeeded", 10)
    wait_until(lambda: f"job {after} record" in supervisor.output(), 10)
    assert "never awaited" not in supervisor.output()


def test_a_generator_handler_is_refused_when_its_app_is_imported(start_supervisor):
    supervisor = start_supervisor("--app", "tests.apps.generator_handler")
    assert supervisor.wait(15) != 0
    lines = [line for line in supervisor.output().splitlines()
             if "tests.apps.generator_handler" in line]
    assert lines and "'yields_by_mistake'" in lines[0] and "generator function" in lines[0]
    assert "Traceback" not in supervisor.output()


def test_an_async_handler_that_holds_the_loop_is_logged_with_its_kind_and_id(
        executions, start_supervisor):
    supervisor = start_supervisor("--workers", "1", *HOSTILE_APP)
    [slow] = enqueue(executions, "hostile_slow_step")
    [quick] = enqueue(executions, "async_record")
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in (slow, quick)), 10)
    line = wait_until(lambda: next((line for line in supervisor.output().splitlines()
                                    if "held the event loop" in line), None), 5)
    assert f"job {slow} hostile_slow_step held the event loop for 0.3" in line
    assert f"job {quick} " not in line


@pytest.mark.parametrize("kind", ["hostile_forks", "hostile_forks_async"])
def test_a_process_a_handler_forks_ends_where_it_returns_from_the_handler(
        executions, start_supervisor, tmp_path, kind):
    """Its ledger, connection and claims are the worker's: a second copy of
    the worker must not live on, nor run anything."""
    start_supervisor("--workers", "1", "--concurrency", "8", *HOSTILE_APP)
    pid_file = tmp_path / "child"
    [job_id] = enqueue(executions, kind, json.dumps({"pid_file": str(pid_file)}),
                       max_attempts=1)
    wait_until(lambda: state_of(executions, job_id) == "succeeded", 10)
    child = int(wait_until(lambda: pid_file.exists() and pid_file.read_text(), 5))
    wait_until(lambda: not alive(child), 5, message=f"the forked process {child} to end")
    later = enqueue(executions, "record", count=8)
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in later), 10)
    assert executions.value("SELECT count(*) FROM test_executions WHERE job_id = %s",
                            (job_id,)) == 1


def test_a_handler_that_closes_fds_1_and_2_leaves_the_worker_s_log_alone(
        executions, start_supervisor):
    """The worker logs to its own duplicates of fds 1 and 2: after a handler
    closed them and connections took their numbers, its lines still reach
    the supervisor's output, and none go into those connections."""
    supervisor = start_supervisor("--workers", "1", "--concurrency", "8", *HOSTILE_APP)
    [hostile] = enqueue(executions, "hostile_closes_stdio", max_attempts=1)
    wait_until(lambda: state_of(executions, hostile) == "succeeded", 10)
    later = enqueue(executions, "record", count=5, max_attempts=5)
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in later), 10)
    wait_until(lambda: all(f"job {j} record attempt 1/5 succeeded" in supervisor.output()
                           for j in later), 5, message="the later jobs' log lines")
    pids = {pid for (pid,) in executions.rows("SELECT pid FROM test_executions")}
    assert pids == set(supervisor.worker_pids())


@pytest.mark.parametrize("kind, says", [("hostile_killed_by_the_kernel", "killed by SIGKILL"),
                                        ("hostile_exits", "exited with code 0")])
def test_a_handler_that_ends_its_process_spends_only_the_attempts_that_ran(
        executions, start_supervisor, kind, says):
    """The process is gone (the OOM killer, os._exit): the jobs that were
    running beside it spend an attempt too (any of them could have been the
    cause), and run again; a new worker takes over."""
    supervisor = start_supervisor("--workers", "1", "--concurrency", "8", *HOSTILE_APP)
    [first_worker] = supervisor.wait_for_workers(1)
    bystanders = enqueue(executions, "record", '{"sleep": 1}', count=4)
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions") == 4, 10)
    [hostile] = enqueue(executions, kind, max_attempts=1)
    wait_until(lambda: state_of(executions, hostile) == "failed", 10)
    error = executions.value("SELECT last_error FROM job_queue WHERE id = %s", (hostile,))
    assert says in error, error
    wait_until(lambda: all(state_of(executions, j) == "succeeded" for j in bystanders), 15)
    attempts = executions.rows("SELECT attempts FROM job_queue WHERE id = ANY(%s)", (bystanders,))
    assert {a for (a,) in attempts} == {2}  # one spent by the killed process, one that ran
    [second_worker] = supervisor.wait_for_workers(1)
    assert second_worker != first_worker


@pytest.mark.parametrize("kind", ["helper_exits", "helper_exits_async",
                                  "helper_keyboard_interrupt"])
def test_a_handler_raising_system_exit_ends_as_testing_run_job_says(
        executions, start_supervisor, kind):
    """SystemExit and KeyboardInterrupt from a handler are its failed
    attempt, in a worker as under testing.run_job: the same outcome, the
    same error, and the worker goes on."""
    from motir_supervisor import testing
    from tests.apps import handlers_under_test  # noqa: F401 - registers the kinds

    supervisor = start_supervisor("--workers", "1", "--concurrency", "2",
                                  "--app", "tests.apps.handlers_under_test")
    [worker] = supervisor.wait_for_workers(1)
    [job_id] = enqueue(executions, kind, max_attempts=1)
    wait_until(lambda: state_of(executions, job_id) == "failed", 10)
    error = executions.value("SELECT last_error FROM job_queue WHERE id = %s", (job_id,))
    under_test = testing.run_job(kind, max_attempts=1)
    assert under_test.outcome == "failed"
    assert under_test.error.splitlines()[0] == error.splitlines()[0], (under_test.error, error)
    [after] = enqueue(executions, "helper_ok")
    wait_until(lambda: state_of(executions, after) == "succeeded", 10)
    assert supervisor.worker_pids() == [worker]
    assert "exited with code" not in supervisor.output()


def test_a_job_started_behind_a_blocked_loop_is_not_charged_for_the_wait(
        executions, start_supervisor):
    """Its timeout counts from its own first step, as asyncio's does: jobs
    handed to the loop while another handler held it are not timed out."""
    start_supervisor("--workers", "1", "--concurrency", "8", *HOSTILE_APP)
    [blocker] = enqueue(executions, "hostile_blocks_the_loop", max_attempts=1)
    wait_until(lambda: executions.value("SELECT count(*) FROM test_executions") == 1, 10)
    quick = enqueue(executions, "quick_async_with_timeout", count=4, max_attempts=1)
    wait_until(lambda: state_of(executions, blocker) == "failed", 10)
    wait_until(lambda: all(state_of(executions, j) in ("succeeded", "failed") for j in quick), 10)
    assert {state_of(executions, j) for j in quick} == {"succeeded"}
