"""Handlers tests/unit/test_testing.py and tests/integration/test_testing.py
run through motir_supervisor.testing: no database of their own, so what
they did is kept in RUNS."""

import asyncio
import time

from motir_supervisor import Interrupted, PermanentFailure, Snooze, job

#: (kind, job id, attempt) of every run, in order.
RUNS = []


def _note(j):
    RUNS.append((j.kind, j.id, j.attempt))


@job("helper_ok")
def ok(j):
    _note(j)
    return j.payload


@job("helper_flaky", max_attempts=5)
def flaky(j):
    """Fails until payload.succeed_on_attempt."""
    _note(j)
    if j.attempt < j.payload["succeed_on_attempt"]:
        raise RuntimeError(f"flaky on attempt {j.attempt}")


@job("helper_permanent")
def permanent(j):
    _note(j)
    raise PermanentFailure("bad input")


@job("helper_snooze")
def snooze(j):
    _note(j)
    raise Snooze(j.payload["seconds"])


@job("helper_steps")
def steps(j):
    """Saves a checkpoint per step; stops at a checkpoint when asked to."""
    _note(j)
    done = (j.checkpoint_data or {}).get("step", 0)
    while done < j.payload["steps"]:
        done += 1
        j.checkpoint({"step": done})
        if j.stopping:
            raise Interrupted()


@job("helper_async")
async def async_handler(j):
    _note(j)
    await asyncio.sleep(0)
    if j.payload.get("fail"):
        raise ValueError("async boom")
    return j.payload.get("value")


@job("helper_interrupt_anyway")
def interrupt_anyway(j):
    """Raises Interrupted although nobody asked it to stop."""
    _note(j)
    raise Interrupted()


@job("helper_limited", max_running=1)
def limited(j):
    """A kind of the limited lane, claimed by claim_limited_jobs."""
    _note(j)


async def _noted(j):
    _note(j)


@job("helper_forgot_async")
def forgot_async(j):
    return _noted(j)  # meant to be `async def`: the coroutine is never awaited


@job("helper_exits")
def exits(j):
    """Raises SystemExit, as a library's sys.exit() in a handler does."""
    _note(j)
    raise SystemExit(3)


@job("helper_exits_async")
async def exits_async(j):
    _note(j)
    raise SystemExit(3)


@job("helper_keyboard_interrupt")
def keyboard_interrupt(j):
    _note(j)
    raise KeyboardInterrupt()


@job("helper_overruns", timeout=0.05)
def overruns(j):
    """Returns, but only after its kind's timeout."""
    _note(j)
    time.sleep(0.1)
    return "late"


@job("helper_overruns_async", timeout=0.05)
async def overruns_async(j):
    _note(j)
    await asyncio.sleep(5)


@job("helper_reads_upstream")
def reads_upstream(j):
    """Returns what it read of the jobs before it, twice (the second read is kept)."""
    _note(j)
    read = [[p.id, p.step, p.kind, p.state, p.output] for p in j.parents]
    assert j.parents is j.parents
    found = j.batch
    return {"parents": read,
            "batch": None if found is None else [found.id, found.name, found.total,
                                                 found.counts["succeeded"]]}
