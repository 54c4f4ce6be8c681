"""The handler registry and the job handle a handler receives.

Only kinds registered here can run: a row names a kind, never code. This
module runs no SQL; saving a checkpoint goes through the callback the worker
gives the handle.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import json
import math
import threading
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol, TypeVar

from . import policy as policies

if TYPE_CHECKING:
    from .schedule import Schedule
    from .jobs import BatchProgress, Parent

Handler = Callable[["Job"], Any]
#: A handler as decorated: @job gives it back unchanged, its type too.
H = TypeVar("H", bound=Handler)


class PermanentFailure(Exception):
    """Raise from a handler to fail the job now, without the remaining retries."""


class Interrupted(Exception):
    """Raise from a handler that saw ``j.stopping`` and saved a checkpoint.

    The job goes back to pending at once without spending an attempt; its
    next run starts from ``j.checkpoint_data``.
    """


class Snooze(Exception):
    """Raise from a handler to run the job again in ``seconds`` (the job is
    waiting on something, a rate limit, another job) without spending an
    attempt: it goes back to pending, due then."""

    #: Longer would not fit a timestamp for long; a year is plenty.
    MAX_SECONDS = 366 * 24 * 3600

    def __init__(self, seconds: float) -> None:
        if (not isinstance(seconds, (int, float)) or isinstance(seconds, bool)
                or not 0 <= seconds <= self.MAX_SECONDS):
            raise ValueError(f"Snooze takes seconds from 0 to {self.MAX_SECONDS},"
                             f" got {seconds!r}")
        super().__init__(f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


@dataclasses.dataclass(frozen=True)
class Registration:
    kind: str
    handler: Handler
    #: Seconds a run may take before it is stopped and counted as a failed attempt.
    timeout: float | None
    #: An ``async def`` handler: it runs on the worker's event loop, not a thread.
    is_async: bool = False
    #: When the kind is also enqueued, read from ``@job(schedule=...)`` (see
    #: maintenance/scheduler.py); None for a kind that is only enqueued.
    schedule: "Schedule | None" = None
    #: At most this many jobs of the kind run at once in the whole fleet
    #: (the database enforces it: see claim_limited_jobs); None for no limit.
    max_running: int | None = None
    #: At most this many with one concurrency_key; None for no such limit.
    max_running_per_key: int | None = None
    #: At most this many starts (N) in any window of this many seconds (S).
    rate_limit: tuple[int, float] | None = None
    #: Its attempts, retry delays, failures not retried, default queue and
    #: priority (see policy.py); policies.FLEET for a kind that says none.
    policy: policies.Policy = policies.FLEET


_registry: dict[str, Registration] = {}
#: Held while a handle's payload is decoded or set: a handler may read it
#: from threads of its own, and all of them must get the one value.
_PAYLOAD_LOCK = threading.Lock()


def job(kind: str, *, timeout: float | None = None,
        schedule: str | int | float | None = None, tz: str | None = None,
        schedule_payload: dict[str, Any] | None = None, schedule_queue: str | None = None,
        schedule_priority: int | None = None,
        max_running: int | None = None, max_running_per_key: int | None = None,
        rate_limit: tuple[int, float] | None = None, max_attempts: int | None = None,
        retry: policies.Backoff | None = None,
        no_retry_for: tuple[type[BaseException], ...] = (), queue: str | None = None,
        priority: int | None = None) -> Callable[[H], H]:
    """Register the decorated function as the handler of ``kind``.

    >>> @job("send_email", timeout=60)
    ... def send_email(j): ...

    An ``async def`` handler runs on the worker's event loop; a plain one on
    one of the worker's handler threads. ``schedule`` (a five-field cron
    expression, or seconds) also enqueues the kind at each instant of it;
    the cron expression is read in UTC, or in the time zone ``tz`` names
    ("Europe/Paris"). Each instant's job has ``schedule_payload`` (a dict)
    with the instant added as ``"scheduled_for"``, and goes to
    ``schedule_queue`` (the kind's ``queue``, else "default") at
    ``schedule_priority`` (the kind's ``priority``, else 0). ``max_running``
    caps how many jobs of the kind run at once across every worker of every
    supervisor; ``max_running_per_key`` how many with one ``concurrency_key``
    (jobs without a key are not limited by it); ``rate_limit=(N, S)`` how
    many start in any window of S seconds (a retry is a start).

    The kind's policy, for every job of it whose row does not say otherwise
    (one a plain INSERT wrote without these columns too, see
    docs/job-model.md): ``max_attempts``; ``retry``, the delay after a
    failed attempt (a :class:`~motir_supervisor.policy.Retry`, or a
    function of the attempt returning seconds); ``no_retry_for``, exceptions
    that end the job failed at once; ``queue`` and ``priority``, where and
    in which order its jobs run.
    """
    if not kind or not isinstance(kind, str):
        raise ValueError("a job kind is a non-empty string")
    if timeout is not None and timeout <= 0:
        raise ValueError(f"timeout of {kind!r} must be positive, got {timeout!r}")
    for name, value in (("max_running", max_running),
                        ("max_running_per_key", max_running_per_key)):
        if value is not None and not _whole_at_least_one(value):
            raise ValueError(f"{name} of {kind!r} must be a whole number of at least 1,"
                             f" got {value!r}")
    if rate_limit is not None:
        if not (isinstance(rate_limit, tuple) and len(rate_limit) == 2
                and _whole_at_least_one(rate_limit[0])
                and isinstance(rate_limit[1], (int, float)) and not isinstance(rate_limit[1], bool)
                and math.isfinite(rate_limit[1]) and rate_limit[1] > 0):
            raise ValueError(f"rate_limit of {kind!r} must be (starts, seconds): a whole number"
                             f" of at least 1 and a positive number, got {rate_limit!r}")
        rate_limit = (rate_limit[0], float(rate_limit[1]))
    kind_policy = policies.check(kind, max_attempts, retry, no_retry_for, queue, priority)
    parsed = None
    if schedule is not None:
        from .schedule import Schedule
        # A bad one fails at import, naming the kind.
        parsed = Schedule.parse(
            kind, schedule, tz=tz, payload=schedule_payload,
            queue=(kind_policy.queue or "default") if schedule_queue is None else schedule_queue,
            priority=((kind_policy.priority or 0) if schedule_priority is None
                      else schedule_priority))
    else:
        about_the_schedule: dict[str, object] = {
            "tz": tz, "schedule_payload": schedule_payload, "schedule_queue": schedule_queue,
            "schedule_priority": schedule_priority}
        for name, given in about_the_schedule.items():
            if given is not None:
                raise ValueError(f"{name} of {kind!r} is for a schedule, and it has none")

    def register(handler: H) -> H:
        if inspect.isgeneratorfunction(handler) or inspect.isasyncgenfunction(handler):
            # Calling one runs none of its body: every job would succeed unrun.
            raise TypeError(f"the handler of job kind {kind!r}, {_qualname(handler)}, is a"
                            " generator function: a handler returns, it does not yield")
        existing = _registry.get(kind)
        if existing is not None and _qualname(existing.handler) != _qualname(handler):
            raise ValueError(
                f"job kind {kind!r} is already handled by {_qualname(existing.handler)}")
        _registry[kind] = Registration(kind, handler, timeout,
                                       inspect.iscoroutinefunction(handler), parsed,
                                       max_running, max_running_per_key, rate_limit,
                                       kind_policy)
        return handler

    return register


def _whole_at_least_one(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _qualname(handler: Handler) -> str:
    return f"{handler.__module__}.{handler.__qualname__}"


def refuse_awaitable(result: object, registration: Registration) -> None:
    """A plain handler's return value: a coroutine (or another awaitable)
    means the handler was meant to be ``async def``, and none of its work
    was done. Fail the run saying so; a coroutine is closed, never left to
    warn that it was not awaited."""
    if not inspect.isawaitable(result):
        return
    close = getattr(result, "close", None)
    if inspect.iscoroutine(result) and close is not None:
        close()
    raise TypeError(f"the handler of job kind {registration.kind!r},"
                    f" {_qualname(registration.handler)}, returned {type(result).__name__}"
                    " without awaiting it: declare the handler `async def` for it to run")


def registration_for(kind: str) -> Registration | None:
    return _registry.get(kind)


def registered_kinds() -> list[str]:
    return sorted(_registry)


def any_async() -> bool:
    """Whether an ``async def`` handler is registered."""
    return any(r.is_async for r in _registry.values())


def limits() -> dict[str, tuple[int | None, int | None, int | None, float | None] | None]:
    """{kind: (max_running, max_running_per_key, rate limit's starts, its
    seconds), or None for a kind without any} of every registered kind."""
    found = {}
    for kind, r in sorted(_registry.items()):
        values = (r.max_running, r.max_running_per_key, *(r.rate_limit or (None, None)))
        found[kind] = values if any(v is not None for v in values) else None
    return found


def policies_of_kinds() -> dict[str, policies.Policy]:
    """{kind: its policy} of every registered kind."""
    return {kind: r.policy for kind, r in sorted(_registry.items())}


def scheduled() -> list[Registration]:
    """The registered kinds that have a schedule."""
    return [r for _, r in sorted(_registry.items()) if r.schedule is not None]


class AppImportError(Exception):
    """An --app module could not be imported: a configuration error."""


def preload_asyncio_for(modules: tuple[str, ...] | list[str]) -> bool:
    """Import asyncio now, in the supervisor before it forks, when an --app
    module's own source mentions ``async def``: its workers then share the
    import instead of each paying for it, in CPU and memory, as it boots,
    and a fleet of plain handlers never imports it at all. Only what can be
    read without running app code is looked at: an async handler in a
    module the app imports is found by the worker at boot, which imports
    asyncio then. True if it was imported."""
    for module in modules:
        if _source_mentions_async(module):
            import asyncio  # noqa: F401 - for the workers forked from here
            return True
    return False


def _source_mentions_async(module: str) -> bool:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return False
    origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return False
    try:
        with open(origin, "rb") as source:
            return b"async def" in source.read()
    except OSError:
        return False


def import_apps(modules: tuple[str, ...] | list[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure is the app's, name it
            if isinstance(exc, KeyboardInterrupt):
                raise
            reason = " ".join(str(exc).split())
            raise AppImportError(
                f"cannot import --app module {module!r}: {type(exc).__name__}: {reason}"
            ) from None


class StopRequest(Protocol):
    """What ``j.stopping`` reads: the worker sets it, the handler only asks."""

    def is_set(self) -> bool: ...


class Upstream(Protocol):
    """What ``j.parents`` and ``j.batch`` read: the worker's reads of the
    database, or what testing.run_job was given."""

    def parents_of(self, job_id: int) -> list[Parent]: ...

    def batch_of(self, job_id: int) -> BatchProgress | None: ...


#: j.batch before it was read (None is a value: no batch).
_NOT_READ: Any = object()


class Job:
    """What a handler receives: the job's values and its drain cooperation.

    ``stopping`` turns true when the worker was asked to stop (a deploy's
    SIGTERM) or the job was taken from it; a long handler checks it, saves its
    progress with ``checkpoint(data)`` and returns. The next run of the job
    finds that progress in ``checkpoint_data``.
    """

    __slots__ = ("id", "kind", "queue", "_payload", "_payload_json", "attempt", "max_attempts",
                 "checkpoint_data", "_stopping", "_save_checkpoint", "_transaction",
                 "trace_context", "_upstream", "_parents", "_batch")

    def __init__(self, *, id: int, kind: str, queue: str, payload: Any = None, attempt: int,
                 max_attempts: int, checkpoint_data: Any, stopping: StopRequest,
                 save_checkpoint: Callable[[Any], bool], payload_json: str | None = None,
                 transaction: Callable[[], ContextManager[Any]] | None = None,
                 trace_context: Any = None, upstream: Upstream | None = None) -> None:
        self.id = id
        self.kind = kind
        self.queue = queue
        #: The payload, or (from a worker's claim) its JSON text until first
        #: read. Any of the handler's threads may read it: both fields are
        #: written under _PAYLOAD_LOCK, the value before the text is cleared.
        self._payload = payload
        self._payload_json = payload_json
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.checkpoint_data = checkpoint_data
        self._stopping = stopping
        self._save_checkpoint = save_checkpoint
        self._transaction = transaction
        #: The W3C trace context of the code that enqueued the job (the
        #: row's trace_context), or None.
        self.trace_context = trace_context
        #: Read once each, when the handler first asks (see parents, batch).
        self._upstream = upstream
        self._parents: list[Parent] | None = None
        self._batch: BatchProgress | None = _NOT_READ

    @property
    def payload(self) -> Any:
        """The job's input, decoded from the row's JSON when first read: a
        handler that never reads it (a no-op, a cache refresh named by its
        kind) never pays for the decoding, nor does the worker's main thread,
        which claims every job."""
        if self._payload_json is not None:
            with _PAYLOAD_LOCK:
                if self._payload_json is not None:  # not decoded (or set) meanwhile
                    # The value first, then the text cleared: a reader that
                    # finds no text finds the value.
                    self._payload = json.loads(self._payload_json)
                    self._payload_json = None
        return self._payload

    @payload.setter
    def payload(self, value: Any) -> None:
        with _PAYLOAD_LOCK:
            self._payload, self._payload_json = value, None

    @property
    def parents(self) -> list[Parent]:
        """The jobs this one waited for (its workflow's steps before it, its
        ``depends_on``, a batch's members), by id: each one's ``id``,
        ``step``, ``kind``, ``state`` and ``output``. Read with one query
        when first asked, then kept; a job that waited for none has none.
        The query is a round trip of the worker's: in an ``async def``
        handler, the event loop waits for it."""
        if self._parents is None:
            self._parents = [] if self._upstream is None else self._upstream.parents_of(self.id)
        return self._parents

    @property
    def batch(self) -> BatchProgress | None:
        """For a batch's ``on_success`` or ``on_complete`` job: the batch's
        ``id``, ``name`` and its members' ``counts`` by state; None for any
        other job. Read with one query when first asked, then kept."""
        if self._batch is _NOT_READ:
            self._batch = None if self._upstream is None else self._upstream.batch_of(self.id)
        return self._batch

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def checkpoint(self, data: Any) -> None:
        """Persist progress (any JSON value) in the job's row.

        Raises RuntimeError when the claim is no longer this worker's: the
        progress belongs to whoever runs the job now.
        """
        if not self._save_checkpoint(data):
            raise RuntimeError(f"job {self.id} is no longer claimed by this worker")
        self.checkpoint_data = data

    def transaction(self) -> ContextManager[Any]:
        """``with j.transaction() as conn:``, a psycopg2 connection in an open
        transaction; when the block exits cleanly, the job's success is
        written in it and it commits, the handler's writes with it. A claim
        lost meanwhile rolls everything back and raises ClaimLost; an
        exception inside rolls everything back and the run fails as usual.
        Once it committed, the job is done whatever the handler does after."""
        if self._transaction is None:
            raise RuntimeError("j.transaction() needs a job claimed by a worker; this run has"
                               " no claim to complete (testing.run_job)")
        return self._transaction()

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.kind} attempt {self.attempt}/{self.max_attempts}>"
