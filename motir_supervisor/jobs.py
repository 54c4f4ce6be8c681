"""Looking at and steering jobs from Python, on a psycopg2 connection of the
caller's and in whatever transaction it has open, as :func:`.api.enqueue`
does::

    from motir_supervisor import JobState, cancel_job, find_jobs, get_job, retry_job

    job = get_job(conn, job_id)          # a JobRow, or None
    if job is not None and job.state is JobState.FAILED:
        retry_job(conn, job_id)
    for stuck in find_jobs(conn, kind="send_email", state=JobState.PENDING, limit=20):
        ...

:func:`cancel_job` and :func:`retry_job` do what the command line's ``cancel`` and
``retry`` do (the same statements, see :mod:`.db.jobs`). Nothing here
commits, rolls back or changes ``autocommit``, and nothing holds SQL: a
rolled-back transaction leaves no cancel or retry behind.
"""

from __future__ import annotations

import dataclasses
import datetime
from enum import StrEnum
from typing import Any, Iterable, Literal, Mapping

import psycopg2.extensions

from .db import jobs as db_jobs


class JobState(StrEnum):
    """Where a job stands: the ``state`` column's values. A member equals its
    word (``JobState.FAILED == "failed"``). How one run ended is an
    :class:`.outcomes.Outcome`, not a state."""

    #: Waiting for the jobs it depends on to end (see docs/workflows.md);
    #: never claimed until the database releases it.
    WAITING = "waiting"
    #: Waiting for its run_at, a worker, or a slot of its kind's limits.
    PENDING = "pending"
    #: Claimed by a worker, which holds a lease on it.
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    #: Its last attempt failed, or a handler raised PermanentFailure.
    FAILED = "failed"
    CANCELLED = "cancelled"


#: find_jobs' orders, by id: the newest jobs first, or the oldest.
Order = Literal["newest", "oldest"]


@dataclasses.dataclass(frozen=True)
class JobRow:
    """A job's row as it stood when read."""

    id: int
    kind: str
    queue: str
    state: JobState
    #: The decoded JSON payload.
    payload: Any
    #: Smaller runs first among due jobs.
    priority: int
    #: Runs started so far.
    attempts: int
    max_attempts: int
    #: Not claimed before this time.
    run_at: datetime.datetime
    created_at: datetime.datetime
    #: When its latest run started; None before the first.
    started_at: datetime.datetime | None
    #: When it succeeded, failed for good or was cancelled; None before.
    finished_at: datetime.datetime | None
    #: The latest failure, readable by a person.
    last_error: str | None
    #: A succeeded run's return value (decoded JSON), or None.
    output: Any
    #: Each failed attempt's error, oldest first, as the row keeps them; empty
    #: when it keeps none.
    errors: tuple[Mapping[str, Any], ...]
    unique_key: str | None
    concurrency_key: str | None
    #: An operator asked its running handler to stop (see cancel_job).
    cancel_requested: bool


class JobNotFound(LookupError):
    """No job has this id."""

    def __init__(self, job_id: int):
        super().__init__(f"no job {job_id}")
        self.job_id = job_id


class UniqueKeyHeld(Exception):
    """A failed or cancelled job was not retried: another pending or running
    job of its queue holds its unique key, and runs instead."""

    def __init__(self, job_id: int, holder: int):
        super().__init__(f"job {job_id} was not retried: job {holder} holds its unique key"
                         " and runs instead")
        self.job_id = job_id
        self.holder = holder


def get_job(conn: psycopg2.extensions.connection, job_id: int) -> JobRow | None:
    """The job with this id as ``conn``'s transaction sees it, or None."""
    record = db_jobs.job_by_id(_connection(conn), _job_id(job_id))
    return None if record is None else _job_row(record)


