"""pgqueuer on bin/bench's no-op jobs: run by the peers venv's python, never imported.

``pgqueuer_run.py URL --jobs N --processes P --batch-size B [--max-concurrent-tasks M]
[--wait-ms W]`` installs pgqueuer's schema in the (empty) database at URL with
the autovacuum settings its performance guide recommends, enqueues N jobs
with its bulk API (``Queries.enqueue`` with lists), then starts P worker
processes, each a ``PgQueuer`` over one asyncpg connection (the driver and
the single connection its guide recommends for a worker) running
``run(batch_size=B, max_concurrent_tasks=M, mode=drain)``, which exits once
the queue is empty. It prints one JSON line: the seconds from starting the
workers to an empty queue, timed the way bin/bench times motir-supervisor
(worker start up included, the queue checked every 10 ms), and how many
jobs were logged successful. A job does nothing, or with ``--wait-ms`` awaits
``asyncio.sleep`` that long (bin/bench's IO-bound runs).

Only pgqueuer's public API runs the jobs; the SQL here only observes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import asyncpg
import pgqueuer
from pgqueuer import PgQueuer, Queries
from pgqueuer.db import AsyncpgDriver
from pgqueuer.types import QueueExecutionMode
from timing import time_workers

#: Enqueued in slices, so no single statement carries every job.
ENQUEUE_SLICE = 5_000

# A finished job leaves the queue table (its record moves to pgqueuer_log),
# so an empty table means every job ran and its completion was written.
QUEUE_HAS_WORK = "SELECT EXISTS (SELECT FROM pgqueuer)"
SUCCESSFUL = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"


async def prepare(url: str, jobs: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(conn))
        await queries.install()
        await queries.optimize_autovacuum()
        for start in range(0, jobs, ENQUEUE_SLICE):
            size = min(ENQUEUE_SLICE, jobs - start)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        # As bin/bench prepares its own table: statistics current, a fresh checkpoint.
        await conn.execute("VACUUM ANALYZE")
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def work(url: str, batch_size: int, max_concurrent_tasks: int | None,
               wait_seconds: float) -> None:
    conn = await asyncpg.connect(url)
    try:
        pgq = PgQueuer.from_asyncpg_connection(conn)

        @pgq.entrypoint("noop")
        async def noop(job: pgqueuer.Job) -> None:
            if wait_seconds:
                await asyncio.sleep(wait_seconds)

        await pgq.run(batch_size=batch_size, max_concurrent_tasks=max_concurrent_tasks,
                      mode=QueueExecutionMode.drain)
    finally:
        await conn.close()


class QueueWatcher:
    """One connection kept open for the checks, as bin/bench keeps one."""

    def __init__(self, url: str):
        self.loop = asyncio.new_event_loop()
        self.conn = self.loop.run_until_complete(asyncpg.connect(url))

    def has_work(self) -> bool:
        return self.loop.run_until_complete(self.conn.fetchval(QUEUE_HAS_WORK))

    def successful(self) -> int:
        return self.loop.run_until_complete(self.conn.fetchval(SUCCESSFUL))

    def close(self) -> None:
        self.loop.run_until_complete(self.conn.close())
        self.loop.close()


def measure(url: str, jobs: int, processes: int, batch_size: int,
            max_concurrent_tasks: int | None, wait_ms: float) -> dict:
    asyncio.run(prepare(url, jobs))
    command = [sys.executable, __file__, url, "--work", "--batch-size", str(batch_size),
               "--wait-ms", str(wait_ms)]
    if max_concurrent_tasks:
        command += ["--max-concurrent-tasks", str(max_concurrent_tasks)]
    watcher = QueueWatcher(url)
    try:
        seconds, codes = time_workers(command, processes, watcher.has_work)
        succeeded = watcher.successful()
    finally:
        watcher.close()
    limit = f", at most {max_concurrent_tasks} at once" if max_concurrent_tasks else ""
    return {"peer": "pgqueuer", "version": pgqueuer.__version__,
            "configuration": f"{processes} process(es) x batch {batch_size}{limit}",
            "jobs": jobs, "succeeded": succeeded, "seconds": seconds, "worker_exit_codes": codes}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=10)
    parser.add_argument("--max-concurrent-tasks", type=int)
    parser.add_argument("--wait-ms", type=float, default=0.0)
    parser.add_argument("--work", action="store_true", help="be one worker process")
    args = parser.parse_args()
    if args.work:
        asyncio.run(work(args.url, args.batch_size, args.max_concurrent_tasks,
                         args.wait_ms / 1000))
        return 0
    print(json.dumps(measure(args.url, args.jobs, args.processes, args.batch_size,
                             args.max_concurrent_tasks, args.wait_ms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
