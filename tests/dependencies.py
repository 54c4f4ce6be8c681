"""What the tests of jobs that wait for jobs share: rows written and read
with plain SQL, as any producer writes them."""

import psycopg2

ENDED = "state = %s, finished_at = now(), locked_by = NULL, lease_expires_at = NULL"
RETRIED = "state = 'pending', run_at = now(), attempts = 0, finished_at = NULL"


def insert(sql, kind="k", depends_on=None, **columns):
    names = ["kind", "depends_on", *columns]
    return sql.value(f"INSERT INTO job_queue ({', '.join(names)})"
                     f" VALUES ({', '.join(['%s'] * len(names))}) RETURNING id",
                     (kind, depends_on, *columns.values()))


def state(sql, job_id):
    return sql.value("SELECT state FROM job_queue WHERE id = %s", (job_id,))


def states(sql, ids):
    return [state(sql, i) for i in ids]


def end(sql, job_id, how="succeeded"):
    sql.rows(f"UPDATE job_queue SET {ENDED} WHERE id = %s", (how, job_id))


def unended(sql, job_id):
    return sql.value("SELECT unended FROM job_queue_waits WHERE job_id = %s", (job_id,))


def in_transaction(url):
    """A connection of its own and its cursor, in a transaction left open."""
    conn = psycopg2.connect(url)
    return conn, conn.cursor()
