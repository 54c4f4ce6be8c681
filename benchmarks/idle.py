"""bin/bench's idle section: CPU and database statements of a fleet with
nothing to do, from a few seconds after its start and after a burst."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Sequence

from benchmarks.support import (DATABASE, FLEET_WORKERS, Bench, BenchError, Fleet, Settings,
                                progress)


@dataclasses.dataclass(frozen=True)
class IdleCost:
    workers: int
    #: "start" or "burst": what the window follows, by idle_settle_seconds.
    after: str
    seconds: float
    #: CPU of the supervisor and its workers, in % of one core.
    cpu_percent_of_core: float
    #: One clock tick over the window: /proc counts CPU in ticks, so less
    #: than this reads as 0.
    cpu_resolution_percent: float
    #: Statements the fleet ran per second, by pg_stat_statements: every
    #: statement of the supervisor runs in a transaction of its own
    #: (autocommit), so this is its transactions per second too.
    db_statements_per_second: float


def count_statements(bench: Bench) -> int:
    """Statements run so far in the benchmark's database, counted as each
    ends (pg_stat_database would do for transactions, but an idle backend
    publishes its counters up to 10 s late: a window of 10 s misses or
    gains whole bursts)."""
    return bench.observer.value(
        "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s)", (DATABASE,))


def measure_idle_cost(bench: Bench) -> tuple[IdleCost, ...]:
    bench.prepare_queue(0)
    with bench.start_fleet("idle", "--workers", str(FLEET_WORKERS)) as fleet:
        bench.wait_for_idle_workers(fleet, FLEET_WORKERS)
        after_start = measure_idle_window(bench, fleet, "start")
        burst = bench.settings.idle_burst_jobs
        before_burst = count_statements(bench)
        bench.sql.rows("INSERT INTO job_queue (kind) SELECT 'noop' FROM generate_series(1, %s)",
                       (burst,))
        bench.wait_for_empty_queue(fleet, burst)
        if count_statements(bench) == before_burst:
            # The idle figures would read 0 whatever the fleet did.
            raise BenchError("pg_stat_statements counted none of the burst's statements")
        return after_start, measure_idle_window(bench, fleet, "burst")


def measure_idle_window(bench: Bench, fleet: Fleet, after: str) -> IdleCost:
    settle, window = bench.settings.idle_settle_seconds, bench.settings.idle_seconds
    progress(f"idle fleet of {FLEET_WORKERS}, {window:g} s from {settle:g} s after its {after}")
    time.sleep(settle)  # deliberate: see Settings.idle_settle_seconds
    ticks_before, statements_before = fleet.cpu_ticks(), count_statements(bench)
    started = time.monotonic()
    time.sleep(window)  # deliberate: the idle window itself
    statements_after, ticks_after = count_statements(bench), fleet.cpu_ticks()
    elapsed = time.monotonic() - started
    fleet.ensure_running()
    # The observer's own reads go to another database: they are not counted.
    used = sum(ticks_after[pid] - ticks_before[pid] for pid in ticks_before
               if pid in ticks_after)
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    return IdleCost(
        workers=FLEET_WORKERS, after=after, seconds=round(elapsed, 2),
        cpu_percent_of_core=round(100 * used / ticks_per_second / elapsed, 2),
        cpu_resolution_percent=round(100 / ticks_per_second / elapsed, 2),
        db_statements_per_second=round(
            (statements_after - statements_before) / elapsed, 2))


def format_idle(runs: Sequence[IdleCost], settings: Settings) -> list[str]:
    lines = [f"idle fleet: --workers {FLEET_WORKERS}, default settings,"
             f" from {settings.idle_settle_seconds:g} s after its start and after a burst"
             f" of {settings.idle_burst_jobs:,} jobs"]
    for idle in runs:
        lines.append(
            f"  after its {idle.after:<5} {idle.seconds:>5.1f} s:"
            f" CPU {idle.cpu_percent_of_core:.2f} % of one core"
            f" (resolution {idle.cpu_resolution_percent:g} %)"
            f"   database {idle.db_statements_per_second:.2f} statements/s")
    return lines
