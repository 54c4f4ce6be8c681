"""procrastinate on bin/bench's no-op jobs: run by the peers venv's python, never imported.

``procrastinate_run.py URL --jobs N --processes P --concurrency C [--wait-ms W]``
installs procrastinate's schema in the (empty) database at URL, defers N
jobs with its bulk API (``Task.batch_defer_async``), then starts P worker
processes, each ``App.run_worker_async(concurrency=C, wait=False)`` (a worker
that stops once it has caught up with the queue). It prints one JSON line:
the seconds from starting the workers to the moment no job is waiting or
running, timed the way bin/bench times motir-supervisor (worker start up
included, the queue checked every 10 ms), and how many jobs succeeded. A job
does nothing, or with ``--wait-ms`` awaits ``asyncio.sleep`` that long: a
job that waits on a network, as bin/bench's IO-bound runs have it.

Only procrastinate's public API runs the jobs; the SQL here only observes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import procrastinate
import psycopg

from timing import time_workers

#: Deferred in slices, so no single statement carries every job.
DEFER_SLICE = 5_000

QUEUE_HAS_WORK = ("SELECT EXISTS (SELECT FROM procrastinate_jobs"
                  " WHERE status IN ('todo', 'doing'))")


def make_app(url: str, pool_size: int, wait_seconds: float = 0.0) -> procrastinate.App:
    # The pool holds a connection per sub-worker, one for LISTEN and one spare.
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(
        conninfo=url, min_size=1, max_size=pool_size))

    @app.task(name="noop")
    async def noop() -> None:
        if wait_seconds:
            await asyncio.sleep(wait_seconds)

    return app


async def prepare(url: str, jobs: int) -> None:
    app = make_app(url, pool_size=2)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        noop = app.tasks["noop"]
        for start in range(0, jobs, DEFER_SLICE):
            await noop.batch_defer_async(*({} for _ in range(min(DEFER_SLICE, jobs - start))))
    # As bin/bench prepares its own table: statistics current, a fresh checkpoint.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")


async def work(url: str, concurrency: int, wait_seconds: float) -> None:
    app = make_app(url, pool_size=concurrency + 2, wait_seconds=wait_seconds)
    async with app.open_async():
        await app.run_worker_async(concurrency=concurrency, wait=False)


def measure(url: str, jobs: int, processes: int, concurrency: int, wait_ms: float) -> dict:
    asyncio.run(prepare(url, jobs))
    command = [sys.executable, __file__, url, "--work", "--concurrency", str(concurrency),
               "--wait-ms", str(wait_ms)]
    with psycopg.connect(url, autocommit=True) as conn:
        seconds, codes = time_workers(
            command, processes, lambda: conn.execute(QUEUE_HAS_WORK).fetchone()[0])
        succeeded = conn.execute("SELECT count(*) FROM procrastinate_jobs"
                                 " WHERE status = 'succeeded'").fetchone()[0]
    return {"peer": "procrastinate", "version": procrastinate.__version__,
            "configuration": f"{processes} process(es) x concurrency {concurrency}",
            "jobs": jobs, "succeeded": succeeded, "seconds": seconds, "worker_exit_codes": codes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--wait-ms", type=float, default=0.0)
    parser.add_argument("--work", action="store_true", help="be one worker process")
    args = parser.parse_args()
    if args.work:
        asyncio.run(work(args.url, args.concurrency, args.wait_ms / 1000))
        return 0
    print(json.dumps(measure(args.url, args.jobs, args.processes, args.concurrency,
                             args.wait_ms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
