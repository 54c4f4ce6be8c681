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


# -- time zones ------------------------------------------------------------------

UTC = datetime.timezone.utc
#: Paris leaves 02:00 CET for 03:00 CEST on 29 March 2026 (01:00 UTC) and
#: comes back from 03:00 CEST to 02:00 CET on 25 October (01:00 UTC).
SPRING_FORWARD = datetime.datetime(2026, 3, 29, 1, tzinfo=UTC)
FALL_BACK = datetime.datetime(2026, 10, 25, 1, tzinfo=UTC)


def utc(text):
    return datetime.datetime.fromisoformat(text).replace(tzinfo=UTC)


def instants_seen(schedule, start, end, step=datetime.timedelta(minutes=5)):
    """What schedulers looking at every step from start to end enqueue, by
    the table's rule: an instant only if it is later than the last one."""
    enqueued = []
    now = start
    while now <= end:
        instant = schedule.latest(now)
        if not enqueued or instant > enqueued[-1]:
            enqueued.append(instant)
        now += step
    return enqueued[1:]  # the first is the schedule's first sight


def test_an_unknown_time_zone_fails_at_registration_in_one_line_naming_it():
    with pytest.raises(ScheduleError) as raised:
        job("zoned", schedule="0 9 * * *", tz="Europe/Pariss")(lambda j: None)
    message = str(raised.value)
    assert "'zoned'" in message and "'Europe/Pariss'" in message and "\n" not in message
    assert "zoned" not in registry.registered_kinds()
    for tz, fragment in (("../etc/passwd", "unknown time zone"), (1, "time zone name")):
        with pytest.raises(ScheduleError, match=fragment):
            job("zoned", schedule="0 9 * * *", tz=tz)(lambda j: None)


def test_a_time_zone_is_for_a_cron_expression_of_a_schedule():
    with pytest.raises(ScheduleError, match="interval of seconds has no time zone"):
        job("zoned", schedule=3600, tz="Europe/Paris")(lambda j: None)
    with pytest.raises(ValueError, match="tz of 'zoned' is for a schedule"):
        job("zoned", tz="Europe/Paris")(lambda j: None)


def test_a_schedule_without_a_time_zone_is_read_in_utc():
    plain = Schedule.parse("k", "0 9 * * *")
    assert plain.tz is None and plain.zone is UTC
    # 09:00 UTC on either side of Paris's changes, as before a zone existed.
    for day in (SPRING_FORWARD, FALL_BACK):
        assert plain.following(day) == day.replace(hour=9)
        assert plain.latest(day.replace(hour=10)) == day.replace(hour=9)
    # A zone of the same time, named, gives the same instants.
    named = Schedule.parse("k", "0 9 * * *", tz="UTC")
    assert instants_seen(named, SPRING_FORWARD, SPRING_FORWARD + datetime.timedelta(days=3),
                         datetime.timedelta(minutes=30)) == instants_seen(
        plain, SPRING_FORWARD, SPRING_FORWARD + datetime.timedelta(days=3),
        datetime.timedelta(minutes=30))


def test_a_local_time_follows_the_zone_s_offset_through_both_changes():
    nine = Schedule.parse("k", "0 9 * * *", tz="Europe/Paris")
    assert nine.following(utc("2026-03-28 12:00")) == utc("2026-03-29 07:00")  # CEST
    assert nine.following(utc("2026-10-24 12:00")) == utc("2026-10-25 08:00")  # CET
    assert instant_text(nine.latest(utc("2026-10-25 08:00:00.5"))) == "2026-10-25T08:00:00+00:00"


def test_a_local_time_a_spring_forward_skips_runs_once_at_the_first_valid_instant_after():
    half_past_two = Schedule.parse("k", "30 2 * * *", tz="Europe/Paris")
    assert instants_seen(half_past_two, utc("2026-03-27 12:00"), utc("2026-03-31 12:00")) == [
        utc("2026-03-28 01:30"),  # 02:30 CET
        utc("2026-03-29 01:00"),  # 02:30 does not exist: 03:00 CEST, as cron runs it
        utc("2026-03-30 00:30"),  # 02:30 CEST
        utc("2026-03-31 00:30")]
    assert half_past_two.following(utc("2026-03-29 00:59:59")) == SPRING_FORWARD
    assert half_past_two.latest(SPRING_FORWARD) == SPRING_FORWARD


