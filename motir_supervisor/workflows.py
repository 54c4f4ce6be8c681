"""Workflows and batches from Python, in the caller's transaction.

A workflow is a set of jobs that wait for one another, inserted together
when its block ends::

    from motir_supervisor import workflow

    with workflow(conn, "index_repo") as wf:
        fetch = wf.add("fetch", {"repo": 7})
        embeds = [wf.add("embed", {"file": f}, after=[fetch]) for f in files]
        wf.add("publish", {"repo": 7}, after=embeds)
    print(wf.id, fetch.id)  # set once the block has inserted them

A batch is a set of jobs with callbacks: ``on_success`` runs once every
member succeeded, ``on_complete`` once every member ended::

    with batch(conn, "import", on_success=("notify", {"user": 3})) as b:
        for row in rows:
            b.add("import_row", row)

    b = open_batch(conn, "import", on_complete="report")  # members over time
    b.add("import_row", {"row": 1})
    b.seal()

``conn`` is any connection :func:`api.enqueue` takes; under ``async with``,
the blocks take the async connections of :mod:`async_api`. Each block
inserts in one go at its end (job_queue_workflow; job_queue_batch_open,
one insert of the members, job_queue_batch_seal); a block that raises
inserts nothing. A bad argument or graph (an unknown ``after``, a cycle)
raises TypeError or ValueError before anything is sent, so the caller's
transaction stays usable. Nothing here commits, rolls back or holds SQL.

What a handler reads of them, ``j.parents`` and ``j.batch``, is
:class:`jobs.Parent` and :class:`jobs.BatchProgress`.
"""

from __future__ import annotations

import datetime
import heapq
import json
from typing import Any, Generator, Iterable, Mapping, Self, Union

from . import db
from .api import KINDS_QUEUE, Enqueued, OnParentFailure, _new_job, _new_jobs
from .db import drivers
from .db import workflows as db_workflows
from .db.drivers import Statement
from .db.enqueueing import enqueueing

#: A batch's callback: a kind, (kind, payload), or a dict of ``kind``,
#: ``payload``, ``queue``, ``priority`` and ``max_attempts``.
Callback = Union[str, tuple[str, Any], Mapping[str, Any]]

_CALLBACK_KEYS = frozenset({"kind", "payload", "queue", "priority", "max_attempts"})
_AFTER_ASYNC = "end the block with `async with` on an async connection"
_AFTER_SYNC = "end the block with `with` on a connection that is not async"


class Step:
    """A job that a workflow's or a batch's block inserts when it ends: its
    ``id`` is None until then. ``ref`` is its step's name in a workflow
    (None for a batch's member)."""

    __slots__ = ("ref", "kind", "id", "_block")

    def __init__(self, block: _Block, ref: str | None, kind: str):
        self._block = block
        self.ref = ref
        self.kind = kind
        #: An Enqueued once inserted (a batch member whose unique key another
        #: job holds is that job's id, ``duplicate`` true, and no member).
        self.id: Enqueued | None = None

    def __repr__(self) -> str:
        return f"<Step {self.ref or self.kind} {self.id or 'not inserted'}>"


class _Block:
    """What a workflow's and a batch's blocks share: ``with`` and ``async
    with``, and one insert when the block ends without an exception."""

    def __init__(self, conn: Any, what: str):
        self.conn = conn
        #: The workflow's or batch's id, once the block inserted it.
        self.id: int | None = None
        self._what = what
        #: The block ended and sent its insert (which may have failed).
        self._ended = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._start_insert()
            drivers.run(self.conn, self._inserting(), instead=_AFTER_ASYNC)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self._start_insert()
            await drivers.run_async(self.conn, self._inserting(), instead=_AFTER_SYNC)

    def _start_insert(self) -> None:
        self._check_open()
        self._check()
        # Once only, even if the insert fails: the caller's transaction is
        # then aborted, and the steps are to be added again after its
        # rollback, in a new block.
        self._ended = True

    def _check(self) -> None:
        """A ValueError for what the database would refuse."""

    def _check_open(self) -> None:
        if self._ended:
            raise RuntimeError(f"{self._what} was inserted when its block ended: add to it"
                               " inside the block")

    def _inserting(self) -> Generator[Statement, db.Result, None]:
        raise NotImplementedError


