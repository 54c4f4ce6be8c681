"""bin/bench's throughput section, beside the server's own limit.

- The server's limit: pgbench looping the one-row claim transaction and the
  completion update with 4 clients; every throughput is also shown as a
  ratio to it, because only ratios measured in one run on one machine
  compare. The harness always measures it.
- Pre-inserted no-op jobs run by ``motir-supervisor run --workers N`` for
  each N, timed from the supervisor's start to an empty queue; then the same
  with a large history of finished rows in the table.
- With ``--peers``, the peer job runners on the same jobs with the same
  parallelism, each in its own database of the same server (see
  benchmarks/peers: they are installed apart from the project and only called).
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Sequence

from benchmarks.peers import PeerRun, Runtimes, configurations
from benchmarks.peers import measure as measure_peer
from benchmarks.support import DATABASE, FLEET_WORKERS, Bench, BenchError, progress
from testbed.pgserver import find_pg_ctl

PGBENCH_CLIENTS = 4

# One job per iteration, the way a worker that claims and completes one row
# per round trip runs it: the claim is a transaction of its own (a handler
# would run after it commits), the fenced completion is another. pgbench
# counts one script run as one transaction, so its rate is jobs per second.
PGBENCH_ONE_ROW_LOOP = r"""
BEGIN;
SELECT id FROM job_queue
 WHERE state = 'pending' AND run_at <= now()
 ORDER BY run_at, id
 LIMIT 1
 FOR UPDATE SKIP LOCKED \gset
UPDATE job_queue
   SET state = 'running', locked_by = 'pgbench',
       lease_expires_at = now() + interval '30 seconds',
       attempts = attempts + 1, started_at = now()
 WHERE id = :id;
COMMIT;
UPDATE job_queue
   SET state = 'succeeded', finished_at = now(), locked_by = NULL, lease_expires_at = NULL
 WHERE id = :id AND locked_by = 'pgbench' AND state = 'running';
