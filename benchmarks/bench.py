"""bin/bench: how fast motir-supervisor runs jobs, next to PostgreSQL's own limit.

One run starts a throwaway PostgreSQL on this machine at default durability
(fsync and synchronous commit on, as in production), migrates a database and
measures, in this order:

- the server's limit: pgbench looping the one-row claim transaction and the
  completion update with 4 clients; every throughput is also shown as a ratio
  to it, because only ratios measured in one run on one machine compare;
- throughput: pre-inserted no-op jobs run by ``motir-supervisor run
  --workers N`` for each N, timed from the supervisor's start to an empty queue;
- the same with a large history of finished rows in the table
  (benchmarks/throughput.py);
- pick-up latency to the handler's start: jobs inserted one at a time at a
  steady rate into an idle fleet with ``--poll-seconds 30``, so only the
  wake-up can make it fast, beside a bare loop doing the least any runner
  could (the machine's floor), in the same run (benchmarks/latency.py);
- IO-bound throughput: jobs that wait 100 ms without CPU, sync and async, by
  job slots, with the fleet's memory and database connections
  (benchmarks/io_bound.py);
- idle cost: CPU and database transactions of a fleet with nothing to do,
  from 3 s after its start and from 3 s after a burst (benchmarks/idle.py);
- the job model (benchmarks/job_model.py): priorities and unique keys, and
  urgent jobs behind a deep backlog;
- flow control (benchmarks/flow.py): jobs limited per key beside the same
  jobs without, IO-bound jobs limited per key, and a rate-limited backlog;
- the dashboard (benchmarks/dashboard_pages.py): each page's time on a
  table of a million finished jobs;
- workflows (benchmarks/workflows.py): a chain of steps each waiting for
  the one before, and a fan-out then fan-in beside as many independent jobs;
- with ``--peers``, the peer job runners on the same jobs with the same
  parallelism, each in its own database of the same server (see
  benchmarks/peers: they are installed apart from the project and only called).

The supervisor is driven as an operator drives it, through its command; this
tool runs its own SQL for setting up and observing, and the package never
imports it.

This module is the harness: the command line, the order of the sections and
the report. Each section is a module of its own that takes what it shares
with the others from benchmarks/support.py; none imports this one.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

from benchmarks import (dashboard_pages, flow, idle, io_bound, job_model, latency, throughput,
                        workflows)
from benchmarks.dashboard_pages import DashboardRun
from benchmarks.flow import FlowRun
from benchmarks.idle import IdleCost
from benchmarks.io_bound import IoRun, PeerIoRun
from benchmarks.job_model import JobModelRun
from benchmarks.latency import HandlerLatency
from benchmarks.peers import PeerRun
from benchmarks.support import FLEET_WORKERS, SECTIONS, SMOKE, Bench, BenchError, Settings, progress
from benchmarks.throughput import PgbenchLoop, ThroughputRun
from benchmarks.workflows import WorkflowRun
from testbed.pgserver import ThrowawayPostgres

DEFAULT_JSON = Path(".bench/results.json")
#: Enough for --workers 128 of the IO-bound runs, each worker with its
#: connection, beside the supervisors' own.
MAX_CONNECTIONS = 400


# -- results ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Machine:
    cpus: int
    cpu_model: str
    memory_gib: float
    kernel: str
    python: str
    postgresql: str
    #: The server's durability settings, read back from it, not assumed.
    durability: str


@dataclasses.dataclass(frozen=True)
class BenchResults:
    measured_at: str
    settings: Settings
    machine: Machine
    pgbench: PgbenchLoop
    throughput: tuple[ThroughputRun, ...]
    #: None (and the other sections empty) when --only left them out.
    bloated: ThroughputRun | None
    latency: HandlerLatency | None
    io_bound: tuple[IoRun, ...]
    #: The peers on the same IO-bound jobs; empty unless run with --peers.
    io_peers: tuple[PeerIoRun, ...]
    idle: tuple[IdleCost, ...]
    #: None unless run with --peers; a failed peer has no figures and says why.
    peers: tuple[PeerRun, ...] | None
    #: The job model: priorities and unique keys, urgent jobs behind a backlog.
    job_model: JobModelRun | None = None
    flow: FlowRun | None = None
    #: The dashboard's pages on a big table.
    dashboard: DashboardRun | None = None
    #: Chains and fan-outs of jobs that wait for other jobs.
    workflows: WorkflowRun | None = None

    def as_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        measured = [run for run in data["peers"] or () if run["jobs_per_second"] is not None]
        for run in [*data["throughput"], *filter(None, [data["bloated"]]), *measured]:
            run["ratio_to_pgbench"] = round(
                run["jobs_per_second"] / self.pgbench.transactions_per_second, 3)
        return data


# -- the measurements ------------------------------------------------------------


def describe_machine(bench: Bench) -> Machine:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.MULTILINE)
    memory = re.search(r"^MemTotal:\s*(\d+) kB", Path("/proc/meminfo").read_text(),
                       re.MULTILINE)
    durability = {name: bench.sql.value(f"SHOW {name}")
                  for name in ("fsync", "synchronous_commit", "full_page_writes")}
    described = " ".join(f"{name}={value}" for name, value in durability.items())
    if set(durability.values()) != {"on"}:
        raise BenchError(f"the server does not run at default durability: {described}")
    return Machine(
        cpus=len(os.sched_getaffinity(0)),
        cpu_model=model[1].strip() if model else platform.processor() or "unknown",
        memory_gib=round(int(memory[1]) / 2**20, 1) if memory else 0.0,
        kernel=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        postgresql=bench.sql.value("SHOW server_version"),
        durability=described)


def measure_everything(bench: Bench) -> BenchResults:
    machine = describe_machine(bench)
    pgbench = throughput.measure_pgbench_loop(bench)
    only = bench.settings.only
    runs: tuple[ThroughputRun, ...] = ()
    bloated: ThroughputRun | None = None
    handler_latency: HandlerLatency | None = None
    io_runs: tuple[IoRun, ...] = ()
    io_peers: tuple[PeerIoRun, ...] = ()
    idle_cost: tuple[IdleCost, ...] = ()
    if "throughput" in only:
        runs = tuple(throughput.measure_throughput(bench, w) for w in bench.settings.workers_list)
        bloated = throughput.measure_throughput(bench, FLEET_WORKERS, bench.settings.bloat_rows)
    if "latency" in only:
        handler_latency = latency.measure_handler_latency(bench)
    if "io" in only:
        io_runs = io_bound.measure_io_bound(bench)
        if bench.settings.peers:
            io_peers = io_bound.measure_io_peers(bench)
    if "idle" in only:
        idle_cost = idle.measure_idle_cost(bench)
    model = job_model.measure_job_model(bench) if "model" in only else None
    flow_run = flow.measure_flow(bench) if "flow" in only else None
    dashboard = dashboard_pages.measure_dashboard(bench) if "dashboard" in only else None
    workflow_run = workflows.measure_workflows(bench) if "workflows" in only else None
    return BenchResults(
        measured_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        settings=bench.settings, machine=machine, pgbench=pgbench, throughput=runs,
        bloated=bloated, latency=handler_latency, io_bound=io_runs, io_peers=io_peers,
        idle=idle_cost, peers=throughput.measure_peers(bench) if "throughput" in only else None,
        job_model=model, flow=flow_run, dashboard=dashboard, workflows=workflow_run)


# -- the report -------------------------------------------------------------------


def format_report(results: BenchResults) -> str:
    m, s = results.machine, results.settings
    lines = [
        f"motir-supervisor benchmark, {results.measured_at}",
        f"machine: {m.cpus} CPUs, {m.cpu_model}, {m.memory_gib:g} GiB; {m.kernel};"
        f" Python {m.python}",
        f"server:  PostgreSQL {m.postgresql} on the same machine; {m.durability}",
        "",
        *throughput.format_throughput(s.jobs, results.pgbench, results.throughput,
                                      results.bloated, results.peers or ()),
    ]
    if results.latency:
        lines += ["", *latency.format_latency(results.latency)]
    if results.job_model:
        lines += ["", *job_model.format_job_model(results.job_model)]
    if results.flow:
        lines += ["", *flow.format_flow(results.flow)]
    if results.dashboard:
        lines += ["", *dashboard_pages.format_dashboard(results.dashboard)]
    if results.workflows:
        lines += ["", *workflows.format_workflows(results.workflows)]
    if results.io_bound or results.io_peers:
        lines += ["", *io_bound.format_io(results.io_bound, results.io_peers)]
    if results.idle:
        lines += ["", *idle.format_idle(results.idle, s)]
    if results.peers is None and not results.io_peers:
        lines += ["", "peers: not measured (run with --peers)"]
    else:
        lines += ["", "peers: each in its own database of this server, timed like the"
                      " supervisor; see benchmarks/peers/ for how each runs"]
    return "\n".join(lines)


def write_json(results: BenchResults, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results.as_json(), indent=2) + "\n")


# -- the command ------------------------------------------------------------------


def parse_workers_list(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        counts = ()
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected positive counts like 1,2,4,8, got {text!r}")
    return counts


def parse_sections(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(","))
    unknown = set(chosen) - set(SECTIONS)
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sections {sorted(unknown)};"
                                         f" choose from {','.join(SECTIONS)}")
    return chosen


def parse_arguments(argv: Sequence[str] | None) -> tuple[Settings, Path]:
    parser = argparse.ArgumentParser(prog="bin/bench", description=__doc__.split("\n\n")[0])
    defaults = Settings()
    parser.add_argument("--smoke", action="store_true",
                        help="a tiny run for CI (the options below still override it)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"where to write the figures [{DEFAULT_JSON}]")
    parser.add_argument("--jobs", type=int, help=f"jobs per throughput run [{defaults.jobs}]")
    parser.add_argument("--workers-list", type=parse_workers_list,
                        help=f"worker counts of the throughput runs"
                             f" [{','.join(map(str, defaults.workers_list))}]")
    parser.add_argument("--latency-samples", type=int,
                        help=f"jobs of the pick-up latency [{defaults.latency_samples}]")
    parser.add_argument("--latency-interval-ms", type=float,
                        help=f"ms between those jobs [{defaults.latency_interval_ms:g}]")
    parser.add_argument("--latency-rounds", type=int,
                        help=f"turns the runners of the latency take"
                             f" [{defaults.latency_rounds}]")
    parser.add_argument("--bloat-rows", type=int,
                        help=f"finished rows in the table for the history run"
                             f" [{defaults.bloat_rows}]")
    parser.add_argument("--idle-seconds", type=float,
                        help=f"seconds the idle fleet is measured [{defaults.idle_seconds:g}]")
    parser.add_argument("--idle-settle-seconds", type=float,
                        help=f"seconds the idle fleet settles first"
                             f" [{defaults.idle_settle_seconds:g}]")
    parser.add_argument("--idle-burst-jobs", type=int,
                        help=f"jobs of the burst before the second idle window"
                             f" [{defaults.idle_burst_jobs}]")
    parser.add_argument("--io-jobs", type=int,
                        help=f"jobs per IO-bound run [{defaults.io_jobs}]")
    parser.add_argument("--io-slots", type=parse_workers_list,
                        help=f"job slots of the IO-bound runs, none with 0"
                             f" [{','.join(map(str, defaults.io_slots))}]")
    parser.add_argument("--rate-windows", type=int,
                        help=f"windows of the rate-limited backlog [{defaults.rate_windows}]")
    parser.add_argument("--chain-steps", type=int,
                        help=f"steps of the workflows' chain [{defaults.chain_steps}]")
    parser.add_argument("--fan-out-children", type=int,
                        help=f"children of the workflows' fan-out [{defaults.fan_out_children}]")
    parser.add_argument("--only", type=parse_sections,
                        help=f"measure only these sections [{','.join(SECTIONS)}]")
    parser.add_argument("--run-options", type=shlex.split,
                        help="extra options of every supervisor, e.g. '--batch-size 64'")
    parser.add_argument("--peers", action="store_true", default=None,
                        help="also install (into .bench/) and measure procrastinate and"
                             " pgqueuer, and graphile-worker and pg-boss where node is on PATH")
    args = parser.parse_args(argv)
    if args.run_options is not None:
        args.run_options = tuple(args.run_options)
    chosen = {field.name: getattr(args, field.name) for field in dataclasses.fields(Settings)
              if getattr(args, field.name) is not None}
    settings = dataclasses.replace(SMOKE if args.smoke else defaults, **chosen)
    if (settings.jobs < 1 or settings.latency_samples < 1 or settings.latency_rounds < 1
            or settings.bloat_rows < 0 or settings.chain_steps < 2
            or settings.fan_out_children < 1):
        parser.error("--jobs, --latency-samples, --latency-rounds and --fan-out-children must"
                     " be positive, --chain-steps at least 2, --bloat-rows not negative")
    return settings, args.json


def main(argv: Sequence[str] | None = None) -> int:
    settings, json_path = parse_arguments(argv)
    progress("starting a throwaway PostgreSQL at default durability")
    try:
        # pytest-postgresql starts the server with -F (fsync off) whatever we
        # pass; a later -c wins, and everything else stays at its default.
        # Commit timestamps say when a job's end became visible, which is
        # where the workflows section times a release from.
        with ThrowawayPostgres(
                postgres_options=f"-c fsync=on -c max_connections={MAX_CONNECTIONS}"
                                 " -c shared_preload_libraries=pg_stat_statements"
                                 " -c track_commit_timestamp=on") as pg:
            bench = Bench(pg, settings)
            try:
                results = measure_everything(bench)
            finally:
                bench.close()
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    print(format_report(results))
    write_json(results, json_path)
    progress(f"figures written to {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
