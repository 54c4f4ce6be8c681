"""Handlers of bin/bench's flow-control section, passed to the supervisor
with --app: the same no-op and waiting jobs as the other sections, of kinds
limited per key and by rate."""

import time

from benchmarks.waiting_app import WAIT_SECONDS
from motir_supervisor import job

#: The rate-limited kind's allowance: starts per window, and the window.
RATE = (1000, 1.0)


@job("noop_per_key", max_running_per_key=1)
def noop_per_key(j):
    pass


@job("sleep_per_key", max_running_per_key=1)
def sleep_per_key(j):
    time.sleep(WAIT_SECONDS)


@job("noop_rated", rate_limit=RATE)
def noop_rated(j):
    pass
