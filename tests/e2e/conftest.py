"""Real `motir-supervisor run` processes for the end-to-end tests."""

import pytest

from tests.supervisors import RunningSupervisor


@pytest.fixture
def start_supervisor(database_url):
    """Start `motir-supervisor run` processes; all are stopped after the test."""
    started = []

    def start(*args, **kwargs):
        supervisor = RunningSupervisor(database_url, *args, **kwargs)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()
