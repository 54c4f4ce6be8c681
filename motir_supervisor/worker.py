"""One worker process: listen, claim, run, record, renew.

The supervisor forks the process and calls :meth:`Worker.run` in the child;
this module does no forking and holds no SQL (it calls :mod:`db`). The main
thread owns the database connection and the waiting; each handler runs in a
thread of its own so that the main thread can renew the lease, notice
signals and enforce timeouts and the drain deadline while it runs.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import select
import signal
import threading
import time
import traceback
from typing import Any, Callable

import setproctitle

from . import db, metrics, registry
from .config import Config

log = logging.getLogger(__name__)

#: Exit codes a worker uses to tell its supervisor how it ended.
EXIT_OK = 0
#: Configuration error (an --app module that does not import): do not restart.
EXIT_BOOT_FAILURE = 4
#: The worker left a handler thread behind (a timeout) and asks to be replaced.
EXIT_RECYCLE = 5

#: last_error keeps at most this many characters: enough for a message and
#: the innermost frames, small enough to keep rows and status output lean.
MAX_ERROR_CHARS = 4000

_PR_SET_PDEATHSIG = 1


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before retrying after failed attempt ``attempt`` (1-based).

    Exponential, capped, with jitter over the upper half, so jobs that failed
    together (an outage) do not all come back in the same instant.
    """
    delay = min(cap, base * 2 ** max(attempt - 1, 0))
    return delay / 2 + random.uniform(0, delay / 2)


