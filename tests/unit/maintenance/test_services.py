"""maintenance.services: the worker's and the supervisor's services in
their one shape. The scheduler's seat takes its token at most once a
second and, stopped, hands it on and never takes it again; the limits
sync is due until it has written the limits and tells what it found; the
reaper is due every pass and says when next."""

import datetime
import types

from motir_supervisor import db
from motir_supervisor.maintenance import services
from motir_supervisor.maintenance.limits import LimitsSync
from motir_supervisor.maintenance.reaper import Reaper
from motir_supervisor.maintenance.scheduler import SchedulerSeat
from motir_supervisor.schedule import Schedule


class Token:
    def __init__(self):
        self.held = False
        self.tries = 0

    def try_take(self):
        self.tries += 1
        self.held = True
        return True

    def give_up(self):
        self.held = False


def test_a_stopped_scheduler_seat_hands_its_token_on_and_never_takes_it_again():
    token = Token()
    enqueued = []
    store = types.SimpleNamespace(
        database_now=lambda: datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc),
        enqueue_scheduled=lambda kind, *rest: enqueued.append(kind))
    seat = SchedulerSeat(store, token=token, index=1)
    seat.schedules = [Schedule.parse("tick", 60)]
    assert seat.next_due() == float("inf")
    services.run_due([seat], 10.0)
    assert token.held and enqueued == ["tick"] and seat.next_due() < float("inf")
    services.run_due([seat], 10.5)  # the scheduler's next pass is not due yet
    assert enqueued == ["tick"] and token.tries == 1
    seat.stop()
    assert not token.held and seat.next_due() == float("inf")
    services.run_due([seat], 20.0)
    assert token.tries == 1 and not token.held


def test_the_limits_sync_is_due_until_written_and_tells_what_it_found(monkeypatch):
    monkeypatch.setattr("motir_supervisor.registry.limits", lambda: {"a": (1, None, None)})
    answers = [None, ["a: at most 1 running"]]  # another worker at it, then written
    store = types.SimpleNamespace(sync_limits=lambda wanted: answers.pop(0),
                                  limits=lambda: {"a": db.Limits(1)})
    heard = []
    sync = LimitsSync(store, 1, heard=heard.append)
    assert sync.next_due() == 0.0
    services.run_due([sync], 0.0)
    assert heard == [True] and 0.0 < sync.next_due() < float("inf")
    services.run_due([sync], sync.next_due())
    assert heard == [True, True] and sync.synced and sync.next_due() == float("inf")


def test_the_reaper_runs_when_due_and_says_when_next():
    store = types.SimpleNamespace(expire_stale_leases=lambda batch: [], prune_finished=None)
    reaper = Reaper(store, every_seconds=5.0, retention_hours=0)
    assert services.next_due([reaper]) == 0.0
    services.run_due([reaper], 100.0)
    assert reaper.next_due() == 105.0
    assert reaper.run_once().expired == 0
