"""The reaper: turns jobs whose lease expired back into claimable ones.

The supervisor owns it and calls :meth:`Reaper.run_once` on a timer; a pass
is one fenced statement (see ``expire_stale_leases`` in queries.sql) that any
number of supervisors on any number of machines may run at the same time.
It forks nothing and holds no SQL.
"""

from __future__ import annotations

import logging
import time

from . import db

log = logging.getLogger(__name__)

#: Rows one statement handles: small enough that no pass holds many locks.
BATCH = 500


class Reaper:
    def __init__(self, store: db.JobStore, every_seconds: float):
        self.store = store
        self.every_seconds = every_seconds
        self.next_pass = 0.0

    def run_once(self) -> int:
        """Expire every stale lease now; returns how many jobs were taken back."""
        total = 0
        while True:
            rows = self.store.expire_stale_leases(BATCH)
            for job_id, state in rows:
                log.warning("reaper: job %d had an expired lease; now %s", job_id, state)
            total += len(rows)
            if len(rows) < BATCH:
                return total

    def run_when_due(self) -> None:
        now = time.monotonic()
        if now < self.next_pass:
            return
        self.next_pass = now + self.every_seconds
        try:
            self.run_once()
        except db.CONNECTION_ERRORS as exc:
            self.store.close()
            log.warning("reaper: database unreachable: %s",
                        db.one_line(exc, self.store.dsn))
