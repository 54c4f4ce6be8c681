"""One run of a handler, from its call to its decided outcome: the hooks'
starts, the call (a plain handler in the caller's thread, an ``async def``
one awaited step by step under its kind's timeout), what it returned kept
as output JSON, the decision, and the hooks' ends.

A worker's executor and :mod:`motir_supervisor.testing` both end runs here,
so a handler ends the same under test as in production: whatever it raises,
``SystemExit`` and ``KeyboardInterrupt`` included, is its own run's outcome.
The caller owns the rest: its threads and locks, the ledger, the slots, the
writes. Nothing here takes a lock, touches the ledger or runs SQL.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from typing import Any, Callable, Coroutine, Generator

from .. import db, hooks, outcomes, policy, registry
from ..ipc import lifecycle
from .claims import Run
from .transactions import Transactions

log = logging.getLogger(__name__)

#: A handler that holds the event loop this long in one step, without
#: awaiting, is logged: every other async job of its worker waited that
#: long. The threshold asyncio's debug mode uses for slow callbacks.
SLOW_STEP_SECONDS = 0.1


def call(run: Run, begin: Callable[[Run], registry.Job]) -> BaseException | None:
    """Run a plain handler here and now, with the handle ``begin`` makes;
    None when it returned, else what it raised."""
    try:
        handle = begin(run)
        registration = _enter(run, handle)
        result = registration.handler(handle)
        if result is not None:
            registry.refuse_awaitable(result, registration)
            keep_output(run, result)
    except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
        return exc
    return None


async def call_async(run: Run, begin: Callable[[Run], registry.Job],
                     ended: Callable[[Run, BaseException | None], object]) -> None:
    """Await an ``async def`` handler under its kind's timeout, as call()
    runs a plain one, and hand ``ended`` what it raised (None when it
    returned), so that a worker's task is this one coroutine. A handler that
    blocks the loop cannot be cancelled: each of its steps is timed, a step
    over SLOW_STEP_SECONDS is logged, and a run that ends past its timeout
    fails as a timeout whether or not it could be cancelled."""
    import asyncio  # imported by the caller's loop already: a lookup in sys.modules
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
        handle = begin(run)
        stepped = _Stepped(_enter(run, handle).handler(handle))
        async with asyncio.timeout(timeout) as limit:
            result = await stepped
        if result is not None:
            keep_output(run, result)
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
    ended(run, error)


def handle(run: Run, save_checkpoint: Callable[[Any], bool],
           transactions: Transactions | None,
           upstream: registry.Upstream | None = None) -> registry.Job:
    """The ``j`` a claimed run's handler gets: its job's values, its stop
    flag, ``j.transaction()`` through ``transactions`` (None: a
    transaction needs a worker's claim), and ``j.parents`` and ``j.batch``
    read through ``upstream``."""
    job = run.claimed
    return registry.Job(
        id=job.id, kind=job.kind, queue=job.queue, payload_json=job.payload_json,
        attempt=job.attempt, max_attempts=job.max_attempts,
        checkpoint_data=job.checkpoint_data, stopping=run.stopping,
        save_checkpoint=save_checkpoint,
        transaction=None if transactions is None else functools.partial(
            transactions.around, run),
        trace_context=job.trace_context, upstream=upstream)


def _enter(run: Run, handle: registry.Job) -> registry.Registration:
    """The hooks' starts; a kind nobody registered fails here, after them."""
    if hooks.active:
        run.opened = hooks.enter(handle)
    if run.registration is None:
        known = ", ".join(registry.registered_kinds()) or "none"
        raise LookupError(f"no handler registered for job kind {run.claimed.kind!r}"
                          f" (registered: {known})")
    return run.registration


def keep_output(run: Run, result: Any) -> None:
    """Keep what a handler returned for its output."""
    run.output = result
    run.output_json, why = outcomes.output_json(result)
    if why:
        log.warning("job %d %s returned a value output cannot store: %s; its output stays"
                    " empty", run.claimed.id, run.claimed.kind, why)


def decide(run: Run, error: BaseException | None, retry_base: float, retry_cap: float
           ) -> tuple[outcomes.Decision, BaseException | None]:
    """How a run ended, and the error that says so. A run whose success its
    transaction committed stays succeeded whatever it raised after; a plain
    run marked timed out fails as a timeout whatever it did."""
    if run.completed:
        if error is not None:
            log.warning("job %d %s raised after its transaction committed its success"
                        " (%s); it stays succeeded", run.claimed.id, run.claimed.kind,
                        outcomes.first_line(error))
        return outcomes.SUCCESS, None
    if run.timed_out and not run.is_async:  # an async run's error says it already
        error = timeout_error(run)
    if error is None:
        return outcomes.SUCCESS, None
    job = run.claimed
    return outcomes.decide(error, job.attempt, job.max_attempts, run.stopping.value,
                           retry_base, retry_cap, _policy(run)), error


def leave(run: Run, error: BaseException | None) -> None:
    """The hooks' ends, once the run is decided (``error`` as decide()
    gave it)."""
    assert run.opened is not None and run.decision is not None
    hooks.leave(run.opened, hooks.RunEnd(run.decision.outcome, error,
                                         run.output if error is None else None, run.duration,
                                         run.timed_out))


def end_at_timeout(run: Run, retry_base: float, retry_cap: float) -> hooks.RunEnd:
    """How a plain run given up at its timeout ended, for the on_run_end
    hooks: its attempt fails now, whether or not its thread ever returns."""
    job, error = run.claimed, timeout_error(run)
    decision = outcomes.decide(error, job.attempt, job.max_attempts, False, retry_base,
                               retry_cap, _policy(run))
    return hooks.RunEnd(decision.outcome, error, None, time.monotonic() - (run.started or 0.0),
                        True)


def _policy(run: Run) -> policy.Policy:
    return policy.FLEET if run.registration is None else run.registration.policy


def as_outcome(job_id: int, decision: outcomes.Decision,
               output: str | None = None) -> db.Outcome:
    """What record_outcomes writes for a run that ended with ``decision``
    (not an interrupted run: its claim goes back, unwritten)."""
    return db.Outcome(job_id, decision.error, decision.retry_in_seconds, decision.permanent,
                      decision.outcome is outcomes.Outcome.SNOOZED, output)


def timeout_error(run: Run) -> TimeoutError:
    assert run.registration is not None  # a run with a timeout has a kind
    return TimeoutError(f"ran past the timeout of its kind ({run.registration.timeout:g}s)")


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
