"""The producer of a worker: it claims jobs for the executor's slots.

How many (the free slots, a reserve beside the running jobs, whole
batches for jobs that take no time; the numbers are :mod:`.batching`'s),
from which lane (the regular claim, or the limited one for kinds with a
``max_running``, a ``max_running_per_key`` or a ``rate_limit``), and what
goes back before it starts (a slow claim's waiting jobs, a stop's, a lost
claim's). Each job it claims is mirrored in
the worker's ledger so that the supervisor can settle it if the worker
dies. The worker's main thread calls these verbs and owns every field
here. The producer runs no handler, writes no outcome (:mod:`.completer`
does) and renews no lease (:mod:`.leases` does).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Callable

import psycopg2

from .. import db, metrics, registry
from ..config import Config
from ..ipc import ledger
from .batching import (SLOW_BATCH_SECONDS, URGENT_CLAIM_ROWS, URGENT_WATCH_SECONDS, RoundTrips,
                       Turnover, next_batch_size, reserve_size)
from .claims import Claim, Run
from .completer import Completer
from .executor import Executor
from .leases import Leases
from .poller import Poller

log = logging.getLogger("motir_supervisor.worker")

#: While any kind is limited, a worker with room tries the limited claim at
#: least this often, whatever it heard.
LIMITED_CLAIM_BACKSTOP_SECONDS = 1.0
#: At most this many rows per limited claim: limited claims run one at a
#: time fleet-wide, so each one holds every other back while it runs.
LIMITED_CLAIM_ROWS = 128
#: Limited claims in a row that may come back empty and still be followed
#: at once by another (one that parked rows, or walked only part of the
#: keys); after that, the next waits for a wake-up or the backstop.
EMPTY_LIMITED_CLAIMS = 3
#: A claim in doubt when the connection broke may commit later still; its
#: rows are looked for once more this long after the reconnect.
CLAIM_RECHECK_SECONDS = 2.0


class Producer:
    def __init__(self, config: Config, claimant: str, index: int, store: db.JobStore,
                 executor: Executor, entries: ledger.Ledger, held: dict[int, Run],
                 completer: Completer, leases: Leases, poller: Poller,
                 round_trips: RoundTrips, stop_check: Callable[[], bool] = lambda: False):
        self.config = config
        self.claimant = claimant
        self.index = index
        self.store = store
        self.executor = executor
        self.ledger = entries
        #: Every run whose claim is this worker's until its outcome or
        #: release is written: added here, removed by the completer, read by
        #: the leases.
        self.held = held
        self.completer = completer
        self.leases = leases
        #: Says whether a claim could find work now, and hears of more.
        self.poller = poller
        self.round_trips = round_trips
        #: Whether the stop signal has landed (the worker's check).
        self.stop_check = stop_check
        self.queues = list(config.queues) or None
        #: Whether any kind is limited, fleet-wide (job_queue_limits): the
        #: worker sets it from what the database says.
        self.limits_exist = False
        self._next_limited_claim = 0.0
        #: Limited claims in a row that came back empty.
        self._empty_limited_claims = 0
        self.batch_size = 1
        #: The limited lane's own batch size: its claims come up short
        #: whenever keys or kinds are full, which says nothing of the regular
        #: lane, and an empty regular claim says nothing of the limited one.
        self.limited_batch_size = 1
        #: Claims with runs neither ended nor withdrawn yet.
        self._open_claims: list[Claim] = []
        self._claim_in_doubt = False
        self._recheck_claims_at: float | None = None
        self.last_claim_was_short = False
        #: Jobs still to claim before the worker recycles (see recycling): no
        #: claim asks for more, so a worker runs its limit exactly, and a job
        #: given back before it started gives its share back.
        self.claims_left = sys.maxsize
        #: Recycling: slow claims keep their jobs, which run here.
        self.keep_unstarted = False
        #: When each lane's batch size (by ``limited``) last changed: a claim
        #: sent before that says nothing about the size now, so its close
        #: leaves the size alone.
        self._size_changed_at = {False: 0.0, True: 0.0}
        #: When a claim last brought a job ahead of the ones claimed before
        #: it, and the priority of the last job of the latest regular claim
        #: (see URGENT_WATCH_SECONDS).
        self._urgent_seen_at = float("-inf")
        self._last_claimed_priority: int | None = None
        #: The runs taken from the executor lately.
        self.turnover = Turnover()

    # -- claiming ----------------------------------------------------------------

    def claim_while_room(self, stopping: Callable[[], bool]) -> bool:
        """Claim while there is room and, the poller says, work; True when a
        claim came back empty (the worker then goes idle). ``stopping`` is
        asked before each claim: a stop may land during one."""
        poller = self.poller
        while (room := self._room_to_claim(stopping())) > 0:
            now = time.monotonic()
            limited_goes_on = False
            if self.limits_exist and (poller.limited_may_have_work
                                      or now >= self._next_limited_claim):
                # The backstop: a wake-up lost (or never sent: --no-listen)
                # delays a limited job by a second at most.
                self._next_limited_claim = now + LIMITED_CLAIM_BACKSTOP_SECONDS
                claimed, more_due = self.claim_limited(room)
                self._empty_limited_claims = 0 if claimed else self._empty_limited_claims + 1
                # One that keeps coming back empty saying more is due (rows
                # another transaction holds, say) waits for the backstop.
                more_due = more_due and self._empty_limited_claims <= EMPTY_LIMITED_CLAIMS
                poller.limited_may_have_work = more_due
                if more_due and claimed:
                    poller.kick()
                if claimed:
                    poller.claimed()
                    # The regular claim takes its turn before the next
                    # limited one: a backlog of limited jobs never holds
                    # the other jobs back.
                    if (room := self._room_to_claim(stopping())) <= 0:
                        continue
                    limited_goes_on = more_due
                else:
                    # Nothing claimed for free slots, so it parked rows or
                    # stopped its walk of the keys short: it goes on once
                    # the worker has written what ended meanwhile, after the
                    # regular claim. (With none free, more_due is the jobs
                    # waiting for a free slot.)
                    limited_goes_on = more_due and self.executor.free_slots() > 0
            claimed, more_due = self.claim(room)
            if more_due:
                poller.kick()
            if not claimed:
                if limited_goes_on:
                    return False
                poller.may_have_work = False
                return True
            poller.claimed()
            if self.last_claim_was_short:
                poller.may_have_work = False
        return False

    def _room_to_claim(self, stopping: bool) -> int:
        """How many jobs to claim now (computed once: the reserve moves with
        the clock); 0 for none."""
        # Ended claims first: the batch size follows them, not the writes.
        self.collect_finished()
        if not self.poller.may_have_work or stopping:
            return 0
        return self.room()

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
                            self.turnover.per_second(now), self.round_trips.average)

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

    def claim_limited(self, room: int) -> tuple[int, bool]:
        """Claim jobs of limited kinds: for the free slots only where a kind
        has a max_running or a rate limit (one waiting in the reserve would
        hold a slot of the kind, or a start, while it does not run), for
        ``room`` where it is limited per key only (such a job holds only its
        own key). (jobs claimed, more could run than were claimed)."""
        cap = min(self.ledger.free_entries(), self.claims_left)
        free = min(self.executor.free_slots(), cap)
        if free > 0:
            room = max(room, self.limited_batch_size)  # as claim() sizes its own
        limit = min(max(room, free), cap, LIMITED_CLAIM_ROWS)
        if limit <= 0:
            return 0, True
        return self._claim(limit, limited=True, size=self.limited_batch_size,
                           free=max(free, 0))

    def watching_for_urgent(self, now: float) -> bool:
        """Whether a claim brought a job ahead of a backlog lately, so that
        claims stay short (see URGENT_WATCH_SECONDS)."""
        return now < self._urgent_seen_at + URGENT_WATCH_SECONDS

    def _claim(self, limit: int, limited: bool, size: int | None = None,
               free: int = 0) -> tuple[int, bool]:
        sent = time.monotonic()
        self._claim_in_doubt = True
        if limited:
            jobs, more_due = self.store.claim_limited_jobs(
                self.claimant, limit, self.config.lease_seconds, self.queues, free)
        else:
            jobs, more_due = self.store.claim_due_jobs(
                self.claimant, limit, self.config.lease_seconds, self.queues)
        self._claim_in_doubt = False
        self.round_trips.took(sent)
        if not jobs:
            if limited:
                return 0, more_due
            # The queue is empty: whatever comes next is shared by every
            # worker it wakes, each growing its claims afresh.
            self._resize(1, sent)
            self._last_claimed_priority = None
            return 0, False
        if limited:
            claim = Claim(sent, self.limited_batch_size if size is None else size, limit,
                          open=len(jobs), limited=True)
        else:
            # Limited jobs have a lane, and priorities, of their own.
            last = self._last_claimed_priority
            if last is not None and jobs[0].priority < last:
                self._urgent_seen_at = sent
            # Only behind a backlog (due jobs left after this claim): jobs
            # given back, or a queue that ran dry, arm nothing.
            self._last_claimed_priority = jobs[-1].priority if more_due else None
            self.last_claim_was_short = len(jobs) < limit
            claim = Claim(sent, self.batch_size if size is None else size, limit, open=len(jobs))
        self._take(jobs, claim)
        return len(jobs), more_due

    def write_handing_on(self, ids: list[int], outputs: list[str | None] | None = None,
                         generations: dict[str, int | None] | None = None) -> set[int]:
        """Write the successes of these runs, some of them of limited kinds,
        with their ``outputs`` if given (as db.JobStore.record_successes takes
        them) and the ``generations`` their claims gave them (see
        db.generations_of), claiming the next due job of each key whose run
        succeeded (kinds limited per key only; see
        db.JobStore.record_successes_handing_on): such a key's next job waits
        for no claim. The ids written.

        The next jobs take the places of the runs that ended, so the worker
        holds no more than it did; they wait no longer than any claimed job
        (see give_back_slow_claims)."""
        room = 0 if self.stop_check() else min(
            len(ids), self.ledger.free_entries(), self.claims_left)
        if room <= 0:
            return self.store.record_successes(self.claimant, ids, outputs)
        sent = time.monotonic()
        # A claim as any other: if the connection breaks, its rows may be
        # this worker's unknown to it (see after_reconnect).
        self._claim_in_doubt = True
        try:
            written, jobs = self.store.record_successes_handing_on(
                self.claimant, ids, room, self.config.lease_seconds, self.queues, outputs,
                generations)
        except psycopg2.Error as exc:
            if exc.pgcode is not None:
                # The server refused the statement (a value it cannot store,
                # say), which then claimed nothing.
                self._claim_in_doubt = False
            raise
        self._claim_in_doubt = False
        if jobs:
            # Sized by what ended, not by a batch size, which it leaves alone.
            self._take(jobs, Claim(sent, self.limited_batch_size, len(jobs), open=len(jobs),
                                   limited=True, handed_on=True))
        return written

    def _take(self, jobs: list[db.ClaimedJob], claim: Claim) -> None:
        """Hold the jobs a statement claimed, and start them."""
        sent = claim.sent_at
        self.claims_left -= len(jobs)
        self.leases.claimed(sent)
        claim.runs = [Run(job, claim, self.ledger.claim(job.id),
                          registry.registration_for(job.kind)) for job in jobs]
        for run in claim.runs:
            self.held[run.claimed.id] = run
            metrics.record_claim(run.claimed.queue)
        self._open_claims.append(claim)
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
            # Armed before any handler starts: see Leases.update_alarm.
            self.leases.arm()
            self.executor.submit(claim.runs)

    def _close(self, run: Run, now: float) -> None:
        """One run of its claim ended or was withdrawn; adapt the batch size
        once the whole claim is done."""
        claim = run.claim
        claim.open -= 1
        if claim.open == 0:
            self._open_claims.remove(claim)
            if claim.sent_at < self._size_changed_at[claim.limited] or claim.handed_on:
                return  # sent before the size last changed: it is out of date
            # From its first start to its last end, as the handlers' threads
            # saw them: not the wait behind an earlier claim's runs, nor how
            # soon this thread got round to noticing.
            ran = [(r.started, r.duration) for r in claim.runs
                   if r.started is not None and r.ended]
            took = (max(started + duration for started, duration in ran)
                    - min(started for started, _ in ran) if ran else now - claim.sent_at)
            if not claim.limited:
                self._resize(next_batch_size(claim.size, claim.limit, len(claim.runs), took,
                                             self.config.batch_size), now)
            elif len(claim.runs) == claim.limit or took > SLOW_BATCH_SECONDS:
                # A limited claim short of its limit met full keys or kinds,
                # not a dry lane: only a full or a slow one says something.
                self._resize(next_batch_size(claim.size, claim.limit, len(claim.runs), took,
                                             LIMITED_CLAIM_ROWS), now, limited=True)

    def _resize(self, size: int, now: float, limited: bool = False) -> None:
        if size != (self.limited_batch_size if limited else self.batch_size):
            if limited:
                self.limited_batch_size = size
            else:
                self.batch_size = size
            self._size_changed_at[limited] = now

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
            self.completer.release_later(run)
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

    def withdraw(self, wanted: Callable[[Run], bool]) -> None:
        """The ready runs ``wanted`` selects never start here: they go back."""
        self._withdrawn(self.executor.withdraw(wanted))

    def collect_finished(self) -> None:
        """Take the ended runs from the executor for the completer to write:
        done before every claim and every write, so that the batch size
        follows the claims that have ended rather than the writes."""
        since = self.executor.finished_since()
        finished = self.executor.take_finished()
        if finished:
            now = time.monotonic()
            self.turnover.add(now, len(finished))
            self.completer.add_ended(finished, now if since is None else since)
            for run in finished:
                self._close(run, now)

    def give_back_slow_claims(self, now: float) -> None:
        """A claim whose jobs have not all started after SLOW_BATCH_SECONDS
        waits for a slow run: its waiting jobs go to other workers."""
        for claim in list(self._open_claims):
            # A recycling worker gives nothing back: it claims no more, so
            # what it holds waits no longer than its own runs take.
            if (not claim.checked and now - claim.sent_at > SLOW_BATCH_SECONDS
                    and not self.keep_unstarted):
                claim.checked = True
                unstarted = [run for run in claim.runs if run.started is None]
                if unstarted:
                    self._resize(1, now, limited=claim.limited)
                    self._withdraw_runs(unstarted)

    def next_timer(self) -> float:
        # A recycling worker gives nothing back (see give_back_slow_claims):
        # no timer for it, or its loop would spin while a slow run goes on.
        timers = [claim.sent_at + SLOW_BATCH_SECONDS for claim in self._open_claims
                  if not claim.checked and not self.keep_unstarted]
        if self._recheck_claims_at is not None:
            timers.append(self._recheck_claims_at)
        return min(timers, default=float("inf"))
