"""Claims in doubt after a reconnect: rows a claim statement took just as
the connection broke are this worker's unknown to it, so they are given
back at the reconnect and looked for once more a little later (a claim in
doubt may commit later still).

A service of the worker's loop (see :mod:`..maintenance.services`). It
reads what is held from :class:`.holdings.Holdings` and changes none of
it; what it gives back goes through :mod:`..db`.
"""

from __future__ import annotations

import logging
import time

from .. import db
from ..maintenance.services import Service
from .holdings import Holdings

log = logging.getLogger(__name__)

#: A claim in doubt when the connection broke may commit later still; its
#: rows are looked for once more this long after the reconnect.
CLAIM_RECHECK_SECONDS = 2.0


class ClaimRecheck(Service):
    """The worker's main thread owns every field."""

    def __init__(self, store: db.JobStore, claimant: str, index: int, holdings: Holdings):
        self.store = store
        self.claimant = claimant
        self.index = index
        self.holdings = holdings
        #: When the passes still to make are due, earliest first.
        self._due: list[float] = []

    def after_reconnect(self, now: float | None = None) -> None:
        """The connection is new: a claim in doubt when the old one broke
        is looked for now, and once more CLAIM_RECHECK_SECONDS later.
        ``now``: the time of the loop's pass that reconnected, whose run of
        the services (before its claims) makes the first look."""
        if self.holdings.take_doubt():
            if now is None:
                now = time.monotonic()
            self._due = [now, now + CLAIM_RECHECK_SECONDS]

    def next_due(self) -> float:
        return self._due[0] if self._due else float("inf")

    def run_when_due(self, now: float) -> None:
        if self._due and now >= self._due[0]:
            self.run_once()
            self._due.pop(0)  # after the pass: one the database failed is tried again

    def run_once(self) -> list[int]:
        """Give back the rows claimed by this worker that it does not hold;
        their ids."""
        released = self.store.release_claims_not_held(self.claimant, self.holdings.job_ids())
        if released:
            log.warning("worker %d: released jobs %s claimed just before the connection"
                        " was lost", self.index, released)
        return released
