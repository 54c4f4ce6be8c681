"""One worker process: its lifecycle, its signals and its loop (how it
waits is :mod:`waiting`'s; how it ends, :mod:`exits`).

The supervisor forks the process and calls :meth:`Worker.run` in the child;
this module does no forking and holds no SQL. The main thread owns the
worker's database connection (through :class:`holdings.Holdings`) and all
waiting: it claims what its free slots can start, hands the runs to the
:class:`executor.Executor`, and meanwhile writes outcomes, renews leases,
enforces timeouts and the drain, and waits for wake-ups (see
:mod:`wakeups`). While a handler may still be running, this process never
gives its claim back itself: it exits, and the supervisor releases the claim
once the process is gone, so a job can never run here and elsewhere at once.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from typing import Any

import psycopg2

from .. import db, metrics, registry
from ..config import Config
from .executor import Executor
from .title import WorkerTitle
from ..ipc.lifecycle import (EXIT_BOOT_FAILURE, EXIT_OK, EXIT_RECYCLED, EXIT_TIMEOUT,
                             HANDLED_SIGNALS, ExitNow, report_ready,
                             set_parent_death_signal)
from .producer import Holdings
from ..ipc.ledger import Ledger
from ..maintenance.limits import LimitsSync
from ..logs import flush_logs
from .recycling import Recycling
from ..maintenance.scheduler import Schedule, Scheduler
from ..ipc.tokens import Kicks, Token
from .poller import Waiting

log = logging.getLogger(__name__)

#: Reconnecting after an outage backs off from the first to the last of these.
RECONNECT_BACKOFF = (0.1, 5.0)
#: While any kind is limited, a worker with room tries the limited claim at
#: least this often, whatever it heard.
LIMITED_CLAIM_BACKSTOP_SECONDS = 1.0


class Worker(Waiting):
    def __init__(self, config: Config, index: int, claimant: str, parent_pid: int,
                 ready_fd: int = -1, ledger: Ledger | None = None,
                 token: Token | None = None, kicks: Kicks | None = None,
                 scheduler_token: Token | None = None):
        self.config = config
        self.index = index
        self.claimant = claimant
        self.parent_pid = parent_pid
        self.ready_fd = ready_fd
        self.ledger = ledger or Ledger(config.ledger_entries)
        #: Only with LISTEN: one worker of the supervisor listens, the others
        #: are kicked (see wakeups).
        self.token = token if config.listen else None
        self.kicks = kicks if config.listen else None
        #: The scheduler runs in the one worker holding this token, once the
        #: apps are imported and name a schedule (see _take_scheduler_token).
        self.scheduler_token = scheduler_token
        self.scheduler: Scheduler | None = None
        self._schedules: list[Schedule] = []
        self._next_token_try = 0.0
        self._next_listener_try = 0.0
        self.title = WorkerTitle(index)
        self.recycling = Recycling(config.max_jobs_per_worker, config.max_worker_memory_mb)
        # --no-listen is for PgBouncer in transaction mode, where a prepared
        # statement may not be on the server connection the next one gets.
        self.store = db.JobStore(config.database_url,
                                 application_name=f"motir-supervisor worker {index}",
                                 timeout_seconds=config.renew_every, prepare=config.listen)
        # Checkpoints come from handler threads; a store of their own keeps
        # the main thread's connection (and its LISTEN) out of their hands.
        self._checkpoint_store = db.JobStore(
            config.database_url, application_name=f"motir-supervisor worker {index} checkpoints",
            timeout_seconds=config.renew_every)
        self._checkpoint_lock = threading.Lock()
        self._signals: list[int] = []
        self._wake_r, self._wake_w = -1, -1
        self.executor = Executor(
            config.concurrency, self.ledger, retry_base=config.retry_base_seconds,
            retry_cap=config.retry_max_seconds, wake=self.wake,
            save_checkpoint=self.save_checkpoint, title=self.title)
        self.holdings = Holdings(config, claimant, index, self.store, self.executor,
                                 self.ledger, stop_check=self._stop_landed)
        self.holdings.claims_left = self.recycling.claim_budget
        self.stop_requested = False
        self.drain_deadline = float("inf")
        self.exit_code = EXIT_OK
        #: Whether a claim now could find something: set by a wake-up, a
        #: kick, the poll timer or a claim that took all it asked for.
        self.may_have_work = True
        #: Whether any kind is limited, fleet-wide (job_queue_limits), and
        #: whether claim_limited_jobs could find something now: set by what
        #: sets may_have_work, and by a limited claim that left some behind.
        #: A limited kind's slot that frees notifies (migrations/0004).
        self.limits_exist = False
        self.limited_may_have_work = True
        self.limits_sync = LimitsSync(self.store, index)
        self._next_limited_claim = 0.0
        #: When an idle worker looks again without being woken.
        self._idle_until = 0.0
        self._poll_backoff = 0.0
        self._reconnect_backoff = 0.0
        #: After a database error, nothing is sent before this time.
        self._database_retry_at = 0.0

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
        self._schedules = [r.schedule for r in registry.scheduled()]
        if registry.any_async():
            # Imported now rather than by the first async run, under the
            # executor's lock; a no-op when the supervisor imported it before
            # the fork (see registry.preload_asyncio_for). The loop itself
            # starts with the first async run: a thread of its own in every
            # worker took about 0.4 MB each of one that runs only def jobs.
            import asyncio  # noqa: F401
        if warning := self.recycling.warning_at_boot():
            log.warning("worker %d %s", self.index, warning)
        report_ready(self.ready_fd)
        metrics.name_this_process(f"worker-{self.index}")
        log.debug("worker %d (pid %d) up as %s", self.index, os.getpid(), self.claimant)
        try:
            return self._work_until_stopped()
        except ExitNow as exit_now:
            return exit_now.code
        finally:
            self.store.close()

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
            if signum == signal.SIGTERM:
                self.begin_stop(self.config.drain_seconds, "stopping")
            else:
                self.begin_stop(0.0, "giving back unfinished jobs now")
        if not self.draining and self.ledger.stop_asked:
            self.begin_stop(self.config.drain_seconds, "stopping")
        if not self.draining and os.getppid() != self.parent_pid:
            log.warning("worker %d: supervisor is gone; draining", self.index)
            self.begin_stop(self.config.drain_seconds, "draining")

    def _stop_landed(self) -> bool:
        self._absorb_signals()
        return self.stop_requested

    @property
    def draining(self) -> bool:
        """Stopping with a deadline (a recycle alone has none)."""
        return self.drain_deadline < float("inf")

    def begin_stop(self, drain_seconds: float, why: str) -> None:
        """Start nothing more; running jobs get ``drain_seconds`` to finish.
        During a recycle too: what has not started then goes back after all."""
        deadline = time.monotonic() + drain_seconds
        if self.stop_requested and deadline >= self.drain_deadline:
            return
        if not self.draining:
            log.info("worker %d: %s, in-flight work may take %gs", self.index, why,
                     drain_seconds)
        self.stop_requested = True
        self.drain_deadline = deadline
        self.holdings.withdraw_unstarted()
        for run in self.executor.running():
            run.stopping.set()
        self._hand_on_tokens()

    def begin_recycling(self, reason: str) -> None:
        """Claim nothing more, run all that is held, exit with EXIT_RECYCLED.
        Unlike a stop, nothing goes back (claimed jobs not started yet run
        here too) and no deadline cuts a run short. The ledger says so at
        once, so that the replacement starts, and claims, meanwhile."""
        held = self.holdings.held.values()
        log.info("worker %d (pid %d) recycling %s; the %d jobs it holds end here, %d of them"
                 " not started yet", self.index, os.getpid(), reason, len(held),
                 sum(1 for run in held if run.started is None and not run.withdrawn))
        self.exit_code = EXIT_RECYCLED
        self.stop_requested = True
        self.holdings.keep_unstarted = True
        self._hand_on_tokens()
        self.ledger.set_retiring(reason)
        self.title.prefix = f"recycling {reason}, "
        self.title(f"finishing {len(held)} jobs")

    def _hand_on_tokens(self) -> None:
        """Let another worker listen and schedule: this one claims nothing more."""
        if self.token is not None and self.token.held:
            # Another worker listens from now on, not a draining one.
            self.token.give_up()
            self.store.listen = False
            self.kicks.kick()
        if self.scheduler is not None:
            # Another worker (a staying one, or the replacement) schedules.
            self.scheduler_token.give_up()
            self.scheduler = None

    def wake(self) -> None:
        """Wake the main thread (called from handler threads)."""
        try:
            os.write(self._wake_w, b"\0")
        except OSError:
            pass

    def save_checkpoint(self, job_id: int, data: Any) -> bool:
        with self._checkpoint_lock:
            try:
                return self._checkpoint_store.save_checkpoint(job_id, self.claimant, data)
            except db.CONNECTION_ERRORS:
                self._checkpoint_store.close()
                raise

    # -- the loop -------------------------------------------------------------

    def _work_until_stopped(self) -> int:
        holdings = self.holdings
        while True:
            self._absorb_signals()
            self.executor.nudge()
            now = time.monotonic()
            if holdings.watch(now):
                self.begin_timeout_retirement()
            if self.stop_requested:
                if not holdings.anything_running():
                    holdings.settle_before_exit()
                    return self.exit_code
                if now >= self.drain_deadline:
                    holdings.abandon_running()
                    raise ExitNow(self.exit_code)
            if now >= self._database_retry_at:
                try:
                    self._talk_to_database(now)
                except psycopg2.Error as exc:
                    # Unreachable, or refusing writes (a read-only node after a
                    # failover): either way it is the database's state, not ours.
                    self._database_failed(exc)
                    continue
            # After the claims: one that spent the last of the budget recycles
            # before this worker waits, still holding the listener's token.
            if not self.stop_requested and (
                    reason := self.recycling.reason(holdings.claims_left, now)):
                self.begin_recycling(reason)
            holdings.update_lease_alarm()
            flush_logs()
            self._wait()

    def _talk_to_database(self, now: float) -> None:
        holdings = self.holdings
        if not self.store.connected:
            self._connect()
        # Renew first, so that a claim never starts handlers under a lease
        # confirmed too long ago (after an outage the alarm would fire at
        # once). Then claim before writing: a slot a run has just left starts
        # its next job a round trip sooner, and the ended run's outcome is
        # safe in the ledger meanwhile.
        holdings.renew_leases_if_due(now)
        holdings.recheck_claims_if_due(now)
        self._claim_while_room()
        holdings.write_finished()
        holdings.release_withdrawn()
        self._reconnect_backoff = 0.0
        self._claim_while_room()
        self._look_for_listener_token(now)
        if self._take_scheduler_token():
            self.scheduler.run_when_due()

    def _claim_while_room(self) -> None:
        while (room := self._room_to_claim()) > 0:
            now = time.monotonic()
            if self.limits_exist and (self.limited_may_have_work
                                      or now >= self._next_limited_claim):
                # The backstop: a wake-up lost (or never sent: --no-listen)
                # delays a limited job by a second at most.
                self._next_limited_claim = now + LIMITED_CLAIM_BACKSTOP_SECONDS
                claimed, more_due = self.holdings.claim_limited()
                self.limited_may_have_work = more_due
                if more_due and claimed and self.kicks is not None:
                    self.kicks.kick()
                if claimed:
                    continue
            claimed, more_due = self.holdings.claim(room)
            if more_due and self.kicks is not None:
                self.kicks.kick()
            if not claimed:
                self.may_have_work = False
                self._go_idle()
                return
            self._poll_backoff = 0.0
            if self.holdings.last_claim_was_short:
                self.may_have_work = False

    def _room_to_claim(self) -> int:
        """How many jobs to claim now (computed once: the reserve moves with
        the clock); 0 for none."""
        # Ended claims first: the batch size follows them, not the writes.
        self.holdings.collect_finished()
        if not self.may_have_work or self.stop_requested:
            return 0
        return self.holdings.room()

    def begin_timeout_retirement(self) -> None:
        """A sync handler ran past its timeout and cannot be stopped from
        outside: the others get the drain to finish, then this process ends
        and the supervisor fails that job's attempt and starts a new worker
        (at once: the ledger says this one is retiring)."""
        self.exit_code = EXIT_TIMEOUT
        self.ledger.set_retiring()
        self.begin_stop(self.config.drain_seconds, "replacing itself after a timeout")

    def _connect(self) -> None:
        if self.token is not None and self.token.held:
            self.store.listen = True
        self.store.open()
        log.debug("worker %d connected to %s, %s", self.index,
                  db.describe_dsn(self.config.database_url),
                  "polling only" if self.token is None
                  else "listening" if self.store.listen else "woken by the listener")
        self.holdings.after_reconnect()
        self._sync_limits()
        # Whatever was announced while the connection was down went unheard.
        self._expect_work()

    def _expect_work(self) -> None:
        self.may_have_work = True
        self.limited_may_have_work = True

    def _sync_limits(self) -> None:
        if (limits_exist := self.limits_sync.run()) is not None:
            self.limits_exist = limits_exist

    def _database_failed(self, exc: BaseException) -> None:
        self.store.close()
        low, high = RECONNECT_BACKOFF
        self._reconnect_backoff = min(max(self._reconnect_backoff * 2, low), high)
        wait = self._reconnect_backoff * random.uniform(0.5, 1.0)
        self._database_retry_at = time.monotonic() + wait
        log.warning("worker %d: database unreachable (%s); retrying in %.1fs", self.index,
                    db.one_line(exc, self.config.database_url), wait)
        if not self.executor.busy:
            self.title("waiting for the database")
