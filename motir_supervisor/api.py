"""Enqueueing from Python, inside the caller's transaction.

A web request that enqueues a job and then fails rolls the job back with
everything else it wrote::

    from motir_supervisor import enqueue

    with conn:  # a psycopg2 connection: commits on success, rolls back on error
        with conn.cursor() as cur:
            cur.execute("INSERT INTO reports (id) VALUES (%s)", (7,))
        enqueue(conn, "rebuild_report", {"report": 7}, unique_key="report:7")

``conn`` is whichever connection the app already holds: a psycopg2
connection, a psycopg (3) Connection, or a SQLAlchemy Session (a
``scoped_session`` too, as Flask-SQLAlchemy's ``db.session``) or
Connection over psycopg2 or psycopg. One name for all of them, told apart
by type, because each call means the same whatever the driver; on
asyncio, the same calls are :func:`async_api.enqueue_async` and
``enqueue_many_async``, a name of their own since they must be awaited.

This module checks the arguments and turns them into :class:`db.NewJob`
values; the db package runs the statements. It never commits, rolls back
or changes ``autocommit``, and holds no SQL. On a connection in
autocommit, each call is its own transaction (and the retries of a taken
unique key, see :func:`db.enqueue_jobs`, are transactions of their own).

The wake-up trigger notifies the workers when the transaction commits; a
rolled-back one wakes nobody. A unique key held by a job that another
transaction inserted and has not committed yet makes the call wait for that
transaction, as with any unique index: if it commits, its job's id is
returned; if it rolls back, the job is inserted. Two transactions taking the
same keys in opposite orders can deadlock, and PostgreSQL then aborts one of
them.
"""

from __future__ import annotations

import datetime
import inspect
import math
from typing import Any, Iterable, Literal, Mapping

from . import db

#: What a parent's failure (failed or cancelled) does to a job that waits
#: for it: "cancel" it (and so on down the graph), or "run" it anyway.
OnParentFailure = Literal["cancel", "run"]
ON_PARENT_FAILURE = ("cancel", "run")
#: Ids are bigints drawn from 1 up.
_LARGEST_ID = 2 ** 63 - 1
#: The unique index holds pending and running rows: two waiting jobs with
#: one key could not both be released (migrations/0019 refuses them too).
_WAITING_WITH_KEY = "a job that waits for others (depends_on) cannot have a unique_key"


class Enqueued(int):
    """The id of an enqueued job, which also says whether a unique key made
    the enqueue a duplicate: ``duplicate`` is true when another pending or
    running job of the queue held the key, nothing was inserted, and the id
    is that job's.

    An int, so that code written for ``enqueue(...) -> int`` keeps working
    as it is (ids stored, compared, formatted, sent as query parameters), and
    a caller that cares reads one attribute rather than calling another
    function. Arithmetic on it gives a plain int.
    """

    duplicate: bool

    def __new__(cls, job_id: int, duplicate: bool = False) -> Enqueued:
        made = super().__new__(cls, job_id)
        made.duplicate = duplicate
        return made


class _KindsQueue(str):
    """The default of ``queue``: the queue the kind's policy names, else
    'default'. A str, so that an explicit None stays a TypeError."""

    def __repr__(self) -> str:
        return "<the kind's queue>"


#: ``queue``'s default (see _KindsQueue).
KINDS_QUEUE: str = _KindsQueue()


def enqueue(conn: db.Connection, kind: str, payload: Any = None, *,
            queue: str = KINDS_QUEUE, delay: float | None = None,
            run_at: datetime.datetime | None = None, priority: int | None = None,
            unique_key: str | None = None, max_attempts: int | None = None,
            concurrency_key: str | None = None, depends_on: Iterable[int] | None = None,
            on_parent_failure: OnParentFailure = "cancel") -> Enqueued:
    """Insert one job in ``conn``'s transaction and return its id; with a
    ``unique_key`` another pending or running job of ``queue`` holds, insert
    nothing and return that job's id, its ``duplicate`` true (see
    :class:`Enqueued`).

    ``payload`` is stored as JSON (None as ``{}``). The job falls due
    ``delay`` seconds after this call, or at ``run_at`` (an aware datetime),
    or at once; ``delay`` and ``run_at`` together are a ValueError.
    ``queue`` left out, ``priority`` and ``max_attempts`` None follow the kind's
    policy (``@job``'s, as the workers wrote it to the database), else the
    fleet's: the default queue, priority 0, 25 attempts. ``concurrency_key``
    (a non-empty str) is what the kind's ``max_running_per_key`` counts by.

    ``depends_on`` (job ids) makes the job wait: it starts ``waiting``, and
    the database makes it ``pending`` in the transaction that ends the last
    of those jobs. If one of them ends failed or cancelled, the job is
    cancelled (``on_parent_failure="cancel"``, naming that parent in its
    last_error), or released all the same (``"run"``). An id of no job fails
    the statement. Such a job cannot have a ``unique_key``.

    A bad argument raises TypeError or ValueError before anything is sent, so
    the transaction stays usable. Values the schema refuses (a
    ``max_attempts`` below 1, a ``priority`` outside a smallint) fail the
    statement, and that aborts the transaction, like any failed statement:
    roll it back.
    """
    [(job_id, inserted)] = db.enqueue_jobs(conn, [_new_job(
        kind, payload, queue=queue, delay=delay, run_at=run_at, priority=priority,
        unique_key=unique_key, max_attempts=max_attempts,
        concurrency_key=concurrency_key, depends_on=depends_on,
        on_parent_failure=on_parent_failure)])
    return Enqueued(job_id, duplicate=not inserted)


