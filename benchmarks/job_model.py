"""bin/bench's job-model section: priorities and unique keys.

- No-op throughput of 20,000 jobs that use priorities (ten levels) and a
  unique key each, beside the same jobs without, run after run in turns.
- Pick-up latency of urgent jobs (priority -1) while a fleet of 4 works
  through a backlog of pending low-priority jobs (1,000,000 by default),
  beside the same fleet's latency with nothing else to do, and beside the
  machine's floor under the same load: the bare loop of benchmarks/floor.py
  on urgent jobs of a queue of its own, which the fleet does not serve,
  while the fleet works through the backlog (the two take turns). Enqueue
  to the handler's first statement, as in benchmarks/latency.py.
"""

from __future__ import annotations

import dataclasses
import statistics

from benchmarks import latency
from benchmarks.support import Bench

WORKERS = 4
ROUNDS = 2
BACKLOG_PRIORITY = 10
URGENT_PRIORITY = -1
#: The floor's urgent jobs go to a queue of their own, which the fleet
#: (started with --queue default) leaves to it.
FLOOR_QUEUE = "floor"
APPS = ("--app", "benchmarks.noop_app")


@dataclasses.dataclass(frozen=True)
class JobModelRun:
    jobs: int
    #: Each run's jobs/s, in the order run (plain and model took turns).
    plain_jobs_per_second: tuple[float, ...]
    model_jobs_per_second: tuple[float, ...]
    backlog: int
    #: Of the backlog, still pending when the last urgent job had started.
    backlog_left: int
    #: Urgent jobs behind the backlog, the same fleet idle, and the floor's
    #: loop on urgent jobs while the fleet works through the backlog.
    urgent: latency.Latency
    idle: latency.Latency
    floor: latency.Latency


def _throughput(bench: Bench, model: bool) -> float:
    jobs = bench.settings.jobs
    bench.prepare_queue(0)
    if model:
        bench.sql.rows("INSERT INTO job_queue (kind, priority, unique_key)"
                       " SELECT 'noop', g %% 10, 'key-' || g FROM generate_series(1, %s) AS g",
                       (jobs,))
    else:
        bench.sql.rows("INSERT INTO job_queue (kind) SELECT 'noop' FROM generate_series(1, %s)",
                       (jobs,))
    bench.sql.rows("VACUUM ANALYZE job_queue")
    bench.sql.rows("CHECKPOINT")
    label = "model" if model else "plain"
    with bench.start_fleet(f"job-model-{label}", "--workers", str(WORKERS)) as fleet:
        seconds = bench.wait_for_empty_queue(fleet, jobs)
    bench.ensure_all_succeeded(jobs)
    return round(jobs / seconds, 1)


def _urgent_latency(bench: Bench, backlog: int) -> tuple[list[float], list[float], int]:
    """Urgent stamp jobs while the fleet runs the backlog, and the floor's
    loop on urgent jobs of its own queue meanwhile, in turns; their
    latencies, and how much of the backlog was still pending once they had
    all started (the report shows it: with none left, the urgent jobs met an
    idle fleet)."""
    samples, interval = bench.settings.latency_samples, bench.settings.latency_interval_ms
    bench.prepare_queue(0)
    bench.sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'noop', %s"
                   " FROM generate_series(1, %s)", (BACKLOG_PRIORITY, backlog))
    bench.sql.rows("VACUUM ANALYZE job_queue")
    bench.sql.rows("CHECKPOINT")
    urgent: list[float] = []
    floor: list[float] = []
    with bench.start_fleet("job-model-backlog", "--workers", str(WORKERS), "--queue", "default",
                           *APPS, app=latency.WAITING_APP) as fleet:
        bench.wait_for_idle_workers(fleet, WORKERS)
        # Every worker's connection for the stamps opened before measuring:
        # a burst, which the busy workers share.
        burst = bench.sql.rows("INSERT INTO job_queue (kind, priority) SELECT 'stamp', %s"
                               " FROM generate_series(1, 40) RETURNING id", (URGENT_PRIORITY,))
        latency.wait_for_stamps(bench, [job_id for job_id, in burst], fleet.ensure_running)
        for share in _shares(samples):
            floor += latency.measure_floor(bench, share, interval, urgent_queue=FLOOR_QUEUE)
            fleet.ensure_running()
            enqueued = latency.insert_stamped(bench, share, interval, URGENT_PRIORITY)
            latency.wait_for_stamps(bench, list(enqueued), fleet.ensure_running)
            urgent += latency.latencies(bench, "urgent", enqueued)
        left = bench.sql.value("SELECT count(*) FROM job_queue WHERE kind = 'noop'"
                               " AND state = 'pending'")
    return urgent, floor, left


