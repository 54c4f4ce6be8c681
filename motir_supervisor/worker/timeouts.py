"""A kind's ``timeout`` for plain ``def`` handlers: a thread cannot be
stopped from outside, so a run past its timeout is marked, its attempt
fails, and the worker replaces itself once the others have finished.
(An ``async def`` run is cancelled by the executor's event loop instead.)

The worker's main thread calls it and owns its one field.
"""

from __future__ import annotations

from .. import metrics, registry
from ..outcomes import Outcome
from .completer import log_run
from .executor import Executor


class Timeouts:
    def __init__(self, executor: Executor):
        self.executor = executor
        #: Whether any registered kind has a timeout; looked up on first use,
        #: once the apps are imported.
        self._any: bool | None = None

    def time_out_runs(self, now: float) -> bool:
        """Mark the sync runs past their timeout; True when one was."""
        if self._any is None:
            self._any = any((registration := registry.registration_for(kind)) is not None
                            and registration.timeout for kind in registry.registered_kinds())
        if not self._any:
            return False
        timed_out = False
        for run in self.executor.running():
            if run.is_async or run.timed_out or now < run.timeout_at:
                continue
            if self.executor.time_out(run):
                metrics.record_run(run.claimed.kind, Outcome.TIMED_OUT, run.duration,
                                   run.claimed.queue, run.waited())
                assert run.registration is not None  # a run with a timeout has a kind
                log_run(run, Outcome.TIMED_OUT, f"ran past its timeout of"
                        f" {run.registration.timeout:g}s")
                self.executor.tell_timed_out(run)
                timed_out = True
        return timed_out

    def next_timer(self) -> float:
        if not self._any:
            return float("inf")
        return min((run.timeout_at for run in self.executor.running() if not run.is_async),
                   default=float("inf"))
