"""How a worker waits: when an idle one looks again, which wake-ups it heeds,
and the two tokens its supervisor's workers pass round (the listener's and
the scheduler's, see :mod:`wakeups` and :mod:`schedules`).

A part of :class:`worker.Worker`, kept apart because waiting is a role of its
own: it reads the worker's state (its store, holdings, executor, stop and
retry times) and sets only whether a claim could find work now
(``may_have_work``, ``limited_may_have_work``) and when to look again.
Nothing here claims or writes.
"""

from __future__ import annotations

import logging
import os
import select
import time

import psycopg2

from .. import db
from ..maintenance.scheduler import Scheduler

log = logging.getLogger("motir_supervisor.worker")

#: Without LISTEN (--no-listen), empty polls back off from this to --poll-seconds.
FIRST_POLL_SECONDS = 0.05


class Waiting:
    def _go_idle(self) -> None:
        """After an empty claim: when to look again without being woken."""
        if not self.executor.busy:
            self.title("idle")
        if self.token is not None:
            self._take_listener_token()
        self._sync_limits()
        now = time.monotonic()
        if self.token is None:
            # Polling only: back off while the queue stays empty.
            self._poll_backoff = min(max(self._poll_backoff * 2, FIRST_POLL_SECONDS),
                                     self.config.poll_seconds)
            wait = self._poll_backoff
        else:
            wait = self.config.poll_seconds
        # Every idle worker watches the clock for delayed jobs: no NOTIFY
        # comes when a run_at passes, and the listener may be full by then.
        until_due, self.limits_exist = self.store.seconds_until_next_due(self.holdings.queues)
        if until_due is not None:
            wait = min(wait, max(until_due, 0.0))
        self._idle_until = now + wait

    def _take_scheduler_token(self) -> bool:
        """Whether this worker runs the scheduler: the token's holder, once
        it is free (its holder died), taken by the next worker that looks."""
        if not self._schedules or self.scheduler_token is None or self.stop_requested:
            return False
        if self.scheduler is None:
            # A syscall, so at most once a second (the loop's longest sleep).
            now = time.monotonic()
            if now < self._next_token_try:
                return False
            self._next_token_try = now + 1.0
            if not self.scheduler_token.try_take():
                return False
            self.scheduler = Scheduler(self.store, self._schedules)
            log.debug("worker %d runs the scheduler", self.index)
        return True

    def _look_for_listener_token(self, now: float) -> None:
        """Take the listener's token if it is free, busy or not, at most once a
        second (a syscall). Idle workers take it at once; but a fleet started
        on a backlog, or whose listener died while the others were busy, has
        no idle worker, and without a listener it would hear nothing (a freed
        slot of a limited kind among it) until one ran dry. A busy listener
        hands what it hears on (see _heard_wanted_notification)."""
        if self.token is None or self.token.held or self.stop_requested:
            return
        if now >= self._next_listener_try:
            self._next_listener_try = now + 1.0
            self._take_listener_token()

    def _take_listener_token(self) -> None:
        if not self.token.held and self.token.try_take():
            self.store.start_listening()
            log.debug("worker %d is the listener now", self.index)

    def _wait(self) -> None:
        """Sleep until a signal, a handler's news, a wake-up or the next timer."""
        now = time.monotonic()
        timers = [self.holdings.next_timer(), self.executor.next_nudge(), now + 1.0]
        if self.scheduler is not None and not self.stop_requested:
            # Not before the database may be tried again: no spinning meanwhile.
            timers.append(max(self.scheduler.next_pass, self._database_retry_at))
        if self.stop_requested:
            timers.append(self.drain_deadline)
        if now < self._database_retry_at:
            timers.append(self._database_retry_at)
        elif self.holdings.has_unwritten():
            timers.append(now + 0.05)
        watch = [self._wake_r]
        room = not self.stop_requested and self.holdings.room() > 0
        # Wake-ups go to workers with a free slot, not to one with room only
        # for its reserve: that one would take a job another could start.
        free = room and self.executor.free_slots() > 0
        if room and not self.may_have_work:
            timers.append(self._idle_until)
            if self.kicks is not None and free:
                watch.append(self.kicks.fileno())
        if self.store.listen and self.store.connected and self._heard_wanted_notification():
            return
        # Reading may have found the connection broken and closed it.
        listening = self.store.listen and self.store.connected
        if listening:
            watch.append(self.store.fileno())
        if room and self.may_have_work and now >= self._database_retry_at:
            return  # claim again right away
        timeout = max(min(timers) - now, 0.0)
        ready, _, _ = select.select(watch, [], [], timeout)
        if self._wake_r in ready:
            self._drain_wake_pipe()
        if listening and self.store.fileno() in ready:
            self._heard_wanted_notification()
        if self.kicks is not None and self.kicks.fileno() in ready and free:
            if self.kicks.take():
                self._expect_work()
                self._take_listener_token()
        if room and not self.may_have_work and time.monotonic() >= self._idle_until:
            self._expect_work()  # the poll backstop, or a delayed job fell due

    def _heard_wanted_notification(self) -> bool:
        try:
            queues = self.store.take_notifications()
        except psycopg2.Error:
            self.store.close()
            return False
        if not queues or (self.holdings.queues is not None and db.ANY_QUEUE not in queues
                          and not any(q in self.holdings.queues for q in queues)):
            return False
        # Even when busy: the next free slot here tries the limited claim,
        # since kicks reach only idle workers and a busy fleet has none.
        self.limited_may_have_work = True
        if self.stop_requested or self.executor.free_slots() <= 0:
            if self.kicks is not None:
                self.kicks.kick()  # busy here: somebody else should look
            return False
        self._expect_work()
        return True

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass
