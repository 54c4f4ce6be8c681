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

insert jobs that wait for one another with :func:`workflow` (see
workflows.py), and batches with callbacks with :func:`batch` and
:func:`open_batch` (batches.py), and look at and steer jobs on their connection with
:func:`get_job`, :func:`find_jobs`, :func:`cancel_job` and
:func:`retry_job` (see jobs.py).
"""

from .api import Enqueued, enqueue, enqueue_many
from .async_api import enqueue_async, enqueue_many_async
from .jobs import (BatchProgress, JobNotFound, JobRow, JobState, Parent, UniqueKeyHeld, cancel_job,
                   find_jobs, get_job, retry_job)
from .policy import Retry
from .registry import Interrupted, Job, PermanentFailure, Snooze, job
from .worker.transactions import ClaimLost
from .batches import Batch, BatchBuilder, batch, open_batch, open_batch_async
from .workflows import Step, Workflow, workflow

__all__ = ["Batch", "BatchBuilder", "BatchProgress", "ClaimLost", "Enqueued", "Interrupted", "Job",
           "JobNotFound", "JobRow", "JobState", "Parent", "PermanentFailure", "Retry", "Snooze",
           "Step", "UniqueKeyHeld", "Workflow", "batch", "cancel_job", "enqueue", "enqueue_async",
           "enqueue_many", "enqueue_many_async", "find_jobs", "get_job", "job", "open_batch",
           "open_batch_async", "retry_job", "workflow"]
