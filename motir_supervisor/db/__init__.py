"""The database layer: every statement the supervisor, its workers, the
command line and the dashboard run goes through here.

- :mod:`.store` — :class:`JobStore`, the verbs of the workers and the
  supervisor (claims, outcomes, leases) over a connection of their own.
- :mod:`.operations` — :class:`Operations`, the queue's other verbs
  (operators', enqueueing, schedules, limits, migrations), which JobStore
  has too and the dashboard's actions use.
- :mod:`.session` — :class:`Session`, one connection opened again after a
  loss, running the named statements as their blocks declare.
- :mod:`.rows` — the typed rows the statements return, read by column name.
- :mod:`.enqueueing` — the insert every producer of this package shares,
  on a connection of the caller's.
- :mod:`.drivers` — running the enqueue's statements on whichever driver
  made that connection: psycopg2, psycopg 3, SQLAlchemy, sync or async.
- :mod:`.workflows` — a workflow's steps, and a batch opened and sealed,
  on a connection of the caller's, through the same drivers.
- :mod:`.jobs` — the jobs the Python API reads, and its cancel and retry,
  on a connection of the caller's.
- :mod:`.transactions` — the job's success written in its handler's own
  transaction, on that transaction's connection.
- :mod:`.statements` — the named SQL of ``sql/queries.sql`` and
  ``sql/dashboard.sql``, what each block declares, their prepared forms.
- :mod:`.migrations` — the schema's migrations, applying them, and what a
  database has applied and has pending.
- :mod:`.limits` — a kind's fleet-wide limits, and writing a registry's
  limits to the table every claim reads.
- :mod:`.kinds` — a kind's policy (attempts, retry delays, queue,
  priority), and writing a registry's policies to the table the insert
  trigger reads.
- :mod:`.connections` — opening a connection, and naming a database URL
  without its password.

Nothing outside this package holds SQL text, and nothing in it forks,
handles a signal or runs handler code.
"""

from .connections import connect, describe_dsn, one_line, scrub
from .drivers import AsyncConnection, Connection
from .enqueueing import (NewJob, UNIQUE_KEY_TRIES, encode_payload, enqueue_jobs,
                         enqueue_jobs_async)
from .kinds import KindPolicy
from .limits import Limits
from .migrations import (Applied, Migration, load_migrations, pending_migrations,
                         pending_sql)
from .operations import PRUNED_TOGETHER, Operations
from .rows import (BatchRecord, CancelResult, ClaimedJob, Lease, Outcome, ParentRecord, Result,
                   RetryResult, Rows, ScheduleSeen, Settled, StateOfJob, generations_of)
from .session import Session
from .statements import DECLARED, PREPARED, QUERIES, Declared, prepared_form, text_of
from .store import ANY_QUEUE, CONNECTION_ERRORS, STATES, WAKEUP_CHANNEL, JobStore
from .transactions import record_success_in_transaction, reset_session

__all__ = [
    "ANY_QUEUE", "AsyncConnection", "BatchRecord", "CONNECTION_ERRORS", "CancelResult",
    "ClaimedJob", "Connection", "DECLARED", "Declared", "JobStore", "KindPolicy", "Lease",
    "Limits", "Migration", "NewJob", "Operations", "Outcome", "PREPARED", "PRUNED_TOGETHER",
    "ParentRecord", "QUERIES", "Result", "RetryResult", "Rows", "STATES", "ScheduleSeen",
    "Session", "Settled", "StateOfJob", "UNIQUE_KEY_TRIES",
    "WAKEUP_CHANNEL", "connect", "describe_dsn", "encode_payload", "enqueue_jobs",
    "enqueue_jobs_async", "generations_of", "load_migrations", "one_line", "prepared_form",
    "record_success_in_transaction", "reset_session", "scrub", "text_of",
    # What a database has applied and has pending (migrate --status, --sql).
    "Applied", "pending_migrations", "pending_sql",
]
