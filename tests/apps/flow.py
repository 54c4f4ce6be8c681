"""Kinds for the flow-control tests: each run records its start, its key and
the start the claim stamped (the row's started_at) in test_executions."""

import functools
import os
import sys
import time

from motir_supervisor import job
from tests.apps.sample import _record_end, _sql

#: What tests/e2e/test_flow_control.py asserts at every instant and over
#: every window.
PER_KEY = 1
RATE = (10, 0.5)


def _record_start(j):
    return _sql("INSERT INTO test_executions (job_id, attempt, pid, checkpoint)"
                " SELECT id, %s, %s, jsonb_build_object("
                "   'key', concurrency_key, 'claimed_at', extract(epoch FROM started_at))"
                " FROM job_queue WHERE id = %s RETURNING execution_id",
                (j.attempt, os.getpid(), j.id))[0]


@job("per_account", max_running_per_key=PER_KEY)
def per_account(j):
    execution = _record_start(j)
    time.sleep(j.payload.get("sleep", 0.02))
    _record_end(execution)


@job("partner_call", rate_limit=RATE)
def partner_call(j):
    execution = _record_start(j)
    time.sleep(j.payload.get("sleep", 0.005))
    _record_end(execution)


@job("account_report", max_running_per_key=PER_KEY)
def account_report(j):
    """Returns a value, which is stored with its success; with "deep", one
    nested past what jsonb takes (JSON takes it, the recursion limit raised)."""
    if j.payload.get("deep"):
        sys.setrecursionlimit(100_000)
        return functools.reduce(lambda inner, _: [inner], range(20_000), [])
    return {"job": j.id, "attempt": j.attempt}
