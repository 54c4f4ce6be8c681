"""Periodic jobs: each scheduled instant enqueued once, across every supervisor.

A kind registered with ``@job("kind", schedule=...)`` is enqueued at each
instant of its schedule, with the schedule's payload, queue and priority
(see :mod:`..schedule`). Every
supervisor runs a :class:`Scheduler`; which of them enqueues an instant is
decided by the database, in one statement (``enqueue_scheduled`` in
queries.sql): the instant advances the kind's row of ``job_queue_schedules``
only if it is later than the one recorded, and the job is inserted only if
it did. So an instant is enqueued exactly once however many supervisors see
it, a supervisor that was down enqueues only the latest instant it missed,
and a schedule seen for the first time starts with its next instant.

The scheduler reads the database's clock, not the machine's: a machine whose
clock runs ahead does not enqueue early. It forks nothing and handles no
signal; the one worker of a supervisor that holds the scheduler's token
runs it, through :class:`SchedulerSeat`, a service of the worker's loop
(see :mod:`.services`).
"""

from __future__ import annotations

import datetime
import logging
import math
import time

from .. import db, registry
from ..ipc.tokens import Token
from ..schedule import UTC, Schedule, instant_text
from .services import Service

log = logging.getLogger(__name__)

#: The scheduler looks at least this often, so that a clock jump, a missed
#: wake-up or a database outage at an instant costs at most this long.
LOOK_EVERY_SECONDS = 30.0


class Scheduler:
    def __init__(self, store: db.JobStore, schedules: list[Schedule]):
        self.store = store
        self.schedules = schedules
        #: The latest instant of each kind this scheduler saw settled (by it
        #: or another): not sent again.
        self.settled: dict[str, datetime.datetime] = {}
        self.next_pass = 0.0 if schedules else math.inf

    def run_once(self, now: datetime.datetime | None = None) -> list[int]:
        """Enqueue every schedule's latest instant not enqueued yet; their ids."""
        if now is None:
            # In UTC: the session's time zone would move the cron instants.
            now = self.store.database_now().astimezone(UTC)
        enqueued = []
        for schedule in self.schedules:
            instant = schedule.latest(now)
            if self.settled.get(schedule.kind) == instant:
                continue
            job_id = self.store.enqueue_scheduled(
                schedule.kind, schedule.spec, schedule.tz, instant, instant_text(instant),
                schedule.payload_json, schedule.queue, schedule.priority)
            self.settled[schedule.kind] = instant
            if job_id is not None:
                enqueued.append(job_id)
                log.info("scheduler: enqueued job %d %s for %s", job_id, schedule.kind,
                         instant_text(instant))
        upcoming = min(schedule.following(now) for schedule in self.schedules)
        wait = (upcoming - now).total_seconds()
        self.next_pass = time.monotonic() + min(max(wait, 0.0), LOOK_EVERY_SECONDS)
        return enqueued


class SchedulerSeat(Service):
    """Which worker of a supervisor runs the scheduler: the holder of the
    scheduler's token (see ipc.tokens), which the kernel frees when its
    holder dies, taken by the next worker that looks. A worker's main
    thread owns it."""

    def __init__(self, store: db.JobStore, token: Token | None, index: int):
        self.store = store
        self.token = token
        self.index = index
        #: Set once the apps are imported (see start): none, and nothing is
        #: scheduled.
        self.schedules: list[Schedule] = []
        #: This worker's scheduler while it holds the token.
        self.scheduler: Scheduler | None = None
        self._next_try = 0.0
        #: This worker claims no more: another schedules.
        self._stopped = False

    def start(self) -> None:
        self.schedules = [r.schedule for r in registry.scheduled() if r.schedule is not None]

    def next_due(self) -> float:
        return self.scheduler.next_pass if self.scheduler is not None else math.inf

    def run_when_due(self, now: float) -> None:
        """Enqueue what is due if this worker runs the scheduler, taking the
        token if it is free. A database error is the caller's to handle
        (the worker reconnects); the instant is tried again then: late,
        never lost."""
        scheduler = self.take(now)
        if scheduler is not None and now >= scheduler.next_pass:
            scheduler.run_once()

    def take(self, now: float) -> Scheduler | None:
        """This worker's scheduler if it runs the scheduler now, taking the
        token if it is free; else None."""
        if not self.schedules or self.token is None or self._stopped:
            return None
        if self.scheduler is None:
            # A syscall, so at most once a second (a worker loop's longest sleep).
            if now < self._next_try:
                return None
            self._next_try = now + 1.0
            if not self.token.try_take():
                return None
            self.scheduler = Scheduler(self.store, self.schedules)
            log.debug("worker %d runs the scheduler", self.index)
        return self.scheduler

    def stop(self) -> None:
        """Another worker (a staying one, or the replacement) schedules."""
        self._stopped = True
        if self.scheduler is not None and self.token is not None:
            self.token.give_up()
            self.scheduler = None
