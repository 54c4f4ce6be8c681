"""Where a worker's ``async def`` handlers run: one event loop in a thread
of its own, started with the first async run, so that a thousand waiting
jobs cost a thousand tasks, not a thousand threads, and a worker that runs
only ``def`` handlers keeps no loop (nor imports asyncio, which a fleet of
plain handlers would otherwise wait for before its first job).

The executor starts each async run here and is told when it ends; a kind's
``timeout`` cancels the run's task.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from .. import registry
from .claims import Run

if TYPE_CHECKING:
    import asyncio


class EventLoop:
    def __init__(self, announce: Callable[[Run], None],
                 job_handle: Callable[[Run], registry.Job],
                 finish: Callable[[Run, BaseException | None, Any], object]):
        self._announce = announce
        self._job_handle = job_handle
        self._finish = finish
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
        loop.create_task(self._run(run))

    async def _run(self, run: Run) -> None:
        import asyncio  # imported by _start_loop already: a lookup in sys.modules
        error: BaseException | None = None
        registration = run.registration
        assert registration is not None  # only a registered kind is async
        timeout = registration.timeout
        try:
            self._announce(run)
            async with asyncio.timeout(timeout) as limit:
                await registration.handler(self._job_handle(run))
        except TimeoutError as exc:
            error = exc
            if limit.expired():
                error = TimeoutError(f"ran past the timeout of its kind ({timeout:g}s);"
                                     " its task was cancelled")
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
            error = exc
        self._finish(run, error, None)
