"""Helpers for testing users' handlers: one run in-process, or a test database drained.

:func:`run_job` calls a registered kind's handler with a payload, no
database needed, and says how the run ended. It ends the run through the
worker's own code (:mod:`.worker.running`): the same hooks, the same
decision (:func:`outcomes.decide`), whatever the handler raises, and an
``async def`` handler's timeout; a plain handler past its kind's timeout
fails as a timeout once it returns, as the worker writes it (a worker gives
up on it at the deadline). :func:`drain` claims a test database's due jobs
with the real claims, runs them the same way and writes their outcomes as
a worker does. Neither forks nor installs signal handlers: the run happens
in the caller's thread. The pytest fixtures are in pytest_plugin.py.

:func:`assert_enqueued`, :func:`refute_enqueued` and :func:`all_enqueued`
check what a piece of code enqueued, in the test's transaction (they live in
assertions.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from typing import Any, Callable, ContextManager, Sequence

from . import db, outcomes, policy, registry
# What a piece of code enqueued, checked where users look for test helpers.
from .assertions import all_enqueued, assert_enqueued, payload_holds, refute_enqueued
from .config import Config
from .outcomes import Outcome
from .worker import running
from .worker.claims import Claim, Run
from .worker.transactions import Transactions
from .worker.upstream import Upstream
from .jobs import BatchProgress, Parent

#: What an app's tests import; docs/api.md lists each (tests/unit/test_docs.py checks).
__all__ = ["FAILED", "INTERRUPTED", "JobOutcome", "RETRY", "SNOOZED", "SUCCEEDED", "UnknownKind",
           "all_enqueued", "assert_enqueued", "drain", "payload_holds", "refute_enqueued",
           "run_job", "write_policies"]

#: The claimant name drain's claims carry, as `status` shows them.
CLAIMANT = f"motir-testing:{os.getpid()}"
#: How long drain's claims are valid: the handler runs in the caller's
#: thread and nothing renews them.
LEASE_SECONDS = 300.0
#: The worker's defaults, so that a test sees the delays production sees.
RETRY_BASE_SECONDS = Config.retry_base_seconds
RETRY_MAX_SECONDS = Config.retry_max_seconds

#: JobOutcome.outcome's words: the Outcome a run ended with, but for a
#: failed attempt with attempts left, which is "retry" here.
SUCCEEDED = Outcome.SUCCEEDED
RETRY = "retry"
FAILED = Outcome.FAILED
SNOOZED = Outcome.SNOOZED
INTERRUPTED = Outcome.INTERRUPTED


class UnknownKind(LookupError):
    """run_job was given a kind no imported module registered."""


@dataclasses.dataclass(frozen=True)
class JobOutcome:
    """How one run of a handler ended."""

    kind: str
    job_id: int
    #: One of SUCCEEDED, RETRY, FAILED, SNOOZED, INTERRUPTED
    #: (``decision.outcome`` says RETRY as Outcome.RETRIED).
    outcome: str
    #: The failure as last_error stores it (type, message, innermost frames).
    error: str | None = None
    #: For RETRY the delay before the next attempt; for SNOOZED the snooze.
    seconds: float = 0.0
    #: What the handler raised, None for a success.
    exception: BaseException | None = None
    #: Every j.checkpoint(data) of the run, in order.
    checkpoints: tuple[Any, ...] = ()
    #: The decision the worker would write.
    decision: outcomes.Decision = outcomes.SUCCESS
    #: What the handler returned, for a success; the row's output is this
    #: as JSON (see outcomes.output_json), or NULL where JSON cannot hold it.
    output: Any = None

    @property
    def checkpoint(self) -> Any:
        """The last checkpoint the handler saved, or None."""
        return self.checkpoints[-1] if self.checkpoints else None


def run_job(kind: str, payload: Any = None, *, attempt: int = 1,
            max_attempts: int | None = None, checkpoint_data: Any = None, stopping: bool = False,
            job_id: int = 1, queue: str | None = None,
            retry_base_seconds: float = RETRY_BASE_SECONDS,
            retry_max_seconds: float = RETRY_MAX_SECONDS,
            save_checkpoint: Callable[[Any], bool] | None = None,
            transaction: Callable[[], ContextManager[Any]] | None = None,
            parents: Sequence[Parent] = (), batch: BatchProgress | None = None) -> JobOutcome:
    """Run ``kind``'s handler once, here and now, and say how it ended.

    ``stopping`` is what ``j.stopping`` reads (a deploy's SIGTERM): a handler
    that then saves a checkpoint and raises Interrupted is INTERRUPTED.
    Checkpoints are kept in memory (``save_checkpoint``, which drain passes,
    also writes them elsewhere). An ``async def`` handler runs in asyncio.run.
    ``max_attempts`` and ``queue`` None are the kind's policy's (else 25
    attempts, the default queue), as for a row that leaves them unset; the
    retry delay is the kind's, or the fleet's from ``retry_base_seconds``
    and ``retry_max_seconds``. ``parents`` and ``batch`` are what the
    handler reads as ``j.parents`` and ``j.batch``.
    """
    registration = registry.registration_for(kind)
    if registration is None:
        known = ", ".join(registry.registered_kinds()) or "none"
        raise UnknownKind(f"no handler registered for job kind {kind!r} (registered: {known});"
                          " import the module that registers it")
    kind_policy = registration.policy
    if max_attempts is None:
        max_attempts = kind_policy.max_attempts or policy.DEFAULT_MAX_ATTEMPTS
    if queue is None:
        queue = kind_policy.queue or "default"
    # The handle holds the payload itself: the claim's JSON text is not read.
    run = Run(db.ClaimedJob(job_id, queue, kind, "", attempt, max_attempts, checkpoint_data),
              _CLAIM, -1, registration)
    if stopping:
        run.stopping.set()
    saved: list[Any] = []
    handle = registry.Job(id=job_id, kind=kind, queue=queue, payload=payload, attempt=attempt,
                          max_attempts=max_attempts, checkpoint_data=checkpoint_data,
                          stopping=run.stopping, save_checkpoint=_keeping(saved, save_checkpoint),
                          transaction=transaction, upstream=_Given(list(parents), batch))
    return _run(run, handle, saved, retry_base_seconds, retry_max_seconds)


class _Given:
    """The parents and batch run_job was given, as j.parents and j.batch read them."""

    def __init__(self, parents: list[Parent], batch: BatchProgress | None):
        self.parents = parents
        self.batch = batch

    def parents_of(self, job_id: int) -> list[Parent]:
        return self.parents

    def batch_of(self, job_id: int) -> BatchProgress | None:
        return self.batch


#: What a Run needs of the claim it came in; nothing here reads it.
_CLAIM = Claim(sent_at=0.0, size=1, limit=1)


def _keeping(saved: list[Any], save: Callable[[Any], bool] | None) -> Callable[[Any], bool]:
    """A save_checkpoint that keeps each checkpoint in ``saved`` once
    ``save`` (if any) took it."""
    def keep(data: Any) -> bool:
        if save is not None and not save(data):
            return False
        saved.append(data)
        return True
    return keep


def _run(run: Run, handle: registry.Job, saved: list[Any], retry_base_seconds: float,
         retry_max_seconds: float) -> JobOutcome:
    """Run ``run``'s handler here and now and end it as a worker does."""
    ended: list[JobOutcome] = []

    def end(run: Run, error: BaseException | None) -> None:
        # In an async handler's task, as in a worker: the hooks' ends run
        # in the context their starts set.
        run.duration = time.monotonic() - run.started  # type: ignore[operator]
        timeout = run.registration.timeout if run.registration is not None else None
        if timeout is not None and not run.is_async and run.duration > timeout:
            run.timed_out = True
        run.decision, error = running.decide(run, error, retry_base_seconds,
                                             retry_max_seconds)
        if run.opened is not None:
            running.leave(run, error)
        decision = run.decision
        ended.append(JobOutcome(
            run.claimed.kind, run.claimed.id,
            RETRY if decision.outcome is Outcome.RETRIED else decision.outcome,
            decision.error, decision.retry_in_seconds, error, tuple(saved), decision,
            run.output if error is None else None))

    run.started = time.monotonic()
    if run.is_async:
        asyncio.run(running.call_async(run, lambda _: handle, end))
    else:
        end(run, running.call(run, lambda _: handle))
    return ended[0]


def drain(database: str | db.JobStore, *, queues: Sequence[str] | None = None,
          max_jobs: int = 1000, retry_base_seconds: float = RETRY_BASE_SECONDS,
          retry_max_seconds: float = RETRY_MAX_SECONDS) -> list[JobOutcome]:
    """Run the due jobs of a test database (a URL or a JobStore) until none is due.

    Jobs are claimed with the worker's own claims (limited kinds within
    their max_running) and their outcomes written by record_outcomes, so
    rows end as a worker leaves them: a retried job is pending again with
    its attempt spent, due after the retry delay. That delay is the
    worker's by default, so a retry stays pending; with
    ``retry_base_seconds=0`` it is due at once and drained again. Jobs
    whose run_at is in the future are left pending. The registered kinds'
    policies are written first (see write_policies). Stops after
    ``max_jobs`` runs (a job that snoozes 0 s forever). Returns the runs'
    outcomes in the order they ran.
    """
    store = db.JobStore(database) if isinstance(database, str) else database
    transactions = Transactions(store.dsn, CLAIMANT, "motir-testing", store.timeout_seconds)
    ran: list[JobOutcome] = []
    try:
        write_policies(store, retry_base_seconds, retry_max_seconds)
        while len(ran) < max_jobs:
            room = max_jobs - len(ran)
            claimed, _ = store.claim_due_jobs(CLAIMANT, room, LEASE_SECONDS, queues)
            if len(claimed) < room:
                limited, _ = store.claim_limited_jobs(CLAIMANT, room - len(claimed),
                                                      LEASE_SECONDS, queues)
                claimed += limited
            if not claimed:
                break
            unknown = sorted({j.kind for j in claimed} - set(registry.registered_kinds()))
            if unknown:
                store.release_claims_of([CLAIMANT], [j.id for j in claimed])
                raise UnknownKind(f"the queue holds jobs of kinds no handler is registered"
                                  f" for: {', '.join(unknown)}; import the modules that"
                                  " register them")
            batch = [_run_claimed(store, transactions, job, retry_base_seconds,
                                  retry_max_seconds) for job in claimed]
            # Nothing asks a drained handler to stop, so no run is given
            # back (INTERRUPTED): every one has an outcome to write.
            store.record_outcomes(CLAIMANT, [
                running.as_outcome(o.job_id, o.decision, outcomes.output_json(o.output)[0])
                for o in batch])
            ran += batch
    finally:
        transactions.close()
        if store is not database:
            store.close()
    return ran


def write_policies(database: str | db.JobStore, retry_base_seconds: float = RETRY_BASE_SECONDS,
                   retry_max_seconds: float = RETRY_MAX_SECONDS) -> None:
    """Write the registered kinds' policies to a test database, as a
    worker does when it starts: a row inserted after it without
    max_attempts, queue or priority gets its kind's. drain does it first."""
    from .maintenance.policies import kind_policy
    store = db.JobStore(database) if isinstance(database, str) else database
    try:
        fleet = policy.Retry(retry_base_seconds, max(retry_max_seconds, retry_base_seconds))
        store.sync_kind_policies({kind: kind_policy(p, fleet)
                                  for kind, p in registry.policies_of_kinds().items()})
    finally:
        if store is not database:
            store.close()


def _run_claimed(store: db.JobStore, transactions: Transactions, job: db.ClaimedJob,
                 retry_base_seconds: float, retry_max_seconds: float) -> JobOutcome:
    # A run that completes in its transaction has its row written there;
    # drain's write of its outcome after it is fenced, and finds nothing.
    run = Run(job, _CLAIM, -1, registry.registration_for(job.kind))
    saved: list[Any] = []
    handle = running.handle(run, _keeping(saved, lambda data: store.save_checkpoint(
        job.id, CLAIMANT, data)), transactions, Upstream(store))
    return _run(run, handle, saved, retry_base_seconds, retry_max_seconds)
