"""Workflows from Python, in the caller's transaction: a set of jobs that
wait for one another, inserted together when its block ends::

    from motir_supervisor import workflow

    with workflow(conn, "index_repo") as wf:
        fetch = wf.add("fetch", {"repo": 7})
        embeds = [wf.add("embed", {"file": f}, after=[fetch]) for f in files]
        wf.add("publish", {"repo": 7}, after=embeds)
    print(wf.id, fetch.id)  # set once the block has inserted them

``conn`` is any connection :func:`api.enqueue` takes, and under ``async
with`` the async connections of :mod:`async_api`. The block inserts in
one call of job_queue_workflow at its end; a block that raises inserts
nothing. A bad argument or graph (an unknown ``after``, a cycle) raises
TypeError or ValueError before anything is sent, so the caller's
transaction stays usable. Nothing here commits, rolls back or holds SQL.

:class:`Step` and the block's ``with`` and ``async with`` serve the
batches too (see :mod:`batches`). What a handler reads of the jobs before
its own, ``j.parents``, is a list of :class:`jobs.Parent`.
"""

from __future__ import annotations

import datetime
import heapq
import json
from typing import Any, Generator, Iterable, Mapping, Self

from . import db
from .api import _WAITING_WITH_KEY, KINDS_QUEUE, Enqueued, OnParentFailure, _new_job
from .db import drivers
from .db import workflows as db_workflows
from .db.drivers import Statement

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
            if refs and unique_key is not None:
                raise ValueError(_WAITING_WITH_KEY)
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
