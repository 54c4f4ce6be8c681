"""The verbs on the queue as a whole, over a :class:`.Session`: what the
command line and the dashboard do (cancel, retry, pause, resume, prune,
status), enqueueing, schedules, limits and migrations.

:class:`.store.JobStore` adds a worker's claims and outcomes to these; the
dashboard holds an :class:`Operations` of its own for its actions, so that
it and the command line cannot disagree on what they do. Nothing here
claims a job or writes an outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg2.extensions

from . import migrations
from .enqueueing import NewJob, encode_payload, enqueue_jobs
from .kinds import KindPolicy, read_kind_policies, sync_kind_policies
from .limits import Limits, read_limits, sync_limits
from .migrations import Applied, Migration, load_migrations
from .rows import CANCELS, RETRIES, SCHEDULES, CancelResult, RetryResult, ScheduleSeen
from .session import Session


#: The ended states, in the groups that retention deletes by one statement
#: each: each group is the rows of one partial index (migrations/0002 and
#: 0005), so a batch walks it by age rather than the whole table.
PRUNED_TOGETHER = (("succeeded", "cancelled"), ("failed",))


class Operations:
    """The queue's verbs over ``session``, and that session's connection."""

    def __init__(self, session: Session):
        self.session = session

    # -- the connection -------------------------------------------------------

    @property
    def dsn(self) -> str:
        return self.session.dsn

    @property
    def timeout_seconds(self) -> float:
        return self.session.timeout_seconds

    @property
    def listen(self) -> bool:
        """LISTEN on every connection opened, reconnects included."""
        return self.session.listen

    @listen.setter
    def listen(self, listen: bool) -> None:
        self.session.listen = listen

    @property
    def conn(self) -> psycopg2.extensions.connection:
        return self.session.conn

    @property
    def connected(self) -> bool:
        return self.session.connected

    def open(self) -> None:
        """Connect now (reconnecting if need be), so that an outage shows here."""
        self.session.open()

    def close(self) -> None:
        self.session.close()

    def start_listening(self) -> None:
        """LISTEN from now on, on this connection and every later one."""
        self.session.start_listening()

    def fileno(self) -> int:
        return self.session.fileno()

    def take_notifications(self) -> list[str]:
        """Read what arrived on the socket; return the queue names notified."""
        return self.session.take_notifications()

    # -- producers, schedules and limits --------------------------------------

    def enqueue(self, kind: str, payload: Any = None, *, queue: str | None = None,
                delay_seconds: float = 0, max_attempts: int | None = None,
                priority: int | None = None,
                unique_key: str | None = None,
                concurrency_key: str | None = None) -> tuple[int, bool]:
        """(job id, inserted): with a ``unique_key`` another pending or running
        job of the queue holds, nothing is inserted and that job's id returns.
        What is None (queue, max_attempts, priority) follows the kind's policy."""
        job = NewJob(kind, encode_payload(payload), queue, None, delay_seconds, priority,
                     unique_key, max_attempts, concurrency_key)
        return enqueue_jobs(self.conn, [job])[0]

    def database_now(self) -> Any:
        """The database's clock, as an aware datetime."""
        return self.session.run("database_now").value("now")

    def enqueue_scheduled(self, kind: str, spec: str, tz: str | None, instant: Any,
                          instant_text: str, payload_json: str, queue: str,
                          priority: int) -> int | None:
        """The new job's id, or None when another supervisor enqueued this
        instant (or a later one) first (see enqueue_scheduled in queries.sql).
        The job's payload is the object ``payload_json`` with
        "scheduled_for" added."""
        return self.session.run("enqueue_scheduled", {
            "kind": kind, "spec": spec, "tz": tz, "instant": instant,
            "instant_text": instant_text, "payload": payload_json, "queue": queue,
            "priority": priority}).value("id")

    def schedules(self) -> list[ScheduleSeen]:
        """(kind, spec, time zone, last instant) of every schedule the fleet has seen."""
        return SCHEDULES.of(self.session.run("schedules"))

    def limits(self) -> dict[str, Limits]:
        """The limits of every limited kind."""
        with self.conn.cursor() as cur:
            return read_limits(cur)

    def sync_limits(self, wanted: dict[str, Limits | None]) -> list[str] | None:
        """See limits.sync_limits."""
        return sync_limits(self.conn, wanted)

    def kind_policies(self) -> dict[str, KindPolicy]:
        """The policy of every kind that has one."""
        with self.conn.cursor() as cur:
            return read_kind_policies(cur)

    def sync_kind_policies(self, wanted: dict[str, KindPolicy | None]) -> list[str]:
        """See kinds.sync_kind_policies."""
        return sync_kind_policies(self.conn, wanted)

    # -- operators -----------------------------------------------------------

    def pause_queue(self, queue: str) -> bool:
        """False if it was paused already."""
        return bool(self.session.run("pause_queue", {"queue": queue}).rows)

    def resume_queue(self, queue: str) -> bool:
        """False if it was not paused."""
        return bool(self.session.run("resume_queue", {"queue": queue}).rows)

    def cancel_job(self, job_id: int) -> CancelResult | None:
        """(state before, changed) or None for an unknown id."""
        found = CANCELS.of(self.session.run("cancel_job", {"id": job_id}))
        return found[0] if found else None

    def retry_job(self, job_id: int) -> RetryResult | None:
        """(state before, changed, the job holding its unique key) or None
        for an unknown id."""
        found = RETRIES.of(self.session.run("retry_job", {"id": job_id}))
        return found[0] if found else None

    def retry_failed_of_kind(self, kind: str) -> list[int]:
        return self.session.run("retry_failed_of_kind", {"kind": kind}).column("id")

    def prune_finished(self, states: Sequence[str], older_than_seconds: float,
                       limit: int = 1000) -> int:
        """Delete one batch of rows of ``states`` (one group of
        PRUNED_TOGETHER, or part of one) that ended long enough ago;
        returns how many went."""
        return self.session.count("prune_finished", {
            "states": list(states), "older_than_seconds": older_than_seconds, "limit": limit})

    def prune_workflows(self, older_than_seconds: float, failed_older_than_seconds: float | None,
                        limit: int = 100) -> int:
        """Delete up to ``limit`` whole workflows whose jobs all ended long
        enough ago (a failed one after ``failed_older_than_seconds``; a
        workflow with a failed job stays when that is None), with their
        jobs; returns how many jobs went. Then the rows of sealed batches
        whose members and callbacks are gone."""
        deleted = self.session.run("prune_workflows", {
            "older_than_seconds": older_than_seconds,
            "failed_older_than_seconds": failed_older_than_seconds,
            "limit": limit}).value("deleted")
        self.session.count("prune_batches", {"older_than_seconds": older_than_seconds,
                                             "limit": limit})
        return int(deleted)

    def queue_status(self) -> dict[str, Any]:
        run = self.session.run
        return {
            "counts": run("status_counts").records(),
            "oldest_due_seconds": run("status_oldest_due").value("oldest_due_seconds"),
            "running": run("status_running").records(),
            "expired_leases": run("status_expired_leases").value("expired_leases"),
            "paused": run("paused_queues").records(),
            "limits": run("status_limits").records(),
            "schedules": self.schedules(),
            "now": self.database_now(),
        }

    # -- the schema ------------------------------------------------------------

    def migrate(self) -> list[Migration]:
        """Apply the migrations not applied yet, each in its own transaction."""
        return migrations.migrate(self.session)

    def applied_migrations(self) -> list[Applied] | None:
        """What the database records as applied; None where never migrated."""
        return migrations.applied_migrations(self.session)

    def schema_version(self) -> int:
        """The newest migration applied; 0 on a database never migrated."""
        return migrations.schema_version(self.session)

    def schema_is_current(self) -> bool:
        return self.schema_version() >= load_migrations()[-1].version