def test_a_local_time_a_fall_back_repeats_runs_once_at_its_first_occurrence():
    half_past_two = Schedule.parse("k", "30 2 * * *", tz="Europe/Paris")
    assert instants_seen(half_past_two, utc("2026-10-23 12:00"), utc("2026-10-27 12:00")) == [
        utc("2026-10-24 00:30"),  # 02:30 CEST
        utc("2026-10-25 00:30"),  # the first 02:30 (CEST); the second (CET) is not run
        utc("2026-10-26 01:30"),  # 02:30 CET
        utc("2026-10-27 01:30")]
    # From inside the second pass of 02:00-03:00, the first 02:30 is the
    # latest instant and tomorrow's the next: not this pass's 02:30 again.
    for now in (utc("2026-10-25 01:10"), utc("2026-10-25 01:30"), utc("2026-10-25 01:45")):
        assert half_past_two.latest(now) == utc("2026-10-25 00:30")
        assert half_past_two.following(now) == utc("2026-10-26 01:30")


def test_a_wildcard_hour_runs_at_every_real_hour_through_both_changes():
    hourly = Schedule.parse("k", "0 * * * *", tz="Europe/Paris")
    spring = instants_seen(hourly, utc("2026-03-28 22:30"), utc("2026-03-29 21:30"))
    fall = instants_seen(hourly, utc("2026-10-24 21:30"), utc("2026-10-25 22:30"))
    # Paris's 29 March has 23 hours and its 25 October 25, each run once.
    assert spring == [utc("2026-03-28 23:00") + datetime.timedelta(hours=n) for n in range(23)]
    assert fall == [utc("2026-10-24 22:00") + datetime.timedelta(hours=n) for n in range(25)]


@pytest.mark.parametrize("tz", ["Europe/Paris", "America/New_York", "Australia/Sydney",
                                "Australia/Lord_Howe"])
@pytest.mark.parametrize("spec", ["30 2 * * *", "0 * * * *", "*/20 1-3 * * *", "45 1 * * 0"])
def test_latest_and_following_agree_around_every_change_of_offset(tz, spec):
    """Whatever the zone (Lord Howe moves by half an hour) and wherever now
    falls, the latest instant is at or before it, the following one after
    it, and one pass's following is the next pass's latest."""
    schedule = Schedule.parse("k", spec, tz=tz)
    year = datetime.datetime(2026, 1, 1, tzinfo=UTC)
    zone = schedule.zone
    changes = [year + datetime.timedelta(hours=h) for h in range(365 * 24)
               if (year + datetime.timedelta(hours=h)).astimezone(zone).utcoffset()
               != (year + datetime.timedelta(hours=h + 1)).astimezone(zone).utcoffset()]
    assert len(changes) == 2
    # Every 5 minutes within 3 hours of a change, every 47 within a day.
    moments = [change + datetime.timedelta(minutes=m) for change in changes
               for m in [*range(-180, 181, 5), *range(-24 * 60, 24 * 60, 47)]]
    for now in moments:
        latest, following = schedule.latest(now), schedule.following(now)
        assert latest <= now < following
        assert schedule.following(latest) == following  # no instant between them
        assert schedule.latest(following) == following
        assert schedule.following(following - datetime.timedelta(seconds=1)) == following


# -- what each instant enqueues ----------------------------------------------------


def test_a_schedule_carries_its_payload_queue_and_priority():
    scheduled = Schedule.parse("k", "0 9 * * *", payload={"report": "sales", "n": 2},
                               queue="reports", priority=-5)
    assert scheduled.payload_json == '{"n": 2, "report": "sales"}'
    assert (scheduled.queue, scheduled.priority) == ("reports", -5)
    plain = Schedule.parse("k", 60)
    assert (plain.payload_json, plain.queue, plain.priority) == ("{}", "default", 0)


@pytest.mark.parametrize("options, fragment", [
    (dict(schedule_payload=[1]), "must be a dict"),
    (dict(schedule_payload={"scheduled_for": "x"}), "'scheduled_for' key"),
    (dict(schedule_payload={"at": datetime.date(2026, 1, 1)}), "is not JSON"),
    (dict(schedule_queue=""), "schedule_queue of 'bad_options'"),
    (dict(schedule_priority=40000), "from -32768 to 32767"),
    (dict(schedule_priority=True), "schedule_priority of 'bad_options'"),
])
def test_a_bad_payload_queue_or_priority_fails_at_registration(options, fragment):
    with pytest.raises(ScheduleError, match=fragment):
        job("bad_options", schedule="0 9 * * *", **options)(lambda j: None)
    assert "bad_options" not in registry.registered_kinds()


def test_job_registers_the_schedule_s_zone_payload_queue_and_priority():
    @job("zoned_digest", schedule="0 9 * * 1", tz="Europe/Paris",
         schedule_payload={"list": "weekly"}, schedule_queue="mail", schedule_priority=3)
    def digest(j):
        return None

    schedule = registry.registration_for("zoned_digest").schedule
    assert (schedule.spec, schedule.tz, schedule.payload_json, schedule.queue,
            schedule.priority) == ("0 9 * * 1", "Europe/Paris", '{"list": "weekly"}', "mail", 3)
