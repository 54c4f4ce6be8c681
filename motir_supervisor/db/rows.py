"""What the statements return, read by column name: :class:`Result` (a
statement's rows and its columns' names), :class:`Rows` (a row type read
from them) and the row types the store's verbs hand out.

A row type is a NamedTuple whose fields are the columns it reads, by name
(or by the alias its :class:`Rows` gives): a new column is one edit in the
statement and one in the row type. Where each field sits in a statement's
rows is worked out once per shape of result, not per row, so that a claim
of a hundred jobs costs no more than unpacking them by hand.

Nothing here connects or holds SQL text.
"""

from __future__ import annotations

import collections
import operator
from typing import Any, Callable, Generic, Iterable, NamedTuple, TypeVar

import psycopg2.extensions

T = TypeVar("T", bound=tuple)


class Result(NamedTuple):
    """What one statement returned."""

    #: Its columns' names, in order (empty for a statement without rows).
    names: tuple[str, ...]
    rows: list[tuple]

    def column(self, name: str) -> list[Any]:
        """Each row's value of one column."""
        at = self.names.index(name)
        return [row[at] for row in self.rows]

    def value(self, name: str, default: Any = None) -> Any:
        """The first row's value of one column; ``default`` without rows."""
        return self.rows[0][self.names.index(name)] if self.rows else default

    def dicts(self) -> list[dict[str, Any]]:
        """Each row as {column: value}, for templates."""
        return [dict(zip(self.names, row)) for row in self.rows]

    def records(self) -> list[tuple]:
        """Each row as a named tuple of all its columns, for reports that
        show whatever the statement returns (``status``)."""
        return [_record_type(self.names)._make(row) for row in self.rows]


def result_of(cur: psycopg2.extensions.cursor) -> Result:
    """What the statement last run on ``cur`` returned."""
    description = cur.description
    if not description:
        return Result((), [])
    return Result(tuple([column.name for column in description]), cur.fetchall())


def _record_type(names: tuple[str, ...], _made: dict[tuple[str, ...], Any] = {}) -> Any:
    made = _made.get(names)
    if made is None:
        made = _made[names] = collections.namedtuple("Record", names)
    return made


class Rows(Generic[T]):
    """Rows of ``row_type`` read from a statement's result by column name.

    ``aliases`` name the column a field reads where the two differ
    (``payload_json="payload"``). Every field must have its column; columns
    no field reads are left alone.
    """

    def __init__(self, row_type: type[T], **aliases: str):
        self.row_type = row_type
        fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
        self.columns = tuple(aliases.get(f, f) for f in fields)
        #: {columns' names: how to make one row}: one entry per shape of result.
        self._makers: dict[tuple[str, ...], Callable[[tuple], T]] = {}

    def of(self, result: Result, start: int = 0) -> list[T]:
        """The rows of ``result``, from its ``start``-th on, as ``row_type``."""
        make = self._makers.get(result.names)
        if make is None:
            make = self._makers[result.names] = self._maker(result.names)
        return list(map(make, result.rows[start:] if start else result.rows))

    def _maker(self, names: tuple[str, ...]) -> Callable[[tuple], T]:
        if any(names.count(c) != 1 for c in self.columns):
            raise LookupError(f"{self.row_type.__name__} reads the columns {self.columns},"
                              f" not all found once among {names}")
        places = [names.index(c) for c in self.columns]
        new, row_type = tuple.__new__, self.row_type
        if len(places) == 1:
            at = places[0]
            return lambda row: new(row_type, (row[at],))
        pick = operator.itemgetter(*places)
        # tuple.__new__ of the picked values: what NamedTuple._make does,
        # without its call and length check.
        return lambda row: new(row_type, pick(row))


# Tuples, not frozen dataclasses: a worker makes two of these per job, and a
# frozen dataclass costs several times as much to build.
class ClaimedJob(NamedTuple):
    """A row as the claim returned it: ours until we record its outcome."""

    id: int
    queue: str
    kind: str
    #: The payload as the row's JSON text, decoded by the handler's handle.
    payload_json: str
    attempt: int
    max_attempts: int
    checkpoint_data: Any
    #: Smaller first: a worker starts its claimed jobs in this order.
    priority: int = 0
    #: Seconds it had been due when the claim took it, by the database's clock.
    waited: float = 0.0
    #: The row's trace_context (see tracing), or None.
    trace_context: Any = None
    #: The generation of its kind's limits the claim saw (migrations/0013),
    #: handed back when the run ends; None for a job of the regular lane.
    generation: int | None = None


#: The claims name the table's columns; a run names three of them its own way.
CLAIMED = Rows(ClaimedJob, payload_json="payload", attempt="attempts",
               checkpoint_data="checkpoint")


def generations_of(jobs: Iterable[ClaimedJob]) -> dict[str, int | None]:
    """Each kind's generation among these jobs: None for a kind whose jobs
    came with different ones (or none)."""
    found: dict[str, int | None] = {}
    for job in jobs:
        seen = found.get(job.kind, job.generation)
        found[job.kind] = job.generation if seen == job.generation else None
    return found


class Outcome(NamedTuple):
    """What record_outcomes writes for one ended run: its row's values, not
    the word for how it ended (that is an outcomes.Outcome)."""

    job_id: int
    #: None for a success; else the failure, readable by a person.
    error: str | None = None
    retry_in_seconds: float = 0.0
    permanent: bool = False
    #: The handler raised Snooze: pending again after retry_in_seconds, the
    #: attempt handed back.
    snoozed: bool = False
    #: A success's return value as JSON text (see outcomes.output_json), or None.
    output: str | None = None


class StateOfJob(NamedTuple):
    """A job's state as an outcome's write left it, or as it stands."""

    id: int
    state: str
    kind: str


class Settled(NamedTuple):
    """A claim settled without its worker: a dead worker's, or a lapsed lease."""

    id: int
    state: str


class Lease(NamedTuple):
    """A lease renewed, and whether an operator asked for the job's cancel."""

    id: int
    cancel_requested: bool


class ScheduleSeen(NamedTuple):
    """A schedule the fleet has seen, and the last instant it enqueued."""

    kind: str
    spec: str
    #: The cron expression's time zone; None for UTC.
    tz: str | None
    last_instant: Any


class CancelResult(NamedTuple):
    """What `cancel` found and did."""

    state_before: str
    changed: bool


class RetryResult(NamedTuple):
    """What `retry` found and did: the job holding the unique key that kept
    it from retrying, if one did."""

    state_before: str
    changed: bool
    key_holder: int | None


class ParentRecord(NamedTuple):
    """A job another waited for, as a handler reads it (j.parents)."""

    id: int
    step: str | None
    kind: str
    state: str
    output: Any


class BatchRecord(NamedTuple):
    """A batch as its callback reads it (j.batch)."""

    id: int
    name: str | None
    #: {state: members in it}, from a jsonb object.
    counts: Any


JOB_STATES = Rows(StateOfJob)
SETTLED = Rows(Settled)
LEASES = Rows(Lease)
SCHEDULES = Rows(ScheduleSeen)
CANCELS = Rows(CancelResult)
RETRIES = Rows(RetryResult)
PARENTS = Rows(ParentRecord)
BATCHES = Rows(BatchRecord)
