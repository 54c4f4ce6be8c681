"""The kind of the workflow race tests (tests/e2e/test_workflow_races.py).

Every run is recorded in race_runs (created by the tests): its job, attempt
and process, and the server's clock as it starts and as it ends, through a
connection of this handler thread's own. What a run does is in its payload:

- ``"gate": KEY`` waits until the test lets go of the advisory lock KEY,
  which it holds exclusively: every run waiting on it takes the lock shared,
  so all of them are let through in the same instant and end together;
- ``"hold": N`` runs on its first N attempts until the worker asks it to
  stop (a cancel), then raises Interrupted; it is there to be killed;
- ``"fail": "always"`` raises on every attempt, ``"first"`` on the first
  only, and ``"until_flag"`` until the test inserts a row of race_flags
  named by ``"flag"``;
- ``"sleep": S`` sleeps S seconds;
- ``"in_transaction": true`` ends a run that succeeds in ``j.transaction()``,
  which writes the job's success, and so releases its dependents, in the
  handler's own transaction, with the run's end recorded in it.
"""

import os
import time

from motir_supervisor import Interrupted, Retry, job
from tests.apps.sample import _sql

#: Where the runs are recorded, and the flags a run may wait for.
TABLES = """
CREATE TABLE race_runs (
    run_id      bigserial PRIMARY KEY,
    job_id      bigint NOT NULL,
    attempt     int NOT NULL,
    pid         int NOT NULL,
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz,
    outcome     text
);
CREATE TABLE race_flags (name text PRIMARY KEY);
"""

_RECORD_END = ("UPDATE race_runs SET finished_at = clock_timestamp(), outcome = %s"
               " WHERE run_id = %s")


def _wait_at_the_gate(key):
    _sql("SELECT pg_advisory_lock_shared(%s)", (key,))
    _sql("SELECT pg_advisory_unlock_shared(%s)", (key,))


def _hold(j):
    while not j.stopping:
        time.sleep(0.02)
    raise Interrupted()


def _fails(j):
    fail = j.payload.get("fail")
    if fail == "until_flag":
        return _sql("SELECT NOT EXISTS (SELECT FROM race_flags WHERE name = %s)",
                    (j.payload["flag"],))[0]
    return fail == "always" or (fail == "first" and j.attempt == 1)


@job("race_step", max_attempts=4, retry=Retry(base=0.05, cap=0.1))
def race_step(j):
    run = _sql("INSERT INTO race_runs (job_id, attempt, pid) VALUES (%s, %s, %s)"
               " RETURNING run_id", (j.id, j.attempt, os.getpid()))[0]
    if j.payload.get("gate") is not None:
        _wait_at_the_gate(j.payload["gate"])
    if j.attempt <= j.payload.get("hold", 0):
        _hold(j)
    time.sleep(j.payload.get("sleep", 0))
    failing = _fails(j)
    if j.payload.get("in_transaction") and not failing:
        with j.transaction() as conn, conn.cursor() as cur:
            cur.execute(_RECORD_END, ("ok", run))
        return
    _sql(_RECORD_END, ("raised" if failing else "ok", run))
    if failing:
        raise RuntimeError(f"attempt {j.attempt} of job {j.id} fails on purpose")
