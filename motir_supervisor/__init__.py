"""motir-supervisor: runs the Motir app's background jobs from PostgreSQL.

Handlers register with :func:`job`::

    from motir_supervisor import job

    @job("send_email")
    def send_email(j):
        ...
"""

from .registry import Interrupted, Job, PermanentFailure, Snooze, job

__all__ = ["Interrupted", "Job", "PermanentFailure", "Snooze", "job"]
