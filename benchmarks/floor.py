"""The machine's floor for pick-up latency: the least any runner could do.

``python -m benchmarks.floor URL COUNT [QUEUE]`` LISTENs on the supervisor's
channel and, on every notification, claims one row with a one-row ``SKIP
LOCKED`` update, stamps its start on a second connection exactly as the
``stamp`` handler does, and marks it done; it exits after COUNT jobs. bin/bench
runs it beside the fleets, on the same jobs and the same server, so the
fleets' latency reads as a multiple of it.

With QUEUE, it claims only that queue's jobs of a priority below 0, through
the claim's index: the floor of an urgent job while a fleet that serves
other queues works through a backlog on the same machine (see
benchmarks/job_model.py).
"""

from __future__ import annotations

import os
import select
import sys

import psycopg2

from benchmarks.waiting_app import RECORD_START, starts_connection

CLAIM_ONE = """
UPDATE job_queue SET state = 'running', locked_by = 'floor', attempts = attempts + 1,
       started_at = now(), lease_expires_at = now() + interval '30 seconds'
 WHERE id = (SELECT id FROM job_queue WHERE state = 'pending' AND run_at <= now()
              ORDER BY run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""
# The range of job_queue_claim below priority 0 (migrations/0004): an empty
# claim reads no backlog row.
CLAIM_ONE_URGENT = """
UPDATE job_queue SET state = 'running', locked_by = 'floor', attempts = attempts + 1,
       started_at = now(), lease_expires_at = now() + interval '30 seconds'
 WHERE id = (SELECT id FROM job_queue WHERE state = 'pending' AND NOT limited
                AND priority < 0 AND run_at <= now() AND queue = %(queue)s
              ORDER BY priority, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""
FINISH = ("UPDATE job_queue SET state = 'succeeded', finished_at = now(), locked_by = NULL,"
          " lease_expires_at = NULL WHERE id = %s")


def main(url: str, count: int, queue: str | None = None) -> int:
    claim = CLAIM_ONE if queue is None else CLAIM_ONE_URGENT
    listener = psycopg2.connect(url, application_name="bench floor")
    listener.autocommit = True
    starts = starts_connection(url)
    with listener.cursor() as cur:
        cur.execute("LISTEN motir_job_queue")
    print("listening", flush=True)
    done = 0
    while done < count:
        select.select([listener], [], [], 5.0)
        listener.poll()
        listener.notifies.clear()
        while True:
            with listener.cursor() as cur:
                cur.execute(claim, {"queue": queue})
                row = cur.fetchone()
            if row is None:
                break
            with starts.cursor() as cur:
                cur.execute(RECORD_START, (row[0], os.getpid()))
            with listener.cursor() as cur:
                cur.execute(FINISH, (row[0],))
            done += 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), *sys.argv[3:4]))
