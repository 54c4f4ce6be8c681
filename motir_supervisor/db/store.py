"""The module that talks to PostgreSQL for the supervisor and its workers.

It owns their connections and runs the named statements of
``sql/queries.sql`` (see :mod:`statements`) and the migrations beside it.
Everything else calls the verbs of :class:`JobStore` (or
:func:`enqueueing.enqueue_jobs`, on a connection of the caller's) and never
holds SQL text. It does no forking, no signal handling and runs no handler
code.
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, NamedTuple, Sequence

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from .connections import connect
from .enqueueing import NewJob, encode_payload, enqueue_jobs
from .limits import Limits, read_limits, sync_limits
from .statements import PREPARED, QUERIES, Migration, load_migrations, prepared_form

log = logging.getLogger(__name__)

#: The channel the job_queue triggers notify (see migrations/0001).
WAKEUP_CHANNEL = "motir_job_queue"
#: The payload of a wake-up for every worker, whatever queues it serves: a
#: limited kind's slot freed, or the limits changed (migrations/0004).
ANY_QUEUE = "*"
#: The states of a job (the CHECK of migrations/0001).
STATES = ("pending", "running", "succeeded", "failed", "cancelled")

#: Errors after which the connection is unusable and must be opened again.
CONNECTION_ERRORS = (psycopg2.OperationalError, psycopg2.InterfaceError)

#: Filled on first use, so that a statement replaced at start-up (as the
#: tests' negative control replaces the claim) is the one prepared.
_PREPARED_FORMS: dict[str, tuple[str, str]] = {}
#: The statements sent after read_committed (see there): those that end
#: runs, and a queue's pause and resume.
READ_COMMITTED = frozenset({"record_successes", "record_successes_with_output",
                            "record_successes_handing_on", "record_outcomes",
                            "release_claims_of", "release_claims_not_held",
                            "fail_claims_of_dead", "expire_stale_leases",
                            "pause_queue", "resume_queue"})


# Tuples, not frozen dataclasses: a worker makes two of these per job, and a
# frozen dataclass costs several times as much to build.
class ClaimedJob(NamedTuple):
    """A row as the claim returned it: ours until we record its outcome."""

    id: int
    queue: str
    kind: str
    #: The payload as the row's JSON text, decoded by the handler's handle.
    payload_json: str
    attempt: int
    max_attempts: int
    checkpoint_data: Any
    #: Smaller first: a worker starts its claimed jobs in this order.
    priority: int = 0
    #: Seconds it had been due when the claim took it, by the database's clock.
    waited: float = 0.0
    #: The row's trace_context (see tracing), or None.
    trace_context: Any = None
    #: The generation of its kind's limits the claim saw (migrations/0013),
    #: handed back when the run ends; None for a job of the regular lane.
    generation: int | None = None


def generations_of(jobs: Iterable[ClaimedJob]) -> dict[str, int | None]:
    """Each kind's generation among these jobs: None for a kind whose jobs
    came with different ones (or none)."""
    found: dict[str, int | None] = {}
    for job in jobs:
        seen = found.get(job.kind, job.generation)
        found[job.kind] = job.generation if seen == job.generation else None
    return found


class Outcome(NamedTuple):
    """What record_outcomes writes for one ended run: its row's values, not
    the word for how it ended (that is an outcomes.Outcome)."""

    job_id: int
    #: None for a success; else the failure, readable by a person.
    error: str | None = None
    retry_in_seconds: float = 0.0
    permanent: bool = False
    #: The handler raised Snooze: pending again after retry_in_seconds, the
    #: attempt handed back.
    snoozed: bool = False
    #: A success's return value as JSON text (see outcomes.output_json), or None.
    output: str | None = None


class JobStore:
    """The verbs the supervisor, the reaper and the workers use on job_queue."""

    def __init__(self, dsn: str, application_name: str = "motir-supervisor",
                 listen: bool = False, timeout_seconds: float = 20.0, prepare: bool = True):
        self.dsn = dsn
        #: Prepare the PREPARED statements (see there) on each connection.
        self.prepare = prepare
        self.application_name = application_name
        #: LISTEN on every connection this store opens, reconnects included,
        #: so that no reconnect can leave a worker deaf to wake-ups.
        self.listen = listen
        self.timeout_seconds = timeout_seconds
        self._conn: psycopg2.extensions.connection | None = None
        #: What the current connection has prepared; a new one starts empty.
        self._prepared: set[str] = set()

    # -- connection ---------------------------------------------------------

    @property
    def conn(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self.open()
        assert self._conn is not None  # open() connected, or raised
        return self._conn

    def open(self) -> None:
        """Connect now (reconnecting if need be), so that an outage shows here."""
        self.close()
        conn = connect(self.dsn, self.application_name, self.timeout_seconds)
        self._conn = conn
        self._prepared = set()
        if self.prepare:
            # No JIT for statements that take a millisecond: compiling one
            # on a misestimate (a small table whose statistics are stale, as
            # analyze_limits explains) costs far more than running it. Not
            # with --no-listen: a pooler in transaction mode would leave the
            # setting on whichever server connection it landed.
            self._run("no_jit")
        if self.listen:
            self._run("listen")

    def start_listening(self) -> None:
        """LISTEN from now on, on this connection and every later one."""
        self.listen = True
        if self.connected:
            self._run("listen")

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.closed

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg2.Error:
                pass
            self._conn = None

    def _run(self, name: str, params: dict[str, Any] | None = None,
             after: str | None = None) -> list[tuple]:
        """Run the named statement; with ``after``, the statement of that name
        first, in the same transaction (both go as one query string), and
        read_committed before either for the statements READ_COMMITTED
        names."""
        with self.conn.cursor() as cur:
            if self.prepare and name in PREPARED:
                forms = _PREPARED_FORMS.get(name)
                if forms is None:
                    forms = _PREPARED_FORMS[name] = prepared_form(name)
                prepare, statement = forms
                if name not in self._prepared:
                    cur.execute(prepare)
                    self._prepared.add(name)
                    if after == "lock_limited_claims":
                        # Planned before it first runs behind the lock, which
                        # every limited claim of the fleet waits for: planning
                        # it takes longer than running it. The generic plan
                        # EXPLAIN makes is the one kept for its runs.
                        cur.execute(f"{QUERIES['generic_plan']}\nEXPLAIN {statement}", params)
            else:
                statement = QUERIES[name]
            if after is not None:
                statement = f"{QUERIES[after]}\n{statement}"
            if name in READ_COMMITTED:
                statement = f"{QUERIES['read_committed']}\n{statement}"
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else []

    def _count(self, name: str, params: dict[str, Any] | None = None) -> int:
        with self.conn.cursor() as cur:
            cur.execute(QUERIES[name], params)
            return cur.rowcount

    # -- wake-ups -----------------------------------------------------------

    def fileno(self) -> int:
        return self.conn.fileno()

    def take_notifications(self) -> list[str]:
        """Read what arrived on the socket; return the queue names notified."""
        conn = self.conn
        conn.poll()
        queues = [n.payload for n in conn.notifies]
        conn.notifies.clear()
        return queues

    # -- the claim and the outcomes ------------------------------------------

    def claim_due_jobs(self, claimant: str, limit: int, lease_seconds: float,
                       queues: Sequence[str] | None) -> tuple[list[ClaimedJob], bool]:
        """The claimed jobs in due order, and whether more were due after them."""
        rows = self._run("claim_due_jobs", {
            "claimant": claimant, "limit": limit, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
        })
        return ([ClaimedJob._make((*row[:8], *row[9:], None)) for row in rows],
                bool(rows) and rows[0][8])

    def claim_limited_jobs(self, claimant: str, limit: int, lease_seconds: float,
                           queues: Sequence[str] | None,
                           free: int | None = None) -> tuple[list[ClaimedJob], bool]:
        """claim_due_jobs for the limited kinds, never past their limits: up
        to ``limit`` jobs, of which at most ``free`` (default: all) of kinds
        with a max_running or a rate limit. (jobs, whether more could run than
        were claimed)."""
        rows = self._run("claim_limited_jobs", {
            "claimant": claimant, "limit": limit, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
            "free": limit if free is None else free,
        }, after="lock_limited_claims")
        # One row even when nothing was claimed, for more_due.
        return ([ClaimedJob._make((*row[:8], *row[9:])) for row in rows if row[0] is not None],
                rows[0][8])

    def seconds_until_next_due(self, queues: Sequence[str] | None) -> tuple[float | None, bool]:
        """(seconds, whether any kind is limited); the seconds are None when no
        pending job is waited for, negative when one is due already."""
        rows = self._run("seconds_until_next_due", {"queues": list(queues) if queues else None})
        return rows[0][0], rows[0][1]

    def renew_leases(self, claimant: str, ids: Iterable[int],
                     lease_seconds: float) -> dict[int, bool]:
        """{job id: cancel requested} for the claims still ours; the others were lost."""
        rows = self._run("renew_leases", {
            "claimant": claimant, "ids": list(ids), "lease_seconds": lease_seconds})
        return dict(rows)

    def record_outcomes(self, claimant: str, outcomes: Sequence[Outcome]) -> dict[int, str]:
        """{job id: new state} for the rows still ours; the others are left alone."""
        return {job_id: state for job_id, state, _ in self.record_outcomes_of(claimant, outcomes)}

    def record_successes(self, claimant: str, ids: list[int],
                         outputs: list[str | None] | None = None) -> set[int]:
        """Runs that returned: the ids of the rows still ours, now succeeded.
        ``outputs`` (JSON texts, each id's) are stored with them."""
        return {row[0] for row in self._successes(claimant, ids, outputs)}

    def _successes(self, claimant: str, ids: list[int],
                   outputs: list[str | None] | None) -> list[tuple]:
        if outputs is None:
            return self._run("record_successes", {"claimant": claimant, "ids": ids})
        return self._run("record_successes_with_output",
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
        rows = self._run("record_successes_handing_on", {
            "claimant": claimant, "ids": ids, "room": room, "lease_seconds": lease_seconds,
            "queues": list(queues) if queues else None,
            "outputs": outputs if outputs is not None else [None] * len(ids),
            "kinds": list(generations), "generations": list(generations.values())},
            after="generic_plan")
        # The ids written come as one array, in the first row.
        return set(rows[0][0]), [ClaimedJob._make(row[1:]) for row in rows[1:]]

    def record_outcomes_of(self, claimant: str,
                           outcomes: Sequence[Outcome]) -> list[tuple[int, str, str]]:
        """(job id, new state, kind) of the rows still ours that were written:
        the successes by record_successes, the other outcomes (usually few)
        by record_outcomes, whose join may grow with the square of what it
        is sent (see there)."""
        rows = []
        successes = [o for o in outcomes if o.error is None and not o.snoozed]
        for returned in (False, True):
            these = [o for o in successes if (o.output is not None) is returned]
            if these:
                rows += self._successes(claimant, [o.job_id for o in these],
                                        [o.output for o in these] if returned else None)
        others = [o for o in outcomes if o.error is not None or o.snoozed]
        if others:
            rows += self._run("record_outcomes", {
                "claimant": claimant,
                "ids": [o.job_id for o in others],
                "errors": [o.error for o in others],
                "retry_in_seconds": [o.retry_in_seconds for o in others],
                "permanent": [o.permanent for o in others],
                "snoozed": [o.snoozed for o in others]})
        return [tuple(row) for row in rows]

    def save_checkpoint(self, job_id: int, claimant: str, data: Any) -> bool:
        return bool(self._run("save_checkpoint", {
            "id": job_id, "claimant": claimant, "checkpoint": psycopg2.extras.Json(data)}))

    def release_claims_of(self, claimants: Sequence[str],
                          ids: Sequence[int] | None = None) -> list[int]:
        """Give unfinished jobs back without spending an attempt (a drain);
        all of the claimants' jobs, or only ``ids``."""
        return [row[0] for row in self._run("release_claims_of", {
            "claimants": list(claimants), "ids": list(ids) if ids is not None else None})]

    def release_claims_not_held(self, claimant: str, held: Sequence[int]) -> list[int]:
        return [row[0] for row in self._run("release_claims_not_held", {
            "claimant": claimant, "held": list(held)})]

    def fail_claims_of_dead(self, claimants: Sequence[str], ids: Sequence[int],
                            error: str) -> list[tuple[int, str]]:
        """Give back the jobs a dead claimant was running, spending the attempt."""
        return [tuple(r) for r in self._run("fail_claims_of_dead", {
            "claimants": list(claimants), "ids": list(ids), "error": error})]

    def states_of_jobs(self, ids: Sequence[int]) -> list[tuple[int, str, str]]:
        """(job id, state, kind) of each of ``ids`` still in the table."""
        return [tuple(r) for r in self._run("states_of_jobs", {"ids": list(ids)})]

    def expire_stale_leases(self, limit: int = 500) -> list[tuple[int, str]]:
        return [tuple(r) for r in self._run("expire_stale_leases", {"limit": limit})]

    # -- producers and operators ---------------------------------------------

    def enqueue(self, kind: str, payload: Any = None, *, queue: str = "default",
                delay_seconds: float = 0, max_attempts: int | None = None, priority: int = 0,
                unique_key: str | None = None,
                concurrency_key: str | None = None) -> tuple[int, bool]:
        """(job id, inserted): with a ``unique_key`` another pending or running
        job of the queue holds, nothing is inserted and that job's id returns."""
        job = NewJob(kind, encode_payload(payload), queue, None, delay_seconds, priority,
                     unique_key, max_attempts, concurrency_key)
        return enqueue_jobs(self.conn, [job])[0]

    def database_now(self) -> Any:
        """The database's clock, as an aware datetime."""
        return self._run("database_now")[0][0]

    def enqueue_scheduled(self, kind: str, spec: str, instant: Any,
                          instant_text: str) -> int | None:
        """The new job's id, or None when another supervisor enqueued this
        instant (or a later one) first (see enqueue_scheduled in queries.sql)."""
        rows = self._run("enqueue_scheduled", {"kind": kind, "spec": spec, "instant": instant,
                                               "instant_text": instant_text})
        return rows[0][0] if rows else None

    def schedules(self) -> list[tuple[str, str, Any]]:
        """(kind, spec, last instant) of every schedule the fleet has seen."""
        return [tuple(row) for row in self._run("schedules")]

    def limits(self) -> dict[str, Limits]:
        """The limits of every limited kind."""
        with self.conn.cursor() as cur:
            return read_limits(cur)

    def sync_limits(self, wanted: dict[str, Limits | None]) -> list[str] | None:
        """See limits.sync_limits."""
        return sync_limits(self.conn, wanted)

    def pause_queue(self, queue: str) -> bool:
        """False if it was paused already."""
        return bool(self._run("pause_queue", {"queue": queue}))

    def resume_queue(self, queue: str) -> bool:
        """False if it was not paused."""
        return bool(self._run("resume_queue", {"queue": queue}))

    def cancel_job(self, job_id: int) -> tuple[str, bool] | None:
        """(state before, changed) or None for an unknown id."""
        rows = self._run("cancel_job", {"id": job_id})
        return tuple(rows[0]) if rows else None

    def retry_job(self, job_id: int) -> tuple[str, bool, int | None] | None:
        """(state before, changed, the job holding its unique key) or None
        for an unknown id."""
        rows = self._run("retry_job", {"id": job_id})
        return tuple(rows[0]) if rows else None

    def retry_failed_of_kind(self, kind: str) -> list[int]:
        return [row[0] for row in self._run("retry_failed_of_kind", {"kind": kind})]

    def prune_finished(self, older_than_seconds: float, limit: int = 1000) -> int:
        """Delete one batch of finished rows; returns how many went."""
        return self._count("prune_finished", {"older_than_seconds": older_than_seconds,
                                              "limit": limit})

    def queue_status(self) -> dict[str, Any]:
        return {
            "counts": self._run("status_counts"),
            "oldest_due_seconds": self._run("status_oldest_due")[0][0],
            "running": self._run("status_running"),
            "expired_leases": self._run("status_expired_leases")[0][0],
            "paused": self._run("paused_queues"),
            "limits": self._run("status_limits"),
            "schedules": self.schedules(),
            "now": self.database_now(),
        }

    # -- schema ----------------------------------------------------------------

    def migrate(self) -> list[Migration]:
        """Apply the migrations not applied yet, each in its own transaction."""
        applied_now = []
        self._run("lock_migrations")
        try:
            self._run("create_migrations_table")
            done = {row[0] for row in self._run("applied_migrations")}
            for migration in load_migrations():
                if migration.version in done:
                    continue
                self.conn.autocommit = False
                try:
                    # One transaction: committed whole, or rolled back whole.
                    with self.conn, self.conn.cursor() as cur:
                        cur.execute(migration.sql)
                        cur.execute(QUERIES["record_migration"],
                                    {"version": migration.version, "name": migration.name})
                finally:
                    self.conn.autocommit = True
                applied_now.append(migration)
        finally:
            if self.connected:
                self._run("unlock_migrations")
        return applied_now

    def schema_version(self) -> int:
        """The newest migration applied; 0 on a database never migrated."""
        try:
            return self._run("schema_version")[0][0]
        except psycopg2.errors.UndefinedTable:
            return 0

    def schema_is_current(self) -> bool:
        return self.schema_version() >= load_migrations()[-1].version
