"""A soak with faults: what crashes, deploys and outages cost in repeated work.

``python -m benchmarks.soak [SECONDS]`` starts a throwaway PostgreSQL and two
supervisors (``--workers 2 --concurrency 4``, the test suite's sample app),
feeds them 5 ms jobs at a steady 300 per second, and meanwhile: SIGKILLs a
random worker every 0.7 s, restarts one supervisor with SIGTERM every 4 s
(its successor starts first, as on a rolling deploy), freezes and SIGKILLs a
whole supervisor tree at a third and at two thirds of the run (its leases
must expire), and restarts PostgreSQL twice. Then it waits for an empty
queue and reads every execution the handlers recorded:

- jobs not succeeded, rows left running, and runs of one job that overlapped;
- runs that repeated a run which had finished (its handler recorded its
  end): the bound is one per worker kill, from the microseconds
  between a handler's last statement and its return;
- every other repeat, against the bound of the jobs that can have been
  running when their process died: kills x concurrency, plus the jobs held
  by the trees lost, plus the runs a PostgreSQL restart broke (the
  handler's own connection fails, so the attempt fails and retries).

It prints one line of JSON. Not part of bin/bench: it takes a minute and a
half and measures guarantees, not speed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time

import psycopg2

from motir_supervisor import db
from testbed.pgserver import ThrowawayPostgres
from testbed.polling import wait_until
from testbed.sql import EXECUTIONS_TABLE, Sql
from testbed.supervisors import RunningSupervisor

OPTIONS = ("--workers", "2", "--concurrency", "4", "--lease-seconds", "6",
           "--retry-base-seconds", "0.2")
CONCURRENCY = 4
JOBS_PER_TICK, TICK_SECONDS = 15, 0.05
KILL_EVERY, DEPLOY_EVERY = 0.7, 4.0

REPEATS = """
SELECT count(*) FILTER (WHERE later AND finished_at IS NOT NULL),
       count(*) FILTER (WHERE later AND finished_at IS NULL),
       count(*) FILTER (WHERE overlapped)
FROM (SELECT e.finished_at,
             EXISTS (SELECT FROM test_executions l WHERE l.job_id = e.job_id
                     AND l.execution_id > e.execution_id) AS later,
             EXISTS (SELECT FROM test_executions l WHERE l.job_id = e.job_id
                     AND l.execution_id > e.execution_id AND e.finished_at IS NOT NULL
                     AND l.started_at < e.finished_at) AS overlapped
      FROM test_executions e) AS runs
"""


def held_by(sql: Sql, supervisor: RunningSupervisor) -> int:
    return sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'"
                     " AND locked_by LIKE %s", (f"%:{supervisor.pid}:%",))


def soak(seconds: float) -> dict:
    rng = random.Random(9)
    with ThrowawayPostgres() as pg:
        url = pg.create_database("soak")
        store = db.JobStore(url)
        store.migrate()
        store.close()
        sql = Sql(url)
        sql.rows(EXECUTIONS_TABLE)
        fleets = [RunningSupervisor(url, *OPTIONS) for _ in range(2)]
        counts = dict(enqueued=0, worker_kills=0, deploys=0, trees_lost=0,
                      held_by_lost_trees=0, database_restarts=0, slots_at_restarts=0)
        retired = []
        start = time.monotonic()
        next_kill, next_deploy = start + KILL_EVERY, start + DEPLOY_EVERY
        tree_losses = [start + seconds / 3, start + 2 * seconds / 3]
        restarts = [start + seconds / 4, start + 3 * seconds / 4]
        try:
            while (now := time.monotonic()) < start + seconds:
                try:
                    counts["enqueued"] += len(sql.rows(
                        "INSERT INTO job_queue (kind, payload) SELECT 'record',"
                        " '{\"sleep\": 0.005}' FROM generate_series(1, %s) RETURNING id",
                        (JOBS_PER_TICK,)))
                except psycopg2.Error:
                    sql = Sql(url) if pg_ready(url) else sql
                if now >= next_kill:
                    next_kill += KILL_EVERY
                    pids = [p for fleet in fleets for p in fleet.worker_pids()]
                    if pids:
                        os.kill(rng.choice(pids), signal.SIGKILL)
                        counts["worker_kills"] += 1
                if now >= next_deploy:
                    next_deploy += DEPLOY_EVERY
                    old = fleets.pop(0)
                    fleets.append(RunningSupervisor(url, *OPTIONS))
                    old.signal(signal.SIGTERM)
                    retired.append(old)
                    counts["deploys"] += 1
                if tree_losses and now >= tree_losses[0]:
                    tree_losses.pop(0)
                    lost = fleets.pop(0)
                    tree = [lost.pid, *lost.worker_pids()]
                    for pid in tree:
                        os.kill(pid, signal.SIGSTOP)
                    counts["held_by_lost_trees"] += held_by(sql, lost)
                    for pid in tree:
                        os.kill(pid, signal.SIGKILL)
                    fleets.append(RunningSupervisor(url, *OPTIONS))
                    counts["trees_lost"] += 1
                if restarts and now >= restarts[0]:
                    restarts.pop(0)
                    counts["slots_at_restarts"] += CONCURRENCY * sum(
                        len(fleet.worker_pids()) for fleet in fleets + retired)
                    sql.close()
                    pg.executor.stop()
                    time.sleep(0.5)  # deliberate: an outage, however short
                    pg.executor.start()
                    sql = Sql(url)
                    counts["database_restarts"] += 1
                time.sleep(TICK_SECONDS)  # deliberate: the steady inflow's pace
            wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state IN"
                                         " ('pending', 'running')") == 0, 120, interval=0.2,
                       message="an empty queue")
            drained = time.monotonic() - start - seconds
            finished_then_rerun, unfinished_then_rerun, overlapping = sql.rows(REPEATS)[0]
            states = dict(sql.rows("SELECT state, count(*) FROM job_queue GROUP BY state"))
        finally:
            for fleet in fleets + retired:
                fleet.stop()
    return dict(
        seconds=seconds, **counts, states=states, drained_after_seconds=round(drained, 1),
        overlapping_runs=overlapping, finished_then_rerun=finished_then_rerun,
        unfinished_then_rerun=unfinished_then_rerun,
        bound_finished_then_rerun=counts["worker_kills"],
        bound_unfinished_then_rerun=(counts["worker_kills"] * CONCURRENCY
                                     + counts["held_by_lost_trees"]
                                     + counts["slots_at_restarts"]))


def pg_ready(url: str) -> bool:
    try:
        psycopg2.connect(url).close()
        return True
    except psycopg2.Error:
        return False


if __name__ == "__main__":
    print(json.dumps(soak(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)))