def find_jobs(conn: psycopg2.extensions.connection, *,
              kind: str | Iterable[str] | None = None,
              state: JobState | str | Iterable[JobState | str] | None = None,
              queue: str | Iterable[str] | None = None, limit: int = 100,
              order: Order = "newest") -> list[JobRow]:
    """The jobs of these kinds, in these states and queues (each one value or
    several; None for any), at most ``limit`` of them, newest or oldest first
    (by id, which follows the order they were enqueued in).

    A state that is not a :class:`JobState`, a ``limit`` below 1 or an
    unknown ``order`` raises ValueError before anything is sent. A find
    walks the jobs by id (or an index of their state) and keeps those that
    match until it has ``limit``: quick while matches are common, as slow as
    a read of the whole table when few or none match.
    """
    states = _several("state", state)
    if states is not None:
        unknown = [s for s in states if s not in _STATES]
        if unknown:
            raise ValueError(f"state must be one of {', '.join(_STATES)}, not {unknown[0]!r}")
    if not isinstance(limit, int) or isinstance(limit, bool):
        raise TypeError(f"limit must be an int, not {limit!r}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    if order not in ("newest", "oldest"):
        raise ValueError(f"order must be 'newest' or 'oldest', not {order!r}")
    records = db_jobs.find_jobs(
        _connection(conn), kinds=_several("kind", kind), states=states,
        queues=_several("queue", queue), limit=limit, newest_first=order == "newest")
    return [_job_row(record) for record in records]


def cancel_job(conn: psycopg2.extensions.connection, job_id: int) -> JobRow:
    """Cancel a job in ``conn``'s transaction; return it as the cancel left it.

    A pending or failed job is cancelled at once. A running one stays
    running with ``cancel_requested`` set: once the transaction commits, its
    worker asks the handler to stop at its next lease renewal, and the job
    ends cancelled unless it completes first. A succeeded or cancelled job
    is returned unchanged. An unknown id raises :class:`JobNotFound`.
    """
    conn = _connection(conn)
    if db_jobs.cancel_job(conn, _job_id(job_id)) is None:
        raise JobNotFound(job_id)
    return _reread(conn, job_id)


def retry_job(conn: psycopg2.extensions.connection, job_id: int) -> JobRow:
    """Retry a failed or cancelled job in ``conn``'s transaction: it is
    pending again, due now, with a fresh set of attempts. Returns the job as
    the retry left it; a pending, running or succeeded job is returned
    unchanged.

    A failed or cancelled job whose unique key another pending or running
    job of its queue holds stays as it is, and :class:`UniqueKeyHeld` names
    that job; the transaction stays usable. An unknown id raises
    :class:`JobNotFound`. A job enqueued with the same key by a transaction
    that commits while this one retries makes the statement fail on the
    unique index (``psycopg2.errors.UniqueViolation``), which aborts the
    transaction, as any failed statement does: roll it back.
    """
    conn = _connection(conn)
    found = db_jobs.retry_job(conn, _job_id(job_id))
    if found is None:
        raise JobNotFound(job_id)
    if found.key_holder is not None and found.state_before in _RETRIABLE:
        raise UniqueKeyHeld(job_id, found.key_holder)
    return _reread(conn, job_id)


_STATES = tuple(JobState)
_RETRIABLE = (JobState.FAILED, JobState.CANCELLED)


def _reread(conn: psycopg2.extensions.connection, job_id: int) -> JobRow:
    # In the caller's transaction the row is locked since the change; on an
    # autocommit connection, a prune between the two statements could take it.
    record = db_jobs.job_by_id(conn, job_id)
    if record is None:
        raise JobNotFound(job_id)
    return _job_row(record)


def _job_row(record: db_jobs.JobRecord) -> JobRow:
    # A history a client overwrote with something other than a list is none.
    errors = tuple(record.errors) if isinstance(record.errors, list) else ()
    return JobRow(**{**record._asdict(), "state": JobState(record.state), "errors": errors})


def _connection(conn: Any) -> psycopg2.extensions.connection:
    if not isinstance(conn, psycopg2.extensions.connection):
        raise TypeError(f"conn must be a psycopg2 connection, not {type(conn).__name__}")
    return conn


def _job_id(job_id: Any) -> int:
    if not isinstance(job_id, int) or isinstance(job_id, bool):
        raise TypeError(f"job_id must be an int, not {job_id!r}")
    return job_id


def _several(name: str, value: str | Iterable[str] | None) -> list[str] | None:
    """One value or several as a list; None stays None (any)."""
    if value is None:
        return None
    values = [value] if isinstance(value, str) else list(value)
    for one in values:
        if not isinstance(one, str):
            raise TypeError(f"{name} must be a str or an iterable of str, not {one!r}")
    return [str(one) for one in values]
