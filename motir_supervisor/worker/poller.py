"""How a worker waits: when an idle one looks again, and which wake-ups it
heeds — a handler thread's news, a signal, a NOTIFY heard by the listener,
a kick from another worker, the poll timer.

Of a supervisor's workers one LISTENs (the holder of the listener's token,
see :mod:`..ipc.tokens`); the others wait on the kicks pipe. The poller
takes and hands on that token, reads the notifications and decides from
them whether a claim could find work now (``may_have_work``,
``limited_may_have_work``), which the producer reads and, through
:meth:`Poller.ran_dry` and :meth:`Poller.limited_work_pending`, tells it
of. The worker's main thread calls it and owns every field here, but for
:meth:`Poller.wake`, which handler threads call. Nothing here claims or
writes.
"""

from __future__ import annotations

import logging
import os
import select
import time

import psycopg2

from .. import db
from ..config import Config
from ..ipc.tokens import Kicks, Token
from .executor import Executor
from .title import WorkerTitle

log = logging.getLogger(__name__)

#: Without LISTEN (--no-listen), empty polls back off from this to --poll-seconds.
FIRST_POLL_SECONDS = 0.05
#: The longest wait for a job said to be due that claims keep not taking.
DUE_BACKOFF_MAX_SECONDS = 1.0


