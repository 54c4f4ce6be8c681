"""Runs a worker's claimed jobs, up to ``--concurrency`` at once.

Plain ``def`` handlers run on a pool of threads, started as they are needed
and kept for the worker's life; ``async def`` handlers run as tasks on one
event loop in a thread of its own (see :mod:`.event_loop`). Both kinds
share the same slots.

A thread that finishes a run takes the next ready one itself, so jobs that
take no time flow through one thread without a hand-over each. Every run's
state goes to the worker's ledger (shared with the supervisor) before its
handler starts and as soon as its outcome is decided; how one run goes, from
its call to that outcome, is :mod:`.running`'s. The main thread of the
worker feeds runs in with :meth:`Executor.submit` and collects ended ones
with :meth:`Executor.take_finished`; this module runs no SQL, handles no
signal and never forks.
"""

from __future__ import annotations

import collections
import heapq
import logging
import os
import threading
import time
from typing import Any, Callable

from .. import hooks, registry
from ..ipc import ledger, lifecycle
from . import running
from .claims import Run
from .event_loop import EventLoop
from .title import running_jobs
from .transactions import Transactions

#: Runs shorter than this on average (no-ops, cache writes) mostly hold the
#: interpreter lock: a second thread would only contend for it, so the
#: running threads take the next ready runs themselves...
SHORT_RUN_SECONDS = 0.001
#: ...unless no run has started for this long (one blocks after all): then
#: the next ready one gets a thread of its own.
HOLD_BACK_SECONDS = 0.001
#: A run handed to a resting thread while nothing else ran (a job picked up
#: by an idle worker): the main thread waits up to this long for that thread
#: to take the interpreter lock, instead of keeping it for its bookkeeping
#: until it next blocks, so that the handler starts without a second wake-up.
HAND_OVER_SECONDS = 0.001

#: The latest runs whose median length says how long a run takes.
RECENT_RUNS = 15

log = logging.getLogger(__name__)


class _Thread:
    """A handler thread's mailbox: the run it was handed while it waited,
    and ``took``, set once it has taken that run. ``run`` is written under
    the executor's lock before ``event`` is set, and read by the handler
    thread once it is."""

    __slots__ = ("run", "event", "took")

    def __init__(self, run: Run | None):
        self.run = run
        self.event = threading.Event()
        self.took = threading.Event()