def _shares(samples: int) -> list[int]:
    """The samples in ROUNDS turns."""
    return [samples // ROUNDS + (1 if turn < samples % ROUNDS else 0) for turn in range(ROUNDS)]


def measure_job_model(bench: Bench) -> JobModelRun:
    bench.sql.rows(latency.STARTS_TABLE)
    plain, model = [], []
    for number in range(ROUNDS):
        bench.progress(f"job model, round {number + 1} of {ROUNDS}: {bench.settings.jobs}"
                       f" no-op jobs with and without priorities and unique keys,"
                       f" --workers {WORKERS}")
        plain.append(_throughput(bench, model=False))
        model.append(_throughput(bench, model=True))
    backlog = bench.settings.bloat_rows
    bench.progress(f"job model: urgent jobs behind {backlog:,} pending low-priority jobs,"
                   f" beside the floor's loop under the same load, and the same fleet idle")
    idle = latency.measure_fleet(bench, WORKERS, bench.settings.latency_samples,
                                 bench.settings.latency_interval_ms)
    urgent, floor, left = _urgent_latency(bench, backlog)
    return JobModelRun(jobs=bench.settings.jobs, plain_jobs_per_second=tuple(plain),
                       model_jobs_per_second=tuple(model), backlog=backlog, backlog_left=left,
                       urgent=latency.summarise(f"urgent, {backlog:,} behind", urgent),
                       idle=latency.summarise("idle fleet", idle),
                       floor=latency.summarise(f"floor, {backlog:,} behind", floor))


def format_job_model(run: JobModelRun) -> list[str]:
    plain = statistics.mean(run.plain_jobs_per_second)
    model = statistics.mean(run.model_jobs_per_second)

    def each(rates: tuple[float, ...]) -> str:
        return ", ".join(f"{rate:,.0f}" for rate in rates)
    lines = [f"job model: {run.jobs:,} no-op jobs, --workers {WORKERS}, {ROUNDS} runs each"
             " in turns",
             f"  plain jobs                             {plain:>10,.0f} jobs/s"
             f"  ({each(run.plain_jobs_per_second)})",
             f"  priorities 0-9 and a unique key each   {model:>10,.0f} jobs/s"
             f"  ({each(run.model_jobs_per_second)})  = {model / plain:.2f} × plain",
             f"  pick-up latency of priority {URGENT_PRIORITY} jobs, --workers {WORKERS}, while"
             f" it runs {run.backlog:,} pending priority {BACKLOG_PRIORITY} jobs"
             f" ({run.backlog_left:,} still pending after the last urgent one started):",
             f"  {'runner':<30} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7} {'max ms':>7}"]
    for measured in (run.idle, run.floor, run.urgent):
        lines.append(f"  {measured.runner:<30} {measured.p50_ms:>7.2f} {measured.p95_ms:>7.2f}"
                     f" {measured.p99_ms:>7.2f} {measured.max_ms:>7.2f}")
    lines.append(f"  urgent p50 = {run.urgent.p50_ms / run.idle.p50_ms:.2f} × idle,"
                 f" p99 = {run.urgent.p99_ms / run.idle.p99_ms:.2f} × idle;"
                 f" p50 = {run.urgent.p50_ms / run.floor.p50_ms:.2f} × the floor behind the"
                 f" backlog, p99 = {run.urgent.p99_ms / run.floor.p99_ms:.2f} × it")
    return lines
