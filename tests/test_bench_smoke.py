"""bin/bench in its smoke form runs end to end and reports every figure, so it cannot rot.

It starts its own PostgreSQL at default durability, apart from the suite's.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent


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
    assert latency["samples"] == results["settings"]["latency_samples"]
    assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    assert results["idle"]["cpu_percent_of_core"] >= 0
    assert results["idle"]["db_transactions_per_second"] >= 0
    assert results["peers"] is None