class Poller:
    def __init__(self, config: Config, index: int, store: db.JobStore, executor: Executor,
                 title: WorkerTitle, token: Token | None, kicks: Kicks | None):
        self.config = config
        self.index = index
        self.store = store
        self.executor = executor
        self.title = title
        #: None without LISTEN (--no-listen): every worker polls.
        self.token = token
        self.kicks = kicks
        #: Whether a claim now could find something: set by a wake-up, a
        #: kick, the poll timer or a claim that took all it asked for.
        self.may_have_work = True
        #: Whether claim_limited_jobs could find something now: set by what
        #: sets may_have_work, and by a limited claim that left some behind.
        #: A limited kind's slot that frees notifies (migrations/0004).
        self.limited_may_have_work = True
        #: When an idle worker looks again without being woken.
        self._idle_until = 0.0
        self._poll_backoff = 0.0
        #: Empty claims in a row after which the database said a job was due.
        self._due_misses = 0
        self._next_listener_try = 0.0
        #: The pipe that wakes the main thread: handler threads write to it
        #: (wake), and so does the signal machinery (the worker passes its
        #: write end to signal.set_wakeup_fd).
        self.wake_r, self.wake_w = -1, -1

    def open_wake_pipe(self) -> int:
        """Create the wake-up pipe; returns its write end."""
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(self.wake_w, False)
        return self.wake_w

    def wake(self) -> None:
        """Wake the main thread (called from handler threads)."""
        try:
            os.write(self.wake_w, b"\0")
        except OSError:
            pass

    def connect(self) -> None:
        """Open the worker's connection, listening on it if this worker holds
        the listener's token. Whatever was announced while the connection
        was down went unheard: a claim could find work now."""
        token = self.token
        if token is not None and token.held:
            self.store.listen = True
        self.store.open()
        log.debug("worker %d connected to %s, %s", self.index,
                  db.describe_dsn(self.config.database_url),
                  "polling only" if token is None
                  else "listening" if self.store.listen else "woken by the listener")
        self.expect_work()

    def expect_work(self) -> None:
        self.may_have_work = True
        self.limited_may_have_work = True

    def ran_dry(self) -> None:
        """A claim came back empty or short: nothing more until a wake-up,
        a kick or the poll timer."""
        self.may_have_work = False

    def limited_work_pending(self, pending: bool) -> None:
        """What a limited claim said: whether claim_limited_jobs could find
        more now."""
        self.limited_may_have_work = pending

    def next_poll_wait(self) -> float:
        """After an empty claim: how long to wait for a wake-up before
        looking again, delayed jobs aside."""
        if self.token is None:
            # Polling only: back off while the queue stays empty.
            self._poll_backoff = min(max(self._poll_backoff * 2, FIRST_POLL_SECONDS),
                                     self.config.poll_seconds)
            return self._poll_backoff
        return self.config.poll_seconds

    def until_due(self, seconds: float) -> float:
        """How long to wait for a job the database says is due in
        ``seconds`` (now or past when <= 0), asked after an empty claim.
        Due now although the claim just took nothing means a row it could
        not take (another transaction holds it, say): the first such answer
        is looked at again at once (a job may have fallen due between the
        two), the next ones after a wait that doubles up to
        DUE_BACKOFF_MAX_SECONDS, so that such a row cannot spin the worker."""
        if seconds > 0:
            return seconds
        self._due_misses += 1
        if self._due_misses == 1:
            return 0.0
        return min(FIRST_POLL_SECONDS * 2 ** (self._due_misses - 2), DUE_BACKOFF_MAX_SECONDS)

    def idle_from(self, now: float, until_due: float | None) -> None:
        """After an empty claim at ``now``: look again once the poll wait is
        over, or when a job the database says is due in ``until_due``
        seconds falls due (see until_due), if nothing wakes this worker."""
        wait = self.next_poll_wait()
        if until_due is not None:
            wait = min(wait, self.until_due(until_due))
        self._idle_until = now + wait

    def claimed(self) -> None:
        """A claim found jobs: the poll's back-offs start over."""
        self._poll_backoff = 0.0
        self._due_misses = 0

    def look_for_listener_token(self, now: float) -> None:
        """Take the listener's token if it is free, busy or not, at most once a
        second (a syscall). Idle workers take it at once; but a fleet started
        on a backlog, or whose listener died while the others were busy, has
        no idle worker, and without a listener it would hear nothing (a freed
        slot of a limited kind among it) until one ran dry. A busy listener
        hands what it hears on (see _heard_wanted_notification)."""
        if self.token is None or self.token.held:
            return
        if now >= self._next_listener_try:
            self._next_listener_try = now + 1.0
            self.take_listener_token()

    def take_listener_token(self) -> None:
        if self.token is not None and not self.token.held and self.token.try_take():
            self.store.start_listening()
            log.debug("worker %d is the listener now", self.index)

    def hand_on_listener_token(self) -> None:
        """Another worker listens from now on, not this one (it is leaving)."""
        if self.token is not None and self.token.held:
            self.token.give_up()
            self.store.listen = False
            if self.kicks is not None:
                self.kicks.kick()

    def kick(self) -> None:
        """Have another idle worker look: more is due than this one took."""
        if self.kicks is not None:
            self.kicks.kick()

    def wait(self, timers: list[float], room: bool, free: bool, stopping: bool,
             may_claim: bool) -> None:
        """Sleep until a signal, a handler's news, a wake-up or the first of
        ``timers``. ``room``: the worker would claim if there were work;
        ``free``: it has a free slot (the reserve aside); ``may_claim``: the
        database may be tried now."""
        now = time.monotonic()
        watch = [self.wake_r]
        # Wake-ups go to workers with a free slot, not to one with room only
        # for its reserve: that one would take a job another could start.
        if room and not self.may_have_work:
            timers.append(self._idle_until)
            if self.kicks is not None and free:
                watch.append(self.kicks.fileno())
        if (self.store.listen and self.store.connected
                and self._heard_wanted_notification(stopping)):
            return
        # Reading may have found the connection broken and closed it.
        listening = self.store.listen and self.store.connected
        if listening:
            watch.append(self.store.fileno())
        if room and self.may_have_work and may_claim:
            return  # claim again right away
        timeout = max(min(timers) - now, 0.0)
        ready, _, _ = select.select(watch, [], [], timeout)
        if self.wake_r in ready:
            self._drain_wake_pipe()
        if listening and self.store.fileno() in ready:
            self._heard_wanted_notification(stopping)
        if self.kicks is not None and self.kicks.fileno() in ready and free:
            if self.kicks.take():
                self.expect_work()
                self.take_listener_token()
        if room and not self.may_have_work and time.monotonic() >= self._idle_until:
            self.expect_work()  # the poll backstop, or a delayed job fell due

    def _heard_wanted_notification(self, stopping: bool) -> bool:
        try:
            queues = self.store.take_notifications()
        except psycopg2.Error:
            self.store.close()
            return False
        served = self.config.queues
        if not queues or (served and db.ANY_QUEUE not in queues
                          and not any(q in served for q in queues)):
            return False
        # Even when busy: the next free slot here tries the limited claim,
        # since kicks reach only idle workers and a busy fleet has none.
        self.limited_may_have_work = True
        if stopping or self.executor.free_slots() <= 0:
            self.kick()  # busy here: somebody else should look
            return False
        self.expect_work()
        return True

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass
