"""A periodic job's schedule: when its instants fall and what each enqueues.

When: a five-field cron expression (read by the cronsim library) in UTC or
in the time zone the schedule names (``tz="Europe/Paris"``, read through
:mod:`zoneinfo`), or a number of seconds (the instants are the multiples of
it since the Unix epoch, so every machine computes the same ones). What: a
job of the kind with ``{"scheduled_for": <the instant>}`` added to the
schedule's payload, on its queue, at its priority.

A cron expression in a zone follows its wall clock the way cron (cronie)
does, through cronsim: an expression with a fixed minute and hour (``30 2 *
* *``) runs once per matching local time, so a time that a spring-forward
skips runs at the first valid instant after it (03:00 in Paris) and a time
that a fall-back repeats runs once, at its first occurrence; an expression
whose minute or hour is a wildcard (``*/15 * * * *``, ``0 * * * *``) runs
at every real instant that matches, so neither hour of a fall-back is
skipped and no extra run fills a skipped one.

Values only, read when ``@job(schedule=...)`` registers a kind, so that a
schedule that cannot be read fails the app's import naming the kind. The
scheduler that enqueues the instants is :mod:`.maintenance.scheduler`.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import zoneinfo
from typing import Any, Iterator

UTC = datetime.timezone.utc

#: The priority column is a smallint.
PRIORITY_RANGE = range(-32768, 32768)


class ScheduleError(ValueError):
    """A schedule that cannot be read; the message names the kind."""


@dataclasses.dataclass(frozen=True)
class Schedule:
    kind: str
    #: The cron expression, or the interval's seconds as text ("every 30s").
    spec: str
    seconds: float | None = None
    #: The IANA time zone a cron expression is read in; None for UTC.
    tz: str | None = None
    #: The payload of each instant's job as JSON text, an object to which
    #: "scheduled_for" is added.
    payload_json: str = "{}"
    queue: str = "default"
    priority: int = 0

    @classmethod
    def parse(cls, kind: str, schedule: str | int | float, *, tz: str | None = None,
              payload: dict[str, Any] | None = None, queue: str = "default",
              priority: int = 0) -> "Schedule":
        payload_json, queue, priority = (_payload_json(kind, payload), _queue(kind, queue),
                                         _priority(kind, priority))
        if isinstance(schedule, bool):
            raise ScheduleError(f"schedule of {kind!r} must be a cron expression or seconds")
        if isinstance(schedule, (int, float)):
            if not 1 <= schedule < math.inf:
                raise ScheduleError(f"schedule of {kind!r}: an interval is at least 1 second,"
                                    f" got {schedule!r}")
            if tz is not None:
                raise ScheduleError(f"tz of {kind!r}: an interval of seconds has no time zone;"
                                    " a time zone is for a cron expression")
            return cls(kind, f"every {schedule!r}s", float(schedule), None, payload_json, queue,
                       priority)
        if not isinstance(schedule, str) or len(schedule.split()) != 5:
            raise ScheduleError(f"schedule of {kind!r} must be a five-field cron expression"
                                f" (minute hour day month weekday) or seconds, got {schedule!r}")
        if tz is not None:
            read_zone(kind, tz)
        import cronsim  # here, not at the top: most fleets schedule nothing
        try:
            cronsim.CronSim(schedule, datetime.datetime(2000, 1, 1, tzinfo=UTC))
        except cronsim.CronSimError as exc:
            raise ScheduleError(f"schedule of {kind!r}: {schedule!r} is not a cron"
                                f" expression: {exc}") from None
        return cls(kind, " ".join(schedule.split()), None, tz, payload_json, queue, priority)

    @classmethod
    def from_spec(cls, kind: str, spec: str, tz: str | None = None) -> "Schedule":
        """The schedule as parse() wrote it in ``spec`` and ``tz`` (what the
        table keeps), for its instants: the job's payload, queue and priority
        are the registry's."""
        if spec.startswith("every ") and spec.endswith("s"):
            return cls(kind, spec, cls.parse(kind, float(spec[len("every "):-1])).seconds)
        return cls.parse(kind, spec, tz=tz)

    @property
    def zone(self) -> datetime.tzinfo:
        """The zone the cron expression's fields are read in."""
        return UTC if self.tz is None else zoneinfo.ZoneInfo(self.tz)

    def latest(self, now: datetime.datetime) -> datetime.datetime:
        """The last instant at or before ``now``, in UTC."""
        now = now.astimezone(UTC)
        if self.seconds is not None:
            epoch = now.timestamp()
            return datetime.datetime.fromtimestamp(epoch - epoch % self.seconds, UTC)
        # Backwards from a whole second, cronsim starts before it: from the
        # next whole second, so that an instant equal to now is found.
        start = now.replace(microsecond=0) + datetime.timedelta(seconds=1)
        import cronsim
        found = next(cronsim.CronSim(self.spec, start.astimezone(self.zone), reverse=True))
        found = found.astimezone(UTC)
        # Backwards, cronsim reads a repeated local time by its wall clock
        # and can pass over the first occurrence of one from its second (at
        # 02:10 of the second pass it finds yesterday's 02:30, not today's
        # first): the instants forward from what it found settle it.
        for later in self._instants_after(found):
            if later > now:
                return found
            found = later
        raise AssertionError("cron instants end")  # cronsim gives up only after 50 years

    def following(self, now: datetime.datetime) -> datetime.datetime:
        """The first instant after ``now``, in UTC."""
        now = now.astimezone(UTC)
        if self.seconds is not None:
            return self.latest(now) + datetime.timedelta(seconds=self.seconds)
        return next(self._instants_after(now))

    def _instants_after(self, moment: datetime.datetime) -> Iterator[datetime.datetime]:
        """The cron instants after ``moment`` (aware, UTC), in order, in UTC."""
        import cronsim
        # Forward, cronsim reads a repeated local time by its wall clock too,
        # so from the second pass of one it first gives the first pass's
        # instants, which are past.
        for instant in cronsim.CronSim(self.spec, moment.astimezone(self.zone)):
            instant = instant.astimezone(UTC)
            if instant > moment:
                yield instant


