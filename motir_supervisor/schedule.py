"""A periodic job's schedule: a five-field cron expression in UTC (read by
the cronsim library) or a number of seconds (the instants are the multiples
of it since the Unix epoch, so every machine computes the same ones).

Values only, read when ``@job(schedule=...)`` registers a kind, so that a
schedule that cannot be read fails the app's import naming the kind. The
scheduler that enqueues the instants is :mod:`.maintenance.scheduler`.
"""

from __future__ import annotations

import dataclasses
import datetime
import math

UTC = datetime.timezone.utc


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
