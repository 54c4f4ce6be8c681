"""schedule: a schedule that cannot be read fails when its kind
is registered, and schedule instants are UTC and the same on every machine."""

import datetime

import pytest

from motir_supervisor import registry
from motir_supervisor.schedule import Schedule, ScheduleError, instant_text
from motir_supervisor.registry import job


@pytest.mark.parametrize("schedule, fragment", [
    ("* * *", "five-field"), ("61 * * * *", "not a cron expression"), (0, "at least 1"),
    (True, "cron expression or seconds"), ("*/5 * * * * *", "five-field"),
])
def test_a_bad_schedule_fails_at_registration_naming_the_kind(schedule, fragment):
    with pytest.raises(ScheduleError, match=fragment) as raised:
        job("bad_schedule", schedule=schedule)(lambda j: None)
    assert "'bad_schedule'" in str(raised.value)
    assert "bad_schedule" not in registry.registered_kinds()


def test_schedule_instants_are_utc_and_the_same_on_every_machine():
    at = datetime.datetime(2026, 12, 3, 10, 5, 0, tzinfo=datetime.timezone.utc)
    cron = Schedule.parse("k", "*/5 * * * *")
    assert cron.latest(at) == at  # an instant equal to now is the latest
    assert cron.latest(at + datetime.timedelta(seconds=299.5)) == at
    assert cron.following(at) == at + datetime.timedelta(minutes=5)
    every = Schedule.parse("k", 90)
    # Multiples of 90 s since the epoch, whoever computes them.
    assert every.latest(at).timestamp() % 90 == 0
    assert every.following(at) - every.latest(at) == datetime.timedelta(seconds=90)
    assert Schedule.from_spec("k", every.spec) == every
    assert Schedule.from_spec("k", cron.spec) == cron
    assert instant_text(at) == "2026-12-03T10:05:00+00:00"
