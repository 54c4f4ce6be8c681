"""/healthz's answer with the database up (see tests/unit/supervisor/test_health.py)."""

from motir_supervisor.supervisor.health import FleetHealth, check


def test_live_workers_and_a_database_that_answers_are_healthy(database_url):
    fleet = FleetHealth()
    fleet.report(2)
    assert check(fleet, database_url) == (True, "ok: 2 workers alive")
    fleet.report(1)
    assert check(fleet, database_url) == (True, "ok: 1 worker alive")
