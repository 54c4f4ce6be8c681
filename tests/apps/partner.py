"""A rate-limited kind whose handler's first statement records its start in
test_executions (the database's clock, as a partner counting its calls
would see them), beside the start its claim stamped (the row's started_at).

Each worker opens its connections before its first claim (as an app opens
its pool, see docs/observability.md), so a start is recorded one round trip
after the handler begins, not a connect later."""

import os
import queue

import psycopg2

from motir_supervisor import hooks, job

#: What tests/e2e/test_rate_window.py asserts over windows of the handlers'
#: starts: N starts in any window of S seconds.
RATE = (10, 1.0)
#: One connection per slot: the tests run these workers with --concurrency 4.
CONNECTIONS = 4

_idle: "queue.SimpleQueue[psycopg2.extensions.connection]" = queue.SimpleQueue()


@hooks.on_worker_start
def connect(worker_number):
    for _ in range(CONNECTIONS):
        conn = psycopg2.connect(os.environ["DATABASE_URL"])
        conn.autocommit = True
        _idle.put(conn)


@job("partner_api", rate_limit=RATE)
def partner_api(j):
    conn = _idle.get()
    try:
        with conn.cursor() as cur:
            cur.execute("INSERT INTO test_executions (job_id, attempt, pid, checkpoint)"
                        " SELECT id, %s, %s, jsonb_build_object("
                        "   'claimed_at', extract(epoch FROM started_at))"
                        " FROM job_queue WHERE id = %s", (j.attempt, os.getpid(), j.id))
    finally:
        _idle.put(conn)
