"""The shape every periodic service of a process's loop shares, and the
two verbs a loop runs its list of them with.

A service is started once, when its process may run it; its loop asks it
when its next pass is due, wakes by then, and has it run the pass if due;
once the process stops claiming (or draining) it is stopped, and gives
back what it holds. One pass is a method of its own that returns what it
did (``run_once``), so a test calls it instead of waiting for the loop.
Nothing here runs SQL or keeps time.
"""

from __future__ import annotations

from typing import Iterable


class Service:
    """A periodic service. The thread of the loop that runs it owns it."""

    def start(self) -> None:
        """It may run from now on (the worker's apps are imported)."""

    def next_due(self) -> float:
        """When its next pass is due (time.monotonic()); inf for none."""
        raise NotImplementedError

    def run_when_due(self, now: float) -> None:
        """Its pass, if one is due at ``now``; otherwise nothing."""
        raise NotImplementedError

    def stop(self) -> None:
        """It runs no more in this process: what it holds goes to another."""


def run_due(services: Iterable[Service], now: float) -> None:
    """Each service's pass that is due, in the list's order."""
    for service in services:
        service.run_when_due(now)


def next_due(services: Iterable[Service]) -> float:
    """When the first of the services' next passes is due; inf for none."""
    # A loop asks at every pass: a plain loop, cheaper than min() of a generator.
    first = float("inf")
    for service in services:
        due = service.next_due()
        if due < first:
            first = due
    return first
