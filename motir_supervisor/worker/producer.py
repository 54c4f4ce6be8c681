"""What one worker holds: its claims and their leases (how much it claims is
:mod:`sizing`'s; writing what the runs ended with, :mod:`writing`'s).

The worker's main thread calls these verbs; each database round trip goes
through :mod:`db`, and each job's state is mirrored in the worker's ledger
so that the supervisor can settle it if the worker dies. This module runs no
handler, forks nothing and handles no signal.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from typing import Callable

from .. import db, metrics, registry
from ..ipc import ledger
from ..config import Config
from .executor import Executor
from .claims import Claim, Run
from .batching import (SLOW_BATCH_SECONDS, URGENT_CLAIM_ROWS, URGENT_WATCH_SECONDS, Turnover,
                       next_batch_size, next_round_trip, reserve_size)
from .completer import WRITE_EVERY_SECONDS, OutcomeWriting

log = logging.getLogger("motir_supervisor.worker")

#: A claim in doubt when the connection broke may commit later still; its
#: rows are looked for once more this long after the reconnect.
CLAIM_RECHECK_SECONDS = 2.0
#: The lease alarm goes off this long before the lease would expire.
LEASE_ALARM_MARGIN_SECONDS = 0.5


class Holdings(OutcomeWriting):
    def __init__(self, config: Config, claimant: str, index: int, store: db.JobStore,
                 executor: Executor, entries: ledger.Ledger,
                 stop_check: Callable[[], bool] = lambda: False):
        self.config = config
        self.claimant = claimant
        self.index = index
        self.store = store
        self.executor = executor
        self.ledger = entries
        self.stop_check = stop_check
        self.queues = list(config.queues) or None
        self.batch_size = 1
        #: Every run whose claim is ours until its outcome or release is written.
        self.held: dict[int, Run] = {}
        self._open_claims: list[Claim] = []
        self._to_write: list[Run] = []
        self._to_release: list[Run] = []
        self.lease_confirmed = 0.0
        self.next_renewal = float("inf")
        self._lease_warned = False
        self._alarm_at: float | None = None
        self._claim_in_doubt = False
        self.last_claim_was_short = False
        #: Jobs still to claim before the worker recycles (see recycling): no
        #: claim asks for more, so a worker runs its limit exactly, and a job
        #: given back before it started gives its share back.
        self.claims_left = sys.maxsize
        #: Recycling: slow claims keep their jobs, which run here (see watch).
        self.keep_unstarted = False
        self._has_timeouts: bool | None = None
        #: When the batch size last changed: a claim sent before that says
        #: nothing about the size now, so its close leaves the size alone.
        self._size_changed_at = 0.0
        #: When the oldest outcome still to write was taken from the executor.
        self._unwritten_since = 0.0
        self._recheck_claims_at: float | None = None
        #: When a claim last brought a job ahead of the ones claimed before
        #: it, and the priority of the last job of the latest regular claim
        #: (see URGENT_WATCH_SECONDS).
        self._urgent_seen_at = float("-inf")
        self._last_claimed_priority: int | None = None
        #: The running average of the worker's claims and writes of outcomes.
        self.round_trip = 0.0
        #: The runs taken from the executor lately.
        self.turnover = Turnover()

    # -- claiming ----------------------------------------------------------------

    def room(self) -> int:
        """How many jobs to claim now; 0 when nothing should be.

        That is the free slots, and the reserve of jobs the running ones are
        expected to make room for within RESERVE_SECONDS (see there). With
        every slot taken, the reserve is topped up only once half of it has
        started: a claim per few hundred short jobs, not one per job that
        started. Entries of the ledger that only a write frees can cap a claim
        too; with every slot taken it then waits for that write rather than
        go out small."""
        free = self.executor.free_slots()
        reserve = self._reserve()
        room = min(free + reserve, self.ledger.free_entries(), self.claims_left)
        if free <= 0 and room < max(reserve // 2, 1):
            return 0
        return max(room, 0)

    def _reserve(self) -> int:
        # Only beside running jobs.
        typical = self.executor.run_seconds
        if typical is None or not self.executor.busy:
            return 0
        now = time.monotonic()
        # Runs going on longer than the average say it is out of date.
        seconds = max(typical, self.executor.longest_running(now))
        return reserve_size(self.config.concurrency, seconds, self.batch_size,
                            self.turnover.per_second(now), self.round_trip)

    def _took(self, sent: float) -> None:
        """A round trip sent at ``sent`` came back."""
        self.round_trip = next_round_trip(self.round_trip, time.monotonic() - sent)

    def claim(self, room: int) -> tuple[int, bool]:
        """Claim ``room`` jobs (as room() said just before, > 0), or a whole
        batch for free slots; (jobs claimed, more due after them)."""
        # Slots going empty take a whole batch; a reserve is only topped up.
        if self.executor.free_slots() > 0:
            room = max(room, self.batch_size)
        size = self.batch_size
        if self.watching_for_urgent(time.monotonic()) and room > URGENT_CLAIM_ROWS:
            # Sized down for the watch: the claim's timing says how fast its
            # URGENT_CLAIM_ROWS jobs ran, and the batch size grows from that,
            # not from its own.
            room = size = URGENT_CLAIM_ROWS
        return self._claim(min(room, self.ledger.free_entries(), self.claims_left),
                           limited=False, size=size)

    def claim_limited(self) -> tuple[int, bool]:
        """Claim jobs of limited kinds for the free slots only: one waiting in
        the reserve would hold a slot of its kind, fleet-wide, while it does
        not run. (jobs claimed, more could run than were claimed)."""
        limit = min(self.executor.free_slots(), self.ledger.free_entries(), self.claims_left)
        if limit <= 0:
            return 0, True
        return self._claim(limit, limited=True)

    def watching_for_urgent(self, now: float) -> bool:
        """Whether a claim brought a job ahead of a backlog lately, so that
        claims stay short (see URGENT_WATCH_SECONDS)."""
        return now < self._urgent_seen_at + URGENT_WATCH_SECONDS

    def _claim(self, limit: int, limited: bool, size: int | None = None) -> tuple[int, bool]:
        sent = time.monotonic()
        self._claim_in_doubt = True
        claim_jobs = self.store.claim_limited_jobs if limited else self.store.claim_due_jobs
        jobs, more_due = claim_jobs(self.claimant, limit, self.config.lease_seconds, self.queues)
        self._claim_in_doubt = False
        self._took(sent)
        self.claims_left -= len(jobs)
        if not jobs:
            if not limited:
                # The queue is empty: whatever comes next is shared by every
                # worker it wakes, each growing its claims afresh.
                self._resize(1, sent)
                self._last_claimed_priority = None
            return 0, False
        if not limited:
            # Limited jobs have a lane, and priorities, of their own.
            last = self._last_claimed_priority
            if last is not None and jobs[0].priority < last:
                self._urgent_seen_at = sent
            # Only behind a backlog (due jobs left after this claim): jobs
            # given back, or a queue that ran dry, arm nothing.
            self._last_claimed_priority = jobs[-1].priority if more_due else None
        if not self.held:
            self.lease_confirmed = sent
            self.next_renewal = sent + self.config.renew_every
        claim = Claim(sent, self.batch_size if size is None else size, limit, open=len(jobs),
                      limited=limited)
        claim.runs = [Run(job, claim, self.ledger.claim(job.id),
                          registry.registration_for(job.kind)) for job in jobs]
        for run in claim.runs:
            self.held[run.claimed.id] = run
            metrics.record_claim(run.claimed.queue)
        self._open_claims.append(claim)
        if not limited:
            self.last_claim_was_short = len(jobs) < limit
        if self.stop_check():
            # Claimed while the stop signal landed: nothing starts after it.
            self._withdraw_runs(claim.runs)
        elif time.monotonic() - sent > self.config.renew_every:
            # The claim waited (a lock on the table, a stall): its lease is
            # partly spent before anything started. Give it back instead.
            log.warning("worker %d: the claim took %.1fs; giving its jobs back", self.index,
                        time.monotonic() - sent)
            self._withdraw_runs(claim.runs)
        else:
            # Armed before any handler starts: see update_lease_alarm.
            self._set_alarm(self.lease_confirmed)
            self.executor.submit(claim.runs)
        return len(jobs), more_due

    def _close(self, run: Run, now: float) -> None:
        """One run of its claim ended or was withdrawn; adapt the batch size
        once the whole claim is done."""
        claim = run.claim
        claim.open -= 1
        if claim.open == 0:
            self._open_claims.remove(claim)
            if claim.limited or claim.sent_at < self._size_changed_at:
                return  # sent before the size last changed: it is out of date
            # From its first start to its last end, as the handlers' threads
            # saw them: not the wait behind an earlier claim's runs, nor how
            # soon this thread got round to noticing.
            ran = [r for r in claim.runs if r.started is not None and r.ended]
            took = (max(r.started + r.duration for r in ran) - min(r.started for r in ran)
                    if ran else now - claim.sent_at)
            self._resize(next_batch_size(claim.size, claim.limit, len(claim.runs), took,
                                         self.config.batch_size), now)

    def _resize(self, size: int, now: float) -> None:
        if size != self.batch_size:
            self.batch_size = size
            self._size_changed_at = now

    def withdraw_unstarted(self) -> None:
        """Nothing more starts here; what has not started goes back."""
        self._withdrawn(self.executor.stop_starting())

    def _withdraw_runs(self, runs: list[Run]) -> None:
        wanted = set(runs)
        self._withdrawn(self.executor.withdraw(lambda run: run in wanted))
        # Never submitted at all: withdrawn here rather than by the executor.
        for run in runs:
            if run.started is None and not run.withdrawn:
                run.withdrawn = True
                self._withdrawn([run])

    def _withdrawn(self, runs: list[Run]) -> None:
        now = time.monotonic()
        self.claims_left += len(runs)
        for run in runs:
            self._to_release.append(run)
            self._close(run, now)

    def after_reconnect(self) -> None:
        if self._claim_in_doubt:
            self._claim_in_doubt = False
            self._release_claims_not_held()
            self._recheck_claims_at = time.monotonic() + CLAIM_RECHECK_SECONDS

    def recheck_claims_if_due(self, now: float) -> None:
        if self._recheck_claims_at is not None and now >= self._recheck_claims_at:
            self._recheck_claims_at = None
            self._release_claims_not_held()

    def _release_claims_not_held(self) -> None:
        released = self.store.release_claims_not_held(self.claimant, list(self.held))
        if released:
            log.warning("worker %d: released jobs %s claimed just before the connection"
                        " was lost", self.index, released)

    # -- leases ---------------------------------------------------------------------

    def renew_leases_if_due(self, now: float) -> None:
        if not self.held or now < self.next_renewal:
            return
        sent = time.monotonic()
        renewed = self.store.renew_leases(self.claimant, list(self.held),
                                          self.config.lease_seconds)
        self.lease_confirmed = sent
        self.next_renewal = sent + self.config.renew_every
        self._lease_warned = False
        for job_id, run in self.held.items():
            if run.stopping.value:
                continue
            if job_id not in renewed:
                log.warning("worker %d: lost the claim on job %d; asking its handler to stop",
                            self.index, job_id)
                run.stopping.set()
            elif renewed[job_id]:
                log.info("worker %d: job %d was cancelled; asking its handler to stop",
                         self.index, job_id)
                run.stopping.set()
        # Jobs that have not started and were cancelled, or are no longer
        # ours, never will here: their release makes the cancelled ones
        # cancelled and, fenced, leaves the lost ones to their new owner.
        self._withdrawn(self.executor.withdraw(lambda run: run.stopping.value))

    def update_lease_alarm(self) -> None:
        """Have the kernel end this process just before the lease expires.

        Renewals may block on an unreachable database, and a blocked thread
        cannot check the time; SIGALRM at its default action ends the process
        whatever it is doing. Once its lease has expired, another supervisor
        may run the job, and every run here must be over by then. The alarm
        is armed while any handler runs, from the last confirmed lease.
        """
        self._set_alarm(self.lease_confirmed if self.executor.busy else None)

    def _set_alarm(self, confirmed_at: float | None) -> None:
        at = (None if confirmed_at is None
              else confirmed_at + self.config.lease_seconds - LEASE_ALARM_MARGIN_SECONDS)
        if at == self._alarm_at:
            return
        self._alarm_at = at
        left = 0.0 if at is None else max(at - time.monotonic(), 0.001)
        signal.setitimer(signal.ITIMER_REAL, left)

    # -- watching the clock ------------------------------------------------------------

    def watch(self, now: float) -> bool:
        """Slow claims, lapsing leases, timeouts; True when a sync run has just
        run past its timeout (the worker must then replace itself)."""
        for claim in list(self._open_claims):
            # A recycling worker gives nothing back: it claims no more, so
            # what it holds waits no longer than its own runs take.
            if (not claim.checked and now - claim.sent_at > SLOW_BATCH_SECONDS
                    and not self.keep_unstarted):
                claim.checked = True
                unstarted = [run for run in claim.runs if run.started is None]
                if unstarted:
                    # They would wait for a slow run: let other workers have them.
                    self._resize(1, now)
                    self._withdraw_runs(unstarted)
        lease, every = self.config.lease_seconds, self.config.renew_every
        if self.held and now - self.lease_confirmed > lease - every:
            # Renewals keep failing: the claims may soon be someone else's,
            # so nothing more starts, and running handlers are asked to stop.
            if not self._lease_warned and self.executor.busy:
                log.error("worker %d: its lease runs out in %.1fs without a renewal;"
                          " asking its handlers to stop", self.index,
                          lease - (now - self.lease_confirmed))
                self._lease_warned = True
            self._withdrawn(self.executor.withdraw(lambda run: True))
            for run in self.executor.running():
                run.stopping.set()
        return self._time_out_runs(now)

    def _time_out_runs(self, now: float) -> bool:
        if self._has_timeouts is None:
            self._has_timeouts = any(registry.registration_for(kind).timeout
                                     for kind in registry.registered_kinds())
        if not self._has_timeouts:
            return False
        timed_out = False
        for run in self.executor.running():
            if run.is_async or run.timed_out or now < run.timeout_at:
                continue
            if self.executor.time_out(run):
                metrics.record_run(run.claimed.kind, "timed out", run.duration)
                self._log(run, "timed out", f"ran past its timeout of"
                          f" {run.registration.timeout:g}s")
                timed_out = True
        return timed_out

    def anything_running(self) -> bool:
        """A handler is still running, other than one left behind after its timeout."""
        return any(not run.timed_out for run in self.executor.running())

    def next_timer(self) -> float:
        timers = [float("inf")]
        if self.held:
            timers += [self.next_renewal,
                       self.lease_confirmed + self.config.lease_seconds - self.config.renew_every]
        timers += [claim.sent_at + SLOW_BATCH_SECONDS for claim in self._open_claims
                   if not claim.checked]
        if self._has_timeouts:
            timers += [run.timeout_at for run in self.executor.running() if not run.is_async]
        oldest = self._oldest_unwritten()
        if oldest is not None:
            timers.append(oldest + WRITE_EVERY_SECONDS)
        if self._recheck_claims_at is not None:
            timers.append(self._recheck_claims_at)
        return min(timers)
