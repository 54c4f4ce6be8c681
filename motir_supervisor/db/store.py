"""The verbs of a worker and of the supervisor that watches it: claims,
outcomes, leases, checkpoints and claims given back, on ``job_queue``.

:class:`JobStore` runs the named statements of ``sql/queries.sql`` over its
:class:`.Session`, and reads what they return by column name (see
:mod:`.rows`); it inherits the queue's other verbs from
:class:`.Operations`. Everything else calls these verbs (or
:func:`enqueueing.enqueue_jobs`, on a connection of the caller's) and never
holds SQL text. It does no forking, no signal handling and runs no handler
code.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Sequence

import psycopg2
import psycopg2.extras

from .operations import Operations
from .rows import (CLAIMED, JOB_STATES, LEASES, SETTLED, ClaimedJob, Outcome, Result, StateOfJob,
                   Settled)
from .session import Session

log = logging.getLogger(__name__)

#: The channel the job_queue triggers notify (see migrations/0001).
WAKEUP_CHANNEL = "motir_job_queue"
#: The payload of a wake-up for every worker, whatever queues it serves: a
#: limited kind's slot freed, or the limits changed (migrations/0004).
ANY_QUEUE = "*"
#: The states of a job (the CHECK of migrations/0001).
STATES = ("waiting", "pending", "running", "succeeded", "failed", "cancelled")

#: Errors after which the connection is unusable and must be opened again.
CONNECTION_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)


class JobStore(Operations):
    """The verbs the supervisor, the reaper and the workers use on job_queue."""

    def __init__(self, dsn: str, application_name: str = "motir-supervisor",
                 listen: bool = False, timeout_seconds: float = 20.0, prepare: bool = True):
        super().__init__(Session(dsn, application_name, listen=listen,
                                 timeout_seconds=timeout_seconds, prepare=prepare))

    # -- the claim and the outcomes ------------------------------------------

    def claim_due_jobs(self, claimant: str, limit: int, lease_seconds: float,
                       queues: Sequence[str] | None) -> tuple[list[ClaimedJob], bool]:
        """The claimed jobs in due order, and whether more were due after them."""
        result = self.session.run("claim_due_jobs", {
            "claimant": claimant, "limit": limit, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
        })
        return CLAIMED.of(result), result.value("more_due", False)

    def claim_limited_jobs(self, claimant: str, limit: int, lease_seconds: float,
                           queues: Sequence[str] | None,
                           free: int | None = None) -> tuple[list[ClaimedJob], bool]:
        """claim_due_jobs for the limited kinds, never past their limits: up
        to ``limit`` jobs, of which at most ``free`` (default: all) of kinds
        with a max_running or a rate limit. (jobs, whether more could run than
        were claimed)."""
        result = self.session.run("claim_limited_jobs", {
            "claimant": claimant, "limit": limit, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
            "free": limit if free is None else free,
        })
        # One row even when nothing was claimed, for more_due.
        return ([job for job in CLAIMED.of(result) if job.id is not None],
                result.value("more_due"))

    def seconds_until_next_due(self, queues: Sequence[str] | None) -> tuple[float | None, bool]:
        """(seconds, whether any kind is limited); the seconds are None when no
        pending job is waited for, negative when one is due already."""
        result = self.session.run("seconds_until_next_due",
                                  {"queues": list(queues) if queues else None})
        return result.value("seconds"), result.value("any_limited")

    def renew_leases(self, claimant: str, ids: Iterable[int],
                     lease_seconds: float) -> dict[int, bool]:
        """{job id: cancel requested} for the claims still ours; the others were lost."""
        return {lease.id: lease.cancel_requested for lease in LEASES.of(self.session.run(
            "renew_leases",
            {"claimant": claimant, "ids": list(ids), "lease_seconds": lease_seconds}))}

    def record_outcomes(self, claimant: str, outcomes: Sequence[Outcome]) -> dict[int, str]:
        """{job id: new state} for the rows still ours; the others are left alone."""
        return {row.id: row.state for row in self.record_outcomes_of(claimant, outcomes)}

    def record_successes(self, claimant: str, ids: list[int],
                         outputs: list[str | None] | None = None) -> set[int]:
        """Runs that returned: the ids of the rows still ours, now succeeded.
        ``outputs`` (JSON texts, each id's) are stored with them."""
        return set(self._successes(claimant, ids, outputs).column("id"))

    def _successes(self, claimant: str, ids: list[int],
                   outputs: list[str | None] | None) -> Result:
        if outputs is None:
            return self.session.run("record_successes", {"claimant": claimant, "ids": ids})
        return self.session.run("record_successes_with_output",
                                {"claimant": claimant, "ids": ids, "outputs": outputs})

    def record_successes_handing_on(self, claimant: str, ids: list[int], room: int,
                                    lease_seconds: float, queues: Sequence[str] | None,
                                    outputs: list[str | None] | None = None,
                                    generations: dict[str, int | None] | None = None
                                    ) -> tuple[set[int], list[ClaimedJob]]:
        """record_successes that also claims, up to ``room``, the next due job
        of each key whose run succeeded, for the kinds limited per key only:
        (the ids written, the jobs claimed). ``outputs`` as record_successes
        takes them; ``generations``: each kind's generation as the claims of
        these runs gave it (see generations_of), None or missing where not
        known, which the statement then counts."""
        generations = generations or {}
        result = self.session.run("record_successes_handing_on", {
            "claimant": claimant, "ids": ids, "room": room, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
            "outputs": outputs if outputs is not None else [None] * len(ids),
            "kinds": list(generations), "generations": list(generations.values())})
        # The ids written come as one array, in the first row; the jobs
        # claimed follow it.
        return set(result.value("written")), CLAIMED.of(result, start=1)

    def record_outcomes_of(self, claimant: str,
                           outcomes: Sequence[Outcome]) -> list[StateOfJob]:
        """(job id, new state, kind) of the rows still ours that were written:
        the successes by record_successes, the other outcomes (usually few)
        by record_outcomes, whose join may grow with the square of what it
        is sent (see there)."""
        rows: list[StateOfJob] = []
        successes = [o for o in outcomes if o.error is None and not o.snoozed]
        for returned in (False, True):
            these = [o for o in successes if (o.output is not None) is returned]
            if these:
                rows += JOB_STATES.of(self._successes(
                    claimant, [o.job_id for o in these],
                    [o.output for o in these] if returned else None))
        others = [o for o in outcomes if o.error is not None or o.snoozed]
        if others:
            rows += JOB_STATES.of(self.session.run("record_outcomes", {
                "claimant": claimant,
                "ids": [o.job_id for o in others],
                "errors": [o.error for o in others],
                "retry_in_seconds": [o.retry_in_seconds for o in others],
                "permanent": [o.permanent for o in others],
                "snoozed": [o.snoozed for o in others]}))
        return rows

    def save_checkpoint(self, job_id: int, claimant: str, data: Any) -> bool:
        return bool(self.session.run("save_checkpoint", {
            "id": job_id, "claimant": claimant, "checkpoint": psycopg2.extras.Json(data)}).rows)

    def release_claims_of(self, claimants: Sequence[str],
                          ids: Sequence[int] | None = None) -> list[int]:
        """Give unfinished jobs back without spending an attempt (a drain);
        all of the claimants' jobs, or only ``ids``."""
        return self.session.run("release_claims_of", {
            "claimants": list(claimants),
            "ids": list(ids) if ids is not None else None}).column("id")

    def release_claims_not_held(self, claimant: str, held: Sequence[int]) -> list[int]:
        return self.session.run("release_claims_not_held", {
            "claimant": claimant, "held": list(held)}).column("id")

    def fail_claims_of_dead(self, claimants: Sequence[str], ids: Sequence[int],
                            error: str) -> list[Settled]:
        """Give back the jobs a dead claimant was running, spending the attempt."""
        return SETTLED.of(self.session.run("fail_claims_of_dead", {
            "claimants": list(claimants), "ids": list(ids), "error": error}))

    def states_of_jobs(self, ids: Sequence[int]) -> list[StateOfJob]:
        """(job id, state, kind) of each of ``ids`` still in the table."""
        return JOB_STATES.of(self.session.run("states_of_jobs", {"ids": list(ids)}))

    def expire_stale_leases(self, limit: int = 500) -> list[Settled]:
        return SETTLED.of(self.session.run("expire_stale_leases", {"limit": limit}))
