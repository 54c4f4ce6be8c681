"""Waiting for a condition instead of for a fixed time."""

from __future__ import annotations

import time
from typing import Any, Callable


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)
