"""The pytest fixtures of testing.py, registered through the pytest11 entry point.

Thin on purpose: each fixture returns a function of testing.py, which is
where the behaviour (and its documentation) lives.
"""

from __future__ import annotations

import pytest

from . import testing


@pytest.fixture
def motir_run_job():
    """testing.run_job: a registered kind's handler run once, in-process."""
    return testing.run_job


@pytest.fixture
def motir_drain():
    """testing.drain: a test database's due jobs run through the real claims."""
    return testing.drain
