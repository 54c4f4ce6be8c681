"""Writing a worker's registry limits (``@job(max_running=N,
max_running_per_key=N, rate_limit=(N, S))``) to
job_queue_limits, where every worker of the fleet reads them: once per
worker, backing off while a transaction keeps job_queue locked, and not at
all while another worker is at it (see db.JobStore.sync_limits). A service
of the worker's loop (see :mod:`.services`): it tells the worker's producer
whether any kind is limited, fleet-wide, after each try.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Callable

import psycopg2.errors

from .. import db, registry
from .services import Service

log = logging.getLogger(__name__)

#: A locked job_queue is tried again after a jittered wait that doubles
#: from the first to the last of these.
LOCKED_BACKOFF_SECONDS = (5.0, 60.0)


class LimitsSync(Service):
    """The worker's main thread owns every field."""

    def __init__(self, store: db.JobStore, index: int,
                 heard: Callable[[bool], None] = lambda limits_exist: None):
        self.store = store
        self.index = index
        #: Told after each try whether any kind is limited, fleet-wide.
        self.heard = heard
        #: Whether this worker's registry was written, and when to try again.
        self.synced = False
        self._next_try = 0.0
        self._backoff = 0.0
        self._stopped = False

    def next_due(self) -> float:
        return float("inf") if self.synced or self._stopped else self._next_try

    def run_when_due(self, now: float) -> None:
        if now >= self.next_due():
            self.heard(self.run_once())

    def stop(self) -> None:
        """A worker that claims no more needs no limits written."""
        self._stopped = True

    def run_once(self) -> bool:
        """Write the limits; then whether any kind is limited, fleet-wide."""
        try:
            changes = self.store.sync_limits({
                kind: None if values is None else db.Limits(*values)
                for kind, values in registry.limits().items()})
        except psycopg2.errors.LockNotAvailable:
            # A transaction keeps job_queue locked; claims go on meanwhile,
            # and the tries back off so as not to hold them up again and again.
            low, high = LOCKED_BACKOFF_SECONDS
            self._backoff = min(max(self._backoff * 2, low), high)
            wait = self._backoff * random.uniform(0.5, 1.0)
            self._next_try = time.monotonic() + wait
            log.warning("worker %d: could not apply the registry's limits yet (a transaction"
                        " keeps job_queue locked); trying again in %.0fs", self.index, wait)
        else:
            if changes is None:  # another worker is at it
                self._next_try = time.monotonic() + random.uniform(0.5, 1.5)
            else:
                for change in changes:
                    log.info("worker %d: limit of %s", self.index, change)
                self.synced = True
        return bool(self.store.limits())
