"""One worker process: listen, claim, run, record, renew.

The supervisor forks the process and calls :meth:`Worker.run` in the child;
this module does no forking and holds no SQL (it calls :mod:`db`).

The main thread owns the connection and all waiting. It claims a batch of
due jobs, hands the batch to a handler thread that runs them one after the
other, and meanwhile renews the batch's lease, notices signals, cancellations
and a lapsing lease, enforces timeouts and the drain deadline, and writes the
outcomes of finished runs, many per statement. While a handler may still be
running, this process never gives its claim back itself: it exits, and the
supervisor releases the claim once the process is gone, so a job can never
run here and elsewhere at once.
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import mmap
import os
import queue
import random
import select
import signal
import threading
import time
import traceback
from typing import Any, Callable, TypeVar

import psycopg2
import setproctitle

from . import db, metrics, registry
from .config import Config
from .logs import LINES, flush_logs

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Exit codes a worker uses to tell its supervisor how it ended. Whatever the
#: code, the supervisor releases what the worker still holds once it is gone.
EXIT_OK = 0
#: Configuration error (an --app module that does not import): do not restart.
#: Trusted only from a worker that never reported itself booted.
EXIT_BOOT_FAILURE = 4
#: A handler ran past its timeout; the worker left it behind and asks to be replaced.
EXIT_TIMEOUT = 5

#: last_error keeps at most this many characters: enough for a message and
#: the innermost frames, small enough to keep rows and status output lean.
MAX_ERROR_CHARS = 4000
#: A worker claims what it can run in about FAST_BATCH_SECONDS: a full batch
#: that finished sooner grows the next claim in proportion, by at most
#: BATCH_GROWTH_MAX times (1, 8, 64, 512 for jobs that take no time). A claim
#: that came back short sets the next one to what it found, an empty one to a
#: single job. A batch still running after SLOW_BATCH_SECONDS gives its
#: unstarted jobs back to the other workers and drops the next claim to a
#: single job, so that jobs never queue for long inside one worker while
#: others could run them.
FAST_BATCH_SECONDS = 0.1
SLOW_BATCH_SECONDS = 0.5
BATCH_GROWTH_MAX = 8
#: While a batch runs, finished outcomes are written at least this often.
OUTCOME_FLUSH_SECONDS = 0.2
#: After a failed write that must not block, the next such write waits this long.
QUICK_WRITE_RETRY_SECONDS = 1.0
#: The lease alarm goes off this long before the lease would expire.
LEASE_ALARM_MARGIN_SECONDS = 0.5

_PR_SET_PDEATHSIG = 1

#: The signals a worker handles; the supervisor forks with them blocked.
HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD,
                   signal.SIGTTIN, signal.SIGTTOU}


def retry_delay(attempt: int, base: float, cap: float) -> float:
    """Seconds before retrying after failed attempt ``attempt`` (1-based).

    Exponential, capped, with jitter over the upper half, so jobs that failed
    together (an outage) do not all come back in the same instant.
    """
    delay = min(cap, base * 2 ** min(max(attempt - 1, 0), 32))
    return delay / 2 + random.uniform(0, delay / 2)


def next_batch_size(size: int, claimed: int, took: float, most: int) -> int:
    """The next claim's size after ``claimed`` jobs of a claim of ``size`` ran in ``took`` s."""
    if took > SLOW_BATCH_SECONDS:
        return 1
    if claimed < size:
        return max(claimed, 1)
    if took >= FAST_BATCH_SECONDS:
        return size
    growth = min(BATCH_GROWTH_MAX, FAST_BATCH_SECONDS / max(took, 1e-6))
    return min(max(int(size * growth), size + 1), most)