"""


@dataclasses.dataclass(frozen=True)
class PgbenchLoop:
    clients: int
    transactions: int
    seconds: float
    transactions_per_second: float


@dataclasses.dataclass(frozen=True)
class ThroughputRun:
    workers: int
    jobs: int
    #: Finished rows already in the table when the run started.
    finished_rows: int
    #: From starting the supervisor to a queue with nothing pending or running.
    seconds: float
    jobs_per_second: float


def measure_pgbench_loop(bench: Bench) -> PgbenchLoop:
    per_client = -(-bench.settings.jobs // PGBENCH_CLIENTS)
    transactions = per_client * PGBENCH_CLIENTS
    # A few spare rows: \gset fails on an empty result and aborts the client.
    bench.prepare_queue(transactions + PGBENCH_CLIENTS)
    progress(f"pgbench one-row loop, {PGBENCH_CLIENTS} clients, {transactions} jobs")
    script = bench.pg.base / "one_row_loop.sql"
    script.write_text(PGBENCH_ONE_ROW_LOOP)
    # Next to the real pg_ctl: the one on PATH may be a lone symlink to it.
    pgbench = Path(find_pg_ctl()).resolve().with_name("pgbench")
    # pgbench is only a client: it may run as root and connect over TCP.
    done = subprocess.run(
        [str(pgbench), "--no-vacuum", "--client", str(PGBENCH_CLIENTS),
         "--jobs", str(PGBENCH_CLIENTS), "--transactions", str(per_client),
         "--file", str(script), "--host", "127.0.0.1", "--port", str(bench.pg.port),
         "--username", "postgres", DATABASE],
        capture_output=True, text=True)
    tps = re.search(r"^tps = ([\d.]+) \(without initial connection time\)$", done.stdout,
                    re.MULTILINE)
    processed = re.search(r"^number of transactions actually processed: (\d+)/", done.stdout,
                          re.MULTILINE)
    if done.returncode != 0 or not tps or not processed or int(processed[1]) != transactions:
        raise BenchError(f"pgbench failed (exit {done.returncode}):\n"
                         f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    rate = float(tps[1])
    return PgbenchLoop(clients=PGBENCH_CLIENTS, transactions=transactions,
                       seconds=round(transactions / rate, 3),
                       transactions_per_second=round(rate, 1))


def measure_throughput(bench: Bench, workers: int, finished_rows: int = 0) -> ThroughputRun:
    jobs = bench.settings.jobs
    bench.prepare_queue(jobs, finished_rows)
    history = f", {finished_rows:,} finished rows in the table" if finished_rows else ""
    progress(f"throughput, {jobs} jobs, --workers {workers}{history}")
    label = f"throughput-w{workers}" + (f"-history{finished_rows}" if finished_rows else "")
    with bench.start_fleet(label, "--workers", str(workers)) as fleet:
        seconds = bench.wait_for_empty_queue(fleet, jobs)
    bench.ensure_all_succeeded(jobs + finished_rows)
    return ThroughputRun(workers=workers, jobs=jobs, finished_rows=finished_rows,
                         seconds=round(seconds, 3), jobs_per_second=round(jobs / seconds, 1))


def measure_peers(bench: Bench) -> tuple[PeerRun, ...] | None:
    """The peers on the throughput runs' jobs, with the fleet's parallelism.

    Each configuration gets a database of its own on this server, so it
    meets the same durability and the same machine; the driver installs
    the peer's schema, enqueues the jobs with the peer's bulk API and
    times its workers as a motir-supervisor fleet is timed. None unless
    asked for with --peers.
    """
    if not bench.settings.peers:
        return None
    runtimes, runs = Runtimes(), []
    for number, config in enumerate(configurations(FLEET_WORKERS), start=1):
        database = f"peer{number}_{config.peer.replace('-', '_')}"
        progress(f"peer {config.peer}, {bench.settings.jobs} jobs, {config.configuration}")
        url = bench.pg.create_database(database)
        try:
            run = measure_peer(config, runtimes, url, bench.settings.jobs,
                               bench.logs / f"{database}.log")
        finally:
            # Its rows would only take disk and checkpoint time from the next one.
            bench.pg.drop_database(database)
        if run.failure:
            progress(f"peer {config.peer} failed: {run.failure}")
        runs.append(run)
    return tuple(runs)


def format_throughput(jobs: int, pgbench: PgbenchLoop, runs: Sequence[ThroughputRun],
                      bloated: ThroughputRun | None, peers: Sequence[PeerRun]) -> list[str]:
    base = pgbench.transactions_per_second
    lines = [f"throughput: {jobs:,} no-op jobs per run, from the supervisor's start"
             " to an empty queue"]
    # (name, seconds, jobs/s), or (name, None, failure) for a peer that failed.
    rows: list[tuple[str, float | None, float | str]] = [
        (f"pgbench one-row loop ({pgbench.clients} clients)", pgbench.seconds, base)]
    for run in runs:
        rows.append((f"motir-supervisor --workers {run.workers}", run.seconds,
                     run.jobs_per_second))
    if bloated is not None:
        rows.append((f"--workers {bloated.workers}, {bloated.finished_rows:,} finished rows"
                     " in table", bloated.seconds, bloated.jobs_per_second))
    for peer in peers:
        name = f"{peer.peer} {peer.version or ''}".strip() + f", {peer.configuration}"
        rows.append((name, peer.seconds, peer.jobs_per_second or f"failed: {peer.failure}"))
    width = max(48, *(len(name) for name, _, _ in rows))
    lines.append(f"  {'run':<{width}} {'seconds':>8} {'jobs/s':>9} {'× pgbench':>10}")
    for name, seconds, rate in rows:
        if isinstance(rate, str):
            lines.append(f"  {name:<{width}} {rate}")
        else:
            lines.append(f"  {name:<{width}} {seconds:>8.2f} {rate:>9,.0f} {rate / base:>10.2f}")
    return lines
