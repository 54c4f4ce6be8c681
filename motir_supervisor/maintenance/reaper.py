"""The reaper: expired leases back to claimable jobs, and retention (of the
succeeded and cancelled rows, and of the failed ones, each by its own age).

A service of the supervisor's loop (see :mod:`.services`), which calls
:meth:`Reaper.run_when_due`; :meth:`Reaper.run_once` is one pass, callable
directly (the tests do). Each
statement is a small batch under SKIP LOCKED (see ``expire_stale_leases`` and
``prune_finished`` in queries.sql), so any number of supervisors on any
number of machines may reap at once without waiting on each other. It forks
nothing and holds no SQL.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import psycopg2

from .. import db
from .services import Service

log = logging.getLogger(__name__)

#: Rows one lease statement handles: small enough that no pass holds many locks.
LEASE_BATCH = 500
#: Retention is measured in hours; deleting every few minutes is plenty, and
#: keeps an idle fleet's database traffic low.
PRUNE_EVERY_SECONDS = 300.0
#: Rows one retention statement deletes.
PRUNE_BATCH = 1000
#: Workflows one retention statement deletes, each with all its jobs.
PRUNE_WORKFLOWS_BATCH = 100
#: The states of --retention-hours, and of --keep-failed-hours.
FINISHED, FAILED = db.PRUNED_TOGETHER
#: A pass stops pruning after this long and goes on at the next pass, so
#: retention never delays the supervisor's loop for long.
PRUNE_BUDGET_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class ReaperPass:
    expired: int
    pruned: int


class Reaper(Service):
    """The supervisor's loop owns every field."""

    def __init__(self, store: db.JobStore, every_seconds: float, retention_hours: float,
                 keep_failed_hours: float = 0.0):
        self.store = store
        self.every_seconds = every_seconds
        self.retention_seconds = retention_hours * 3600
        self.keep_failed_seconds = keep_failed_hours * 3600
        self.next_pass = 0.0
        self.next_prune = 0.0

    def run_once(self, prune: bool = True) -> ReaperPass:
        return ReaperPass(expired=self.expire_stale_leases(),
                          pruned=self.prune_finished() if prune else 0)

    def expire_stale_leases(self) -> int:
        total = 0
        while True:
            rows = self.store.expire_stale_leases(LEASE_BATCH)
            for job_id, state in rows:
                log.warning("reaper: job %d had an expired lease; now %s", job_id, state)
            total += len(rows)
            if len(rows) < LEASE_BATCH:
                return total

    def prune_finished(self) -> int:
        """One pass of retention: the failed rows past their age, then the
        succeeded and cancelled ones past theirs, within one budget. Failed
        rows go first: they are few, and a backlog of the others must not
        keep them for ever."""
        started = time.monotonic()
        total = 0
        for states, seconds in ((FAILED, self.keep_failed_seconds),
                                (FINISHED, self.retention_seconds)):
            if not seconds:
                continue
            deleted = self._prune(states, seconds, started)
            if deleted:
                log.info("retention: deleted %d %s jobs", deleted,
                         "failed" if states == FAILED else "finished")
            total += deleted
        if self.retention_seconds:
            deleted = self._prune_workflows(started)
            if deleted:
                log.info("retention: deleted %d jobs of finished workflows", deleted)
            total += deleted
        return total

    def _prune_workflows(self, started: float) -> int:
        """Whole workflows, once their last job is old enough (see
        prune_workflows in queries.sql), within the pass's budget."""
        total = 0
        failed_seconds = self.keep_failed_seconds or None
        while time.monotonic() - started < PRUNE_BUDGET_SECONDS:
            deleted = self.store.prune_workflows(self.retention_seconds, failed_seconds,
                                                 PRUNE_WORKFLOWS_BATCH)
            total += deleted
            if not deleted:
                break
        return total

    def _prune(self, states: tuple[str, ...], older_than_seconds: float,
               started: float) -> int:
        total = 0
        while time.monotonic() - started < PRUNE_BUDGET_SECONDS:
            deleted = self.store.prune_finished(states, older_than_seconds, PRUNE_BATCH)
            total += deleted
            if deleted < PRUNE_BATCH:
                break
        return total

    def next_due(self) -> float:
        return self.next_pass

    def run_when_due(self, now: float) -> None:
        """A pass of the supervisor's timer: leases every time, retention
        every PRUNE_EVERY_SECONDS."""
        if now < self.next_pass:
            return
        self.next_pass = now + self.every_seconds
        prune = now >= self.next_prune
        if prune:
            self.next_prune = now + PRUNE_EVERY_SECONDS
        try:
            self.run_once(prune)
        except psycopg2.Error as exc:
            # Any database error (unreachable, read-only after a failover, a
            # foreign key blocking retention) waits for the next pass; it
            # must never take the supervisor down.
            self.store.close()
            log.warning("reaper: %s", db.one_line(exc, self.store.dsn))
