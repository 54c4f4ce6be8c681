"""Where a worker's ``async def`` handlers run: one event loop in a thread
of its own, started with the first async run, so that a thousand waiting
jobs cost a thousand tasks, not a thousand threads, and a worker that runs
only ``def`` handlers keeps no loop (nor imports asyncio, which a fleet of
plain handlers would otherwise wait for before its first job).

The executor starts each async run here and is told when it ends; each run
is a task awaiting :func:`.running.call_async`, which applies its kind's
``timeout`` and times the steps of a handler that blocks the loop.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from .. import registry
from . import running
from .claims import Run

if TYPE_CHECKING:
    import asyncio


class EventLoop:
    def __init__(self, begin: Callable[[Run], registry.Job],
                 finish: Callable[[Run, BaseException | None, Any], object]):
        self._begin = begin
        self._ended: Callable[[Run, BaseException | None], object] = (
            lambda run, error: finish(run, error, None))
        #: Set by the loop's own thread before it signals the starter, never
        #: changed after; the starter is the executor, under its lock.
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, run: Run) -> None:
        """Start an async run's task (any thread)."""
        loop = self._loop if self._loop is not None else self._start_loop()
        loop.call_soon_threadsafe(self._start_task, loop, run)

    def _start_loop(self) -> asyncio.AbstractEventLoop:
        import asyncio
        started = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            started.set()
            loop.run_forever()

        threading.Thread(target=serve, name="async-handlers", daemon=True).start()
        started.wait()
        assert self._loop is not None
        return self._loop

    def _start_task(self, loop: asyncio.AbstractEventLoop, run: Run) -> None:
        loop.create_task(running.call_async(run, self._begin, self._ended))
