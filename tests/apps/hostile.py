"""Handlers that misbehave, for tests/e2e/test_hostile_handlers.py. Each
records its start in test_executions (see tests/apps/sample.py, whose
bystander kinds run beside them), so a test can tell which process ran it."""

import asyncio
import os
import signal
import time

import psycopg2

from motir_supervisor import job
from tests.apps.sample import _record_start


class Unprintable(Exception):
    """A library's exception with a bug: it cannot say what went wrong."""

    def __str__(self):
        raise TypeError("__str__ broke")

    def __repr__(self):
        raise TypeError("__repr__ broke")


@job("hostile_unprintable")
def unprintable(j):
    _record_start(j)
    raise Unprintable()


async def _work():
    await asyncio.sleep(0)


@job("hostile_forgot_async")
def forgot_async(j):
    _record_start(j)
    return _work()  # meant to be `async def`: the coroutine is never awaited


@job("hostile_blocks_the_loop", timeout=1)
async def blocks_the_loop(j):
    _record_start(j)
    time.sleep(2)  # a synchronous call in an async handler: no cancellation reaches it


@job("hostile_slow_step")
async def slow_step(j):
    _record_start(j)
    time.sleep(0.3)


@job("hostile_forks")
def forks(j):
    """Forks, and both processes return from the handler: the child must
    never act as the worker (its ledger and connection are the worker's)."""
    _record_start(j)
    child = os.fork()
    if child and j.payload.get("pid_file"):
        with open(j.payload["pid_file"], "w") as file:
            file.write(str(child))


@job("hostile_chdir")
def changes_directory(j):
    _record_start(j)
    os.chdir("/")


@job("hostile_signal")
def changes_a_signal(j):
    _record_start(j)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only the main thread may


@job("hostile_recursion")
def recurses(j):
    _record_start(j)

    def down(n):
        return down(n + 1) + 1
    down(0)


class _BadFinalizer:
    def __del__(self):
        raise RuntimeError("__del__ broke")


@job("hostile_del")
def raises_in_del(j):
    _record_start(j)
    _BadFinalizer()


@job("hostile_forks_async")
async def forks_async(j):
    forks(j)
    await asyncio.sleep(0)


@job("hostile_closes_stdio")
def closes_stdio(j):
    """Closes fds 1 and 2, then opens connections, which take those numbers."""
    _record_start(j)
    os.close(1)
    os.close(2)
    taken = [psycopg2.connect(os.environ["DATABASE_URL"]) for _ in range(2)]
    assert sorted(conn.fileno() for conn in taken) == [1, 2], [c.fileno() for c in taken]
    _TAKEN.extend(taken)  # kept open: whatever writes to fd 1 or 2 now writes to them


_TAKEN = []


@job("hostile_killed_by_the_kernel")
def killed_by_the_kernel(j):
    """What the kernel's OOM killer does to a process that allocates until
    the machine runs out: SIGKILL, with no chance to clean up."""
    _record_start(j)
    os.kill(os.getpid(), signal.SIGKILL)


@job("hostile_exits")
def exits(j):
    """Ends its process as a library's fatal path might: os._exit, code 0."""
    _record_start(j)
    os._exit(0)


@job("quick_async_with_timeout", timeout=1)
async def quick_async_with_timeout(j):
    _record_start(j)
    await asyncio.sleep(0)
