"""The database layer: every statement the supervisor, its workers, the
command line and the dashboard run goes through here.

- :mod:`.store` — :class:`JobStore`, the verbs the processes use on
  ``job_queue`` over a connection of their own.
- :mod:`.enqueueing` — the insert every producer of this package shares,
  on a connection of the caller's.
- :mod:`.statements` — the named SQL of ``sql/queries.sql`` and
  ``sql/dashboard.sql``, their prepared forms, and the migrations.
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
from .statements import PREPARED, QUERIES, Migration, load_migrations, prepared_form
from .store import (ANY_QUEUE, CONNECTION_ERRORS, STATES, WAKEUP_CHANNEL, ClaimedJob, JobStore,
                    Outcome, generations_of)

__all__ = [
    "ANY_QUEUE", "CONNECTION_ERRORS", "ClaimedJob", "JobStore", "Limits", "Migration", "NewJob",
    "Outcome", "PREPARED", "QUERIES", "STATES", "UNIQUE_KEY_TRIES", "WAKEUP_CHANNEL", "connect",
    "describe_dsn", "encode_payload", "enqueue_jobs", "generations_of", "load_migrations",
    "one_line", "prepared_form", "scrub",
]
