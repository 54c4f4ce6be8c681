"""Handlers of bin/bench's workflows section, passed to the supervisor with --app.

- ``step`` does nothing: the steps of the chains and fan-outs, and the
  independent jobs they are compared with, so that every measured
  microsecond belongs to the supervisor, the workers and the database.
- ``stamped_step`` does nothing either, after writing the server's clock
  into ``bench_starts`` as its first statement, as the latency section's
  ``stamp`` does: the steps whose start is timed to the handler rather than
  to the claim. Each worker opens the connection for it as it starts, so
  that the one stamped step of a run does not pay for opening it.
"""

from __future__ import annotations

import os

from benchmarks.waiting_app import RECORD_START, starts_connection
from motir_supervisor import hooks, job

#: Set once by each worker process's start hook, read by its stamped steps.
_connection = None


@hooks.on_worker_start
def open_starts_connection(worker_number):
    global _connection
    _connection = starts_connection(os.environ["DATABASE_URL"])


@job("step")
def step(j):
    pass


@job("stamped_step")
def stamped_step(j):
    with _connection.cursor() as cur:
        cur.execute(RECORD_START, (j.id, os.getpid()))
