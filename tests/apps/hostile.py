"""Handlers that misbehave, for tests/e2e/test_hostile_handlers.py. Each
records its start in test_executions (see tests/apps/sample.py, whose
bystander kinds run beside them), so a test can tell which process ran it."""

import asyncio
import time

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
