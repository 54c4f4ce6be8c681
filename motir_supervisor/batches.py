"""Batches from Python, in the caller's transaction: a set of jobs with
callbacks, ``on_success`` released once every member succeeded (cancelled
if one ends failed or cancelled, back if that one is retried) and
``on_complete`` once every member ended, however::

    from motir_supervisor import batch, open_batch

    with batch(conn, "import", on_success=("notify", {"user": 3})) as b:
        for row in rows:
            b.add("import_row", row)

    b = open_batch(conn, "import", on_complete="report")  # members over time
    b.add("import_row", {"row": 1})
    b.seal()

The block opens the batch, inserts its members in one statement and seals
it when it ends (three statements, whatever its size), and inserts nothing
if it raises; under ``async with`` it takes the async connections.
:func:`open_batch` opens one now, whose members :meth:`Batch.add` inserts
at once until :meth:`Batch.seal`; :func:`open_batch_async` and the
``_async`` methods are the same on an async connection. A bad argument or
callback raises TypeError or ValueError before anything is sent. Nothing
here commits, rolls back or holds SQL.

What a callback's handler reads of its batch, ``j.batch``, is a
:class:`jobs.BatchProgress`.
"""

from __future__ import annotations

import json
from typing import Any, Generator, Iterable, Mapping, Union

from . import db
from .api import Enqueued, _new_job, _new_jobs
from .db import drivers
from .db import workflows as db_workflows
from .db.drivers import Statement
from .db.enqueueing import enqueueing
from .workflows import Step, _Block

#: A batch's callback: a kind, (kind, payload), or a dict of ``kind``,
#: ``payload``, ``queue``, ``priority`` and ``max_attempts``.
Callback = Union[str, tuple[str, Any], Mapping[str, Any]]

_CALLBACK_KEYS = frozenset({"kind", "payload", "queue", "priority", "max_attempts"})


class BatchBuilder(_Block):
    """A batch whose members are inserted, and the batch sealed, when its
    ``with`` block ends (see :func:`batch`)."""

    def __init__(self, conn: Any, name: str | None, on_success: Callback | None,
                 on_complete: Callback | None):
        super().__init__(conn, f"batch {name!r}")
        self.name = _batch_name(name)
        self._callbacks = (_callback_json("on_success", on_success),
                           _callback_json("on_complete", on_complete))
        self._members: list[tuple[Step, db.NewJob]] = []

    def add(self, kind: str, payload: Any = None, **options: Any) -> Step:
        """A member: ``kind`` with ``payload`` and :func:`api.enqueue`'s
        options; its ``id`` is set when the block ends."""
        self._check_open()
        job = _member(f"{self._what}, member {len(self._members) + 1}", kind, payload, options)
        step = Step(self, None, kind)
        self._members.append((step, job))
        return step

    def _inserting(self) -> Generator[Statement, db.Result, None]:
        batch_id = yield from db_workflows.opening_batch(self.name, *self._callbacks)
        self.id = batch_id
        if self._members:
            ids = yield from enqueueing(
                [job._replace(batch_id=batch_id) for _, job in self._members])
            for (step, _), (job_id, inserted) in zip(self._members, ids):
                step.id = Enqueued(job_id, duplicate=not inserted)
        yield from db_workflows.sealing_batch(batch_id)


def batch(conn: db.Connection | db.AsyncConnection, name: str | None = None, *,
          on_success: Callback | None = None,
          on_complete: Callback | None = None) -> BatchBuilder:
    """``with batch(conn, name, on_success=..., on_complete=...) as b:`` a
    batch whose members (``b.add``) are inserted, and the batch sealed, in
    ``conn``'s transaction when the block ends (``async with`` on an async
    connection). A callback is a kind, ``(kind, payload)``, or a dict of
    ``kind``, ``payload``, ``queue``, ``priority`` and ``max_attempts``."""
    return BatchBuilder(conn, name, on_success, on_complete)


