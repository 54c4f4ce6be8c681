"""bin/bench in its smoke form runs end to end and reports every figure, so it cannot rot.

It starts its own PostgreSQL at default durability, apart from the suite's.
"""

import json
import subprocess
import sys

from tests.helpers import ROOT


def test_the_smoke_benchmark_reports_every_figure(tmp_path):
    results_path = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench", "--smoke", "--json", str(results_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pgbench one-row loop" in done.stdout
    results = json.loads(results_path.read_text())

    assert results["machine"]["durability"].startswith("fsync=on")
    assert results["pgbench"]["transactions_per_second"] > 0
    runs = results["throughput"]
    assert [run["workers"] for run in runs] == list(results["settings"]["workers_list"])
    for run in [*runs, results["bloated"]]:
        assert run["jobs_per_second"] > 0 and run["ratio_to_pgbench"] > 0, run
    assert results["bloated"]["finished_rows"] == results["settings"]["bloat_rows"] > 0

    latency = results["latency"]
    assert [run["runner"] for run in latency["fleets"]] == ["--workers 4", "--workers 1"]
    for run in [latency["floor"], *latency["fleets"]]:
        assert run["samples"] == results["settings"]["latency_samples"]
        assert 0 < run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"] <= run["max_ms"], run
    io_runs = results["io_bound"]
    assert {(run["workers"], run["concurrency"], run["kind"]) for run in io_runs} == {
        (4, 1, "sleep"), (4, 1, "async_sleep")}
    for run in io_runs:
        # 40 jobs of 0.1 s on 4 slots cannot take less than a second.
        assert 0 < run["efficiency"] <= 1 and run["jobs_per_second"] <= 40, run
        assert run["peak_pss_mib"] > 0 and run["peak_connections"] >= 4, run
    assert [idle["after"] for idle in results["idle"]] == ["start", "burst"]
    for idle in results["idle"]:
        assert idle["cpu_percent_of_core"] >= 0 and idle["db_statements_per_second"] >= 0
    model = results["job_model"]
    assert len(model["plain_jobs_per_second"]) == len(model["model_jobs_per_second"]) >= 1
    for run in (model["idle"], model["floor"], model["urgent"]):
        assert run["samples"] == results["settings"]["latency_samples"], run
        assert 0 < run["p50_ms"] <= run["p99_ms"] <= run["max_ms"], run
    assert "the floor behind the backlog" in done.stdout
    flow = results["flow"]
    assert len(flow["plain_jobs_per_second"]) == len(flow["keyed_jobs_per_second"]) >= 1
    assert min(flow["plain_jobs_per_second"] + flow["keyed_jobs_per_second"]) > 0
    assert 0 < flow["io_efficiency"] <= 1, flow
    # A rate-limited backlog never starts more than its allowance in a window.
    assert flow["window_starts"] and max(flow["window_starts"]) <= 1000, flow
    assert "flow control:" in done.stdout
    dashboard = results["dashboard"]
    assert dashboard["rows"] == results["settings"]["bloat_rows"]
    assert len(dashboard["pages"]) >= 10 and dashboard["first_queues_load_ms"] > 0
    for page in dashboard["pages"]:
        assert 0 < page["median_ms"] <= page["max_ms"], page
    assert "dashboard: each page" in done.stdout
    workflows = results["workflows"]
    assert workflows["chain_steps"] == results["settings"]["chain_steps"] > 1
    assert workflows["fan_out_children"] == results["settings"]["fan_out_children"] > 0
    assert (len(workflows["chain_seconds"]) == len(workflows["fan_out_seconds"])
            == len(workflows["independent_seconds"]) >= 2)
    # No step is claimed before the parent it waits for has ended.
    assert 0 < workflows["release_p50_ms"] <= workflows["hop_p50_ms"], workflows
    assert workflows["hop_p50_ms"] <= workflows["hop_p95_ms"] <= workflows["hop_max_ms"]
    assert min(workflows["fan_in_claim_ms"]) > 0 and min(workflows["fan_in_start_ms"]) > 0
    assert min(workflows["chain_seconds"]) > 0 and workflows["fan_out_ratio"] > 0
    # The parts of the fan-out's run each fall within it.
    for part in ("parent_seconds", "children_seconds"):
        assert all(0 < p < whole for p, whole in zip(workflows[part], workflows["fan_out_seconds"]))
    assert all(0 < span < whole for span, whole in zip(workflows["independent_span_seconds"],
                                                       workflows["independent_seconds"]))
    assert "workflows: each inserted by one job_queue_workflow call" in done.stdout
    assert results["peers"] is None
