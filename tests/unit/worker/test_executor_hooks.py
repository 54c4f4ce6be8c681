"""worker.executor with hooks: whatever a hook does, each run ends once, its
outcome is in the ledger before its hooks end, and the worker's main thread
is never held up by them."""

import inspect
import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from motir_supervisor import db, hooks, registry
from motir_supervisor.ipc import ledger
from tests.helpers import ROOT, wait_until


@pytest.fixture(autouse=True)
def no_hooks():
    hooks.clear()
    yield
    hooks.clear()


def make(handler, timeout=None, capacity=2):
    """An executor whose runs all call ``handler``; returns it, its ledger
    and a function that makes the next run."""
    from motir_supervisor.worker.claims import Claim, Run
    from motir_supervisor.worker.executor import Executor

    registration = registry.Registration("k", handler, timeout,
                                         inspect.iscoroutinefunction(handler))
    entries = ledger.Ledger(8)
    executor = Executor(capacity, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)
    ids = iter(range(1, 10 ** 6))

    def new_run():
        job_id = next(ids)
        return Run(db.ClaimedJob(job_id, "default", "k", json.dumps(None), 1, 5, None, 0),
                   Claim(0.0, 1, 1), entries.claim(job_id), registration)
    return executor, entries, new_run


def stubborn(j):
    """Yields again, and will not be closed (`while True: try: yield`)."""
    while True:
        try:
            yield
        except GeneratorExit:
            pass


def state_of(entries, run):
    return {entry.job_id: entry.state for entry in entries.entries()}[run.claimed.id]


# The stubborn generator, dropped at last, says it ignored GeneratorExit once more.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_async_run_whose_hook_will_not_close_still_ends_and_frees_its_slot():
    hooks.around_run(stubborn)

    async def handler(j):
        return 1
    executor, _, new_run = make(handler)
    run = new_run()
    executor.submit([run])
    wait_until(lambda: run.ended, 5, message="the run to end")
    assert executor.take_finished() == [run] and not executor.running()


def test_a_sync_run_whose_hook_will_not_close_ends_and_its_thread_goes_on():
    # In a process of its own: the thread's breaking would end the process.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        from motir_supervisor import hooks
        from tests.helpers import wait_until
        from tests.unit.worker.test_executor_hooks import make, stubborn
        hooks.around_run(stubborn)
        executor, _, new_run = make(lambda j: 1)
        first, second = new_run(), new_run()
        executor.submit([first])
        wait_until(lambda: first.ended, 5)
        executor.submit([second])
        wait_until(lambda: second.ended, 5)
        print("both ended")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and "both ended" in done.stdout, done.stderr[-600:]


def test_the_outcome_is_in_the_ledger_while_the_hooks_end_and_a_drain_keeps_it():
    release = threading.Event()

    @hooks.around_run
    def slow_end(j):
        yield
        release.wait(5)
    executor, entries, new_run = make(lambda j: {"done": 1}, timeout=0.05)
    run = new_run()
    executor.submit([run])
    wait_until(lambda: run.decision is not None, 5, message="the run to be decided")
    # Decided: a worker killed now leaves its supervisor a success to write...
    assert state_of(entries, run) == ledger.SUCCEEDED
    # ...its timeout no longer applies, however long the hook takes...
    time.sleep(0.1)
    assert run.timeout_at == float("inf") and not executor.time_out(run)
    # ...and a drain's deadline does not give it back.
    executor.abandon()
    assert state_of(entries, run) == ledger.SUCCEEDED
    assert executor.has_live_runs()
    release.set()
    wait_until(lambda: run.ended, 5, message="the run to end")
    assert [entry.output for entry in entries.entries()] == ['{"done":1}']


def test_an_async_run_past_its_timeout_is_live_while_its_hooks_end():
    release = threading.Event()

    @hooks.around_run
    def slow_end(j):
        yield
        release.wait(5)

    async def handler(j):
        import asyncio
        await asyncio.sleep(5)
    executor, _, new_run = make(handler, timeout=0.05)
    run = new_run()
    executor.submit([run])
    wait_until(lambda: run.decision is not None, 5, message="the run to time out")
    assert run.timed_out and executor.has_live_runs()
    release.set()
    wait_until(lambda: run.ended, 5, message="the run to end")


def test_a_slow_on_run_end_of_a_timed_out_run_does_not_hold_up_the_main_thread():
    from motir_supervisor.worker.timeouts import Timeouts

    told, release = [], threading.Event()

    @hooks.on_run_end
    def slow_report(j, ended):
        release.wait(5)
        told.append((ended.outcome, ended.timed_out))
    stuck = threading.Event()
    executor, _, new_run = make(lambda j: stuck.wait(5), timeout=0.01)
    run = new_run()
    executor.submit([run])
    wait_until(lambda: run.started is not None, 5)
    timeouts = Timeouts(executor)
    timeouts._any = True  # the kind is not in the registry
    started = time.monotonic()
    wait_until(lambda: timeouts.time_out_runs(time.monotonic()), 5, message="the timeout")
    assert time.monotonic() - started < 1  # the hook still waits, the main thread does not
    assert executor.has_live_runs()  # the worker waits for the hook before it exits
    release.set()
    wait_until(lambda: told, 5)
    stuck.set()
    wait_until(lambda: run.ended, 5)
    # Told once: the thread that returned after the timeout tells nobody again.
    assert told == [("retried", True)]


def test_on_run_end_is_told_once_when_a_run_ends_at_its_timeout():
    """The main thread timing a run out and its thread ending it race for
    the same run, many times: whichever wins, on_run_end hears of it once."""
    from motir_supervisor.worker.timeouts import Timeouts

    told: dict[int, int] = {}

    @hooks.on_run_end
    def end(j, ended):
        told[j.id] = told.get(j.id, 0) + 1

    executor, entries, new_run = make(lambda j: time.sleep(0.001), timeout=0.001, capacity=1)
    timeouts = Timeouts(executor)
    timeouts._any = True  # the kind is not in the registry
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(300):
            run = new_run()
            executor.submit([run])
            while not run.ended:
                timeouts.time_out_runs(time.monotonic())
            for ended in executor.take_finished():
                entries.release(ended.entry)
        wait_until(lambda: len(told) == 300 and not executor.has_live_runs(), 5)
    finally:
        sys.setswitchinterval(old)
    assert set(told.values()) == {1}
