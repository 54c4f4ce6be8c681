"""Writing what a worker's runs ended with: the outcomes, shared by the runs
that end close together, and the releases of runs that never started.

The producer hands the completer the runs the executor ended and the ones
it withdrew; the completer writes them through :mod:`..db`, each write
fenced on this worker's claim, and tells :class:`.holdings.Holdings` which
runs are settled once they are written. Successes of limited kinds are
written through the hand-on, which claims their keys' next jobs in the same
statement: those the completer gives to the holdings, for the producer to
start. The worker's main thread calls it and owns every field here. It
makes no claim of its own choosing, starts no run and runs no handler.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

import psycopg2

from .. import db, metrics, outcomes
from ..outcomes import Outcome
from ..config import Config
from ..ipc import ledger
from . import running
from .batching import RoundTrips
from .claims import Claim, Run
from .executor import Executor
from .holdings import Holdings

log = logging.getLogger(__name__)

#: Classes of SQLSTATE by which the database refuses a value itself (data
#: exceptions; program limits, such as nesting past its stack), as opposed
#: to its own state (a lost connection, a shutdown, a read-only node).
REFUSED_VALUES = frozenset({"22", "54"})

#: While other runs go on, ended runs' outcomes wait this long to share one
#: write: a statement per few runs, not per run, is what keeps short jobs
#: fast. They are safe meanwhile: the ledger holds them, and a worker's
#: supervisor writes them if it dies. A worker with nothing left running
#: writes at once.
WRITE_EVERY_SECONDS = 0.02


class Completer:
    def __init__(self, config: Config, claimant: str, index: int, store: db.JobStore,
                 executor: Executor, holdings: Holdings, round_trips: RoundTrips,
                 stop_check: Callable[[], bool] = lambda: False):
        self.config = config
        self.claimant = claimant
        self.index = index
        self.store = store
        self.executor = executor
        #: What the worker holds: told of each run written, and given what
        #: the hand-on claims.
        self.holdings = holdings
        self.round_trips = round_trips
        #: Whether the stop signal has landed (the worker's check): the
        #: hand-on then claims nothing.
        self.stop_check = stop_check
        self.queues = list(config.queues) or None
        #: Ended runs whose outcomes are still to write, and since when the
        #: oldest of them waits.
        self._to_write: list[Run] = []
        self._unwritten_since = 0.0
        #: Withdrawn runs whose claims are still to give back.
        self._to_release: list[Run] = []

    def add_ended(self, runs: list[Run], since: float) -> None:
        """Runs the executor ended, the first of them at ``since``."""
        if not self._to_write:
            self._unwritten_since = since
        self._to_write.extend(runs)

    def release_later(self, runs: list[Run]) -> None:
        """Runs that will never start here: their claims go back."""
        self._to_release.extend(runs)

    def write_finished(self, now_or_never: bool = False) -> None:
        """Write the ended runs' outcomes not written yet: one statement for
        the successes, one for the other outcomes, one for the runs that
        stopped at a checkpoint. While others run, only once
        WRITE_EVERY_SECONDS have passed (see there), unless ``now_or_never``."""
        now = time.monotonic()
        if not now_or_never and self._may_wait(now):
            return
        if not self._to_write:
            return
        recorded = [run for run in self._to_write if run.decision.state != ledger.RELEASE]
        # The successes and the other outcomes go in statements of their
        # own (see db.JobStore.record_outcomes_of), and each is settled as
        # soon as it is written, so a failure of the second leaves only its
        # own runs to write again.
        succeeded = [run for run in recorded if run.decision is outcomes.SUCCESS]
        others = [run for run in recorded if run.decision is not outcomes.SUCCESS]
        if any(run.completed or run.output_json is not None for run in succeeded):
            # Runs whose handlers committed their success in their own
            # transaction are written already; those that returned a value
            # go in a statement of their own, which writes the outputs too.
            completed = [(run, Outcome.SUCCEEDED) for run in succeeded if run.completed]
            if completed:
                self._count_and_settle(completed)
                self._to_write = [r for r in self._to_write if not r.written]
                _log_ended(completed)
            returned = [run for run in succeeded
                        if not run.completed and run.output_json is not None]
            succeeded = [run for run in succeeded
                         if not run.completed and run.output_json is None]
        else:
            returned = []
        for runs, record in ((returned, self._record_with_outputs),
                             (succeeded, self._record_successes),
                             (others, self._record_outcomes)):
            if runs:
                sent = time.monotonic()
                ended = record(runs)
                self.round_trips.took(sent)
                self._count_and_settle(ended)
                self._to_write = [r for r in self._to_write if not r.written]
                _log_ended(ended)
        if self._to_write:
            stopped = self._to_write
            self.store.release_claims_of([self.claimant], [run.claimed.id for run in stopped])
            ended = [(run, Outcome.RELEASED) for run in stopped]
            self._count_and_settle(ended)
            self._to_write = []
            _log_ended(ended)

    def _record_successes(self, runs: list[Run]) -> list[tuple[Run, Outcome]]:
        """Write the successes of runs that returned nothing; (run, outcome)
        for each. Where some came from a limited claim, the write hands their
        keys' slots on to the keys' next jobs (see _write_handing_on)."""
        return self._write_successes(runs, hand_on=True, outputs=False)

    def _record_with_outputs(self, runs: list[Run]) -> list[tuple[Run, Outcome]]:
        """Write the successes of runs that returned a value, with their
        outputs. A value the database refuses although outcomes.output_json
        took it (nested deeper than the server's stack allows, a number past
        numeric's range) must not keep these successes out: the runs are
        written again one by one, each settled as soon as its statement
        returns (so a break partway leaves only the others to write), and the
        one refused without its output. Where some came from a limited claim,
        the write hands their keys' slots on, as _record_successes does."""
        try:
            return self._write_successes(runs, hand_on=True, outputs=True)
        except psycopg2.Error as exc:
            if not _refused(exc):
                raise  # the database's state, not a value: written again later
        for run in runs:
            ended = self._record_one_with_output(run)
            self._count_and_settle(ended)
            self._to_write.remove(run)
            _log_ended(ended)
        return []

    def _record_one_with_output(self, run: Run) -> list[tuple[Run, Outcome]]:
        # The hand-on's statement runs deeper on the server's stack than
        # record_successes_with_output, so a value it refuses may still be
        # stored by the latter, which hands nothing on.
        for hand_on in ((True, False) if run.claim.limited else (False,)):
            try:
                return self._write_successes([run], hand_on, outputs=True)
            except psycopg2.Error as exc:
                if not _refused(exc):
                    raise
                refused = exc
        job = run.claimed
        log.warning("worker %d: the database refused the output of job %d %s (%s); it"
                    " succeeded with its output empty", self.index, job.id, job.kind,
                    db.one_line(refused, self.config.database_url))
        return self._write_successes([run], hand_on=False, outputs=False)

    def _write_successes(self, runs: list[Run], hand_on: bool,
                         outputs: bool) -> list[tuple[Run, Outcome]]:
        """One statement writing these successes, with the runs' outputs or
        without; through the hand-on when asked and some came from a limited
        claim. (run, outcome) for each."""
        ids = [run.claimed.id for run in runs]
        values = [run.output_json for run in runs] if outputs else None
        if hand_on and any(run.claim.limited for run in runs):
            written = self._write_handing_on(ids, values,
                                             db.generations_of(run.claimed for run in runs))
        else:
            written = self.store.record_successes(self.claimant, ids, values)
        return [(run, Outcome.SUCCEEDED if run.claimed.id in written else Outcome.LOST)
                for run in runs]

    def _write_handing_on(self, ids: list[int], outputs: list[str | None] | None,
                          generations: dict[str, int | None]) -> set[int]:
        """Write the successes of these runs, some of them of limited kinds,
        with their ``outputs`` if given (as db.JobStore.record_successes takes
        them) and the ``generations`` their claims gave them (see
        db.generations_of), claiming the next due job of each key whose run
        succeeded (kinds limited per key only; see
        db.JobStore.record_successes_handing_on): such a key's next job waits
        for no claim. The ids written.

        The next jobs take the places of the runs that ended, so the worker
        holds no more than it did; they wait no longer than any claimed job
        (see producer.Producer.give_back_slow_claims). The runs written are
        still held as the jobs are, so the leases renew from where they did."""
        holdings = self.holdings
        room = 0 if self.stop_check() else min(len(ids), holdings.capacity())
        if room <= 0:
            return self.store.record_successes(self.claimant, ids, outputs)
        sent = time.monotonic()
        # A claim as any other: if the connection breaks, its rows may be
        # this worker's unknown to it (see recheck.ClaimRecheck).
        holdings.claim_sent()
        try:
            written, jobs = self.store.record_successes_handing_on(
                self.claimant, ids, room, self.config.lease_seconds, self.queues, outputs,
                generations)
        except psycopg2.Error as exc:
            if exc.pgcode is not None:
                # The server refused the statement (a value it cannot store,
                # say), which then claimed nothing.
                holdings.claim_answered()
            raise
        holdings.claim_answered()
        if jobs:
            # Sized by what ended, not by a batch size, which it leaves alone.
            holdings.hold_handed_on(jobs, Claim(sent, len(jobs), len(jobs), open=len(jobs),
                                                limited=True, handed_on=True))
        return written

    def _record_outcomes(self, runs: list[Run]) -> list[tuple[Run, Outcome]]:
        """Write the outcomes of runs that did not simply succeed; (run,
        outcome) for each."""
        states = self.store.record_outcomes(self.claimant, [
            running.as_outcome(run.claimed.id, run.decision) for run in runs])
        return [(run, outcomes.outcome_of(states.get(run.claimed.id),
                                          run.decision.state == ledger.SNOOZED))
                for run in runs]

    def _may_wait(self, now: float) -> bool:
        """Whether ended runs' outcomes may wait for more to share their write."""
        if not self.executor.busy or self.holdings.free_entries() < self.config.concurrency:
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

    def next_timer(self) -> float:
        oldest = self._oldest_unwritten()
        return float("inf") if oldest is None else oldest + WRITE_EVERY_SECONDS

    def release_withdrawn(self) -> None:
        """Give back the claims of runs that never started here."""
        if not self._to_release:
            return
        runs = self._to_release
        ids = [run.claimed.id for run in runs]
        self.store.release_claims_of([self.claimant], ids)
        for run in runs:
            self.holdings.settle(run)
        self._to_release = []
        log.info("worker %d released jobs %s before starting them", self.index, ids)
        metrics.record_release("not_started", len(ids))

    def has_unwritten(self) -> bool:
        return bool(self._to_write or self._to_release)

    def _count_and_settle(self, ended: list[tuple[Run, Outcome]]) -> None:
        """Free each written run's ledger entry and count the run in the
        fleet's metrics right after: an entry the supervisor finds still in
        use after a SIGKILL is a run not counted yet, which it counts (see
        supervisor.rescuer), and a kill between the two loses a count, never
        adds one."""
        settle = self.holdings.settle
        for run, outcome in ended:
            settle(run)
            metrics.record_run(run.claimed.kind, outcome, run.duration, run.claimed.queue,
                               run.waited())


def log_run(run: Run, outcome: Outcome, detail: str = "") -> None:
    """The log line of a run that did not simply succeed."""
    if outcome == Outcome.LOST:
        detail = "the claim was no longer this worker's; outcome not recorded"
    outcomes.log_outcome(_line(run, outcome, detail), outcome)


def _line(run: Run, outcome: Outcome, detail: str = "") -> str:
    job = run.claimed
    return outcomes.outcome_line(job.id, job.kind, job.attempt, job.max_attempts, outcome,
                                 run.duration, detail)


def _refused(exc: psycopg2.Error) -> bool:
    """Whether the database refused a value sent (not its state)."""
    return exc.pgcode is not None and exc.pgcode[:2] in REFUSED_VALUES


def _log_ended(ended: list[tuple[Run, Outcome]]) -> None:
    outcomes.log_successes([_line(run, Outcome.SUCCEEDED)
                            for run, outcome in ended if outcome == Outcome.SUCCEEDED])
    for run, outcome in ended:
        if outcome != Outcome.SUCCEEDED:
            log_run(run, outcome, run.decision.summary)
