"""Handlers of bin/bench's waiting workloads, passed to the supervisor with --app.

- ``stamp`` writes, as its first statement, the server's clock into
  ``bench_starts``: the pick-up latency ends where the handler starts, not
  where the claim does. Each worker process keeps one connection of its own
  for it (a handler that needs the database brings its own), opened by the
  warm-up so no measured job pays for it.
- ``sleep`` and ``async_sleep`` wait WAIT_SECONDS without using the CPU, as a
  job waiting on an HTTP call or a model API does: one on a handler thread,
  the other on the worker's event loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import psycopg2

from motir_supervisor import job

#: How long an IO-bound job waits; bin/bench's ideal rate is slots / WAIT_SECONDS.
WAIT_SECONDS = 0.1

STARTS_TABLE = """
CREATE TABLE IF NOT EXISTS bench_starts (
    job_id bigint PRIMARY KEY,
    pid integer NOT NULL,
    started_at timestamptz NOT NULL
)
"""
RECORD_START = ("INSERT INTO bench_starts (job_id, pid, started_at)"
                " VALUES (%s, %s, clock_timestamp())")

_connection = None
_connection_lock = threading.Lock()


def starts_connection(url: str):
    """An autocommit connection whose commits do not wait for the WAL flush:
    the stamp is taken when the statement starts, and the flush would only
    keep the handler (and the floor's loop) busy for longer."""
    conn = psycopg2.connect(url, application_name="bench stamp")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SET synchronous_commit = off")
    return conn


@job("stamp")
def stamp(j):
    global _connection
    with _connection_lock:
        if _connection is None:
            _connection = starts_connection(os.environ["DATABASE_URL"])
        with _connection.cursor() as cur:
            cur.execute(RECORD_START, (j.id, os.getpid()))


@job("sleep")
def sleep(j):
    time.sleep(WAIT_SECONDS)


@job("async_sleep")
async def async_sleep(j):
    await asyncio.sleep(WAIT_SECONDS)
