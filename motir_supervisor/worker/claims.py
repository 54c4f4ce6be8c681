"""What a worker holds of each job it claimed: the claim the job came in
(the unit batch sizes adapt on) and the run, from the claim until its
outcome is in the database, with the flag its handler reads as
``j.stopping``.

Plain values: :mod:`.producer` creates them, :mod:`.executor` starts and
ends them, :mod:`.completer` settles them; nothing here runs SQL or a
handler.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import db, hooks, outcomes, registry


class StopFlag:
    """What ``j.stopping`` reads: a plain flag, cheaper than an Event per job
    (nothing ever waits on it, and a bool is set atomically)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = False

    def set(self) -> None:
        self.value = True

    def is_set(self) -> bool:
        return self.value


@dataclasses.dataclass(slots=True, eq=False)
class Claim:
    """The jobs one claim statement returned: the unit the batch size adapts on."""

    sent_at: float
    #: The batch size it was sent with, and how many rows it asked for (more
    #: than the batch size when free slots asked for more).
    size: int
    limit: int
    runs: list["Run"] = dataclasses.field(default_factory=list)
    #: Runs neither ended nor withdrawn yet.
    open: int = 0
    #: Looked at once it was SLOW_BATCH_SECONDS old (see producer).
    checked: bool = False
    #: A claim of limited kinds: sized by free slots, so the batch size
    #: learns nothing from it.
    limited: bool = False
    #: Claimed by a write of successes, for their keys' next jobs: sized by
    #: the room there was, so the batch size learns nothing from it either.
    handed_on: bool = False


@dataclasses.dataclass(slots=True, eq=False)
class Run:
    """One claimed job, from its claim until its outcome is in the database."""

    claimed: db.ClaimedJob
    claim: Claim
    #: Its entry in the ledger.
    entry: int
    registration: registry.Registration | None
    stopping: StopFlag = dataclasses.field(default_factory=StopFlag)
    #: When it was handed to the executor.
    submitted: float = 0.0
    started: float | None = None
    #: Taken back before it started (a stop, a cancel, a slow claim).
    withdrawn: bool = False
    ended: bool = False
    duration: float = 0.0
    #: How it ended: set by the executor as it ends, and read only after.
    decision: outcomes.Decision = None  # type: ignore[assignment]
    #: It ran past its kind's timeout: a sync handler is left behind, an
    #: async one was cancelled (or could not be) as it ended.
    timed_out: bool = False
    #: Its outcome (or release) is in the database: the claim is no longer held.
    written: bool = False
    #: What its handler returned, and that as the JSON text output stores
    #: (None when it returned None, or a value output cannot hold).
    output: Any = None
    output_json: str | None = None
    #: Its hooks, entered as it started; None with no hook registered.
    opened: hooks.Opened | None = None
    #: The hooks whose on_run_end the main thread tells, having timed the
    #: run out after they were entered (see Executor.time_out).
    told_at_timeout: hooks.Opened | None = None
    #: Its success committed in its handler's j.transaction(): nothing is
    #: left to write, whatever the handler did after.
    completed: bool = False

    def waited(self) -> float | None:
        """Seconds from falling due to its handler's start: what the claim
        measured by the database's clock, and the time since the claim was
        sent until the start. None for a run that never started."""
        if self.started is None:
            return None
        return self.claimed.waited + self.started - self.claim.sent_at

    @property
    def is_async(self) -> bool:
        return self.registration is not None and self.registration.is_async

    @property
    def timeout_at(self) -> float:
        if (self.started is None or self.registration is None or self.ended
                or self.decision is not None):  # decided: its hooks are ending
            return float("inf")
        timeout = self.registration.timeout
        return float("inf") if timeout is None else self.started + timeout
