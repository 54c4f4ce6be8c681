"""A handler that leaks, for the recycling tests: each run keeps payload.mb
MB of memory it wrote in a module-level list, as a cache that only grows
would. Runs are recorded in test_executions like the sample app's."""

import time

from motir_supervisor import job
from tests.apps.sample import _record_end, _record_start

_kept = []


@job("leak")
def leak(j):
    execution = _record_start(j)
    # Written, not merely allocated: untouched pages are not resident.
    _kept.append(b"\x01" * (j.payload["mb"] << 20))
    time.sleep(j.payload.get("sleep", 0))
    _record_end(execution)
