"""Handlers the supervisors of the end-to-end tests run. Each execution is
recorded in the table test_executions (created by the tests) through a
connection this worker process opens for itself after the fork."""

import asyncio
import os
import signal
import threading
import time

import psycopg2
import psycopg2.extras

from motir_supervisor import Interrupted, PermanentFailure, Snooze, job

# One connection per handler thread: with --concurrency above 1 several
# handlers of this process run at once.
_local = threading.local()


def _sql(statement, params=()):
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg2.connect(os.environ["DATABASE_URL"])
        conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(statement, params)
        return cur.fetchone() if cur.description else None


def _record_start(j):
    return _sql("INSERT INTO test_executions (job_id, attempt, pid, checkpoint)"
                " VALUES (%s, %s, %s, %s) RETURNING execution_id",
                (j.id, j.attempt, os.getpid(), psycopg2.extras.Json(j.checkpoint_data)))[0]


def _record_end(execution_id):
    _sql("UPDATE test_executions SET finished_at = clock_timestamp() WHERE execution_id = %s",
         (execution_id,))


@job("record")
def record(j):
    execution = _record_start(j)
    time.sleep(j.payload.get("sleep", 0))
    if j.attempt < j.payload.get("fail_until_attempt", 0):
        raise RuntimeError(f"failing attempt {j.attempt} on purpose")
    _record_end(execution)


@job("fail")
def fail(j):
    _record_start(j)
    raise ValueError("boom")


@job("permanent")
def permanent(j):
    _record_start(j)
    raise PermanentFailure("this input can never work")


@job("crash")
def crash(j):
    _record_start(j)
    if j.attempt <= j.payload.get("crash_attempts", 1000):
        os.kill(os.getpid(), signal.SIGKILL)


@job("hang", timeout=0.5)
def hang(j):
    _record_start(j)
    time.sleep(60)


@job("steps")
def steps(j):
    """Counts to payload.steps, one step per payload.step_seconds, resumable."""
    execution = _record_start(j)
    done = (j.checkpoint_data or {}).get("step", 0)
    while done < j.payload["steps"]:
        if j.stopping:
            j.checkpoint({"step": done})
            raise Interrupted()
        time.sleep(j.payload["step_seconds"])
        done += 1
    _record_end(execution)


@job("exit_with")
def exit_with(j):
    """Ends its whole process with the given code, as misbehaving C code might."""
    _record_start(j)
    os._exit(j.payload["code"])


@job("interrupt_anyway")
def interrupt_anyway(j):
    """Raises Interrupted although nobody asked it to stop."""
    _record_start(j)
    raise Interrupted()


@job("fail_unstorably")
def fail_unstorably(j):
    """Fails with a message PostgreSQL text cannot hold as it is."""
    _record_start(j)
    raise ValueError("bad byte \x00 and a lone surrogate \udcff in a file name")


@job("async_record")
async def async_record(j):
    """record, as an async handler on the worker's event loop."""
    execution = _record_start(j)
    await asyncio.sleep(j.payload.get("sleep", 0))
    _record_end(execution)


@job("async_hang", timeout=0.5)
async def async_hang(j):
    _record_start(j)
    await asyncio.sleep(60)


@job("snooze")
def snooze(j):
    """Snoozes payload.seconds, payload.times times, then succeeds."""
    execution = _record_start(j)
    runs = _sql("SELECT count(*) FROM test_executions WHERE job_id = %s", (j.id,))[0]
    if runs <= j.payload["times"]:
        raise Snooze(j.payload["seconds"])
    _record_end(execution)
