"""Enqueueing from asyncio code, inside the caller's transaction: the twins
of :func:`api.enqueue` and :func:`api.enqueue_many` for an async
connection, with the same arguments, checks and results::

    from motir_supervisor import enqueue_async

    async with conn.transaction():  # a psycopg AsyncConnection
        await conn.execute("INSERT INTO reports (id) VALUES (%s)", (7,))
        await enqueue_async(conn, "rebuild_report", {"report": 7}, unique_key="report:7")

``conn`` is a psycopg (3) AsyncConnection, or a SQLAlchemy AsyncSession
(``async_scoped_session`` too) or AsyncConnection over psycopg or asyncpg
(``postgresql+psycopg://``, ``postgresql+asyncpg://``). Every statement is awaited on that
connection: a call waiting for the database (a unique key held by a
transaction not committed yet, say) lets the event loop run everything
else. A name of its own rather than ``enqueue`` returning an awaitable on
some connections: a type checker then tells a missing ``await`` apart,
and a sync connection given here (or an async one to ``enqueue``) is a
TypeError saying which to call.

Like :mod:`api`, it never commits, rolls back or changes autocommit, and
holds no SQL.
"""

from __future__ import annotations

import datetime
from typing import Any, Iterable, Mapping

from . import db
from .api import KINDS_QUEUE, Enqueued, OnParentFailure, _new_job, _new_jobs


async def enqueue_async(conn: db.AsyncConnection, kind: str, payload: Any = None, *,
                        queue: str = KINDS_QUEUE, delay: float | None = None,
                        run_at: datetime.datetime | None = None, priority: int | None = None,
                        unique_key: str | None = None, max_attempts: int | None = None,
                        concurrency_key: str | None = None,
                        depends_on: Iterable[int] | None = None,
                        on_parent_failure: OnParentFailure = "cancel") -> Enqueued:
    """:func:`api.enqueue` on an async connection: insert one job in
    ``conn``'s transaction and return its id, or the id of the pending or
    running job of ``queue`` already holding ``unique_key`` (its
    ``duplicate`` then true)."""
    [(job_id, inserted)] = await db.enqueue_jobs_async(conn, [_new_job(
        kind, payload, queue=queue, delay=delay, run_at=run_at, priority=priority,
        unique_key=unique_key, max_attempts=max_attempts,
        concurrency_key=concurrency_key, depends_on=depends_on,
        on_parent_failure=on_parent_failure)])
    return Enqueued(job_id, duplicate=not inserted)


async def enqueue_many_async(conn: db.AsyncConnection,
                             jobs: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
    """:func:`api.enqueue_many` on an async connection: many jobs in one
    statement, in ``conn``'s transaction; their ids in the order given, each
    an :class:`Enqueued`."""
    return [Enqueued(job_id, duplicate=not inserted)
            for job_id, inserted in await db.enqueue_jobs_async(conn, _new_jobs(jobs))]
