"""The parent process: fork workers, forward signals, restart the dead, reap leases.

The loop is a handful of verbs (handle_signals, reap_workers,
manage_workers ...). Signal handlers only record the signal and wake the
loop, which dispatches each to its ``handle_<name>`` method. It runs no job
and holds no SQL: what it asks of the database (a dead worker's jobs, see
:mod:`.rescuer`; expired leases, see :mod:`..maintenance.reaper`) goes
through :mod:`..db`. Its periodic services (the reaper) run from one list
while it is not draining (see :mod:`..maintenance.services`). Its own
connection is closed before every fork, so no connection crosses one.
Each pass reports its beat and its live workers for the probe of
``/healthz`` (see :mod:`.health`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import select
import signal
import socket
import time
from typing import Callable

import setproctitle

from .. import db, metrics
from ..config import Config
from ..ipc import ledger
from ..ipc.ledger import Ledger
from ..ipc.lifecycle import (EXIT_BOOT_FAILURE, EXIT_RECYCLED, EXIT_TIMEOUT, HANDLED_SIGNALS,
                             read_ready)
from ..ipc.tokens import Kicks, Token
from ..logs import flush_logs
from ..maintenance import services
from ..maintenance.reaper import Reaper
from ..worker.process import Worker
from .forking import describe_exit, fork_child, send_signal
from .health import FleetHealth
from .metrics_server import MetricsServer
from .rescuer import Rescuer

log = logging.getLogger(__name__)

#: A worker that dies sooner than this after starting counts toward a crash
#: streak, and a streak delays the next restart (0.5 s, 1 s, 2 s ... 30 s).
CRASH_WINDOW_SECONDS = 30.0
MAX_RESPAWN_DELAY = 30.0
#: After the drain, how long workers get to write their releases and exit
#: before they are killed and the supervisor releases for them.
EXIT_GRACE_SECONDS = 3.0
#: A second stop signal gives workers this long to release and exit.
ABORT_GRACE_SECONDS = 3.0
#: A failed fork (out of memory, process limit) is retried after this long.
FORK_RETRY_SECONDS = 1.0
#: Longest sleep of the loop, so timers are never far off.
MAX_TICK_SECONDS = 1.0


@dataclasses.dataclass
class Child:
    index: int
    pid: int
    claimant: str
    started_at: float
    #: Read end of the pipe the worker writes one byte to once it has booted.
    ready_fd: int
    #: What the worker holds, job by job (shared memory).
    ledger: Ledger
    #: Asked to stop by us (shutdown, or fewer workers wanted).
    retiring: bool = False

    @property
    def leaving(self) -> bool:
        """Stopping, by our wish or its own (a timeout, a recycle): it needs a successor."""
        return self.retiring or self.ledger.retiring


class Supervisor:
    """One thread owns every field: the loop's. The signal handlers
    interrupt it between bytecodes and only append to _signals and set the
    workers' stop flags in their ledgers."""

    def __init__(self, config: Config):
        self.config = config
        self.target_workers = config.workers
        self.children: dict[int, Child] = {}
        self.store = db.JobStore(config.database_url, application_name="motir-supervisor master")
        self.identity = ""
        self._signals: list[int] = []
        self._wake_r = self._wake_w = -1
        self.stopping = False
        self.stop_started = 0.0
        self.stop_deadline = float("inf")
        #: What /healthz answers from: the loop's beat and its live workers.
        self.health = FleetHealth()
        self.metrics_server = MetricsServer(config.metrics_port, self._fork, self.health,
                                            config.database_url)
        self.boot_failed = False
        self.rescuer = Rescuer(self.store, config.database_url)
        self.crash_streak = 0
        self.respawn_at = 0.0
        self.reaper = Reaper(self.store, config.reaper_every, config.retention_hours,
                             config.keep_failed_hours)
        self.services: list[services.Service] = [self.reaper]
        #: Shared by every worker: one of them listens, the others are kicked.
        self.token = Token("listener")
        #: Held by the one worker that runs the scheduler (see maintenance.scheduler).
        self.scheduler_token = Token("scheduler")
        self.kicks = Kicks()

    # -- the loop -------------------------------------------------------------

    def run(self) -> int:
        self.identity = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(2).hex()}"
        self._install_signals()
        log.info("supervisor %s starting %d workers on %s", self.identity, self.target_workers,
                 db.describe_dsn(self.config.database_url))
        if self.config.metrics_port:
            self.metrics_server.enable()
        for service in self.services:
            service.start()
        try:
            return self._supervise()
        finally:
            self.metrics_server.stop()

    def _supervise(self) -> int:
        while True:
            self.handle_signals()
            self.reap_workers()
            self.rescuer.settle_due()
            if self.stopping:
                if not self.children:
                    break
                if time.monotonic() >= self.stop_deadline:
                    self.kill_workers(signal.SIGKILL)
            else:
                self.manage_workers()
                self.metrics_server.keep_running()
                services.run_due(self.services, time.monotonic())
            self.health.report(len(self.children))
            self._title()
            flush_logs()
            self.sleep(self._next_wakeup())
        self.rescuer.settle_due(final=True)
        self.store.close()
        drained = time.monotonic() - self.stop_started
        metrics.record_drain(drained)
        log.info("drain finished in %.1fs", drained)
        if self.boot_failed:
            log.error("stopped: a worker could not boot (see the error above)")
            return 1
        log.info("supervisor stopped")
        return 0

    def _next_wakeup(self) -> float:
        now = time.monotonic()
        timers = [now + MAX_TICK_SECONDS]
        if self.stopping:
            timers.append(self.stop_deadline)
        else:
            timers.append(services.next_due(self.services))
            if len(self.children) < self.target_workers:
                timers.append(self.respawn_at)
        return max(min(timers) - now, 0.0)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            select.select([self._wake_r], [], [], seconds)
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _title(self) -> None:
        state = "draining" if self.stopping else "running"
        setproctitle.setproctitle(
            f"motir-supervisor: master {state}, {len(self.children)}/{self.target_workers} workers")

    # -- signals --------------------------------------------------------------

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGTTIN,
                       signal.SIGTTOU, signal.SIGCHLD):
            signal.signal(signum, self._record_signal)

    def _record_signal(self, signum: int, frame: object) -> None:
        self._signals.append(signum)
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT):
            # A flag in shared memory is the fastest word a worker can get: no
            # handler starts after this, though the forwarded signal is yet to land.
            self.ask_workers_to_stop()

    def ask_workers_to_stop(self) -> None:
        for child in list(self.children.values()):
            try:
                child.ledger.ask_to_stop()
            except ValueError:  # reaped meanwhile: its ledger is closed
                pass

    def handle_signals(self) -> None:
        """Dispatch each recorded signal to its handle_<name> method."""
        while self._signals:
            name = signal.Signals(self._signals.pop(0)).name
            getattr(self, f"handle_{name[3:].lower()}")()

    def handle_term(self) -> None:
        self._stop("SIGTERM")

    def handle_int(self) -> None:
        self._stop("SIGINT")

    def _stop(self, why: str) -> None:
        """Drain: the first stop signal lets in-flight jobs finish; a second
        gives back what is left at once."""
        if self.stopping:
            self.abort_drain(why)
        else:
            self.begin_drain(why)

    def handle_quit(self) -> None:
        """Stop now: unfinished jobs go back at once."""
        self.abort_drain("SIGQUIT")

    def handle_ttin(self) -> None:
        """One worker more."""
        if not self.stopping:
            self.target_workers += 1
            log.info("SIGTTIN: now %d workers", self.target_workers)

    def handle_ttou(self) -> None:
        """One worker fewer, never none."""
        if not self.stopping:
            self.target_workers = max(1, self.target_workers - 1)
            log.info("SIGTTOU: now %d workers", self.target_workers)

    def handle_chld(self) -> None:
        """A child exited: the loop reaps it (reap_workers) right after."""

    def begin_drain(self, why: str) -> None:
        self._stop_services()
        self.stopping = True
        self.stop_started = time.monotonic()
        self.stop_deadline = time.monotonic() + self.config.drain_seconds + EXIT_GRACE_SECONDS
        log.info("%s: draining %d workers, in-flight jobs get %gs", why, len(self.children),
                 self.config.drain_seconds)
        self.signal_workers(signal.SIGTERM)

    def abort_drain(self, why: str) -> None:
        if not self.stopping:  # a SIGQUIT with no drain before it
            self.stop_started = time.monotonic()
            self._stop_services()
        self.stopping = True
        self.stop_deadline = min(self.stop_deadline, time.monotonic() + ABORT_GRACE_SECONDS)
        log.info("%s: releasing unfinished jobs now", why)
        self.signal_workers(signal.SIGQUIT)

    def _stop_services(self) -> None:
        """Draining: the services run no more here (other supervisors reap)."""
        for service in self.services:
            service.stop()

    def signal_workers(self, signum: int) -> None:
        for child in self.children.values():
            child.retiring = True
            send_signal(child.pid, signum)

    def kill_workers(self, signum: int) -> None:
        for child in self.children.values():
            log.warning("worker %d (pid %d) did not exit in time; killing it", child.index,
                        child.pid)
            child.retiring = True
            send_signal(child.pid, signum)
        self.stop_deadline = float("inf")  # the kills are reaped on SIGCHLD

    # -- workers --------------------------------------------------------------

    def manage_workers(self) -> None:
        now = time.monotonic()
        while self._staying() < self.target_workers and now >= self.respawn_at:
            self.spawn_worker(self._free_index())
        active = sorted((c for c in self.children.values() if not c.leaving),
                        key=lambda c: c.index)
        for child in active[self.target_workers:]:
            log.info("retiring worker %d (pid %d)", child.index, child.pid)
            child.retiring = True
            send_signal(child.pid, signal.SIGTERM)

    def _staying(self) -> int:
        return sum(1 for child in self.children.values() if not child.leaving)

    def _free_index(self) -> int:
        used = {c.index for c in self.children.values()}
        return next(i for i in range(1, len(used) + 2) if i not in used)

    def claimant_of(self, index: int, pid: int) -> str:
        return f"{self.identity}/w{index}:{pid}"

    def spawn_worker(self, index: int) -> None:
        parent_pid = os.getpid()
        ready_r, ready_w = os.pipe()
        entries = Ledger(self.config.ledger_entries)
        try:
            pid = self._fork(lambda: Worker(
                self.config, index, self.claimant_of(index, os.getpid()), parent_pid,
                ready_fd=ready_w, ledger=entries, token=self.token, kicks=self.kicks,
                scheduler_token=self.scheduler_token).run(),
                keep_fd=ready_w)
        except OSError as exc:
            os.close(ready_r)
            os.close(ready_w)
            entries.close()
            log.error("could not fork worker %d: %s; trying again in %gs", index, exc,
                      FORK_RETRY_SECONDS)
            self.respawn_at = time.monotonic() + FORK_RETRY_SECONDS
            return
        os.close(ready_w)
        os.set_blocking(ready_r, False)
        self.children[pid] = Child(index, pid, self.claimant_of(index, pid), time.monotonic(),
                                   ready_r, entries)
        log.info("worker %d started (pid %d)", index, pid)

    def _fork(self, body: Callable[[], int], keep_fd: int = -1) -> int:
        """Fork a child that runs ``body``; see forking.fork_child."""
        self.store.close()  # no database connection crosses a fork
        inherited = (self._wake_r, self._wake_w, *(c.ready_fd for c in self.children.values()))
        return fork_child(body, HANDLED_SIGNALS, [fd for fd in inherited if fd != keep_fd])

    def reap_workers(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.metrics_server.exited(pid, status):
                continue
            child = self.children.pop(pid, None)
            if child is not None:
                self.worker_exited(child, status)

    def worker_exited(self, child: Child, status: int) -> None:
        """Release what the worker held, then decide how to replace it.

        The exit code is only a hint: a handler can end its process with any
        code, so whatever the code, claims still held are released here.
        """
        code, words = describe_exit(status)
        lived = time.monotonic() - child.started_at
        booted = read_ready(child.ready_fd)
        entries = tuple(child.ledger.entries())
        timed_out = child.ledger.retiring and code == EXIT_TIMEOUT
        ran_to_the_end = not any(entry.state == ledger.RUNNING for entry in entries)
        # A handler can exit with any code: the ledger must say so too, and
        # nothing may have been running (a recycle lets every run end).
        recycled = child.ledger.retiring and code == EXIT_RECYCLED and ran_to_the_end
        why = child.ledger.retiring_why
        child.ledger.close()
        # A worker that dies wakes nobody: if it was the listener, another
        # worker must take over now, not at its next poll.
        self.kicks.kick()
        death = f"worker {child.claimant} {words} while running it"
        if code == EXIT_BOOT_FAILURE and not booted:
            self.boot_failed = True
            if not self.stopping:
                self.begin_drain("configuration error")
            return
        self.rescuer.queue(child.claimant, death, entries)
        if timed_out:
            log.warning("worker %d (pid %d) left a timed-out job behind; replaced it",
                        child.index, child.pid)
            metrics.record_restart("timeout")
            return
        if recycled:
            # Not a crash: no backoff. Its replacement started when it stopped claiming.
            log.info("worker %d (pid %d) recycled %s%s", child.index, child.pid, why,
                     "" if self.stopping else "; a fresh worker runs in its place")
            metrics.record_restart("recycled")
            return
        if ran_to_the_end and child.retiring and code == 0:
            log.info("worker %d (pid %d) %s", child.index, child.pid, words)
            return
        log.error("worker %d (pid %d) %s after %.1fs; settling its claims", child.index,
                  child.pid, words, lived)
        metrics.record_restart("died")
        self.crash_streak = self.crash_streak + 1 if lived < CRASH_WINDOW_SECONDS else 1
        delay = 0.0 if self.crash_streak <= 1 else min(
            MAX_RESPAWN_DELAY, 0.5 * 2 ** (self.crash_streak - 2))
        if delay:
            log.warning("workers keep dying (%d in a row); next start in %.1fs",
                        self.crash_streak, delay)
        self.respawn_at = time.monotonic() + delay