class Executor:
    """A worker's slots. The main thread submits and takes back runs; the
    handler threads and the event loop's thread start and end them."""

    def __init__(self, capacity: int, entries: ledger.Ledger, *, retry_base: float,
                 retry_cap: float, wake: Callable[[], None],
                 save_checkpoint: Callable[[int, Any], bool], title: Callable[[str], None],
                 transactions: Transactions | None = None,
                 upstream: registry.Upstream | None = None):
        # Set here and never changed: read by any thread.
        self.capacity = capacity
        self.ledger = entries
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self._wake = wake
        self._save_checkpoint = save_checkpoint
        self._title = title
        self._transactions = transactions
        self._upstream = upstream
        #: Guards every field below. Each is changed only under it, by the
        #: main thread (submit, withdraw, time_out, abandon), a handler thread
        #: ending a run (_finish) or the event loop's thread (_finish of an
        #: async run). The main thread also reads some without it, each noted
        #: with why a stale value is safe.
        self._lock = threading.Lock()
        #: Runs submitted and not started, in priority order. Read without
        #: the lock by free_slots() and next_nudge(): a run starting moves from
        #: here to _running, so a stale count errs by a run the next loop
        #: corrects, and a run taken meanwhile is an IndexError caught.
        self._ready: collections.deque[Run] = collections.deque()
        #: Runs whose handler is running. Read without the lock by
        #: free_slots() and busy (a length, see _ready).
        self._running: set[Run] = set()
        #: Ended runs the main thread has not taken yet, and when the first
        #: of them ended. Read without the lock by finished_since(): a value
        #: one run late only moves the next write of outcomes by a loop.
        self._finished: list[Run] = []
        self._finished_since = 0.0
        #: Sync runs running; the latest runs' lengths and their median (a
        #: median, since a run that waited for the interpreter lock is an
        #: outlier). _sync_running and _run_seconds are read without the lock
        #: by _holding_back() and run_seconds: a number one run late only
        #: delays the choice to hold back by a run.
        self._sync_running = 0
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT_RUNS)
        self._run_seconds: float | None = None
        #: Runs ended so far.
        self._ended = 0
        #: When a sync run last started: held-back runs wait while this moves.
        self._last_start = 0.0
        #: The thread that run was started on.
        self._last_starter: _Thread | None = None
        #: The resting thread the latest submit() woke, if any.
        self._woken: _Thread | None = None
        #: Handler threads resting until handed a run.
        self._idle: list[_Thread] = []
        #: Set by stop_starting(): nothing starts any more.
        self._stopped = False
        #: Threads telling timed-out runs' on_run_end hooks (main thread only).
        self._telling: list[threading.Thread] = []
        #: _begin, bound once rather than on every run it is handed to.
        self._begin_run = self._begin
        #: Where async handlers run; its loop starts with the first of them.
        self._async = EventLoop(self._begin_run, self._finish)

    # -- the main thread's side ------------------------------------------------

    def submit(self, runs: list[Run]) -> None:
        now = time.monotonic()
        for run in runs:
            run.submitted = now
        with self._lock:
            idle = not self._running
            self._woken = None
            ready = self._ready
            if ready and runs and runs[0].claimed.priority < ready[-1].claimed.priority:
                # Ready runs stay in priority order (each claim returns its
                # jobs in that order): an urgent job claimed behind a batch
                # of others starts before them, FIFO within a priority.
                self._ready = collections.deque(heapq.merge(
                    ready, runs, key=lambda run: run.claimed.priority))
            else:
                ready.extend(runs)
            self._start_more(None)
            woken, self._woken = self._woken, None
        if idle and woken is not None:
            woken.took.wait(HAND_OVER_SECONDS)

    def nudge(self) -> None:
        """Give a thread of its own to a ready run held back too long (see
        HOLD_BACK_SECONDS); the worker's loop calls it at next_nudge()."""
        if self._ready:
            with self._lock:
                self._start_more(None)

    def next_nudge(self) -> float:
        ready = self._ready
        if ready and self._holding_back():
            try:
                return max(ready[0].submitted, self._last_start) + HOLD_BACK_SECONDS
            except IndexError:  # taken by a thread meanwhile
                pass
        return float("inf")

    def _holding_back(self) -> bool:
        """Runs are so short that another thread would only fight the running
        ones for the interpreter lock: the running threads take the ready
        runs one after the other instead."""
        return (self._sync_running > 0 and self._run_seconds is not None
                and self._run_seconds < SHORT_RUN_SECONDS)

    def free_slots(self) -> int:
        """Slots no run holds and no ready run is about to take."""
        return self.capacity - len(self._running) - len(self._ready)

    def has_live_runs(self) -> bool:
        """A handler (or its hooks) is still running, other than a sync one
        left behind after its timeout."""
        return (any(run.is_async or not run.timed_out for run in self.running())
                or any(thread.is_alive() for thread in self._telling))

    def running(self) -> list[Run]:
        with self._lock:
            return list(self._running)

    @property
    def run_seconds(self) -> float | None:
        """The median length of the latest runs; None before the first."""
        return self._run_seconds

    def longest_running(self, now: float) -> float:
        """Seconds the oldest running run has been going; 0 with none."""
        with self._lock:
            return max((now - run.started for run in self._running if run.started is not None),
                       default=0.0)

    @property
    def busy(self) -> bool:
        return bool(self._running)

    def finished_since(self) -> float | None:
        """When the oldest ended run not taken yet ended; None if there is none."""
        return self._finished_since if self._finished else None

    def take_finished(self) -> list[Run]:
        with self._lock:
            finished, self._finished = self._finished, []
        return finished

    def withdraw(self, wanted: Callable[[Run], bool]) -> list[Run]:
        """Take the ready runs ``wanted`` selects back; they never start here."""
        with self._lock:
            taken = [run for run in self._ready if wanted(run)]
            if taken:
                for run in taken:
                    run.withdrawn = True
                self._ready = collections.deque(r for r in self._ready if not r.withdrawn)
        return taken

    def time_out(self, run: Run) -> bool:
        """Mark a sync run that ran past its timeout; False if it ended meanwhile."""
        with self._lock:
            if run not in self._running or run.decision is not None:
                return False
            run.timed_out = True
            if run.opened is not None:
                # Told by tell_timed_out, not by the thread, if it returns.
                # The hooks this marked, not run.opened read again later: a
                # thread that enters its hooks after this tells them itself.
                run.opened.told = True
                run.told_at_timeout = run.opened
            self.ledger.mark(run.entry, ledger.TIMED_OUT)
            return True

    def tell_timed_out(self, run: Run) -> None:
        """Tell a timed-out sync run's on_run_end hooks that it ended: its
        attempt fails now, whether or not its thread ever returns. From a
        thread of their own, so that a slow hook never holds up the main
        thread (and its lease renewals); the worker waits for it as for a
        run before it exits."""
        opened = run.told_at_timeout
        if opened is None:
            return
        ended = running.end_at_timeout(run, self.retry_base, self.retry_cap)
        thread = threading.Thread(target=hooks.tell_end, args=(opened, ended),
                                  name="hooks", daemon=True)
        self._telling = [t for t in self._telling if t.is_alive()] + [thread]
        thread.start()

    def abandon(self) -> list[Run]:
        """The worker exits with these runs still running (a drain's deadline):
        the supervisor gives them back once the process is gone. A run whose
        outcome is decided (its hooks still ending) keeps it: the supervisor
        writes it from the ledger."""
        with self._lock:
            left = list(self._running)
            for run in left:
                if not run.timed_out and run.decision is None:
                    self.ledger.mark(run.entry, ledger.ABANDONED)
            return left

    def stop_starting(self) -> list[Run]:
        """Nothing starts any more; returns what was ready."""
        with self._lock:
            self._stopped = True
        return self.withdraw(lambda run: True)

    # -- starting and ending runs (any thread, under the lock) -------------------

    def _start_more(self, me: _Thread | None) -> Run | None:
        """Start ready runs while slots are free; return the one for ``me`` to run."""
        mine = None
        while (self._ready and len(self._running) < self.capacity and not self._stopped
               and not self.ledger.stop_asked):
            run = self._ready[0]
            # A thread that has just ended a short run takes the next one
            # itself, unless another thread started one within
            # HOLD_BACK_SECONDS (it is taking them one after the other): then
            # it rests, and short runs flow through one thread instead of
            # several taking turns at the interpreter lock. A thread stuck in
            # a long run started long ago, so it holds nobody back.
            others_flow = self._sync_running and self._last_starter is not me
            if (not run.is_async and (me is None or mine is not None or others_flow)
                    and self._holding_back()
                    and time.monotonic() < max(run.submitted, self._last_start)
                    + HOLD_BACK_SECONDS):
                break
            self._ready.popleft()
            run.started = time.monotonic()
            self._running.add(run)
            self.ledger.mark(run.entry, ledger.RUNNING)
            if run.is_async:
                self._async.start(run)
                continue
            self._sync_running += 1
            self._last_start = run.started
            if me is not None and mine is None:
                mine = run
                self._last_starter = me
            elif self._idle:
                thread = self._idle.pop()
                thread.run = run
                self._last_starter = thread
                if me is None and self._woken is None:
                    # Only submit() waits for it (a hand-over between
                    # handler threads leaves it alone).
                    thread.took.clear()
                    self._woken = thread
                thread.event.set()
            else:
                thread = _Thread(run)
                self._last_starter = thread
                threading.Thread(target=self._serve, args=(thread,),
                                 name="handler", daemon=True).start()
        return mine

    def _finish(self, run: Run, error: BaseException | None, me: _Thread | None) -> Run | None:
        # started: set by _start_more before the run was handed to anyone.
        run.duration = time.monotonic() - run.started  # type: ignore[operator]
        if run.opened is not None:
            # Its hooks end before its slot frees and its outcome is written
            # (so a hook has run by the time the row shows the outcome); the
            # ledger has the outcome first, so a worker killed meanwhile
            # loses none, and a drain's deadline gives back no finished run.
            with self._lock:
                error = self._decide(run, error)
            running.leave(run, error)
        with self._lock:
            if run.decision is None:  # not decided before its hooks ended
                # Under the lock, so that abandon() never marks a run that has ended.
                self._decide(run, error)
            if not run.is_async:
                self._sync_running -= 1
            recent = self._recent
            recent.append(run.duration)
            self._ended += 1
            if self._ended & 3 == 0 or len(recent) < RECENT_RUNS:
                # Every fourth run: a window of 15 moves little in three,
                # and sorting after every run would cost a no-op job more
                # than its handler.
                self._run_seconds = sorted(recent)[len(recent) // 2]
            run.ended = True
            self._running.discard(run)
            first = not self._finished
            if first:
                self._finished_since = time.monotonic()
            self._finished.append(run)
            mine = self._start_more(me)
            if mine is None and me is not None:
                me.run = None
                me.event.clear()
                self._idle.append(me)
            # The main thread needs to know of the first ended run (its
            # outcome is to be written) and of a slot left empty with nothing
            # ready for it (a claim could fill it); a thread that went on to
            # the next ready run leaves it in peace.
            slot_left_empty = len(self._running) < self.capacity and not self._ready
            # A thread that rests beside held-back runs: the main thread is to
            # nudge them on if the running ones block (see nudge()).
            rested = mine is None and me is not None and bool(self._ready)
        if first or slot_left_empty or rested:
            self._wake()
        return mine

    def _decide(self, run: Run, error: BaseException | None) -> BaseException | None:
        """Decide how a run ended and put that in the ledger; returns the
        error that says so. Under the lock: time_out() may mark the run until
        its decision is made, and a decided run no longer times out."""
        run.decision, error = running.decide(run, error, self.retry_base, self.retry_cap)
        decision = run.decision
        self.ledger.decide(run.entry, decision.state, run.duration, decision.error,
                           decision.retry_in_seconds, decision.permanent, run.output_json)
        return error

    def _begin(self, run: Run) -> registry.Job:
        """What comes before a handler, in its thread or task: the title and
        its handle (running.call and call_async enter its hooks)."""
        job_id = run.claimed.id
        self._title(running_jobs(job_id, run.claimed.kind, len(self._running),
                                 self._holding_back()))
        return running.handle(run, lambda data: self._save_checkpoint(job_id, data),
                              self._transactions, self._upstream)

    # -- handler threads ------------------------------------------------------------

    def _serve(self, thread: _Thread) -> None:
        try:
            run = thread.run
            while True:
                if run is None:
                    while run is None:
                        thread.event.wait()
                        run = thread.run
                    thread.took.set()
                error = running.call(run, self._begin_run)
                if lifecycle.forked_by_handler:
                    os._exit(0)  # a copy a handler forked: see watch_for_handler_forks
                run = self._finish(run, error, thread)
        except BaseException:  # noqa: BLE001 - a bug of ours, not a handler's failure
            # Without this thread its run would never end: end the process,
            # and the supervisor gives back what it held and starts a new one.
            log.exception("a handler thread broke")
            os._exit(70)