class Workflow(_Block):
    """A workflow's steps, inserted when its ``with`` block ends (see
    :func:`workflow`)."""

    def __init__(self, conn: Any, name: str):
        if not isinstance(name, str):
            raise TypeError(f"a workflow's name must be a str, not {name!r}")
        if not name:
            raise ValueError("a workflow's name must not be empty")
        super().__init__(conn, f"workflow {name!r}")
        self.name = name
        #: Each step, its JSON object for job_queue_workflow, in order added.
        self._steps: list[tuple[Step, dict[str, Any]]] = []
        self._refs: set[str] = set()

    def add(self, kind: str, payload: Any = None, *, after: Iterable[Step | str] = (),
            ref: str | None = None, depends_on: Iterable[int] | None = None,
            on_parent_failure: OnParentFailure = "cancel", queue: str = KINDS_QUEUE,
            run_at: datetime.datetime | None = None, priority: int | None = None,
            unique_key: str | None = None, max_attempts: int | None = None,
            concurrency_key: str | None = None) -> Step:
        """A step running ``kind`` once every step of ``after`` (steps of this
        workflow, or their refs) and every job of ``depends_on`` (ids of jobs
        already enqueued) has ended, as ``on_parent_failure`` asks. ``ref``
        names it (default: its kind, then ``kind.2``, ``kind.3``, ...); the
        other arguments are :func:`api.enqueue`'s."""
        self._check_open()
        if ref is not None and not isinstance(ref, str):
            raise TypeError(f"{self._what}: ref must be a str, not {ref!r}")
        if ref == "":
            raise ValueError(f"{self._what}: ref must not be empty")
        if ref in self._refs:
            raise ValueError(f"{self._what} has a step {ref!r} already")
        named = ref if ref is not None else self._free_ref(kind)
        try:
            job = _new_job(kind, payload, queue=queue, run_at=run_at, priority=priority,
                           unique_key=unique_key, max_attempts=max_attempts,
                           concurrency_key=concurrency_key, depends_on=depends_on,
                           on_parent_failure=on_parent_failure)
            refs = [self._ref_of(step) for step in _listed("after", after)]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{self._what}, step {named!r}: {exc}") from exc
        wanted: dict[str, Any] = {
            "ref": named, "kind": kind, "payload": json.loads(job.payload), "after": refs,
            "depends_on": list(job.depends_on or ()), "queue": job.queue,
            "run_at": None if run_at is None else run_at.isoformat(), "priority": priority,
            "unique_key": unique_key, "max_attempts": max_attempts,
            "concurrency_key": concurrency_key, "on_parent_failure": job.on_parent_failure}
        step = Step(self, named, kind)
        self._steps.append((step, {k: v for k, v in wanted.items() if v is not None}))
        self._refs.add(named)
        return step

    def _free_ref(self, kind: Any) -> str:
        if not isinstance(kind, str) or kind not in self._refs:
            return kind
        n = 2
        while f"{kind}.{n}" in self._refs:
            n += 1
        return f"{kind}.{n}"

    def _ref_of(self, step: Any) -> str:
        if isinstance(step, str):
            return step
        if isinstance(step, Step):
            if step._block is not self:
                raise ValueError(f"after names {step!r}, a step of another workflow or"
                                 " batch: give its id in depends_on once inserted")
            assert step.ref is not None  # a workflow's steps have one
            return step.ref
        raise TypeError(f"after takes steps of this workflow or their refs, not {step!r}"
                        " (a job already enqueued goes in depends_on)")

    def _check(self) -> None:
        """A ValueError for a workflow that job_queue_workflow would refuse."""
        if not self._steps:
            raise ValueError(f"{self._what} has no step")
        after = {obj["ref"]: obj["after"] for _, obj in self._steps}
        for ref, refs in after.items():
            for other in refs:
                if other not in after:
                    raise ValueError(f"{self._what}: step {ref!r} is after {other!r}, which"
                                     " is no step of it")
        _, cycle = _in_order(after)
        if cycle:
            raise ValueError(f"{self._what}: its steps wait for one another in a cycle: "
                             + " after ".join(repr(ref) for ref in cycle))

    def _inserting(self) -> Generator[Statement, db.Result, None]:
        # job_queue_workflow takes each step after the steps it waits for
        # (its ids are drawn in that order, a parent's before its child's).
        by_ref = {obj["ref"]: obj for _, obj in self._steps}
        order, _ = _in_order({ref: obj["after"] for ref, obj in by_ref.items()})
        steps = json.dumps([by_ref[ref] for ref in order])
        workflow_id, ids = yield from db_workflows.inserting_workflow(self.name, steps)
        self.id = workflow_id
        for step, obj in self._steps:
            step.id = Enqueued(ids[obj["ref"]])


