"""Where a worker's ``async def`` handlers run: one event loop in a thread
of its own, started with the first async run, so that a thousand waiting
jobs cost a thousand tasks, not a thousand threads, and a worker that runs
only ``def`` handlers keeps no loop (nor imports asyncio, which a fleet of
plain handlers would otherwise wait for before its first job).

The executor starts each async run here and is told when it ends; a kind's
``timeout`` cancels the run's task. A handler that blocks the loop (a
``time.sleep``, a synchronous client, a long computation) cannot be
cancelled, and stalls every other async job of its worker meanwhile: each
step of a handler is timed, a step over SLOW_STEP_SECONDS is logged with
the job's kind and id, and a run that ends past its timeout fails as a
timeout whether or not it could be cancelled.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Coroutine, Generator

from .. import registry
from ..ipc import lifecycle
from .claims import Run

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger(__name__)

#: A handler that holds the loop this long in one step, without awaiting,
#: is logged: every other async job of its worker waited that long. The
#: threshold asyncio's debug mode uses for slow callbacks.
SLOW_STEP_SECONDS = 0.1


class _Stepped:
    """Awaits a handler's coroutine one step at a time and times each step:
    how long the handler held the loop before it next awaited something.
    Only the loop's thread touches it."""

    __slots__ = ("coro", "longest")

    def __init__(self, coro: Coroutine[Any, Any, Any]):
        self.coro = coro
        #: The longest step so far, in seconds.
        self.longest = 0.0

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self.coro
        value: Any = None
        thrown: BaseException | None = None
        while True:
            started = time.perf_counter()
            try:
                yielded = coro.send(value) if thrown is None else coro.throw(thrown)
            except StopIteration as done:
                return done.value
            finally:
                if lifecycle.forked_by_handler:
                    os._exit(0)  # a copy a handler forked: see watch_for_handler_forks
                held = time.perf_counter() - started
                if held > self.longest:
                    self.longest = held
            try:
                value, thrown = (yield yielded), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - a cancellation, passed on
                value, thrown = None, exc


class EventLoop:
    def __init__(self, begin: Callable[[Run], registry.Job],
                 returned: Callable[[Run, Any], None],
                 finish: Callable[[Run, BaseException | None, Any], object]):
        self._begin = begin
        self._returned = returned
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
        stepped = None
        limit = None
        # From the task's first step, as asyncio.timeout counts: a task that
        # waited for a blocked loop to start it is not charged for the wait.
        begun = time.monotonic()
        try:
            stepped = _Stepped(registration.handler(self._begin(run)))
            async with asyncio.timeout(timeout) as limit:
                result = await stepped
            if result is not None:
                self._returned(run, result)
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
            error = exc
        held = 0.0 if stepped is None else stepped.longest
        if held > SLOW_STEP_SECONDS:
            log.warning("job %d %s held the event loop for %.3fs without awaiting; every other"
                        " async job of this worker waited meanwhile", run.claimed.id,
                        run.claimed.kind, held)
        if timeout is not None and limit is not None:
            run.timed_out = limit.expired() or time.monotonic() - begun > timeout
            if limit.expired():
                error = TimeoutError(f"ran past the timeout of its kind ({timeout:g}s);"
                                     " its task was cancelled")
            elif time.monotonic() - begun > timeout:
                # It blocked the loop past its deadline: no cancellation could
                # reach it, and whatever it did after its time does not count.
                error = TimeoutError(f"ran past the timeout of its kind ({timeout:g}s): it"
                                     f" held the event loop for {held:.3f}s without awaiting,"
                                     " so it could not be cancelled")
        self._finish(run, error, None)
