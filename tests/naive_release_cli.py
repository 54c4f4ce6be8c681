"""motir-supervisor with a deliberately naive release of dependents, for the
negative control of tests/e2e/test_workflow_races.py.

The database's release (the triggers that release a job's dependents in the
transaction that ends it) is disabled, and each worker releases them
itself: once a statement of its own that ends jobs has committed, it looks,
on a connection of its own, at their children, and sets pending (or
cancelled, as their policy asks) each one whose parents all look ended.
A job that no worker's statement ends (killed with its worker, taken over by
the reaper, cancelled or deleted by an operator), or a child inserted while
its parents end, is missed: the control shows that the race tests catch it.
"""

import os

import psycopg2

from motir_supervisor import cli
from motir_supervisor.db import session

#: The triggers on job_queue that release dependents as their parents end,
#: are deleted or come back (migrations/0019_workflows.sql). The one that
#: wires a row's parents as it is inserted stays: it counts them, and
#: releases a row whose parents have all ended already.
RELEASING_TRIGGERS = ("job_queue_parent_changed", "job_queue_dependent_deleted")
#: The statements by which a worker ends the jobs it ran.
ENDING = {"record_successes", "record_successes_with_output", "record_successes_handing_on",
          "record_outcomes", "release_claims_of"}

NAIVE_RELEASE = """
WITH ready AS (
    SELECT c.id,
           (SELECT min(e.parent_id)
            FROM job_queue_edges AS e LEFT JOIN job_queue AS p ON p.id = e.parent_id
            WHERE e.child_id = c.id AND coalesce(p.state, 'cancelled') IN ('failed', 'cancelled'))
           AS failed_parent
    FROM (SELECT DISTINCT child_id AS id FROM job_queue_edges
          WHERE parent_id = ANY(%(ids)s::bigint[])) AS c
    WHERE NOT EXISTS (SELECT FROM job_queue_edges AS e JOIN job_queue AS p ON p.id = e.parent_id
                      WHERE e.child_id = c.id
                        AND p.state NOT IN ('succeeded', 'failed', 'cancelled'))
), decided AS (
    SELECT j.id, r.failed_parent IS NOT NULL AND j.on_parent_failure = 'cancel' AS cancel,
           r.failed_parent
    FROM ready AS r JOIN job_queue AS j ON j.id = r.id
), released AS (
    UPDATE job_queue AS j
    SET state = CASE WHEN d.cancel THEN 'cancelled' ELSE 'pending' END,
        finished_at = CASE WHEN d.cancel THEN now() END,
        last_error = CASE WHEN d.cancel THEN format('parent job %%s failed', d.failed_parent) END
    FROM decided AS d
    WHERE j.id = d.id AND j.state = 'waiting'
    RETURNING j.queue, j.state
)
SELECT pg_notify('motir_job_queue', queue) FROM released WHERE state = 'pending'
"""

_supervisor_pid = os.getpid()
_connection = None
_run = session.Session.run


def _release_after_commit(self, name, params=None):
    result = _run(self, name, params)
    if name in ENDING and os.getpid() != _supervisor_pid:
        ids = (params or {}).get("ids") or result.column("id")
        _naive_release(ids)
    return result


def _naive_release(ids):
    global _connection
    if _connection is None or _connection.closed:
        _connection = psycopg2.connect(os.environ["DATABASE_URL"])
        _connection.autocommit = True
    with _connection.cursor() as cur:
        cur.execute(NAIVE_RELEASE, {"ids": list(ids)})


def disable_the_database_s_release():
    with psycopg2.connect(os.environ["DATABASE_URL"]) as conn, conn.cursor() as cur:
        for trigger in RELEASING_TRIGGERS:
            cur.execute(f"ALTER TABLE job_queue DISABLE TRIGGER {trigger}")
    conn.close()


if __name__ == "__main__":
    disable_the_database_s_release()
    session.Session.run = _release_after_commit
    cli.main()
