"""Keeping a worker's claims: their leases renewed while it holds them, and
the process ended by the kernel before a lease it could not renew lapses.

The worker's main thread calls these verbs and owns every field here. A
claim is only good while its lease holds: once it expires, the reaper of
any supervisor may hand the job to another worker, so every run here must
be over by then (see :meth:`Leases.update_alarm`). It reads what is held
from :class:`.holdings.Holdings` and changes none of it; it claims nothing
and writes no outcome.
"""

from __future__ import annotations

import logging
import signal
import time

from .. import db
from ..config import Config
from .executor import Executor
from .holdings import Holdings

log = logging.getLogger(__name__)

#: The lease alarm goes off this long before the lease would expire.
LEASE_ALARM_MARGIN_SECONDS = 0.5


class Leases:
    def __init__(self, config: Config, claimant: str, index: int, store: db.JobStore,
                 executor: Executor, holdings: Holdings):
        self.config = config
        self.claimant = claimant
        self.index = index
        self.store = store
        self.executor = executor
        #: What the worker holds: read here, never changed.
        self.holdings = holdings
        #: When the leases of every held job were last confirmed (the send
        #: time of the claim or renewal that confirmed them).
        self.confirmed = 0.0
        self.next_renewal = float("inf")
        self._warned = False
        #: When the armed alarm goes off; None while none is armed.
        self._alarm_at: float | None = None

    def claimed(self, sent: float) -> None:
        """A claim sent at ``sent`` is about to add its jobs: with nothing
        held before it, its lease is the one to renew from."""
        if not self.holdings:
            self.confirmed = sent
            self.next_renewal = sent + self.config.renew_every

    def renew_if_due(self, now: float) -> bool:
        """Renew every held job's lease once due; True when it did. A job no
        longer ours, or cancelled, has its handler asked to stop."""
        if not self.holdings or now < self.next_renewal:
            return False
        sent = time.monotonic()
        renewed = self.store.renew_leases(self.claimant, self.holdings.job_ids(),
                                          self.config.lease_seconds)
        self.confirmed = sent
        self.next_renewal = sent + self.config.renew_every
        self._warned = False
        for run in self.holdings.runs():
            job_id = run.claimed.id
            if run.stopping.value or run.completed:  # completed: no claim left to hold
                continue
            if job_id not in renewed:
                log.warning("worker %d: lost the claim on job %d; asking its handler to stop",
                            self.index, job_id)
                run.stopping.set()
            elif renewed[job_id]:
                log.info("worker %d: job %d was cancelled; asking its handler to stop",
                         self.index, job_id)
                run.stopping.set()
        return True

    def lapsing(self, now: float) -> bool:
        """Whether renewals have failed for so long that the claims may soon
        be someone else's: then nothing more may start here."""
        lease, every = self.config.lease_seconds, self.config.renew_every
        if not self.holdings or now - self.confirmed <= lease - every:
            return False
        if not self._warned and self.executor.busy:
            log.error("worker %d: its lease runs out in %.1fs without a renewal;"
                      " asking its handlers to stop", self.index, lease - (now - self.confirmed))
            self._warned = True
        return True

    def next_timer(self) -> float:
        if not self.holdings:
            return float("inf")
        return min(self.next_renewal,
                   self.confirmed + self.config.lease_seconds - self.config.renew_every)

    def update_alarm(self) -> None:
        """Have the kernel end this process just before the lease expires.

        Renewals may block on an unreachable database, and a blocked thread
        cannot check the time; SIGALRM at its default action ends the process
        whatever it is doing. The alarm is armed while any handler runs, from
        the last confirmed lease. The worker leaves SIGALRM at its default
        action for this (see process.Worker).
        """
        self._set_alarm(self.confirmed if self.executor.busy else None)

    def arm(self) -> None:
        """Arm the alarm before a claim's handlers start (see update_alarm)."""
        self._set_alarm(self.confirmed)

    def _set_alarm(self, confirmed_at: float | None) -> None:
        at = (None if confirmed_at is None
              else confirmed_at + self.config.lease_seconds - LEASE_ALARM_MARGIN_SECONDS)
        if at == self._alarm_at:
            return
        self._alarm_at = at
        left = 0.0 if at is None else max(at - time.monotonic(), 0.001)
        signal.setitimer(signal.ITIMER_REAL, left)