def read_zone(kind: str, tz: object) -> zoneinfo.ZoneInfo:
    """The time zone named ``tz``; a ScheduleError naming the kind and the zone if none is."""
    if not isinstance(tz, str):
        raise ScheduleError(f"tz of {kind!r} must be a time zone name such as 'Europe/Paris',"
                            f" got {tz!r}")
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        # Python reads zones from the system's database (or the tzdata
        # package): a machine without either knows none, which says more.
        missing = "" if zoneinfo.available_timezones() else (
            ": this machine has no time zone database (install the tzdata package)")
        raise ScheduleError(f"tz of {kind!r}: unknown time zone {tz!r}{missing}") from None


def _payload_json(kind: str, payload: object) -> str:
    if payload is None:
        return "{}"
    if not isinstance(payload, dict):
        raise ScheduleError(f"schedule_payload of {kind!r} must be a dict (a JSON object),"
                            f" got {type(payload).__name__}")
    if "scheduled_for" in payload:
        raise ScheduleError(f"schedule_payload of {kind!r} has a 'scheduled_for' key:"
                            " each instant's job gets its own")
    try:
        return json.dumps(payload, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ScheduleError(f"schedule_payload of {kind!r} is not JSON: {exc}") from None


def _queue(kind: str, queue: object) -> str:
    if not isinstance(queue, str) or not queue:
        raise ScheduleError(f"schedule_queue of {kind!r} must be a queue's name, got {queue!r}")
    return queue


def _priority(kind: str, priority: object) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool) or (
            priority not in PRIORITY_RANGE):
        raise ScheduleError(f"schedule_priority of {kind!r} must be a whole number from"
                            f" {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[-1]}, got {priority!r}")
    return priority


def instant_text(instant: datetime.datetime) -> str:
    """The instant as j.payload["scheduled_for"] has it: ISO 8601, UTC."""
    return instant.astimezone(UTC).isoformat()
