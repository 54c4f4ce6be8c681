"""Looking at and steering jobs one by one on a connection of the caller's,
in whatever transaction it is in: the rows the Python API reads
(``find_jobs`` in sql/queries.sql), and its cancel and retry, which run the
command line's own statements (``cancel_job``, ``retry_job``), so that the
two cannot disagree on what a cancel or a retry does.

Nothing here commits, rolls back or changes autocommit; :mod:`..jobs` turns
these rows into the values callers get.
"""

from __future__ import annotations

import datetime
from typing import Any, NamedTuple, Sequence

import psycopg2.extensions

from .rows import CANCELS, RETRIES, CancelResult, Result, RetryResult, Rows, result_of
from .statements import text_of


class JobRecord(NamedTuple):
    """A job as ``find_jobs`` reads it."""

    id: int
    kind: str
    queue: str
    state: str
    payload: Any
    priority: int
    attempts: int
    max_attempts: int
    run_at: datetime.datetime
    created_at: datetime.datetime
    started_at: datetime.datetime | None
    finished_at: datetime.datetime | None
    last_error: str | None
    output: Any
    #: The failed attempts' errors, or None where the row holds none.
    errors: Any
    unique_key: str | None
    concurrency_key: str | None
    cancel_requested: bool
    depends_on: list[int] | None
    on_parent_failure: str
    workflow_id: int | None
    step: str | None
    batch_id: int | None


JOB_RECORDS = Rows(JobRecord)


def find_jobs(conn: psycopg2.extensions.connection, *, ids: Sequence[int] | None = None,
              kinds: Sequence[str] | None = None, states: Sequence[str] | None = None,
              queues: Sequence[str] | None = None, limit: int,
              newest_first: bool = True) -> list[JobRecord]:
    """The jobs matching every filter given (None: any), at most ``limit``,
    by id: newest first, or oldest first."""
    return JOB_RECORDS.of(_run(conn, "find_jobs", {
        "ids": _array(ids), "kinds": _array(kinds), "states": _array(states),
        "queues": _array(queues), "limit": limit, "newest_first": newest_first}))


def job_by_id(conn: psycopg2.extensions.connection, job_id: int) -> JobRecord | None:
    found = find_jobs(conn, ids=[job_id], limit=1)
    return found[0] if found else None


def cancel_job(conn: psycopg2.extensions.connection, job_id: int) -> CancelResult | None:
    """(state before, changed), None for an unknown id: the command line's
    cancel (pending or failed: cancelled; running: asked to stop)."""
    found = CANCELS.of(_run(conn, "cancel_job", {"id": job_id}))
    return found[0] if found else None


def retry_job(conn: psycopg2.extensions.connection, job_id: int) -> RetryResult | None:
    """(state before, changed, the job holding its unique key), None for an
    unknown id: the command line's retry (failed or cancelled: pending again
    with fresh attempts, unless another job holds its unique key)."""
    found = RETRIES.of(_run(conn, "retry_job", {"id": job_id}))
    return found[0] if found else None


def _array(values: Sequence[Any] | None) -> list[Any] | None:
    return None if values is None else list(values)


def _run(conn: psycopg2.extensions.connection, name: str, params: dict[str, Any]) -> Result:
    # The caller's connection may make dicts or named tuples of rows.
    with conn.cursor(cursor_factory=psycopg2.extensions.cursor) as cur:
        cur.execute(text_of(name), params)
        return result_of(cur)