def workflow(conn: db.Connection | db.AsyncConnection, name: str) -> Workflow:
    """``with workflow(conn, name) as wf:`` a workflow whose steps
    (``wf.add``) are inserted in ``conn``'s transaction when the block ends
    (``async with`` on an async connection). See :mod:`workflows`."""
    return Workflow(conn, name)


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
        [job] = _new_jobs([{"kind": kind, "payload": payload, **options}])
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
    adds to one opened earlier, on any connection :func:`api.enqueue` takes."""

    def __init__(self, conn: db.Connection, batch_id: int):
        self.conn = conn
        self.id = batch_id

    def add(self, kind: str, payload: Any = None, **options: Any) -> Enqueued:
        """Insert a member: ``kind`` with ``payload`` and :func:`api.enqueue`'s
        options; its id. The database refuses a member of a sealed batch."""
        [member] = self.add_many([{"kind": kind, "payload": payload, **options}])
        return member

    def add_many(self, jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
        """Insert members in one statement, as :func:`api.enqueue_many` does."""
        members = [job._replace(batch_id=self.id) for job in _new_jobs(jobs)]
        return [Enqueued(job_id, duplicate=not inserted)
                for job_id, inserted in db.enqueue_jobs(self.conn, members)]

    def seal(self) -> None:
        """No member joins after this; once every member has ended (at once,
        for a batch without members), its callbacks are released."""
        drivers.run(self.conn, db_workflows.sealing_batch(self.id))

    def __repr__(self) -> str:
        return f"<Batch {self.id}>"


def open_batch(conn: db.Connection, name: str | None = None, *,
               on_success: Callback | None = None,
               on_complete: Callback | None = None) -> Batch:
    """A batch opened in ``conn``'s transaction, its members added over time
    with :meth:`Batch.add` until :meth:`Batch.seal`; callbacks as for
    :func:`batch`."""
    named = _batch_name(name)
    callbacks = (_callback_json("on_success", on_success),
                 _callback_json("on_complete", on_complete))
    return Batch(conn, drivers.run(conn, db_workflows.opening_batch(named, *callbacks)))


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


def _listed(name: str, values: Any) -> list[Any]:
    if isinstance(values, (str, Step)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list, not {values!r}")
    return list(values)


def _in_order(after: Mapping[str, list[str]]) -> tuple[list[str], list[str]]:
    """The refs of ``after`` (each ref: the refs it waits for, every one of
    them a key) with each after those it waits for, else as given; and a
    cycle, as the refs along it and the first one again at its end, or
    empty for none (the order then lacks the steps the cycle holds up)."""
    position = {ref: n for n, ref in enumerate(after)}
    waiting = {ref: len(set(refs)) for ref, refs in after.items()}
    followers: dict[str, list[str]] = {ref: [] for ref in after}
    for ref, refs in after.items():
        for other in set(refs):
            followers[other].append(ref)
    ready = [(position[ref], ref) for ref, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, ref = heapq.heappop(ready)
        order.append(ref)
        del waiting[ref]
        for follower in followers[ref]:
            waiting[follower] -= 1
            if waiting[follower] == 0:
                heapq.heappush(ready, (position[follower], follower))
    if not waiting:
        return order, []
    # Each step left waits for one left too: walking those finds a cycle.
    path: list[str] = []
    ref = next(iter(waiting))
    while ref not in path:
        path.append(ref)
        ref = next(other for other in after[ref] if other in waiting)
    return order, [*path[path.index(ref):], ref]
