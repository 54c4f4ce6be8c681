"""motir-supervisor: runs the Motir app's background jobs from PostgreSQL.

Handlers register with :func:`job`::

    from motir_supervisor import job

    @job("send_email")
    def send_email(j):
        ...

Producers enqueue inside their own transaction with :func:`enqueue` and
:func:`enqueue_many` (see api.py), or from asyncio with
:func:`enqueue_async` and :func:`enqueue_many_async` (async_api.py)::

    from motir_supervisor import enqueue

    enqueue(conn, "send_email", {"to": "a@b.c"})  # conn: psycopg2, psycopg or SQLAlchemy
"""

from .api import enqueue, enqueue_many
from .async_api import enqueue_async, enqueue_many_async
from .registry import Interrupted, Job, PermanentFailure, Snooze, job
from .worker.transactions import ClaimLost

__all__ = ["ClaimLost", "Interrupted", "Job", "PermanentFailure", "Snooze", "enqueue",
           "enqueue_async", "enqueue_many", "enqueue_many_async", "job"]
