"""What the supervisor does for a worker that has exited: settle its claims.

Once a worker is gone, however it went, its ledger (shared memory, see
:mod:`ledger`) tells the supervisor job by job what the worker held. A
:class:`Rescuer` queues that, and on its turn writes it through :mod:`db`,
every write fenced on the dead worker's claim; what fails (the database is
down) waits for the next turn. It forks nothing and handles no signal.
"""

from __future__ import annotations

import dataclasses
import logging
import time

import psycopg2

from .. import db, metrics, outcomes
from ..ipc import ledger

log = logging.getLogger(__name__)

#: The second release of a dead worker's claims follows the first by this much.
RELEASE_RECHECK_SECONDS = 2.0


@dataclasses.dataclass(frozen=True)
class PendingRelease:
    claimant: str
    #: The error a job whose handler was running when the worker went gets.
    death: str
    #: The worker's ledger as it left it (empty for the second, late release).
    entries: tuple[ledger.Entry, ...]
    #: Not before this monotonic time.
    due: float
    #: Jobs counted in the fleet's metrics already, should a turn fail
    #: halfway and be done again.
    counted: set[int] = dataclasses.field(default_factory=set)


class Rescuer:
    def __init__(self, store: db.JobStore, database_url: str):
        self.store = store
        self.database_url = database_url
        self.pending: list[PendingRelease] = []

    def queue(self, claimant: str, death: str, entries: tuple[ledger.Entry, ...]) -> None:
        """Settle now, and release once more a little later: a claim statement
        the worker sent just before it died may commit after the first release."""
        now = time.monotonic()
        self.pending.append(PendingRelease(claimant, death, entries, now))
        self.pending.append(PendingRelease(claimant, death, (), now + RELEASE_RECHECK_SECONDS))

    def settle_due(self, final: bool = False) -> None:
        """Give back the jobs of exited workers; keep what fails for the next turn.

        ``final``: the supervisor is about to exit, so releases not due yet
        are done now and an unreachable database is tried a few times.
        """
        for attempt in range(5 if final else 1):
            due = [r for r in self.pending if final or r.due <= time.monotonic()]
            if not due:
                return
            try:
                for item in due:
                    self._settle(item)
                    self.pending.remove(item)
            except psycopg2.Error as exc:
                self.store.close()
                log.warning("could not release claims of exited workers yet: %s",
                            db.one_line(exc, self.database_url))
                if final and attempt < 4:
                    time.sleep(1)
        if final and self.pending:
            log.error("gave up releasing claims of %d exited workers; their leases will expire",
                      len({r.claimant for r in self.pending}))

    def _settle(self, item: PendingRelease) -> None:
        """Settle what an exited worker held, as its ledger tells: outcomes it
        decided but had not written are written (finished work never runs
        again), jobs whose handlers were running spend their attempt (one of
        them may be what killed it), a timed-out job fails its attempt, and
        everything else (not started, or left at the drain's deadline) goes
        back as it was. Every write is fenced on the dead worker's claim."""
        decided = {e.job_id: e for e in item.entries
                   if e.state in (ledger.SUCCEEDED, ledger.FAILED, ledger.SNOOZED)}
        if decided:
            written = self.store.record_outcomes_of(item.claimant, [
                db.Outcome(e.job_id, e.error, e.retry_in_seconds, e.permanent,
                           e.state == ledger.SNOOZED, e.output)
                for e in decided.values()])
            for job_id, new_state, kind in written:
                outcome = outcomes.written_outcome(new_state, decided[job_id])
                log.info("job %d %s %s in %.3fs: outcome written for exited worker %s", job_id,
                         kind, outcome, decided[job_id].seconds, item.claimant)
                # A worker forked later inherits this label child, and
                # prometheus_client moves it to the worker's own file on its
                # first count there (see metrics.enable).
                self._count(item, job_id, kind, outcome, decided[job_id].seconds)
            metrics.record_release("outcome_written", len(written))
            self._count_written_by_worker(item, decided, {job_id for job_id, _, _ in written})
        for state, error in ((ledger.RUNNING, item.death),
                             (ledger.TIMED_OUT, "TimeoutError: the job ran past the timeout"
                              f" of its kind; worker {item.claimant} was replaced")):
            ids = [e.job_id for e in item.entries if e.state == state]
            if not ids:
                continue
            rows = self.store.fail_claims_of_dead([item.claimant], ids, error)
            for job_id, new_state in rows:
                log.warning("job %d, running in exited worker %s, is now %s", job_id,
                            item.claimant, new_state)
            metrics.record_release("dead_worker", len(rows))
        ids = self.store.release_claims_of([item.claimant])
        if ids:
            log.warning("released unfinished jobs %s of %s", ids, item.claimant)
        metrics.record_release("stopped_worker", len(ids))

    def _count_written_by_worker(self, item: PendingRelease, decided: dict[int, ledger.Entry],
                                 written_here: set[int]) -> None:
        """Count the runs whose outcomes the worker wrote but which it died
        before counting: it counts a run right after freeing its entry, so a
        decided entry whose row no longer held the worker's claim is one. The
        row's state says the outcome; a row running again is a claim lost."""
        rest = [job_id for job_id in decided
                if job_id not in written_here and job_id not in item.counted]
        if not rest or not metrics.enabled():
            return
        for job_id, state, kind in self.store.states_of_jobs(rest):
            entry = decided[job_id]
            self._count(item, job_id, kind, outcomes.written_outcome(state, entry),
                        entry.seconds)

    @staticmethod
    def _count(item: PendingRelease, job_id: int, kind: str, outcome: outcomes.Outcome,
               seconds: float) -> None:
        if job_id not in item.counted:
            item.counted.add(job_id)
            metrics.record_run(kind, outcome, seconds)
