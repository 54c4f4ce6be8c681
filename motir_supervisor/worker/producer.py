"""The producer of a worker: it claims jobs for the executor's slots.

How many (the free slots, a reserve beside the running jobs, whole
batches for jobs that take no time; the numbers are :mod:`.batching`'s),
from which lane (the regular claim, or the limited one for kinds with a
``max_running``, a ``max_running_per_key`` or a ``rate_limit``), and what
goes back before it starts (a slow claim's waiting jobs, a stop's, a lost
claim's). What it claims it asks :class:`.holdings.Holdings` to hold (each
job with its entry in the worker's ledger, so that the supervisor can
settle it if the worker dies), and it starts what the completer's hand-on
claimed. The worker's main thread calls these verbs and owns every field
here. The producer runs no handler, writes no outcome (:mod:`.completer`
does), renews no lease (:mod:`.leases` does) and changes what is held only
through the holdings' verbs.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from .. import db
from ..config import Config
from .batching import (SLOW_BATCH_SECONDS, URGENT_CLAIM_ROWS, URGENT_WATCH_SECONDS, RoundTrips,
                       Turnover, next_batch_size, reserve_size)
from .claims import Claim, Run
from .completer import Completer
from .executor import Executor
from .holdings import Holdings
from .leases import Leases
from .poller import Poller

log = logging.getLogger(__name__)

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


class Producer:
    def __init__(self, config: Config, claimant: str, index: int, store: db.JobStore,
                 executor: Executor, holdings: Holdings, completer: Completer, leases: Leases,
                 poller: Poller, round_trips: RoundTrips,
                 stop_check: Callable[[], bool] = lambda: False):
        self.config = config
        self.claimant = claimant
        self.index = index
        self.store = store
        self.executor = executor
        #: What the worker holds: asked to hold what is claimed here, and to
        #: withdraw and close runs.
        self.holdings = holdings
        self.completer = completer
        self.leases = leases
        #: Says whether a claim could find work now, and hears of more.
        self.poller = poller
        self.round_trips = round_trips
        #: Whether the stop signal has landed (the worker's check).
        self.stop_check = stop_check
        self.queues = list(config.queues) or None
        #: Whether any kind is limited, fleet-wide (job_queue_limits), as the
        #: database last said (see note_limits).
        self._limits_exist = False
        self._next_limited_claim = 0.0
        #: Limited claims in a row that came back empty.
        self._empty_limited_claims = 0
        self.batch_size = 1
        #: The limited lane's own batch size: its claims come up short
        #: whenever keys or kinds are full, which says nothing of the regular
        #: lane, and an empty regular claim says nothing of the limited one.
        self.limited_batch_size = 1
        self.last_claim_was_short = False
        #: Recycling: slow claims keep their jobs, which run here.
        self._keep_unstarted = False
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

    def note_limits(self, exist: bool) -> None:
        """What the database says: whether any kind is limited, fleet-wide."""
        self._limits_exist = exist

    def keep_unstarted(self) -> None:
        """The worker recycles: slow claims keep their jobs, which run here."""
        self._keep_unstarted = True

    # -- claiming ----------------------------------------------------------------

    def claim_while_room(self, stopping: Callable[[], bool]) -> bool:
        """Claim while there is room and, the poller says, work; True when a
        claim came back empty (the worker then goes idle). ``stopping`` is
        asked before each claim: a stop may land during one."""
        poller = self.poller
        while (room := self._room_to_claim(stopping())) > 0:
            now = time.monotonic()
            limited_goes_on = False
            if self._limits_exist and (poller.limited_may_have_work
                                       or now >= self._next_limited_claim):
                # The backstop: a wake-up lost (or never sent: --no-listen)
                # delays a limited job by a second at most.
                self._next_limited_claim = now + LIMITED_CLAIM_BACKSTOP_SECONDS
                claimed, more_due = self.claim_limited(room)
                self._empty_limited_claims = 0 if claimed else self._empty_limited_claims + 1
                # One that keeps coming back empty saying more is due (rows
                # another transaction holds, say) waits for the backstop.
                more_due = more_due and self._empty_limited_claims <= EMPTY_LIMITED_CLAIMS
                poller.limited_work_pending(more_due)
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
                poller.ran_dry()
                return True
            poller.claimed()
            if self.last_claim_was_short:
                poller.ran_dry()
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
        room = min(free + reserve, self.holdings.capacity())
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
        return self._claim(min(room, self.holdings.capacity()), limited=False, size=size)

    def claim_limited(self, room: int) -> tuple[int, bool]:
        """Claim jobs of limited kinds: for the free slots only where a kind
        has a max_running or a rate limit (one waiting in the reserve would
        hold a slot of the kind, or a start, while it does not run), for
        ``room`` where it is limited per key only (such a job holds only its
        own key). (jobs claimed, more could run than were claimed)."""
        cap = self.holdings.capacity()
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
        self.holdings.claim_sent()
        if limited:
            jobs, more_due = self.store.claim_limited_jobs(
                self.claimant, limit, self.config.lease_seconds, self.queues, free)
        else:
            jobs, more_due = self.store.claim_due_jobs(
                self.claimant, limit, self.config.lease_seconds, self.queues)
        self.holdings.claim_answered()
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

    def _take(self, jobs: list[db.ClaimedJob], claim: Claim) -> None:
        """Hold the jobs a statement claimed, and start them."""
        self.leases.claimed(claim.sent_at)
        self.holdings.hold(jobs, claim)
        self._start(claim)

    def start_handed_on(self) -> None:
        """Start what the completer's hand-on claimed (see holdings.Holdings.take_handed_on)."""
        for claim in self.holdings.take_handed_on():
            self._start(claim)

    def _start(self, claim: Claim) -> None:
        if self.stop_check():
            # Claimed while the stop signal landed: nothing starts after it.
            self._withdraw_runs(claim.runs)
        elif time.monotonic() - claim.sent_at > self.config.renew_every:
            # The claim waited (a lock on the table, a stall): its lease is
            # partly spent before anything started. Give it back instead.
            log.warning("worker %d: the claim took %.1fs; giving its jobs back", self.index,
                        time.monotonic() - claim.sent_at)
            self._withdraw_runs(claim.runs)
        else:
            # Armed before any handler starts: see Leases.update_alarm.
            self.leases.arm()
            self.executor.submit(claim.runs)

    def _learn_from(self, claim: Claim, now: float) -> None:
        """Every run of the claim ended or was withdrawn: adapt its lane's
        batch size to what it took."""
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
        self.completer.release_later(runs)
        for claim in self.holdings.withdraw(runs):
            self._learn_from(claim, now)

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
            for claim in self.holdings.close(finished):
                self._learn_from(claim, now)

    def give_back_slow_claims(self, now: float) -> None:
        """A claim whose jobs have not all started after SLOW_BATCH_SECONDS
        waits for a slow run: its waiting jobs go to other workers."""
        # A recycling worker gives nothing back: it claims no more, so what
        # it holds waits no longer than its own runs take.
        if self._keep_unstarted:
            return
        for claim in self.holdings.open_claims():
            if not claim.checked and now - claim.sent_at > SLOW_BATCH_SECONDS:
                claim.checked = True
                unstarted = [run for run in claim.runs if run.started is None]
                if unstarted:
                    self._resize(1, now, limited=claim.limited)
                    self._withdraw_runs(unstarted)

    def next_timer(self) -> float:
        # A recycling worker gives nothing back (see give_back_slow_claims):
        # no timer for it, or its loop would spin while a slow run goes on.
        if self._keep_unstarted:
            return float("inf")
        return min((claim.sent_at + SLOW_BATCH_SECONDS for claim in self.holdings.open_claims()
                    if not claim.checked), default=float("inf"))
