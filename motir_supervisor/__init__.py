"""motir-supervisor: runs the Motir app's background jobs from PostgreSQL.

Handlers register with :func:`job`::

    from motir_supervisor import job

    @job("send_email")
    def send_email(j):
        ...

Producers enqueue inside their own transaction with :func:`enqueue` and
:func:`enqueue_many` (see api.py)::

    from motir_supervisor import enqueue

    enqueue(conn, "send_email", {"to": "a@b.c"})  # conn: a psycopg2 connection
"""

from .api import enqueue, enqueue_many
from .policy import Retry
from .registry import Interrupted, Job, PermanentFailure, Snooze, job
from .worker.transactions import ClaimLost

__all__ = ["ClaimLost", "Interrupted", "Job", "PermanentFailure", "Retry", "Snooze", "enqueue",
           "enqueue_many", "job"]
