"""bin/bench's io section: IO-bound throughput by job slots.

Jobs that wait 100 ms without CPU (benchmarks/waiting_app.py), sync on a
handler thread and async on the event loop, at each slot count, with the
share of the ideal, the fleet's peak memory and its database connections;
with ``--peers``, the peers on the same jobs at the same slot counts.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Sequence

from benchmarks.peers import Runtimes
from benchmarks.peers import io_configurations as peer_configurations
from benchmarks.peers import measure as measure_peer
from benchmarks.peers.timing import EMPTY_QUEUE_CHECK_SECONDS
from benchmarks.support import Bench
from benchmarks.waiting_app import WAIT_SECONDS
from testbed.polling import wait_until

WAITING_APP = "benchmarks.waiting_app"
#: An IO-bound run samples its database connections at each check for an
#: empty queue, every EMPTY_QUEUE_CHECK_SECONDS as for the peers,
#: and its memory this seldom: reading smaps of 128 processes costs CPU.
MEMORY_EVERY_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class IoRun:
    #: Jobs that may run at once, over the whole fleet.
    slots: int
    workers: int
    concurrency: int
    #: "sleep" (a handler thread) or "async_sleep" (the event loop).
    kind: str
    jobs: int
    seconds: float
    jobs_per_second: float
    #: jobs/s over the ideal, slots / WAIT_SECONDS.
    efficiency: float
    #: Peak proportional set size of the supervisor and its workers.
    peak_pss_mib: float
    pss_per_slot_mib: float
    peak_connections: int


@dataclasses.dataclass(frozen=True)
class PeerIoRun:
    peer: str
    #: How it ran, in the report's words.
    configuration: str
    version: str | None
    slots: int
    jobs: int
    seconds: float | None
    jobs_per_second: float | None
    efficiency: float | None
    #: Of its worker processes (not of the driver that times them).
    peak_pss_mib: float | None
    pss_per_slot_mib: float | None
    #: Its workers' connections: the driver's own one is not counted.
    peak_connections: int | None
    #: Why there is no figure, in one line; None when measured.
    failure: str | None = None


def tree_pss_kib(pids: Sequence[int]) -> int:
    total = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1])
                break
    return total


def io_configurations(slots: int) -> list[tuple[int, int, str]]:
    """(workers, concurrency, kind) of each run at ``slots`` job slots."""
    runs = []
    if slots % 4 == 0:
        runs += [(4, slots // 4, "sleep"), (4, slots // 4, "async_sleep")]
    if (slots, 1) not in [(w * c, c) for w, c, _ in runs]:
        runs.append((slots, 1, "sleep"))
    return runs


def measure_io_run(bench: Bench, workers: int, concurrency: int, kind: str) -> IoRun:
    jobs, slots = bench.settings.io_jobs, workers * concurrency
    bench.prepare_queue(jobs, kind=kind)
    bench.progress(f"IO-bound, {jobs} jobs of {kind} {WAIT_SECONDS:g}s,"
                   f" --workers {workers} --concurrency {concurrency}")
    own_backend = bench.sql.value("SELECT pg_backend_pid()")
    peak_pss = peak_connections = 0
    next_memory = 0.0
    with bench.start_fleet(f"io-{kind}-w{workers}-c{concurrency}", "--workers", str(workers),
                           "--concurrency", str(concurrency), app=WAITING_APP) as fleet:
        def drained() -> bool:
            nonlocal peak_pss, peak_connections, next_memory
            fleet.ensure_running()
            if time.monotonic() >= next_memory:
                next_memory = time.monotonic() + MEMORY_EVERY_SECONDS
                peak_pss = max(peak_pss, tree_pss_kib([fleet.process.pid, *fleet.worker_pids()]))
            peak_connections = max(peak_connections, bench.observer.value(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> %s",
                (bench.database, own_backend)))
            return not bench.queue_has_work()
        wait_until(drained, max(120, jobs / slots * WAIT_SECONDS * 5),
                   interval=EMPTY_QUEUE_CHECK_SECONDS, message=f"{jobs} {kind} jobs to finish")
        seconds = time.monotonic() - fleet.started_at
    bench.ensure_all_succeeded(jobs)
    rate = jobs / seconds
    return IoRun(slots=slots, workers=workers, concurrency=concurrency, kind=kind, jobs=jobs,
                 seconds=round(seconds, 3), jobs_per_second=round(rate, 1),
                 efficiency=round(rate / (slots / WAIT_SECONDS), 3),
                 peak_pss_mib=round(peak_pss / 1024, 1),
                 pss_per_slot_mib=round(peak_pss / 1024 / slots, 2),
                 peak_connections=peak_connections)


def measure_io_bound(bench: Bench) -> tuple[IoRun, ...]:
    return tuple(measure_io_run(bench, workers, concurrency, kind)
                 for slots in bench.settings.io_slots
                 for workers, concurrency, kind in io_configurations(slots))


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, children first."""
    found, pending = [], [pid]
    while pending:
        parent = pending.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        found += [int(child) for child in children]
        pending += [int(child) for child in children]
    return found