def enqueue_many(conn: db.Connection, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
    """Insert many jobs in one statement, in ``conn``'s transaction; their ids
    in the order given, each an :class:`Enqueued`.

    Each job is a dict of :func:`enqueue`'s arguments (``kind``, ``payload``,
    ``queue``, ``depends_on``, ...), with the same rules. A job whose unique key an earlier
    one of the same call has gets that one's id, as it would from two calls.
    A bad job raises before anything is sent, naming its place (``jobs[3]``).
    """
    return [Enqueued(job_id, duplicate=not inserted)
            for job_id, inserted in db.enqueue_jobs(conn, _new_jobs(jobs))]


def _new_jobs(jobs: Iterable[Mapping[str, Any]]) -> list[db.NewJob]:
    """enqueue_many's jobs, checked as enqueue checks its arguments."""
    new_jobs = []
    for place, job in enumerate(jobs):
        try:
            if not isinstance(job, Mapping):
                raise TypeError(f"a job is a dict of enqueue's arguments, not"
                                f" {type(job).__name__}")
            unknown = sorted(set(job) - _ARGUMENTS)
            if unknown:
                raise TypeError(f"enqueue takes no argument {unknown[0]!r}")
            if "kind" not in job:
                raise TypeError("a job needs a kind")
            new_jobs.append(_new_job(**job))
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"jobs[{place}]: {exc}") from exc
    return new_jobs


def _new_job(kind: str, payload: Any = None, *, queue: str = KINDS_QUEUE,
             delay: float | None = None, run_at: datetime.datetime | None = None,
             priority: int | None = None, unique_key: str | None = None,
             max_attempts: int | None = None, concurrency_key: str | None = None,
             depends_on: Iterable[int] | None = None,
             on_parent_failure: OnParentFailure = "cancel") -> db.NewJob:
    # What the schema would refuse only after aborting the transaction.
    for name, value, types, what in (
            ("kind", kind, str, "a str"), ("queue", queue, str, "a str"),
            ("unique_key", unique_key, (str, type(None)), "a str or None"),
            ("concurrency_key", concurrency_key, (str, type(None)), "a str or None"),
            ("priority", priority, (int, type(None)), "an int or None"),
            ("max_attempts", max_attempts, (int, type(None)), "an int or None")):
        if not isinstance(value, types) or isinstance(value, bool):
            raise TypeError(f"{name} must be {what}, not {value!r}")
    if concurrency_key == "":
        raise ValueError("concurrency_key must not be empty: give None for no key")
    if delay is not None and run_at is not None:
        raise ValueError("give delay or run_at, not both")
    parents = job_ids("depends_on", depends_on)
    if parents and unique_key is not None:
        raise ValueError(_WAITING_WITH_KEY)
    if run_at is not None:
        if not isinstance(run_at, datetime.datetime):
            raise TypeError(f"run_at must be a datetime, not {run_at!r}")
        if run_at.utcoffset() is None:
            # PostgreSQL would read it in the session's time zone, whatever
            # the caller meant.
            raise ValueError(f"run_at must be an aware datetime (with tzinfo), not {run_at!r}")
    if delay is not None:
        if not isinstance(delay, (int, float)) or isinstance(delay, bool):
            raise TypeError(f"delay must be a number of seconds, not {delay!r}")
        if not (math.isfinite(delay) and delay >= 0):
            raise ValueError(f"delay must be a finite number of seconds >= 0, not {delay!r}")
    return db.NewJob(kind, db.encode_payload(payload), None if queue is KINDS_QUEUE else queue,
                     run_at,
                     0.0 if delay is None else float(delay), priority, unique_key, max_attempts,
                     concurrency_key, parents or None, check_on_parent_failure(on_parent_failure))


def job_ids(name: str, ids: Iterable[int] | None) -> tuple[int, ...]:
    """``ids`` as a tuple of job ids (empty for None), or TypeError or
    ValueError naming ``name``: what the schema would refuse only after
    aborting the transaction."""
    if ids is None:
        return ()
    if isinstance(ids, (str, bytes, int)) or not isinstance(ids, Iterable):
        raise TypeError(f"{name} must be a list of job ids, not {ids!r}")
    found = tuple(ids)
    for job_id in found:
        if not isinstance(job_id, int) or isinstance(job_id, bool):
            raise TypeError(f"{name} must hold job ids (int), not {job_id!r}")
        if not 1 <= job_id <= _LARGEST_ID:
            raise ValueError(f"{name} must hold job ids (1 and up), not {job_id!r}")
    return found


def check_on_parent_failure(policy: Any) -> str:
    if policy not in ON_PARENT_FAILURE or not isinstance(policy, str):
        raise ValueError(f"on_parent_failure must be 'cancel' or 'run', not {policy!r}")
    return str(policy)


#: What a dict of enqueue_many may hold.
_ARGUMENTS = frozenset(inspect.signature(_new_job).parameters)
