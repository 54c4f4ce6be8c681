"""Kinds for the fleet-wide limit tests, recorded in test_executions like
the sample app's jobs (whose helpers they use)."""

import time

from motir_supervisor import job
from tests.apps.sample import _record_end, _record_start

#: What tests/integration/test_limits.py and tests/e2e/test_limits.py
#: assert at every instant.
THROTTLED_MAX_RUNNING = 3


@job("throttled", max_running=THROTTLED_MAX_RUNNING)
def throttled(j):
    execution = _record_start(j)
    time.sleep(j.payload.get("sleep", 0.02))
    _record_end(execution)


@job("keyed")
def keyed(j):
    """Enqueued with unique keys: two runs of one key must never overlap."""
    execution = _record_start(j)
    time.sleep(j.payload.get("sleep", 0.01))
    _record_end(execution)
