"""One worker process: its lifecycle, its signals and its loop.

The supervisor forks the process and calls :meth:`Worker.run` in the child;
this module does no forking and holds no SQL. The worker is composed of
roles, each an object of its own module built here with what it needs:
:class:`.holdings.Holdings` owns what the worker holds, the
:class:`.producer.Producer` claims, the :class:`.executor.Executor` runs,
the :class:`.completer.Completer` writes outcomes, the
:class:`.leases.Leases` keep the claims, the :class:`.poller.Poller`
waits, and :class:`.timeouts.Timeouts` ends sync runs past their timeout.
Its periodic services (the claim recheck, the limits sync, the scheduler;
see :mod:`..maintenance.services`) run from one list. The main thread owns
the worker's database connection and calls every role; only the
executor's handler threads run anything else.

While a handler may still be running, this process never gives its claim
back itself: it exits, and the supervisor releases the claim once the
process is gone, so a job can never run here and elsewhere at once.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import time
from typing import Any

import psycopg2

from .. import db, hooks, metrics, registry, tracing
from ..config import Config
from ..ipc.ledger import Ledger
from ..ipc.lifecycle import (EXIT_BOOT_FAILURE, EXIT_OK, EXIT_RECYCLED, EXIT_TIMEOUT,
                             HANDLED_SIGNALS, ExitNow, report_ready, set_parent_death_signal,
                             watch_for_handler_forks)
from ..ipc.tokens import Kicks, Token
from ..logs import flush_logs, keep_off_standard_fds
from ..maintenance import services
from ..maintenance.limits import LimitsSync
from ..maintenance.policies import PoliciesSync
from ..policy import Retry
from ..maintenance.scheduler import SchedulerSeat
from .batching import RoundTrips
from .checkpoints import Checkpoints
from .completer import Completer
from .executor import Executor
from .holdings import Holdings
from .leases import Leases
from .upstream import Upstream
from .poller import Poller
from .producer import Producer
from .recheck import ClaimRecheck
from .recycling import Recycling
from .timeouts import Timeouts
from .title import WorkerTitle
from .transactions import Transactions

log = logging.getLogger(__name__)

#: Reconnecting after an outage backs off from the first to the last of these.
RECONNECT_BACKOFF = (0.1, 5.0)


class Worker:
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
        self.title = WorkerTitle(index)
        self.recycling = Recycling(config.max_jobs_per_worker, config.max_worker_memory_mb)
        # --no-listen is for PgBouncer in transaction mode, where a prepared
        # statement may not be on the server connection the next one gets.
        self.store = db.JobStore(config.database_url,
                                 application_name=f"motir-supervisor worker {index}",
                                 timeout_seconds=config.renew_every, prepare=config.listen)
        self.checkpoints = Checkpoints(config, claimant, index)
        self.upstream = Upstream(db.JobStore(
            config.database_url, application_name=f"motir-supervisor worker {index} upstream",
            timeout_seconds=config.renew_every, prepare=config.listen))
        #: Signals received, appended by the handler and taken by the main
        #: thread (both run on the main thread: no lock needed).
        self._signals: list[int] = []
        self.transactions = Transactions(config.database_url, claimant,
                                         f"motir-supervisor worker {index}", config.renew_every)
        self.executor = Executor(
            config.concurrency, self.ledger, retry_base=config.retry_base_seconds,
            retry_cap=config.retry_max_seconds, wake=self.wake,
            save_checkpoint=self.checkpoints.save, title=self.title,
            transactions=self.transactions, upstream=self.upstream)
        # Only with LISTEN: one worker of the supervisor listens, the others
        # are kicked (see ipc.tokens).
        self.poller = Poller(config, index, self.store, self.executor, self.title,
                             token if config.listen else None,
                             kicks if config.listen else None)
        self.holdings = Holdings(self.ledger, self.recycling.claim_budget)
        round_trips = RoundTrips()
        self.completer = Completer(config, claimant, index, self.store, self.executor,
                                   self.holdings, round_trips, stop_check=self._stop_landed)
        self.leases = Leases(config, claimant, index, self.store, self.executor, self.holdings)
        self.producer = Producer(config, claimant, index, self.store, self.executor,
                                 self.holdings, self.completer, self.leases, self.poller,
                                 round_trips, stop_check=self._stop_landed)
        self.timeouts = Timeouts(self.executor)
        self.stop_requested = False
        self.drain_deadline = float("inf")
        self.exit_code = EXIT_OK
        self.claim_recheck = ClaimRecheck(self.store, claimant, index, self.holdings)
        #: Run in this order after each renewal, before the claims: a
        #: reconnect's recheck, the policies and the limits before anything
        #: is claimed.
        self.services: list[services.Service] = [
            self.claim_recheck,
            PoliciesSync(self.store, index,
                         Retry(config.retry_base_seconds, config.retry_max_seconds)),
            LimitsSync(self.store, index, heard=self.producer.note_limits),
            SchedulerSeat(self.store, scheduler_token, index)]
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
        watch_for_handler_forks()
        keep_off_standard_fds()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
        set_parent_death_signal(signal.SIGTERM)
        self.title("booting")
        try:
            registry.import_apps(self.config.apps)
        except registry.AppImportError as exc:
            log.error("worker %d: %s", self.index, exc)
            return EXIT_BOOT_FAILURE
        # After the apps: one may configure its own tracer provider.
        tracing.install()
        for service in self.services:
            service.start()
        if registry.any_async():
            # Imported now rather than by the first async run, under the
            # executor's lock; a no-op when the supervisor imported it before
            # the fork (see registry.preload_asyncio_for). The loop itself
            # starts with the first async run, so that a worker that runs
            # only def jobs keeps no loop thread.
            import asyncio  # noqa: F401
        if warning := self.recycling.warning_at_boot():
            log.warning("worker %d %s", self.index, warning)
        report_ready(self.ready_fd)
        metrics.name_this_process(f"worker-{self.index}")
        log.debug("worker %d (pid %d) up as %s", self.index, os.getpid(), self.claimant)
        hooks.worker_started(self.index)
        try:
            return self._work_until_stopped()
        except ExitNow as exit_now:
            return exit_now.code
        finally:
            hooks.worker_exiting(self.index)
            self.transactions.close()
            self.upstream.close()
            self.store.close()

    def _install_signals(self) -> None:
        signal.set_wakeup_fd(self.poller.open_wake_pipe())
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
            name = signal.Signals(self._signals.pop(0)).name
            getattr(self, f"handle_{name[3:].lower()}")()
        if not self.draining and self.ledger.stop_asked:
            self.begin_stop(self.config.drain_seconds, "stopping")
        if not self.draining and os.getppid() != self.parent_pid:
            log.warning("worker %d: supervisor is gone; draining", self.index)
            self.begin_stop(self.config.drain_seconds, "draining")

    def handle_term(self) -> None:
        self.begin_stop(self.config.drain_seconds, "stopping")

    def handle_quit(self) -> None:
        """A second signal to the supervisor: give back what is left now."""
        self.begin_stop(0.0, "giving back unfinished jobs now")

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
        self.producer.withdraw_unstarted()
        for run in self.executor.running():
            run.stopping.set()
        self._hand_on_tokens()

    def begin_recycling(self, reason: str) -> None:
        """Claim nothing more, run all that is held, exit with EXIT_RECYCLED.
        Unlike a stop, nothing goes back (claimed jobs not started yet run
        here too) and no deadline cuts a run short. The ledger says so at
        once, so that the replacement starts, and claims, meanwhile."""
        log.info("worker %d (pid %d) recycling %s; the %d jobs it holds end here, %d of them"
                 " not started yet", self.index, os.getpid(), reason, len(self.holdings),
                 self.holdings.unstarted())
        self.exit_code = EXIT_RECYCLED
        self.stop_requested = True
        self.producer.keep_unstarted()
        self._hand_on_tokens()
        self.ledger.set_retiring(reason)
        self.title.prefix = f"recycling {reason}, "
        self.title(f"finishing {len(self.holdings)} jobs")

    def _hand_on_tokens(self) -> None:
        """Let another worker listen and schedule (its services stop): it claims no more."""
        self.poller.hand_on_listener_token()
        for service in self.services:
            service.stop()

    def wake(self) -> None:
        """Wake the main thread (called from handler threads)."""
        self.poller.wake()

    # -- the loop -------------------------------------------------------------

    def _work_until_stopped(self) -> int:
        while True:
            self._absorb_signals()
            self.executor.nudge()
            now = time.monotonic()
            self._watch(now)
            if self.stop_requested:
                if not self.executor.has_live_runs():
                    self._settle_before_exit()
                    return self.exit_code
                if now >= self.drain_deadline:
                    self._abandon_running()
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
                    reason := self.recycling.reason(self.holdings.claims_left, now)):
                self.begin_recycling(reason)
            self.leases.update_alarm()
            flush_logs()
            self._wait()

    def _watch(self, now: float) -> None:
        """Slow claims, lapsing leases, timeouts."""
        self.producer.give_back_slow_claims(now)
        if self.leases.lapsing(now):
            # The claims may soon be someone else's: nothing more starts,
            # and running handlers are asked to stop.
            self.producer.withdraw(lambda run: True)
            for run in self.executor.running():
                run.stopping.set()
        if self.timeouts.time_out_runs(now):
            self.begin_timeout_retirement()

    def _talk_to_database(self, now: float) -> None:
        if not self.store.connected:
            self.poller.connect()
            self.claim_recheck.after_reconnect(now)
        # Renew first, so that a claim never starts handlers under a lease
        # confirmed too long ago (after an outage the alarm would fire at
        # once). Then claim before writing: a slot a run has just left starts
        # its next job a round trip sooner, and the ended run's outcome is
        # safe in the ledger meanwhile.
        if self.leases.renew_if_due(now):
            # Jobs that have not started and were cancelled, or are no longer
            # ours, never will here: their release makes the cancelled ones
            # cancelled and, fenced, leaves the lost ones to their new owner.
            self.producer.withdraw(lambda run: run.stopping.value)
        services.run_due(self.services, now)
        self._claim_while_room()
        self._write_finished()
        self.completer.release_withdrawn()
        self._reconnect_backoff = 0.0
        self._claim_while_room()
        if not self.stop_requested:
            self.poller.look_for_listener_token(now)

    def _write_finished(self, now_or_never: bool = False) -> None:
        self.producer.collect_finished()
        try:
            self.completer.write_finished(now_or_never)
        finally:
            # What the hand-on claimed starts even if a later write broke.
            self.producer.start_handed_on()

    def _claim_while_room(self) -> None:
        if self.producer.claim_while_room(lambda: self.stop_requested):
            self._go_idle()

    def _go_idle(self) -> None:
        """After an empty claim: when to look again without being woken."""
        if not self.executor.busy:
            self.title("idle")
        self.poller.take_listener_token()
        now = time.monotonic()
        # Every idle worker watches the clock for delayed jobs: no NOTIFY
        # comes when a run_at passes, and the listener may be full by then.
        until_due, limits_exist = self.store.seconds_until_next_due(self.producer.queues)
        self.producer.note_limits(limits_exist)
        self.poller.idle_from(now, until_due)

    def _wait(self) -> None:
        """Sleep until a signal, a handler's news, a wake-up or the next timer."""
        now = time.monotonic()
        # A renewal, a write or a service due while the database cannot be
        # tried yet waits for that try: otherwise an outage with outcomes
        # held would spin this loop until the database is back.
        retry_at = self._database_retry_at
        timers = [self.producer.next_timer(), self.timeouts.next_timer(),
                  self.executor.next_nudge(), now + 1.0,
                  max(self.leases.next_timer(), retry_at),
                  max(self.completer.next_timer(), retry_at),
                  max(services.next_due(self.services), retry_at)]
        if self.stop_requested:
            timers.append(self.drain_deadline)
        if now < self._database_retry_at:
            timers.append(self._database_retry_at)
        elif self.completer.has_unwritten():
            timers.append(now + 0.05)
        room = not self.stop_requested and self.producer.room() > 0
        free = room and self.executor.free_slots() > 0
        self.poller.wait(timers, room, free, self.stop_requested,
                         may_claim=now >= self._database_retry_at)

    def _settle_before_exit(self) -> None:
        """One last try at writing; what fails is left to the supervisor,
        which finds it in the ledger once this process is gone."""
        try:
            self._write_finished(now_or_never=True)
            self.completer.release_withdrawn()
        except psycopg2.Error as exc:
            log.warning("worker %d: could not write its last outcomes (%s); its supervisor"
                        " will", self.index, db.one_line(exc, self.config.database_url))

    def _abandon_running(self) -> None:
        """The drain's deadline passed: what still runs is given back by the
        supervisor once this process has exited."""
        left = self.executor.abandon()
        self._settle_before_exit()
        log.warning("worker %d: drain deadline passed with jobs %s still running; their"
                    " claims are released as this worker exits", self.index,
                    sorted(run.claimed.id for run in left))

    def begin_timeout_retirement(self) -> None:
        """A sync handler ran past its timeout and cannot be stopped from
        outside: the others get the drain to finish, then this process ends
        and the supervisor fails that job's attempt and starts a new worker
        (at once: the ledger says this one is retiring)."""
        self.exit_code = EXIT_TIMEOUT
        self.ledger.set_retiring()
        self.begin_stop(self.config.drain_seconds, "replacing itself after a timeout")

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
