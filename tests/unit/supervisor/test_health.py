"""What /healthz answers from what the supervisor's loop reports (the
database's answer: tests/integration/test_health.py and the e2e test)."""

import os

from motir_supervisor.supervisor import health
from motir_supervisor.supervisor.health import FleetHealth, check

#: Nothing listens on port 1: connecting fails at once.
NO_DATABASE = "postgresql://app:hunter2@127.0.0.1:1/motir"


def test_no_live_workers_is_unhealthy_whatever_the_database():
    fleet = FleetHealth()
    fleet.report(0)
    assert check(fleet, NO_DATABASE) == (False, "no live workers")


def test_a_database_out_of_reach_is_unhealthy_and_its_password_is_not_shown():
    fleet = FleetHealth()
    fleet.report(2)
    healthy, why = check(fleet, NO_DATABASE)
    assert not healthy and why.startswith("database unreachable: "), why
    assert "hunter2" not in why


def test_a_silent_supervisor_loop_is_unhealthy(monkeypatch):
    fleet = FleetHealth()
    fleet.report(2)
    now = health.time.monotonic()
    monkeypatch.setattr(health.time, "monotonic", lambda: now + health.STALE_SECONDS + 1)
    healthy, why = check(fleet, NO_DATABASE)
    assert not healthy and why.startswith("supervisor loop silent for "), why


def test_a_process_forked_before_a_report_reads_it():
    fleet = FleetHealth()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the metrics process, forked once, reads every later report
        os.read(ready_r, 1)
        os._exit(fleet.read()[1])
    fleet.report(3)
    os.write(ready_w, b"x")
    _, status = os.waitpid(pid, 0)
    os.close(ready_r)
    os.close(ready_w)
    assert os.waitstatus_to_exitcode(status) == 3