def describe_failure(exc: BaseException) -> str:
    """The exception's type and message first, then the innermost frames.

    Made storable whatever the exception holds: PostgreSQL text takes no NUL
    and no lone surrogate (a file name that was not UTF-8), and one bad
    message must not keep a whole batch's outcomes out of the database.
    """
    head = _storable(f"{type(exc).__name__}: {exc}")[: MAX_ERROR_CHARS // 4]
    frames = _storable("".join(traceback.format_tb(exc.__traceback__)))
    room = MAX_ERROR_CHARS - len(head) - len("\nTraceback (innermost last):\n")
    if len(frames) > room:
        frames = "..." + frames[-(room - 3):]
    return f"{head}\nTraceback (innermost last):\n{frames}" if frames else head


def _storable(text: str) -> str:
    return text.replace("\0", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send ``signum`` when the parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class RunningSlot:
    """Eight bytes of memory shared by a worker and its supervisor: the id of
    the job whose handler runs right now, 0 between runs.

    When a worker dies, its supervisor reads it to tell the job that was
    running (its attempt counts: it may be what killed the worker) from the
    jobs of the same batch that had not started (given back untouched).
    """

    def __init__(self) -> None:
        self._memory = mmap.mmap(-1, 8)  # anonymous and shared: survives the fork

    def set(self, job_id: int) -> None:
        self._memory[:8] = job_id.to_bytes(8, "little")

    def clear(self) -> None:
        self.set(0)

    def read(self) -> int | None:
        return int.from_bytes(self._memory[:8], "little") or None

    def close(self) -> None:
        self._memory.close()


class ExitNow(Exception):
    """End this process now with ``code``; the supervisor releases what is held."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


class StopFlag:
    """What ``j.stopping`` reads: a plain flag, cheaper than an Event per job
    (nothing ever waits on it, and a bool is set atomically)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def is_set(self) -> bool:
        return self.value


@dataclasses.dataclass(slots=True)
class Run:
    """One claimed job inside a batch, as the two threads share it."""

    claimed: db.ClaimedJob
    stopping: StopFlag = dataclasses.field(default_factory=StopFlag)
    started: float | None = None
    #: Taken out of the batch before it started (a stop, a cancel, a slow
    #: batch-mate); the handler thread skips it.
    withdrawn: bool = False
    #: Set by the handler thread when the run ended; then ``error`` is final.
    ended: bool = False
    error: BaseException | None = None
    duration: float = 0.0
    #: Its outcome (or release) is in the database: the claim is no longer held.
    written: bool = False


class Batch:
    """The jobs of one claim and the handler thread that runs them in order."""

    def __init__(self, worker: "Worker", jobs: list[db.ClaimedJob]):
        self.worker = worker
        self.runs = [Run(job) for job in jobs]
        #: Guards the decision to start the next run against a stop request.
        self.lock = threading.Lock()
        self.stopped = False
        self.done = False

    def run_all(self) -> None:
        """Run the batch's jobs in order (in the handler thread)."""
        try:
            for run in self.runs:
                with self.lock:
                    if self.stopped:
                        break
                    if run.withdrawn:
                        continue
                    run.started = time.monotonic()
                self.worker.running_slot.set(run.claimed.id)
                self._run_one(run)
                self.worker.running_slot.clear()
        finally:
            self.done = True
            self.worker.wake()

    def _run_one(self, run: Run) -> None:
        job = run.claimed
        registration = registry.registration_for(job.kind)
        try:
            if registration is None:
                known = ", ".join(registry.registered_kinds()) or "none"
                raise LookupError(f"no handler registered for job kind {job.kind!r}"
                                  f" (registered: {known})")
            self.worker.title(f"running job {job.id} {job.kind}")
            registration.handler(registry.Job(
                id=job.id, kind=job.kind, queue=job.queue, payload=job.payload,
                attempt=job.attempt, max_attempts=job.max_attempts,
                checkpoint_data=job.checkpoint_data, stopping=run.stopping,
                save_checkpoint=lambda data: self.worker.save_checkpoint(job.id, data)))
        except BaseException as exc:  # noqa: BLE001 - every failure is the job's outcome
            run.error = exc
        run.duration = time.monotonic() - run.started
        run.ended = True
        if run.duration > OUTCOME_FLUSH_SECONDS:
            self.worker.wake()  # a slow run's outcome is worth writing now

    def stop_starting(self) -> None:
        """No further run starts; what has not started is withdrawn."""
        with self.lock:
            self.stopped = True
            self._withdraw(lambda run: True)

    def withdraw(self, wanted: Callable[[Run], bool]) -> None:
        """Take the runs ``wanted`` selects out of the batch, if they have not
        started; the worker gives their claims back (see ``unreleased``)."""
        with self.lock:
            self._withdraw(wanted)

    def _withdraw(self, wanted: Callable[[Run], bool]) -> None:
        for run in self.runs:
            if run.started is None and wanted(run):
                run.withdrawn = True

    def unreleased(self) -> list[Run]:
        """Runs taken out of the batch whose claim is still held (a release
        not written yet, or one that failed and is due again)."""
        return [run for run in self.runs if run.withdrawn and not run.written]

    @property
    def current(self) -> Run | None:
        for run in self.runs:
            if run.started is not None and not run.ended:
                return run
        return None


class Worker:
    def __init__(self, config: Config, index: int, claimant: str, parent_pid: int,
                 ready_fd: int = -1, running_slot: RunningSlot | None = None):
        self.config = config
        self.running_slot = running_slot or RunningSlot()
        self.index = index
        self.claimant = claimant
        self.parent_pid = parent_pid
        self.ready_fd = ready_fd
        self.store = db.JobStore(config.database_url,
                                 application_name=f"motir-supervisor worker {index}",
                                 listen=config.listen, timeout_seconds=config.renew_every)
        # Checkpoints come from the handler thread; a store of their own keeps
        # the main thread's connection (and its LISTEN) out of its hands.
        self._checkpoint_store = db.JobStore(
            config.database_url, application_name=f"motir-supervisor worker {index} checkpoints",
            timeout_seconds=config.renew_every)
        self.queues = list(config.queues) or None
        self._signals: list[int] = []
        self._wake_r, self._wake_w = -1, -1
        self.stop_requested = False
        self.abort_requested = False
        self.drain_deadline = float("inf")
        self.batch_size = 1
        self._idle_backoff = 0.0
        self._reconnect_backoff = 0.0
        self._ever_connected = False
        self._batches: queue.SimpleQueue | None = None
        #: Writes that must not block (while a handler runs) wait for this
        #: after a failure, so that an outage is not retried five times a second.
        self._next_quick_write = 0.0

    # -- lifecycle ----------------------------------------------------------

    def run(self) -> int:
        """The child's whole life; returns its exit code.

        The supervisor forks with the stop signals blocked; they stay blocked
        until this process's own handlers are installed, so none is lost.
        """
        self._install_signals()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
        set_parent_death_signal(signal.SIGTERM)
        self.title("booting")
        try:
            registry.import_apps(self.config.apps)
        except registry.AppImportError as exc:
            log.error("worker %d: %s", self.index, exc)
            return EXIT_BOOT_FAILURE
        self._report_ready()
        metrics.name_this_process(f"worker-{self.index}")
        log.debug("worker %d (pid %d) up as %s", self.index, os.getpid(), self.claimant)
        try:
            self._work_until_stopped()
        except ExitNow as exit_now:
            return exit_now.code
        finally:
            self.store.close()
        return EXIT_OK

    def _report_ready(self) -> None:
        if self.ready_fd >= 0:
            os.write(self.ready_fd, b"R")
            os.close(self.ready_fd)

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
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the lease alarm ends the process
        for signum in (signal.SIGTTIN, signal.SIGTTOU, signal.SIGHUP):
            signal.signal(signum, signal.SIG_IGN)

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

    def title(self, doing: str) -> None:
        setproctitle.setproctitle(f"motir-supervisor: worker {self.index} {doing}")

    def wake(self) -> None:
        """Wake the main thread (called from the handler thread)."""
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def _sleep(self, seconds: float) -> None:
        """Sleep, but wake for a signal or the handler thread."""
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
            if self.stop_requested:
                return
            try:
                if not self.store.connected:
                    self._reconnect()
                self.title("claiming")
                claim_sent = time.monotonic()
                jobs = self.store.claim_due_jobs(self.claimant, self.batch_size,
                                                 self.config.lease_seconds, self.queues)
                self._reconnect_backoff = 0.0
                if jobs:
                    self._idle_backoff = 0.0
                    self._run_batch(jobs, claim_sent)
                else:
                    # The queue is empty: whatever comes next is shared by
                    # every worker it wakes, each growing its claims afresh.
                    self.batch_size = 1
                    self._wait_for_work()
            except psycopg2.Error as exc:
                # Unreachable, or refusing writes (a read-only node after a
                # failover): either way it is the database's state, not ours.
                self._lost_connection(exc)

    def _connect(self) -> None:
        self.store.open()
        log.debug("worker %d connected to %s, %s", self.index,
                  db.describe_dsn(self.config.database_url),
                  "listening" if self.config.listen else "polling only")

    def _reconnect(self) -> None:
        """Connect between batches. A claim whose reply was lost with the old
        connection may have committed: whatever this worker still holds now
        is such a claim, and goes back at once rather than at lease expiry."""
        first = not self._ever_connected
        self._connect()
        self._ever_connected = True
        if not first:
            released = self.store.release_claims_of([self.claimant])
            if released:
                log.warning("worker %d: released jobs %s claimed just before the connection"
                            " was lost", self.index, released)

    def _lost_connection(self, exc: BaseException) -> None:
        self.store.close()
        self._reconnect_backoff = min(max(self._reconnect_backoff * 2, 0.1), 5.0)
        wait = self._reconnect_backoff * random.uniform(0.5, 1.0)
        log.warning("worker %d: database unreachable (%s); retrying in %.1fs", self.index,
                    db.one_line(exc, self.config.database_url), wait)
        self.title("waiting for the database")
        self._sleep(wait)

    def _wait_for_work(self) -> None:
        """Idle until a wanted notification, a signal, the next due job or the poll timer."""
        self.title("idle")
        if self._wanted(self.store.take_notifications()):
            return
        self._idle_backoff = min(max(self._idle_backoff * 2, 0.05), self.config.poll_seconds)
        timeout = self._idle_backoff
        until_due = self.store.seconds_until_next_due(self.queues)
        if until_due is not None and until_due > 0:
            timeout = min(timeout, until_due)
        deadline = time.monotonic() + timeout
        # That query may have read a notification off the socket; select
        # would not see it again.
        if self._wanted(self.store.take_notifications()):
            return
        while (left := deadline - time.monotonic()) > 0:
            ready = self.store.wait_readable([self._wake_r], left)
            if self._wake_r in ready:
                self._drain_wake_pipe()
                return  # a signal: let the loop look at it
            if self.store.fileno() in ready and self._wanted(self.store.take_notifications()):
                # A wake-up is news, not an empty poll: start backing off afresh.
                self._idle_backoff = 0.0
                return
            # Only other queues' news: keep waiting out the same deadline.

    def _wanted(self, notified_queues: list[str]) -> bool:
        if not notified_queues:
            return False
        return self.queues is None or any(q in self.queues for q in notified_queues)

    # -- a batch --------------------------------------------------------------

    def _run_batch(self, jobs: list[db.ClaimedJob], claim_sent: float) -> None:
        for job in jobs:
            metrics.record_claim(job.queue)
        batch = Batch(self, jobs)
        self._absorb_signals()
        if self.stop_requested:
            # Claimed while the stop signal landed: nothing starts after it.
            batch.stop_starting()
            self._release_unstarted(batch)
            return
        if time.monotonic() - claim_sent > self.config.renew_every:
            # The claim waited (a lock on the table, a stall): its lease is
            # partly spent before anything started. Give it back instead.
            log.warning("worker %d: the claim took %.1fs; giving its jobs back", self.index,
                        time.monotonic() - claim_sent)
            batch.stop_starting()
            self._release_unstarted(batch)
            return
        self._arm_lease_alarm(claim_sent)
        self._handler_queue().put(batch)
        started = time.monotonic()
        self._supervise(batch, claim_sent, started)
        self._disarm_lease_alarm()  # no handler runs any more
        self._flush_outcomes(batch)
        self._release_unstarted(batch)
        flush_logs()
        took = time.monotonic() - started
        self.batch_size = next_batch_size(self.batch_size, len(jobs), took,
                                          self.config.batch_size)

    def _supervise(self, batch: Batch, lease_confirmed: float, started: float) -> None:
        """Wait for the batch while renewing its lease; raise ExitNow to give up."""
        lease = self.config.lease_seconds
        next_renewal = lease_confirmed + self.config.renew_every
        while not batch.done:
            now = time.monotonic()
            current = batch.current
            timeout_at = _timeout_at(current)
            wake_at = min(next_renewal, timeout_at, now + OUTCOME_FLUSH_SECONDS,
                          self.drain_deadline if self.stop_requested else float("inf"))
            self._sleep(wake_at - now)
            if batch.done:
                return
            self._absorb_signals()
            now = time.monotonic()
            if self.stop_requested and not batch.stopped:
                for run in batch.runs:
                    run.stopping.set()
                batch.stop_starting()
            if self.stop_requested and now >= self.drain_deadline:
                self._next_quick_write = 0.0  # one last try, whatever failed before
                self._release_unstarted(batch, wait=False)
                self._flush_outcomes(batch, wait=False)
                if batch.current is not None:
                    log.warning("worker %d: drain deadline passed with job %d still running;"
                                " its claim is released as this worker exits", self.index,
                                batch.current.claimed.id)
                raise ExitNow(EXIT_OK)
            current = batch.current
            if current is not None and now >= _timeout_at(current):
                self._abandon_timed_out(batch, current)
            elif now - started > SLOW_BATCH_SECONDS:
                # What has not started would wait for a slow run, or a slow
                # batch: let other workers have it.
                batch.withdraw(lambda run: True)
            if now >= next_renewal:
                next_renewal = now + self.config.renew_every
                if self._renew_leases(batch):
                    lease_confirmed = now
                    self._arm_lease_alarm(now)
            if now - lease_confirmed > lease - self.config.renew_every:
                # Renewals keep failing: the claim may soon be someone else's,
                # so nothing more starts, and the running handler is asked to stop.
                if not batch.runs[0].stopping.is_set():
                    log.error("worker %d: its lease runs out in %.1fs without a renewal;"
                              " asking its handler to stop", self.index,
                              lease - (now - lease_confirmed))
                batch.withdraw(lambda run: True)
                for run in batch.runs:
                    run.stopping.set()
            # Whatever was withdrawn above, or earlier by a release that failed.
            self._release_unstarted(batch, wait=False)
            self._flush_outcomes(batch, wait=False)
            flush_logs()

    def _handler_queue(self) -> queue.SimpleQueue:
        """The handler thread's inbox, started on first use: one thread for the
        worker's life, so that a batch costs a hand-over, not a thread start."""
        if self._batches is None:
            self._batches = queue.SimpleQueue()
            threading.Thread(target=self._run_batches, name="handlers", daemon=True).start()
        return self._batches

    def _run_batches(self) -> None:
        try:
            while True:
                self._batches.get().run_all()
        except BaseException:  # noqa: BLE001 - a bug of ours, not a handler's failure
            # Without this thread no batch would ever finish: end the process,
            # and the supervisor releases what it held and starts a new one.
            log.exception("worker %d: its handler thread broke", self.index)
            flush_logs()
            os._exit(70)

    def _arm_lease_alarm(self, confirmed_at: float) -> None:
        """Have the kernel end this process just before the lease expires.

        Renewals may block on an unreachable database, and a blocked thread
        cannot check the time; SIGALRM at its default action ends the process
        whatever it is doing. Once its lease has expired, another supervisor
        may run the job, and this run must be over by then. The supervisor
        then releases what the worker held.
        """
        left = (self.config.lease_seconds - LEASE_ALARM_MARGIN_SECONDS
                - (time.monotonic() - confirmed_at))
        signal.setitimer(signal.ITIMER_REAL, max(left, 0.001))

    @staticmethod
    def _disarm_lease_alarm() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _abandon_timed_out(self, batch: Batch, run: Run) -> None:
        batch.stop_starting()
        if run.ended:
            # It finished in the meantime: nothing to abandon, and nothing
            # else starts in this batch either way.
            self._release_unstarted(batch, wait=False)
            return
        self._next_quick_write = 0.0  # one last try, whatever failed before
        self._flush_outcomes(batch, wait=False)
        self._release_unstarted(batch, wait=False)
        registration = registry.registration_for(run.claimed.kind)
        self._log_outcome(run, "timed out", f"ran past its timeout of {registration.timeout:g}s")
        # The handler thread cannot be stopped from outside: this process
        # ends, the supervisor releases the claim (the attempt counts) and
        # starts a fresh worker.
        raise ExitNow(EXIT_TIMEOUT)

    def _renew_leases(self, batch: Batch) -> bool:
        """Renew the claims still held; True when the database confirmed it."""
        held = [run for run in batch.runs if not run.written]
        if not held:
            return True
        try:
            if not self.store.connected:
                self._connect()
            renewed = self.store.renew_leases(self.claimant, [r.claimed.id for r in held],
                                              self.config.lease_seconds)
        except psycopg2.Error as exc:
            self.store.close()
            log.warning("worker %d: could not renew its lease: %s", self.index,
                        db.one_line(exc, self.config.database_url))
            return False
        for run in held:
            if run.claimed.id not in renewed:
                if not run.stopping.is_set():
                    log.warning("worker %d: lost the claim on job %d; asking its handler to"
                                " stop", self.index, run.claimed.id)
                run.stopping.set()
            elif renewed[run.claimed.id] and not run.stopping.is_set():
                log.info("worker %d: job %d was cancelled; asking its handler to stop",
                         self.index, run.claimed.id)
                run.stopping.set()
        # Jobs that have not started and were cancelled, or are no longer
        # ours, never will here: their release (by _supervise) makes the
        # cancelled ones cancelled and, fenced, leaves the lost ones to their
        # new owner.
        batch.withdraw(lambda run: renewed.get(run.claimed.id, True))
        return True

    def save_checkpoint(self, job_id: int, data: Any) -> bool:
        try:
            return self._checkpoint_store.save_checkpoint(job_id, self.claimant, data)
        except db.CONNECTION_ERRORS:
            self._checkpoint_store.close()
            raise

    def _release_unstarted(self, batch: Batch, wait: bool = True) -> None:
        """Give back the claims of the batch's withdrawn runs not given back yet."""
        runs = batch.unreleased()
        if not runs:
            return
        ids = [run.claimed.id for run in runs]
        if self._write(lambda: self.store.release_claims_of([self.claimant], ids),
                       wait) is None:
            return  # still claimed: tried again at the next tick, or released by the supervisor
        for run in runs:
            run.written = True
        log.info("worker %d released jobs %s before starting them", self.index, ids)
        metrics.record_release("not_started", len(ids))

    # -- outcomes -------------------------------------------------------------

    def _flush_outcomes(self, batch: Batch, wait: bool = True) -> None:
        """Write every finished run's outcome not written yet, in one statement.

        With ``wait`` false a failed write is left for later rather than
        waited out: the caller is supervising a running handler.
        """
        finished = [run for run in batch.runs if run.ended and not run.written]
        if not finished:
            return
        interrupted = [run for run in finished if isinstance(run.error, registry.Interrupted)
                       and run.stopping.is_set()]
        outcomes = [self._outcome_of(run) for run in finished if run not in interrupted]
        states = self._write(lambda: self.store.record_outcomes(self.claimant, outcomes), wait)
        if states is None:
            return
        succeeded = []
        for run in finished:
            if run not in interrupted:
                run.written = True
                state = states.get(run.claimed.id)
                if state == "succeeded":
                    succeeded.append(run)
                else:
                    outcome = {"pending": "retried", None: "lost"}.get(state, state)
                    self._log_outcome(run, outcome, _first_line(run.error))
        self._log_successes(succeeded)
        if interrupted and self._write(lambda: self.store.release_claims_of(
                [self.claimant], [run.claimed.id for run in interrupted]), wait) is not None:
            for run in interrupted:
                run.written = True
                self._log_outcome(run, "released", "its handler stopped at a checkpoint")

    def _outcome_of(self, run: Run) -> db.Outcome:
        if run.error is None:
            return db.Outcome(run.claimed.id)
        error = run.error
        if isinstance(error, registry.Interrupted):
            error = RuntimeError("the handler raised Interrupted although the worker was not"
                                 " stopping; counted as a failed attempt")
        return db.Outcome(
            run.claimed.id, describe_failure(error),
            retry_delay(run.claimed.attempt, self.config.retry_base_seconds,
                        self.config.retry_max_seconds),
            isinstance(error, registry.PermanentFailure))

    def _write(self, write: Callable[[], T], wait: bool = True) -> T | None:
        """Run a write, waiting out a database outage for as long as it lasts.

        Every write is fenced on our claim, so writing it late is safe: if the
        lease expired meanwhile and someone else took the job, it changes
        nothing. An abort signal ends the wait: the process exits and its
        supervisor releases what it held. With ``wait`` false one failure
        returns None instead.
        """
        if not wait and time.monotonic() < self._next_quick_write:
            return None
        while True:
            try:
                if not self.store.connected:
                    self._connect()
                return write()
            except psycopg2.Error as exc:
                if not wait:
                    self.store.close()
                    self._next_quick_write = time.monotonic() + QUICK_WRITE_RETRY_SECONDS
                    log.warning("worker %d: database unreachable (%s); will retry",
                                self.index, db.one_line(exc, self.config.database_url))
                    return None
                self._absorb_signals()
                if self.abort_requested:
                    raise ExitNow(EXIT_OK) from None
                self._lost_connection(exc)

    def _log_outcome(self, run: Run, outcome: str, detail: str = "") -> None:
        """One line per run: id, kind, attempt, duration, outcome."""
        metrics.record_run(run.claimed.kind, outcome, run.duration)
        if outcome == "lost":
            detail = "the claim was no longer this worker's; outcome not recorded"
        log.warning("%s", _outcome_line(run, outcome, detail))

    def _log_successes(self, runs: list[Run]) -> None:
        """The same line for each run that succeeded, in one log record for all
        of them (see logs.LINES): a busy worker records hundreds at a time."""
        for run in runs:
            metrics.record_run(run.claimed.kind, "succeeded", run.duration)
        if runs and log.isEnabledFor(logging.INFO):
            lines = [_outcome_line(run, "succeeded") for run in runs]
            log.info("%s", "\n".join(lines), extra={LINES: lines})


def _timeout_at(run: Run | None) -> float:
    if run is None or run.started is None:
        return float("inf")
    registration = registry.registration_for(run.claimed.kind)
    if registration is None or registration.timeout is None:
        return float("inf")
    return run.started + registration.timeout


def _outcome_line(run: Run, outcome: str, detail: str = "") -> str:
    job = run.claimed
    return (f"job {job.id} {job.kind} attempt {job.attempt}/{job.max_attempts} {outcome}"
            f" in {run.duration:.3f}s{': ' + detail if detail else ''}")


def _first_line(error: BaseException | None) -> str:
    if error is None:
        return ""
    return f"{type(error).__name__}: {error}".splitlines()[0]