class Batch:
    """An open batch: members join with :meth:`add` (inserted at once, in the
    connection's transaction) until :meth:`seal`. ``Batch(conn, batch_id)``
    adds to one opened earlier, on any connection :func:`api.enqueue` takes;
    on an async one, await the ``_async`` methods."""

    def __init__(self, conn: db.Connection | db.AsyncConnection, batch_id: int):
        #: Sync or async: which one each method needs, db.drivers checks.
        self.conn: Any = conn
        self.id = batch_id

    def add(self, kind: str, payload: Any = None, **options: Any) -> Enqueued:
        """Insert a member: ``kind`` with ``payload`` and :func:`api.enqueue`'s
        options; its id. The database refuses a member of a sealed batch."""
        member = _member(f"batch {self.id}'s member", kind, payload, options)
        [enqueued] = _enqueued(drivers.run(self.conn, self._adding([member]),
                                           instead=_AWAIT_INSTEAD))
        return enqueued

    def add_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Insert members in one statement, as :func:`api.enqueue_many` does."""
        return _enqueued(drivers.run(self.conn, self._adding(_new_jobs(jobs)),
                                     instead=_AWAIT_INSTEAD))

    def seal(self) -> None:
        """No member joins after this; once every member has ended (at once,
        for a batch without members), its callbacks are released."""
        drivers.run(self.conn, db_workflows.sealing_batch(self.id), instead=_AWAIT_INSTEAD)

    async def add_async(self, kind: str, payload: Any = None, **options: Any) -> Enqueued:
        """:meth:`add` on an async connection."""
        member = _member(f"batch {self.id}'s member", kind, payload, options)
        [enqueued] = _enqueued(await drivers.run_async(self.conn, self._adding([member]),
                                                       instead=_CALL_INSTEAD))
        return enqueued

    async def add_many_async(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """:meth:`add_many` on an async connection."""
        return _enqueued(await drivers.run_async(self.conn, self._adding(_new_jobs(jobs)),
                                                 instead=_CALL_INSTEAD))

    async def seal_async(self) -> None:
        """:meth:`seal` on an async connection."""
        await drivers.run_async(self.conn, db_workflows.sealing_batch(self.id),
                                instead=_CALL_INSTEAD)

    def _adding(self, members: list[db.NewJob]
                ) -> Generator[Statement, db.Result, list[tuple[int, bool]]]:
        return enqueueing([member._replace(batch_id=self.id) for member in members])

    def __repr__(self) -> str:
        return f"<Batch {self.id}>"


def open_batch(conn: db.Connection, name: str | None = None, *,
               on_success: Callback | None = None,
               on_complete: Callback | None = None) -> Batch:
    """A batch opened in ``conn``'s transaction, its members added over time
    with :meth:`Batch.add` until :meth:`Batch.seal`; callbacks as for
    :func:`batch`."""
    opening = _opening(name, on_success, on_complete)
    return Batch(conn, drivers.run(conn, opening, instead="await open_batch_async with it"))


async def open_batch_async(conn: db.AsyncConnection, name: str | None = None, *,
                           on_success: Callback | None = None,
                           on_complete: Callback | None = None) -> Batch:
    """:func:`open_batch` on an async connection; await the Batch's
    ``_async`` methods."""
    opening = _opening(name, on_success, on_complete)
    return Batch(conn, await drivers.run_async(conn, opening,
                                               instead="call open_batch with it"))


_AWAIT_INSTEAD = "await the Batch's _async methods with it"
_CALL_INSTEAD = "call the Batch's methods without _async with it"


def _opening(name: Any, on_success: Any,
             on_complete: Any) -> Generator[Statement, db.Result, int]:
    # Checked now, before anything is sent.
    named = _batch_name(name)
    callbacks = (_callback_json("on_success", on_success),
                 _callback_json("on_complete", on_complete))
    return db_workflows.opening_batch(named, *callbacks)


def _member(what: str, kind: Any, payload: Any, options: Mapping[str, Any]) -> db.NewJob:
    """One member checked as enqueue checks a job, its errors naming it."""
    try:
        [job] = _new_jobs([{"kind": kind, "payload": payload, **options}])
    except (TypeError, ValueError) as exc:
        # _new_jobs names the job's place in a list; one member has none.
        raise type(exc)(f"{what}: {exc.__cause__ or exc}") from exc
    return job


def _enqueued(ids: list[tuple[int, bool]]) -> list[Enqueued]:
    return [Enqueued(job_id, duplicate=not inserted) for job_id, inserted in ids]


def _batch_name(name: Any) -> str | None:
    if name is not None and not isinstance(name, str):
        raise TypeError(f"a batch's name must be a str or None, not {name!r}")
    return name


def _callback_json(which: str, callback: Any) -> str | None:
    """A batch's callback as job_queue_batch_open takes it: JSON text."""
    if callback is None:
        return None
    if isinstance(callback, str):
        given: Mapping[str, Any] = {"kind": callback}
    elif isinstance(callback, tuple) and len(callback) == 2:
        given = {"kind": callback[0], "payload": callback[1]}
    elif isinstance(callback, Mapping):
        given = callback
        unknown = sorted(set(given) - _CALLBACK_KEYS)
        if unknown:
            raise TypeError(f"{which} takes kind, payload, queue, priority and max_attempts,"
                            f" not {unknown[0]!r}")
        if "kind" not in given:
            raise TypeError(f"{which} needs a kind")
    else:
        raise TypeError(f"{which} must be a kind, (kind, payload) or a dict, not {callback!r}")
    try:
        job = _new_job(**given)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{which}: {exc}") from exc
    spec = {"kind": job.kind, "payload": json.loads(job.payload), "queue": job.queue,
            "priority": job.priority, "max_attempts": job.max_attempts}
    return json.dumps({k: v for k, v in spec.items() if v is not None})
