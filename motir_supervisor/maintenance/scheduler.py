"""Periodic jobs: each scheduled instant enqueued once, across every supervisor.

A kind registered with ``@job("kind", schedule=...)`` is enqueued at each
instant of its schedule: a five-field cron expression (UTC, read by the
cronsim library) or a number of seconds (the instants are the multiples of it
since the Unix epoch, so every machine computes the same ones). Every
supervisor runs a :class:`Scheduler`; which of them enqueues an instant is
decided by the database, in one statement (``enqueue_scheduled`` in
queries.sql): the instant advances the kind's row of ``job_queue_schedules``
only if it is later than the one recorded, and the job is inserted only if
it did. So an instant is enqueued exactly once however many supervisors see
it, a supervisor that was down enqueues only the latest instant it missed,
and a schedule seen for the first time starts with its next instant.

The scheduler reads the database's clock, not the machine's: a machine whose
clock runs ahead does not enqueue early. It forks nothing and handles no
signal; the supervisor calls :meth:`Scheduler.run_when_due` from its loop.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import math
import time

from .. import db
from ..ipc.tokens import Token

log = logging.getLogger("motir_supervisor.supervisor")

UTC = datetime.timezone.utc
#: The scheduler looks at least this often, so that a clock jump, a missed
#: wake-up or a database outage at an instant costs at most this long.
LOOK_EVERY_SECONDS = 30.0


class ScheduleError(ValueError):
    """A schedule that cannot be read; the message names the kind."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    kind: str
    #: The cron expression, or the interval's seconds as text ("every 30s").
    spec: str
    seconds: float | None = None

    @classmethod
    def parse(cls, kind: str, schedule: str | int | float) -> "Schedule":
        if isinstance(schedule, bool):
            raise ScheduleError(f"schedule of {kind!r} must be a cron expression or seconds")
        if isinstance(schedule, (int, float)):
            if not 1 <= schedule < math.inf:
                raise ScheduleError(f"schedule of {kind!r}: an interval is at least 1 second,"
                                    f" got {schedule!r}")
            return cls(kind, f"every {schedule!r}s", float(schedule))
        if not isinstance(schedule, str) or len(schedule.split()) != 5:
            raise ScheduleError(f"schedule of {kind!r} must be a five-field cron expression"
                                f" (minute hour day month weekday) or seconds, got {schedule!r}")
        import cronsim  # here, not at the top: most fleets schedule nothing
        try:
            cronsim.CronSim(schedule, datetime.datetime(2000, 1, 1, tzinfo=UTC))
        except cronsim.CronSimError as exc:
            raise ScheduleError(f"schedule of {kind!r}: {schedule!r} is not a cron"
                                f" expression: {exc}") from None
        return cls(kind, " ".join(schedule.split()))

    @classmethod
    def from_spec(cls, kind: str, spec: str) -> "Schedule":
        """The schedule as parse() wrote it in ``spec`` (what the table keeps)."""
        if spec.startswith("every ") and spec.endswith("s"):
            return cls(kind, spec, cls.parse(kind, float(spec[len("every "):-1])).seconds)
        return cls.parse(kind, spec)

    def latest(self, now: datetime.datetime) -> datetime.datetime:
        """The last instant at or before ``now``."""
        if self.seconds is not None:
            epoch = now.timestamp()
            return datetime.datetime.fromtimestamp(epoch - epoch % self.seconds, UTC)
        # Backwards from a whole second, cronsim starts before it: from the
        # next whole second, so that an instant equal to now is found.
        start = now.replace(microsecond=0) + datetime.timedelta(seconds=1)
        import cronsim
        return next(cronsim.CronSim(self.spec, start, reverse=True))

    def following(self, now: datetime.datetime) -> datetime.datetime:
        """The first instant after ``now``."""
        if self.seconds is not None:
            return self.latest(now) + datetime.timedelta(seconds=self.seconds)
        import cronsim
        return next(cronsim.CronSim(self.spec, now))


def instant_text(instant: datetime.datetime) -> str:
    """The instant as j.payload["scheduled_for"] has it: ISO 8601, UTC."""
    return instant.astimezone(UTC).isoformat()


class Scheduler:
    def __init__(self, store: db.JobStore, schedules: list[Schedule]):
        self.store = store
        self.schedules = schedules
        #: The latest instant of each kind this scheduler saw settled (by it
        #: or another): not sent again.
        self.settled: dict[str, datetime.datetime] = {}
        self.next_pass = 0.0 if schedules else math.inf

    def run_when_due(self) -> None:
        """A database error is the caller's to handle (the worker reconnects);
        the instant is tried again then: late, never lost."""
        if time.monotonic() >= self.next_pass:
            self.run_once()

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
            job_id = self.store.enqueue_scheduled(schedule.kind, schedule.spec, instant,
                                                  instant_text(instant))
            self.settled[schedule.kind] = instant
            if job_id is not None:
                enqueued.append(job_id)
                log.info("scheduler: enqueued job %d %s for %s", job_id, schedule.kind,
                         instant_text(instant))
        upcoming = min(schedule.following(now) for schedule in self.schedules)
        wait = (upcoming - now).total_seconds()
        self.next_pass = time.monotonic() + min(max(wait, 0.0), LOOK_EVERY_SECONDS)
        return enqueued


class SchedulerSeat:
    """Which worker of a supervisor runs the scheduler: the holder of the
    scheduler's token (see ipc.tokens), which the kernel frees when its
    holder dies, taken by the next worker that looks. A worker's main
    thread owns it."""

    def __init__(self, store: db.JobStore, token: Token | None, index: int):
        self.store = store
        self.token = token
        self.index = index
        #: Set once the apps are imported: none, and nothing is scheduled.
        self.schedules: list[Schedule] = []
        #: This worker's scheduler while it holds the token.
        self.scheduler: Scheduler | None = None
        self._next_try = 0.0

    def take(self) -> Scheduler | None:
        """This worker's scheduler if it runs the scheduler now, taking the
        token if it is free; else None."""
        if not self.schedules or self.token is None:
            return None
        if self.scheduler is None:
            # A syscall, so at most once a second (a worker loop's longest sleep).
            now = time.monotonic()
            if now < self._next_try:
                return None
            self._next_try = now + 1.0
            if not self.token.try_take():
                return None
            self.scheduler = Scheduler(self.store, self.schedules)
            logging.getLogger("motir_supervisor.worker").debug(
                "worker %d runs the scheduler", self.index)
        return self.scheduler

    def hand_on(self) -> None:
        """Another worker (a staying one, or the replacement) schedules."""
        if self.scheduler is not None and self.token is not None:
            self.token.give_up()
            self.scheduler = None
