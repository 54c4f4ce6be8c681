"""Workflows and batches inserted on a connection of the caller's, in
whatever transaction it is in, as :mod:`.enqueueing` inserts jobs: each
verb is written once as the statements it sends (``insert_workflow``,
``open_batch``, ``seal_batch`` in sql/queries.sql, which call the functions
of migrations/0019), and :mod:`.drivers` runs it on psycopg2, psycopg 3 or
SQLAlchemy, sync or async.

Nothing here commits, rolls back or checks a graph: the functions refuse a
bad one, and :mod:`..workflows` checks it before anything is sent.
"""

from __future__ import annotations

from typing import Generator, NamedTuple

from .drivers import Statement
from .rows import Result, Rows
from .statements import text_of


class InsertedStep(NamedTuple):
    """A step job_queue_workflow inserted."""

    workflow_id: int
    ref: str
    job_id: int


_STEPS = Rows(InsertedStep)


def inserting_workflow(name: str, steps_json: str
                       ) -> Generator[Statement, Result, tuple[int, dict[str, int]]]:
    """The workflow's id and {ref: job id} of its steps, ``steps_json``
    being job_queue_workflow's JSON array of steps."""
    rows = _STEPS.of((yield Statement(text_of("insert_workflow"),
                                      {"name": name, "steps": steps_json})))
    return rows[0].workflow_id, {row.ref: row.job_id for row in rows}


def opening_batch(name: str | None, on_success_json: str | None,
                  on_complete_json: str | None) -> Generator[Statement, Result, int]:
    """The id of a new open batch; each callback is the JSON text of
    ``{kind, payload, ...}``, or None for none."""
    result = yield Statement(text_of("open_batch"), {
        "name": name, "on_success": on_success_json, "on_complete": on_complete_json})
    return int(result.value("batch_id"))


def sealing_batch(batch_id: int) -> Generator[Statement, Result, None]:
    yield Statement(text_of("seal_batch"), {"batch_id": batch_id})
