"""The pytest fixtures of testing.py, registered through the pytest11 entry point.

Thin on purpose: each fixture returns a function of testing.py, which is
where the behaviour (and its documentation) lives.
"""

from __future__ import annotations

from typing import Callable

import pytest

from . import testing


@pytest.fixture
def motir_run_job() -> Callable[..., testing.JobOutcome]:
    """testing.run_job: a registered kind's handler run once, in-process."""
    return testing.run_job


@pytest.fixture
def motir_drain() -> Callable[..., list[testing.JobOutcome]]:
    """testing.drain: a test database's due jobs run through the real claims."""
    return testing.drain
