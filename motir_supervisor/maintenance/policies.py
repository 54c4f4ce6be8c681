"""Writing the policy of each kind of a worker's registry (``@job(
max_attempts=N, retry=..., queue=..., priority=...)``, and the fleet's
retry delays where it gives none) to job_queue_kinds, where the insert
trigger fills in what a row left unset and the supervisor's rescuer and
reaper read a kind's retry delays: once per worker, when it starts (see
db.JobStore.sync_kind_policies). A service of the worker's loop (see
:mod:`.services`).
"""

from __future__ import annotations

import logging

from .. import db, registry
from ..policy import DEFAULT_MAX_ATTEMPTS, Policy, Retry
from .services import Service

log = logging.getLogger(__name__)


def kind_policy(policy: Policy, fleet: Retry) -> db.KindPolicy:
    """What job_queue_kinds keeps of a kind's policy: the fleet's values
    where it gives none (``fleet``'s delays), so that every column of a
    registered kind's row is set and an enqueue from Python, which reads
    the row, leaves nothing to the insert trigger (see enqueue_jobs)."""
    delays, jitter = policy.delays_written(fleet)
    return db.KindPolicy(policy.max_attempts or DEFAULT_MAX_ATTEMPTS, policy.queue or "default",
                         0 if policy.priority is None else policy.priority, tuple(delays), jitter)


class PoliciesSync(Service):
    """The worker's main thread owns every field."""

    def __init__(self, store: db.JobStore, index: int, fleet: Retry):
        self.store = store
        self.index = index
        #: The delays of a kind without its own (the supervisor's options).
        self.fleet = fleet
        #: Whether this worker's registry was written (a failed try, on a lost
        #: connection, is tried again at the next pass).
        self.synced = False
        self._stopped = False

    def next_due(self) -> float:
        return float("inf") if self.synced or self._stopped else 0.0

    def run_when_due(self, now: float) -> None:
        if now >= self.next_due():
            self.run_once()

    def stop(self) -> None:
        self._stopped = True

    def run_once(self) -> list[str]:
        """Write the policies (an upsert: workers at it at once write the
        same rows, in the same order); what changed."""
        changes = self.store.sync_kind_policies({
            kind: kind_policy(policy, self.fleet)
            for kind, policy in registry.policies_of_kinds().items()})
        for change in changes:
            log.info("worker %d: policy of %s", self.index, change)
        self.synced = True
        return changes
