"""Hooks: an app's own code around every run, and at a worker's start and exit.

Registered from the app module, as handlers are::

    from motir_supervisor import hooks

    @hooks.around_run
    def timed(j):
        started = time.monotonic()
        ended = yield                  # the handler runs here
        record(j.kind, ended.outcome, time.monotonic() - started)

An around hook is a generator function. What comes before its ``yield``
runs just before the handler, in the handler's own thread (or, for an
``async def`` handler, in its task), so context it sets (a contextvar, a
tracing span made current) is the handler's context too; the ``yield``
gives back a :class:`RunEnd`, and what follows runs before the run's
outcome is written. ``on_run_start``, ``on_run_end``, ``on_worker_start``
and ``on_worker_exit`` register plain callbacks.

A hook's failure is logged and costs nothing else: the run goes on (a hook
that raised before its ``yield`` is left out of that run), its outcome is
the handler's, and the worker keeps working. With no hook registered a
run pays one truth test.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from typing import Any, Callable, Generator, TypeVar

from .outcomes import Outcome
from .registry import Job

log = logging.getLogger(__name__)

AroundRun = Callable[[Job], Generator[None, "RunEnd", None]]
F = TypeVar("F", bound=Callable[..., Any])

#: How a run ended, as RunEnd.outcome says it (members of Outcome, each
#: equal to its word: ``ended.outcome == "failed"``).
SUCCEEDED = Outcome.SUCCEEDED
RETRIED = Outcome.RETRIED
FAILED = Outcome.FAILED
SNOOZED = Outcome.SNOOZED
INTERRUPTED = Outcome.INTERRUPTED


@dataclasses.dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run ended, as its worker decided it (before it is written: a
    run whose claim was taken over meanwhile is written by nobody)."""

    #: SUCCEEDED, RETRIED (a failed attempt with attempts left), FAILED (the
    #: last attempt, or a PermanentFailure), SNOOZED or INTERRUPTED (stopped
    #: at a checkpoint by a deploy; it runs again without spending an attempt).
    outcome: Outcome
    #: What the handler raised (a TimeoutError for a run past its kind's
    #: timeout); None when it returned.
    error: BaseException | None
    #: The handler's return value; None unless it returned.
    output: Any
    #: Seconds the handler ran.
    seconds: float
    #: The run went past its kind's timeout.
    timed_out: bool = False


_around: list[AroundRun] = []
_run_start: list[Callable[[Job], Any]] = []
_run_end: list[Callable[[Job, RunEnd], Any]] = []
_worker_start: list[Callable[[int], Any]] = []
_worker_exit: list[Callable[[int], Any]] = []

#: Whether any run hook is registered: the one test a run pays without them.
active = False


def around_run(hook: F | None = None, *, first: bool = False) -> Any:
    """Register a generator function that wraps every run of every kind;
    with ``first=True`` (``@hooks.around_run(first=True)``), outside those
    registered before it."""
    if hook is None:
        return lambda hook: around_run(hook, first=first)
    if not inspect.isgeneratorfunction(hook):
        raise TypeError(f"around_run takes a generator function (one that yields once, where"
                        f" the handler runs); {_name(hook)} is not one")
    return _add(_around, hook, first)


def on_run_start(hook: F) -> F:
    """Register ``hook(j)``, called just before each handler starts."""
    return _add(_run_start, hook)


def on_run_end(hook: F) -> F:
    """Register ``hook(j, ended)``, called as each run ends, with its RunEnd."""
    return _add(_run_end, hook)


def on_worker_start(hook: F) -> F:
    """Register ``hook(worker_number)``, called in each worker process once
    the apps are imported, before its first claim."""
    return _add(_worker_start, hook)


def on_worker_exit(hook: F) -> F:
    """Register ``hook(worker_number)``, called as a worker process exits
    (not when it is killed)."""
    return _add(_worker_exit, hook)


def _add(hooks: list[Any], hook: F, first: bool = False) -> F:
    global active
    if not callable(hook):
        raise TypeError(f"a hook is a function, got {hook!r}")
    if hook not in hooks:  # a module imported twice registers once
        hooks.insert(0 if first else len(hooks), hook)
    active = bool(_around or _run_start or _run_end)
    return hook


def clear() -> None:
    """Forget every hook (for tests)."""
    global active
    for hooks in (_around, _run_start, _run_end, _worker_start, _worker_exit):
        hooks.clear()
    active = False


class Opened:
    """A run's hooks between its start and its end: the around hooks that
    reached their ``yield``, in the order they were entered."""

    __slots__ = ("job", "around", "told")

    def __init__(self, job: Job, around: list[Generator[None, RunEnd, None]]):
        self.job = job
        self.around = around
        #: The on_run_end hooks are told of the end elsewhere (see tell_end).
        self.told = False


def enter(job: Job) -> Opened:
    """Run the hooks' parts before a handler; call in the handler's thread or task."""
    opened = []
    for hook in tuple(_around):  # a hook that registers another changes no pass under way
        try:
            generator = hook(job)
            next(generator)
        except StopIteration:
            _failed(hook, job, "returned without yielding; the handler ran without it")
            continue
        except BaseException:  # noqa: BLE001 - an app's hook, whatever it does
            _failed(hook, job, "raised before the handler; the handler ran without it",
                    exc_info=True)
            continue
        opened.append(generator)
    for start in tuple(_run_start):
        _call(start, job)
    return Opened(job, opened)


def tell_end(opened: Opened, ended: RunEnd) -> None:
    """Call the on_run_end hooks. leave() does, unless ``opened.told`` says
    they were told already: the executor sets it for a plain handler it gave
    up on at its timeout (a thread cannot be stopped), and tells them from a
    thread of their own."""
    for end in tuple(_run_end):
        _call(end, opened.job, ended)


def leave(opened: Opened, ended: RunEnd) -> None:
    """Run the hooks' parts after a handler, innermost first."""
    job = opened.job
    if not opened.told:
        tell_end(opened, ended)
    for generator in reversed(opened.around):
        try:
            generator.send(ended)
        except StopIteration:
            continue
        except BaseException:  # noqa: BLE001 - an app's hook, whatever it does
            _failed(generator, job, "raised after the handler; the run's outcome stands",
                    exc_info=True)
            continue
        try:
            generator.close()
        except BaseException:  # noqa: BLE001 - one that will not close is left as it is
            pass
        _failed(generator, job, "yielded more than once; it was closed at its second yield")


def worker_started(index: int) -> None:
    for hook in _worker_start:
        _call(hook, index)


def worker_exiting(index: int) -> None:
    for hook in _worker_exit:
        _call(hook, index)


def _call(hook: Callable[..., Any], *args: Any) -> None:
    try:
        hook(*args)
    except BaseException:  # noqa: BLE001 - an app's hook, whatever it does
        _failed(hook, args[0] if isinstance(args[0], Job) else None, "raised", exc_info=True)


def _failed(hook: Any, job: Job | None, what: str, exc_info: bool = False) -> None:
    about = f" in job {job.id} {job.kind}" if job is not None else ""
    log.error("hook %s%s %s", _name(hook), about, what, exc_info=exc_info)


def _name(hook: Any) -> str:
    code = getattr(hook, "gi_code", None)  # an around hook's generator
    if code is not None:
        return code.co_qualname
    return getattr(hook, "__qualname__", repr(hook))
