"""Inserting jobs on a connection of the caller's, in whatever transaction
it is in: the Python API (:mod:`api`, :mod:`async_api`) and
``JobStore.enqueue`` all come here, so one statement (``enqueue_jobs`` in
sql/queries.sql) and one handling of unique keys serve every producer of
this package, on every driver.

:func:`enqueueing` is that handling written once, without a connection: it
yields each statement to send and is sent back what it returned.
:mod:`.drivers` runs it on psycopg2, psycopg 3 or SQLAlchemy, sync or
async; nothing here knows which.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import TYPE_CHECKING, Any, Generator, NamedTuple, Sequence

from .. import tracing
from . import drivers
from .drivers import Statement
from .rows import Result, Rows
from .statements import text_of

if TYPE_CHECKING:
    from .drivers import AsyncConnection, Connection


class NewJob(NamedTuple):
    """A job to insert, as :func:`enqueue_jobs` takes it."""

    kind: str
    #: JSON text, from :func:`encode_payload`.
    payload: str
    #: None, and for priority and max_attempts too: the kind's policy
    #: (migrations/0016), as for a plain INSERT that leaves them out.
    queue: str | None = None
    #: When it falls due; None for ``delay_seconds`` after the enqueue.
    run_at: datetime.datetime | None = None
    delay_seconds: float = 0.0
    priority: int | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    #: What the kind's max_running_per_key counts by; None for no key.
    concurrency_key: str | None = None
    #: The jobs it waits for (it starts ``waiting``); None or empty for none.
    depends_on: tuple[int, ...] | None = None
    #: What a parent's failure does to it: 'cancel' it, or 'run' it anyway.
    on_parent_failure: str = "cancel"
    #: The open batch it is a member of; None for none.
    batch_id: int | None = None


class Inserted(NamedTuple):
    """A row enqueue_jobs inserted; none for a job whose key was held."""

    id: int
    queue: str
    unique_key: str | None


class KeyHolder(NamedTuple):
    """The pending or running job holding a unique key."""

    queue: str
    unique_key: str
    id: int


_INSERTED = Rows(Inserted)
_KEY_HOLDERS = Rows(KeyHolder)

#: (queue, unique_key): a key is unique within its queue.
UniqueKey = tuple[str | None, str | None]

#: How often enqueue tries again when a unique key's holder finished between
#: the insert that found it and the look-up of its id.
UNIQUE_KEY_TRIES = 5

#: jsonb cannot hold U+0000 (text has no form for it) and refuses its escape.
#: In JSON text, \u0000 is that escape only after an even number of
#: backslashes; after an odd number its own backslash is escaped, and it is
#: plain text.
_NUL_ESCAPE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def encode_payload(payload: Any) -> str:
    """The JSON text of a job's payload ({} for None).

    Anything jsonb would refuse is refused here, before a statement is sent,
    so that a bad payload leaves the caller's transaction usable: a type JSON
    has no form for (TypeError), NaN, infinities, a cycle or U+0000
    (ValueError).
    """
    try:
        text = json.dumps({} if payload is None else payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"payload cannot be stored as JSON: {exc}") from exc
    if _NUL_ESCAPE.search(text):
        raise ValueError("payload cannot be stored as JSON: PostgreSQL's jsonb cannot hold"
                         " the character U+0000")
    return text


#: An enqueue as the statements it sends: it yields each one, is sent what
#: that one returned, and returns (job id, inserted) of each job.
Enqueueing = Generator[Statement, Result, list[tuple[int, bool]]]


def enqueue_jobs(conn: Connection, jobs: Sequence[NewJob]) -> list[tuple[int, bool]]:
    """:func:`enqueueing` of ``jobs`` run on ``conn``: a psycopg2 or psycopg
    connection, or a SQLAlchemy Session or Connection (see :mod:`.drivers`)."""
    return drivers.run(conn, enqueueing(jobs))


async def enqueue_jobs_async(conn: AsyncConnection,
                             jobs: Sequence[NewJob]) -> list[tuple[int, bool]]:
    """:func:`enqueueing` of ``jobs`` run on ``conn``, a psycopg
    AsyncConnection or a SQLAlchemy AsyncSession or AsyncConnection."""
    return await drivers.run_async(conn, enqueueing(jobs))


def enqueueing(jobs: Sequence[NewJob]) -> Enqueueing:
    """(job id, inserted) of each job, in order, inserted over the caller's
    connection in whatever transaction it is in: nothing here commits, rolls
    back or changes autocommit.

    A job whose unique key another pending or running job of its queue holds
    inserts nothing and gets that job's id; so does a job whose key an
    earlier one of ``jobs`` has (the first one's id). The jobs go in one
    statement; the holders of the keys it skipped are looked up after it, and
    a key whose holder finished in between is inserted again (at most
    UNIQUE_KEY_TRIES times in all).

    No savepoint: a skipped insert and a look-up change nothing, so a try
    needs nothing undone. An error leaves whatever this call inserted in the
    transaction, and a failed statement aborts it, as any statement's error
    does: the caller rolls back.
    """
    if not jobs:
        return []
    jobs = yield from _with_queues(jobs)
    first_of_key: dict[UniqueKey, int] = {}
    sent: list[NewJob] = []
    #: For each job, its place in ``sent`` and whether it is the one sent.
    places: list[tuple[int, bool]] = []
    for job in jobs:
        key = (job.queue, job.unique_key)
        if job.unique_key is not None and key in first_of_key:
            places.append((first_of_key[key], False))
            continue
        if job.unique_key is not None:
            first_of_key[key] = len(sent)
        places.append((len(sent), True))
        sent.append(job)
    found: dict[int, tuple[int, bool]] = {}
    waiting = list(range(len(sent)))
    for _ in range(UNIQUE_KEY_TRIES):
        skipped = []
        ids = yield from _insert_jobs([sent[p] for p in waiting])
        for place, job_id in zip(waiting, ids):
            if job_id is None:
                skipped.append(place)
            else:
                found[place] = (job_id, True)
        holders = (yield from _holders_of_keys([sent[p] for p in skipped])) if skipped else {}
        waiting = []
        for place in skipped:
            holder = holders.get((sent[place].queue, sent[place].unique_key))
            if holder is None:
                waiting.append(place)  # it finished in between and freed the key
            else:
                found[place] = (holder, False)
        if not waiting:
            break
    else:
        job = sent[waiting[0]]
        raise RuntimeError(f"unique key {job.unique_key!r} of queue {job.queue!r} kept"
                           f" changing hands; try again")
    return [(found[place][0], found[place][1] and first) for place, first in places]


def _with_queues(jobs: Sequence[NewJob]) -> Generator[Statement, Result, Sequence[NewJob]]:
    """``jobs``, each with a unique key and no queue given the queue its
    kind's policy names: the key is unique within that queue, and the
    holder of a taken key is looked up there. Only then a round trip."""
    kinds = sorted({job.kind for job in jobs if job.queue is None and job.unique_key is not None})
    if not kinds:
        return jobs
    queues = dict((yield Statement(text_of("queues_of_kinds"), {"kinds": kinds})).rows)
    return [job._replace(queue=queues[job.kind])
            if job.queue is None and job.unique_key is not None else job for job in jobs]


def _insert_jobs(jobs: Sequence[NewJob]) -> Generator[Statement, Result, list[int | None]]:
    """The new id of each job, None for one whose unique key is held."""
    columns = {field: list(values) for field, values in zip(NewJob._fields, zip(*jobs))}
    # An array of arrays must be rectangular: each job's ids go as the text
    # of an array, which the statement casts.
    columns["depends_on"] = [_array_text(ids) for ids in columns["depends_on"]]
    rows = _INSERTED.of((yield Statement(text_of("enqueue_jobs"), {
        **columns,
        # Enqueued inside a span: its runs join that trace.
        "trace_context": tracing.current_trace_context()})))
    # Sorted by id, so in the order the jobs were given (see enqueue_jobs in
    # queries.sql); a keyed row is found by its key, being the only one.
    keyed: dict[UniqueKey, int] = {(row.queue, row.unique_key): row.id
                                   for row in rows if row.unique_key is not None}
    unkeyed = iter([row.id for row in rows if row.unique_key is None])
    return [next(unkeyed) if job.unique_key is None else keyed.get((job.queue, job.unique_key))
            for job in jobs]


def _array_text(ids: Sequence[int] | None) -> str | None:
    """``{1,2}``: PostgreSQL's text of a bigint[]; None for no ids."""
    return "{" + ",".join(str(int(i)) for i in ids) + "}" if ids else None


def _holders_of_keys(jobs: Sequence[NewJob]) -> Generator[Statement, Result, dict[UniqueKey, int]]:
    result = yield Statement(text_of("jobs_holding_unique_keys"), {
        "queue": [job.queue for job in jobs], "unique_key": [job.unique_key for job in jobs]})
    return {(row.queue, row.unique_key): row.id for row in _KEY_HOLDERS.of(result)}
