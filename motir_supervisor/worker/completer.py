"""Writing what a worker's runs ended with: the outcomes, shared by the
runs that end close together, and the releases of runs that never started.

A part of :class:`holdings.Holdings`, kept apart because it is a role of its
own: it takes the ended runs from the executor and settles them in the
database and the ledger; the claims they came in are the rest of Holdings'.
"""

from __future__ import annotations

import logging
import time

import psycopg2

from .. import db, metrics, outcomes
from ..ipc import ledger
from .claims import Run

log = logging.getLogger("motir_supervisor.worker")

#: While other runs go on, ended runs' outcomes wait this long to share one
#: write: a statement per few runs, not per run, is what keeps short jobs
#: fast. They are safe meanwhile: the ledger holds them, and a worker's
#: supervisor writes them if it dies. A worker with nothing left running
#: writes at once.
WRITE_EVERY_SECONDS = 0.02


class OutcomeWriting:
    def write_finished(self, now_or_never: bool = False) -> None:
        """Write the ended runs' outcomes not written yet: one statement for
        the successes, one for the other outcomes, one for the runs that
        stopped at a checkpoint. While others run, only once
        WRITE_EVERY_SECONDS have passed (see there), unless ``now_or_never``."""
        now = time.monotonic()
        if not now_or_never and self._may_wait(now):
            return
        self.collect_finished()
        if not self._to_write:
            return
        recorded = [run for run in self._to_write if run.decision.state != ledger.RELEASE]
        # The successes and the other outcomes go in statements of their
        # own (see db.JobStore.record_outcomes_of), and each is settled as
        # soon as it is written, so a failure of the second leaves only its
        # own runs to write again.
        succeeded = [run for run in recorded if run.decision is outcomes.SUCCESS]
        others = [run for run in recorded if run.decision is not outcomes.SUCCESS]
        for runs, record in ((succeeded, self._record_successes), (others, self._record_outcomes)):
            if runs:
                sent = time.monotonic()
                ended = record(runs)
                self._took(sent)
                self._count_and_settle(ended)
                self._to_write = [r for r in self._to_write if not r.written]
                self._log_ended(ended)
        if self._to_write:
            stopped = self._to_write
            self.store.release_claims_of([self.claimant], [run.claimed.id for run in stopped])
            ended = [(run, "released") for run in stopped]
            self._count_and_settle(ended)
            self._to_write = []
            self._log_ended(ended)

    def _record_successes(self, runs: list[Run]) -> list[tuple[Run, str]]:
        """Write the successes of runs that returned; (run, outcome) for each."""
        written = self.store.record_successes(self.claimant, [run.claimed.id for run in runs])
        return [(run, "succeeded" if run.claimed.id in written else "lost") for run in runs]

    def _record_outcomes(self, runs: list[Run]) -> list[tuple[Run, str]]:
        """Write the outcomes of runs that did not simply succeed; (run,
        outcome) for each."""
        states = self.store.record_outcomes(self.claimant, [
            outcomes.as_outcome(run.claimed.id, run.decision) for run in runs])
        return [(run, outcomes.outcome_of(states.get(run.claimed.id),
                                          run.decision.state == ledger.SNOOZED))
                for run in runs]

    def collect_finished(self) -> None:
        """Take the ended runs from the executor, their outcomes to be
        written: done before every claim, so that the batch size follows the
        claims that have ended rather than the writes."""
        since = self.executor.finished_since()
        finished = self.executor.take_finished()
        if finished:
            now = time.monotonic()
            self.turnover.add(now, len(finished))
            if not self._to_write:
                self._unwritten_since = now if since is None else since
            for run in finished:
                self._close(run, now)
            self._to_write.extend(finished)

    def _may_wait(self, now: float) -> bool:
        """Whether ended runs' outcomes may wait for more to share their write."""
        if not self.executor.busy or self.ledger.free_entries() < self.config.concurrency:
            return False
        oldest = self._oldest_unwritten()
        return oldest is None or now < oldest + WRITE_EVERY_SECONDS

    def _oldest_unwritten(self) -> float | None:
        """When the oldest ended run whose outcome is not written yet ended."""
        times = [self._unwritten_since] if self._to_write else []
        since = self.executor.finished_since()
        if since is not None:
            times.append(since)
        return min(times, default=None)

    def release_withdrawn(self) -> None:
        """Give back the claims of runs that never started here."""
        if not self._to_release:
            return
        runs = self._to_release
        ids = [run.claimed.id for run in runs]
        self.store.release_claims_of([self.claimant], ids)
        self._settle(runs)
        self._to_release = []
        log.info("worker %d released jobs %s before starting them", self.index, ids)
        metrics.record_release("not_started", len(ids))

    def has_unwritten(self) -> bool:
        return bool(self._to_write or self._to_release)

    def _settle(self, runs: list[Run]) -> None:
        for run in runs:
            self._settle_one(run)

    def _settle_one(self, run: Run) -> None:
        run.written = True
        self.held.pop(run.claimed.id, None)
        self.ledger.release(run.entry)

    def _count_and_settle(self, ended: list[tuple[Run, str]]) -> None:
        """Free each written run's ledger entry and count the run in the
        fleet's metrics right after: an entry the supervisor finds still in
        use after a SIGKILL is a run not counted yet, which it counts (see
        settling), and a kill between the two loses a count, never adds one."""
        for run, outcome in ended:
            self._settle_one(run)
            metrics.record_run(run.claimed.kind, outcome, run.duration)

    def _log_ended(self, ended: list[tuple[Run, str]]) -> None:
        outcomes.log_successes([self._line(run, "succeeded")
                                for run, outcome in ended if outcome == "succeeded"])
        for run, outcome in ended:
            if outcome != "succeeded":
                self._log(run, outcome, run.decision.summary)

    def _line(self, run: Run, outcome: str, detail: str = "") -> str:
        job = run.claimed
        return outcomes.outcome_line(job.id, job.kind, job.attempt, job.max_attempts, outcome,
                                     run.duration, detail)

    def _log(self, run: Run, outcome: str, detail: str = "") -> None:
        if outcome == "lost":
            detail = "the claim was no longer this worker's; outcome not recorded"
        outcomes.log_outcome(self._line(run, outcome, detail), outcome)

    def settle_before_exit(self) -> None:
        """One last try at writing; what fails is left to the supervisor,
        which finds it in the ledger once this process is gone."""
        try:
            self.write_finished(now_or_never=True)
            self.release_withdrawn()
        except psycopg2.Error as exc:
            log.warning("worker %d: could not write its last outcomes (%s); its supervisor"
                        " will", self.index, db.one_line(exc, self.config.database_url))

    def abandon_running(self) -> None:
        """The drain's deadline passed: what still runs is given back by the
        supervisor once this process has exited."""
        left = self.executor.abandon()
        self.settle_before_exit()
        log.warning("worker %d: drain deadline passed with jobs %s still running; their"
                    " claims are released as this worker exits", self.index,
                    sorted(run.claimed.id for run in left))