class PeerWatch:
    """What a peer driver's workers use at their peak: memory and connections.

    Called by benchmarks.peers.run_driver with the driver's pid; it looks only
    while the driver has workers, so the driver's own setup (its schema, its
    inserts) is not counted, and it leaves out the one connection the driver
    keeps to watch the queue."""

    def __init__(self, bench: Bench, database: str):
        self.bench = bench
        self.database = database
        self.peak_pss_kib = 0
        self.peak_connections = 0
        self._next_memory = 0.0

    def __call__(self, driver_pid: int) -> None:
        workers = descendants(driver_pid)
        if not workers:
            return
        if time.monotonic() >= self._next_memory:
            self._next_memory = time.monotonic() + MEMORY_EVERY_SECONDS
            self.peak_pss_kib = max(self.peak_pss_kib, tree_pss_kib(workers))
        connections = self.bench.observer.value(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (self.database,))
        self.peak_connections = max(self.peak_connections, connections - 1)


def measure_io_peers(bench: Bench) -> tuple[PeerIoRun, ...]:
    """Each peer on the IO-bound jobs at each slot count, in its own database."""
    runtimes, runs = Runtimes(), []
    jobs = bench.settings.io_jobs
    for slots in bench.settings.io_slots:
        for number, config in enumerate(peer_configurations(slots), start=1):
            database = f"io{slots}_{number}_{config.peer.replace('-', '_')}"
            bench.progress(f"IO-bound, peer {config.peer}, {jobs} jobs of"
                           f" {WAIT_SECONDS:g}s, {config.configuration}")
            url = bench.pg.create_database(database)
            watch = PeerWatch(bench, database)
            try:
                run = measure_peer(config, runtimes, url, jobs, bench.logs / f"{database}.log",
                                   wait_ms=WAIT_SECONDS * 1000, sample=watch)
            finally:
                bench.pg.drop_database(database)
            if run.failure:
                bench.progress(f"peer {config.peer} failed: {run.failure}")
            rate = run.jobs_per_second
            pss = watch.peak_pss_kib / 1024 if rate else None
            runs.append(PeerIoRun(
                peer=run.peer, configuration=run.configuration, version=run.version,
                slots=slots, jobs=jobs, seconds=run.seconds, jobs_per_second=rate,
                efficiency=round(rate / (slots / WAIT_SECONDS), 3) if rate else None,
                peak_pss_mib=round(pss, 1) if pss is not None else None,
                pss_per_slot_mib=round(pss / slots, 2) if pss is not None else None,
                peak_connections=watch.peak_connections if rate else None,
                failure=run.failure))
    return tuple(runs)


def format_io(runs: Sequence[IoRun], peers: Sequence[PeerIoRun] = ()) -> list[str]:
    if not runs and not peers:
        return []
    jobs = (runs or peers)[0].jobs
    rows: list[tuple[int, str, IoRun | PeerIoRun]] = []
    for run in runs:
        handler = "async def" if run.kind == "async_sleep" else "def"
        rows.append((run.slots, f"--workers {run.workers} --concurrency {run.concurrency},"
                                f" {handler}", run))
    for peer in peers:
        name = f"{peer.peer} {peer.version or ''}".strip() + f", {peer.configuration}"
        rows.append((peer.slots, name, peer))
    width = max(40, *(len(name) for _, name, _ in rows))
    lines = [f"IO-bound: {jobs:,} jobs each waiting {WAIT_SECONDS:g} s without CPU,"
             " from the runner's start to an empty queue; ideal = slots / "
             f"{WAIT_SECONDS:g} s",
             f"  {'slots':>5} {'run':<{width}} {'jobs/s':>7} {'of ideal':>9} {'PSS MiB':>8}"
             f" {'MiB/slot':>9} {'DB conns':>9}"]
    # Sorted by slots, ours first at each (a stable sort keeps that order).
    for slots, name, run in sorted(rows, key=lambda row: row[0]):
        if run.jobs_per_second is None:
            lines.append(f"  {slots:>5} {name:<{width}} failed: {run.failure}")
            continue
        lines.append(f"  {slots:>5} {name:<{width}} {run.jobs_per_second:>7,.0f}"
                     f" {run.efficiency:>9.0%} {run.peak_pss_mib:>8.1f}"
                     f" {run.pss_per_slot_mib:>9.2f} {run.peak_connections:>9}")
    if peers:
        lines.append("  (a peer's memory and connections are its workers', without the"
                     " driver that times them)")
    return lines
