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
- :mod:`.transactions` — the job's success written in its handler's own
  transaction, on that transaction's connection.
- :mod:`.statements` — the named SQL of ``sql/queries.sql`` and
  ``sql/dashboard.sql``, what each block declares, their prepared forms.
- :mod:`.migrations` — the schema's migrations, and applying them.
- :mod:`.limits` — a kind's fleet-wide limits, and writing a registry's
  limits to the table every claim reads.
- :mod:`.connections` — opening a connection, and naming a database URL
  without its password.

Nothing outside this package holds SQL text, and nothing in it forks,
handles a signal or runs handler code.
"""

from .connections import connect, describe_dsn, one_line, scrub
from .enqueueing import NewJob, UNIQUE_KEY_TRIES, encode_payload, enqueue_jobs
from .limits import Limits
from .migrations import Migration, load_migrations
from .operations import PRUNED_TOGETHER, Operations
from .rows import (Cancel, ClaimedJob, JobState, Lease, Outcome, Result, Retry, Rows,
                   ScheduleSeen, Settled, generations_of)
from .session import Session
from .statements import DECLARED, PREPARED, QUERIES, Declared, prepared_form, text_of
from .store import ANY_QUEUE, CONNECTION_ERRORS, STATES, WAKEUP_CHANNEL, JobStore
from .transactions import record_success_in_transaction, reset_session

__all__ = [
    "ANY_QUEUE", "CONNECTION_ERRORS", "Cancel", "ClaimedJob", "DECLARED", "Declared", "JobState",
    "JobStore", "Lease", "Limits", "Migration", "NewJob", "Operations", "Outcome", "PREPARED",
    "PRUNED_TOGETHER", "QUERIES", "Result", "Retry", "Rows", "STATES", "ScheduleSeen", "Session",
    "Settled", "UNIQUE_KEY_TRIES", "WAKEUP_CHANNEL", "connect", "describe_dsn", "encode_payload",
    "enqueue_jobs", "generations_of", "load_migrations", "one_line", "prepared_form",
    "record_success_in_transaction", "reset_session", "scrub", "text_of",
]