def describe_failure(exc: BaseException) -> str:
    """The exception's type and message first, then the innermost frames."""
    head = f"{type(exc).__name__}: {exc}"[: MAX_ERROR_CHARS // 4]
    frames = "".join(traceback.format_tb(exc.__traceback__))
    room = MAX_ERROR_CHARS - len(head) - len("\nTraceback (innermost last):\n")
    if len(frames) > room:
        frames = "..." + frames[-(room - 3):]
    return f"{head}\nTraceback (innermost last):\n{frames}" if frames else head


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send ``signum`` when the parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class _Abandon(Exception):
    """The running job must be given up now (abort signal, drain deadline)."""


class Worker:
    def __init__(self, config: Config, index: int, claimant: str, parent_pid: int):
        self.config = config
        self.index = index
        self.claimant = claimant
        self.parent_pid = parent_pid
        self.store = db.JobStore(config.database_url,
                                 application_name=f"motir-supervisor worker {index}")
        self.queues = list(config.queues) or None
        self._signals: list[int] = []
        self._wake_r, self._wake_w = -1, -1
        self.stop_requested = False
        self.abort_requested = False
        self.drain_deadline = float("inf")
        self._idle_backoff = 0.0
        self._reconnect_backoff = 0.0
        self._must_exit_code: int | None = None

    # -- lifecycle ----------------------------------------------------------

    def run(self) -> int:
        """The child's whole life; returns its exit code."""
        self._install_signals()
        set_parent_death_signal(signal.SIGTERM)
        self._title("booting")
        try:
            registry.import_apps(self.config.apps)
        except registry.AppImportError as exc:
            log.error("worker %d: %s", self.index, exc)
            return EXIT_BOOT_FAILURE
        log.debug("worker %d (pid %d) up as %s", self.index, os.getpid(), self.claimant)
        try:
            self._work_until_stopped()
        finally:
            self._release_own_claims()
            self.store.close()
        return self._must_exit_code if self._must_exit_code is not None else EXIT_OK

    def _install_signals(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        signal.set_wakeup_fd(self._wake_w)
        for signum in (signal.SIGTERM, signal.SIGQUIT):
            signal.signal(signum, self._record_signal)
        # Ctrl-C reaches the whole process group; the supervisor forwards it
        # as SIGTERM, so the worker itself must not count it a second time.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for signum in (signal.SIGCHLD, signal.SIGTTIN, signal.SIGTTOU, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL if signum == signal.SIGCHLD else signal.SIG_IGN)

    def _record_signal(self, signum: int, frame: Any) -> None:
        # Only record: the byte set_wakeup_fd writes wakes whatever waits.
        self._signals.append(signum)

    def _absorb_signals(self) -> None:
        while self._signals:
            signum = self._signals.pop(0)
            if signum == signal.SIGTERM and not self.stop_requested:
                self.stop_requested = True
                self.drain_deadline = time.monotonic() + self.config.drain_seconds
                log.info("worker %d: stopping, in-flight work may take %gs",
                         self.index, self.config.drain_seconds)
            else:
                self.stop_requested = self.abort_requested = True
                self.drain_deadline = time.monotonic()
        if not self.stop_requested and os.getppid() != self.parent_pid:
            log.warning("worker %d: supervisor is gone; draining", self.index)
            self.stop_requested = True
            self.drain_deadline = time.monotonic() + self.config.drain_seconds

    def _title(self, doing: str) -> None:
        setproctitle.setproctitle(f"motir-supervisor: worker {self.index} {doing}")

    def _sleep(self, seconds: float) -> None:
        """Sleep, but wake for a signal (or a finished handler)."""
        if seconds > 0:
            select.select([self._wake_r], [], [], seconds)
        self._drain_wake_pipe()

    def _drain_wake_pipe(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    # -- the loop -------------------------------------------------------------

    def _work_until_stopped(self) -> None:
        while True:
            self._absorb_signals()
            if self.stop_requested or self._must_exit_code is not None:
                return
            try:
                if not self.store.connected:
                    self._connect()
                self._title("claiming")
                jobs = self.store.claim_due_jobs(self.claimant, 1, self.config.lease_seconds,
                                                 self.queues)
                self._reconnect_backoff = 0.0
                if jobs:
                    self._idle_backoff = 0.0
                    metrics.record_claim(jobs[0].queue)
                    for claimed in jobs:
                        self._run_claimed(claimed)
                else:
                    self._wait_for_work()
            except db.CONNECTION_ERRORS as exc:
                self._lost_connection(exc)
            except _Abandon:
                return

    def _connect(self) -> None:
        self.store.open()
        if self.config.listen:
            self.store.listen()
        log.debug("worker %d connected to %s, %s", self.index,
                  db.describe_dsn(self.config.database_url),
                  "listening" if self.config.listen else "polling only")

    def _lost_connection(self, exc: BaseException) -> None:
        self.store.close()
        self._reconnect_backoff = min(max(self._reconnect_backoff * 2, 0.1), 5.0)
        wait = self._reconnect_backoff * random.uniform(0.5, 1.0)
        log.warning("worker %d: database unreachable (%s); retrying in %.1fs", self.index,
                    db.one_line(exc, self.config.database_url), wait)
        self._title("waiting for the database")
        self._sleep(wait)

    def _wait_for_work(self) -> None:
        """Idle until a notification, a signal, the next due job or the poll timer."""
        self._title("idle")
        if self._wanted(self.store.take_notifications()):
            return
        self._idle_backoff = min(max(self._idle_backoff * 2, 0.05), self.config.poll_seconds)
        timeout = self._idle_backoff
        until_due = self.store.seconds_until_next_due(self.queues)
        if until_due is not None and until_due > 0:
            timeout = min(timeout, until_due)
        ready = self.store.wait_readable([self._wake_r], timeout)
        if self._wake_r in ready:
            self._drain_wake_pipe()
        if self.store.fileno() in ready and self._wanted(self.store.take_notifications()):
            # A wake-up is news, not an empty poll: start backing off afresh.
            self._idle_backoff = 0.0

    def _wanted(self, notified_queues: list[str]) -> bool:
        if not notified_queues:
            return False
        return self.queues is None or any(q in self.queues for q in notified_queues)

    # -- one job --------------------------------------------------------------

    def _run_claimed(self, claimed: db.ClaimedJob) -> None:
        self._absorb_signals()
        if self.stop_requested:
            # Claimed while the stop signal landed: nothing starts after it.
            self.store.release_claims_of([self.claimant])
            return
        registration = registry.registration_for(claimed.kind)
        started = time.monotonic()
        if registration is None:
            known = ", ".join(registry.registered_kinds()) or "none"
            error = f"no handler registered for job kind {claimed.kind!r} (registered: {known})"
            self._record_failure(claimed, error, started, permanent=False)
            return
        self._title(f"running job {claimed.id} {claimed.kind}")
        stopping = threading.Event()
        handle = registry.Job(
            id=claimed.id, kind=claimed.kind, queue=claimed.queue, payload=claimed.payload,
            attempt=claimed.attempt, max_attempts=claimed.max_attempts,
            checkpoint_data=claimed.checkpoint_data, stopping=stopping,
            save_checkpoint=lambda data: self.store.save_checkpoint(
                claimed.id, self.claimant, data),
        )
        outcome: dict[str, BaseException | None] = {}
        thread = threading.Thread(target=self._call_handler,
                                  args=(registration.handler, handle, outcome),
                                  name=f"job-{claimed.id}", daemon=True)
        thread.start()
        if not self._supervise_handler(claimed, registration, outcome, stopping, started):
            return  # timed out: already recorded
        error = outcome["error"]
        if isinstance(error, registry.Interrupted):
            self._give_back(claimed, started, "its handler stopped at a checkpoint")
        elif error is None:
            self._record_success(claimed, started)
        else:
            self._record_failure(claimed, describe_failure(error), started,
                                 permanent=isinstance(error, registry.PermanentFailure))

    def _call_handler(self, handler: Callable, handle: registry.Job,
                      outcome: dict[str, BaseException | None]) -> None:
        try:
            handler(handle)
            outcome["error"] = None
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
            outcome["error"] = exc
        finally:
            try:
                os.write(self._wake_w, b"\0")
            except OSError:
                pass

    def _supervise_handler(self, claimed: db.ClaimedJob, registration: registry.Registration,
                           outcome: dict[str, BaseException | None],
                           stopping: threading.Event, started: float) -> bool:
        """Wait for the handler while renewing the lease.

        True when the handler finished; False when it ran past its timeout
        (recorded here). Raises _Abandon when the job must be given up now.
        """
        next_renewal = started + self.config.renew_every
        timeout_at = started + registration.timeout if registration.timeout else float("inf")
        # The handler thread fills ``outcome`` before it writes the wake-up byte.
        while "error" not in outcome:
            now = time.monotonic()
            wake_at = min(next_renewal, timeout_at,
                          self.drain_deadline if self.stop_requested else float("inf"))
            self._sleep(wake_at - now)
            if "error" in outcome:
                return True
            self._absorb_signals()
            now = time.monotonic()
            if self.stop_requested:
                stopping.set()
                if now >= self.drain_deadline:
                    self._give_back(claimed, started, "the drain deadline passed")
                    raise _Abandon
            if now >= timeout_at:
                self._record_failure(
                    claimed, f"TimeoutError: job ran past its timeout of {registration.timeout:g}s",
                    started, permanent=False)
                # The handler thread cannot be stopped from outside; this
                # process ends and its supervisor starts a fresh one.
                self._must_exit_code = EXIT_RECYCLE
                return False
            if now >= next_renewal:
                next_renewal = now + self.config.renew_every
                if not self._renew_lease(claimed):
                    stopping.set()
        return True

    def _renew_lease(self, claimed: db.ClaimedJob) -> bool:
        """False when the handler should stop: the job is no longer ours, or was
        cancelled. A failed round trip is retried at the next renewal."""
        try:
            if not self.store.connected:
                self._connect()
            renewed = self.store.renew_leases(self.claimant, [claimed.id],
                                              self.config.lease_seconds)
            if claimed.id not in renewed:
                log.warning("worker %d: lost the claim on job %d (lease expired and taken"
                            " over); asking its handler to stop", self.index, claimed.id)
                return False
            if renewed[claimed.id]:
                log.info("worker %d: job %d was cancelled; asking its handler to stop",
                         self.index, claimed.id)
                return False
            return True
        except db.CONNECTION_ERRORS as exc:
            self.store.close()
            log.warning("worker %d: could not renew the lease of job %d: %s", self.index,
                        claimed.id, db.one_line(exc, self.config.database_url))
            return True

    def _give_back(self, claimed: db.ClaimedJob, started: float, why: str) -> None:
        self._release_own_claims()
        self._log_outcome(claimed, started, "released", why)

    def _release_own_claims(self) -> None:
        try:
            released = self.store.release_claims_of([self.claimant])
        except db.CONNECTION_ERRORS as exc:
            # The supervisor releases them when this process exits; the lease
            # is the last resort.
            log.warning("worker %d: could not release its claims: %s", self.index,
                        db.one_line(exc, self.config.database_url))
            self.store.close()
            return
        if released:
            log.info("worker %d released jobs %s", self.index, released)

    # -- outcomes -------------------------------------------------------------

    def _record_success(self, claimed: db.ClaimedJob, started: float) -> None:
        ours = self._write_outcome(lambda: self.store.mark_succeeded(claimed.id, self.claimant))
        self._log_outcome(claimed, started, "succeeded" if ours else "lost")

    def _record_failure(self, claimed: db.ClaimedJob, error: str, started: float,
                        permanent: bool) -> None:
        delay = retry_delay(claimed.attempt, self.config.retry_base_seconds,
                            self.config.retry_max_seconds)
        state = self._write_outcome(lambda: self.store.mark_failed_attempt(
            claimed.id, self.claimant, error, delay, permanent))
        outcome = {"pending": "retried", None: "lost"}.get(state, state)
        detail = f"{error.splitlines()[0]}" + (f"; retry in {delay:.1f}s" if state == "pending"
                                               else "")
        self._log_outcome(claimed, started, outcome, detail)

    def _write_outcome(self, write: Callable[[], Any]) -> Any:
        """Write an outcome, waiting out a database outage for as long as it lasts.

        The write is fenced on our claim, so writing it late is safe: if the
        lease expired meanwhile and someone else took the job, it changes
        nothing. An abort signal ends the wait; the supervisor then releases
        the claim.
        """
        while True:
            try:
                if not self.store.connected:
                    self._connect()
                return write()
            except db.CONNECTION_ERRORS as exc:
                self._absorb_signals()
                if self.abort_requested:
                    raise _Abandon from None
                self._lost_connection(exc)

    def _log_outcome(self, claimed: db.ClaimedJob, started: float, outcome: str,
                     detail: str = "") -> None:
        """One line per run: id, kind, attempt, duration, outcome."""
        took = time.monotonic() - started
        metrics.record_run(claimed.kind, outcome, took)
        if outcome == "lost":
            detail = "the claim was no longer this worker's; outcome not recorded"
        level = logging.INFO if outcome == "succeeded" else logging.WARNING
        log.log(level, "job %d %s attempt %d/%d %s in %.3fs%s", claimed.id, claimed.kind,
                claimed.attempt, claimed.max_attempts, outcome, took,
                f": {detail}" if detail else "")
