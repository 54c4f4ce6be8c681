"""bin/demo: run motir-supervisor end to end on a throwaway PostgreSQL.

``bin/demo --dashboard`` then keeps the database, runs the supervisor again
and serves the dashboard on it until Ctrl-C, SIGTERM or SIGHUP (its terminal
closed): each stops the children and removes the database.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.pgserver import ThrowawayPostgres
from testbed.sql import Sql

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "motir_supervisor"]
JOBS = [("send_email", 200, '{"to": "user@example.com"}'),
        ("resize_image", 100, '{"image": "avatar.png"}'),
        ("flaky_webhook", 10, '{"url": "https://hooks.example.com"}')]


def main() -> int:
    parser = argparse.ArgumentParser(prog="bin/demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dashboard", action="store_true",
                        help="afterwards, serve the dashboard on the demo's jobs until Ctrl-C")
    parser.add_argument("--port", type=int, default=8080, help="the dashboard's port [8080]")
    args = parser.parse_args()
    stop_on_signals(signal.SIGTERM, signal.SIGHUP)
    print("starting a throwaway PostgreSQL ...", flush=True)
    with ThrowawayPostgres() as pg:
        url = pg.create_database("motir_demo")
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT),
               "MOTIR_RETRY_BASE_SECONDS": "1"}
        subprocess.run([*CLI, "migrate"], env=env, check=True)
        sql = Sql(url)
        for kind, count, payload in JOBS:
            sql.rows("INSERT INTO job_queue (kind, payload)"
                     " SELECT %s, %s FROM generate_series(1, %s)", (kind, payload, count))
        subprocess.run([*CLI, "enqueue", "broken_report", "--payload", '{"report": "q3"}',
                        "--max-attempts", "2"], env=env, check=True, stdout=subprocess.DEVNULL)
        subprocess.run([*CLI, "enqueue", "reminder", "--delay", "3"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        total = sql.value("SELECT count(*) FROM job_queue")
        print(f"enqueued {total} jobs; starting motir-supervisor --workers 4", flush=True)
        log_path = pg.base / "supervisor.log"
        with open(log_path, "w") as log:
            supervisor = subprocess.Popen(
                [*CLI, "run", "--workers", "4", "--app", "examples.demo_app"],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        started = time.monotonic()
        try:
            show_progress(sql, total)
        finally:
            supervisor.send_signal(signal.SIGTERM)
            code = supervisor.wait(60)
        took = time.monotonic() - started
        print(f"\nsupervisor stopped by SIGTERM, exit code {code}")
        summarize(sql, took)
        print(f"supervisor log (last lines of {log_path.name}):")
        for line in log_path.read_text().splitlines()[-6:]:
            print("  " + line)
        sql.close()
        if args.dashboard:
            serve_dashboard(env, args.port, log_path)
    print("throwaway PostgreSQL stopped and removed")
    return 0 if code == 0 else 1


def stop_on_signals(*signums: int) -> None:
    """Make these signals stop the demo as Ctrl-C does: raised as
    KeyboardInterrupt, they unwind through the same ``finally`` blocks, which
    stop the children and remove the throwaway PostgreSQL. Only the first
    interrupts; a repeat must not cut that cleanup short."""
    def interrupt(signum: int, frame: object) -> None:
        for other in signums:
            signal.signal(other, lambda *_: None)
        raise KeyboardInterrupt

    for signum in signums:
        signal.signal(signum, interrupt)


def serve_dashboard(env: dict[str, str], port: int, log_path: Path) -> None:
    password = secrets.token_urlsafe(12)
    env = {**env, "MOTIR_WEB_PASSWORD": password}
    with open(log_path, "a") as log:
        processes = [subprocess.Popen([*CLI, *command], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
                     for command in (["run", "--workers", "2", "--app", "examples.demo_app"],
                                     ["web", "--host", "127.0.0.1", "--port", str(port)])]
    print(f"the dashboard: http://127.0.0.1:{port}/ (any user name, password {password});"
          f" the supervisor runs again, so a retried job runs (log: {log_path})."
          " Ctrl-C to stop.", flush=True)
    try:
        while all(p.poll() is None for p in processes):
            time.sleep(0.5)
        print("demo: the supervisor or the dashboard stopped; see", log_path, file=sys.stderr)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            process.wait(60)


def show_progress(sql: Sql, total: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        counts = dict(sql.rows("SELECT state, count(*) FROM job_queue GROUP BY state"))
        line = "  ".join(f"{state} {counts.get(state, 0):>4}"
                         for state in ("pending", "running", "succeeded", "failed"))
        print(f"\r{line}", end="", flush=True)
        if counts.get("succeeded", 0) + counts.get("failed", 0) == total:
            return
        time.sleep(0.2)
    raise SystemExit("\ndemo: jobs did not finish within 120 s")


def summarize(sql: Sql, took: float) -> None:
    print(f"all jobs finished in {took:.1f}s\n")
    print(f"  {'kind':<15} {'state':<10} {'jobs':>5} {'attempts':>9}")
    for kind, state, jobs, attempts in sql.rows(
            "SELECT kind, state, count(*), sum(attempts) FROM job_queue"
            " GROUP BY kind, state ORDER BY kind, state"):
        print(f"  {kind:<15} {state:<10} {jobs:>5} {attempts:>9}")
    error = sql.value("SELECT split_part(last_error, E'\\n', 1) FROM job_queue"
                      " WHERE state = 'failed' LIMIT 1")
    print(f"\n  the failing job's last_error: {error}")
    late = sql.value("SELECT extract(epoch FROM started_at - run_at) FROM job_queue"
                     " WHERE kind = 'reminder'")
    print(f"  the delayed job started {late * 1000:.0f} ms after its run_at")
    running = sql.value("SELECT count(*) FROM job_queue WHERE state = 'running'")
    print(f"  rows left running after shutdown: {running}\n")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        # Stopped before the dashboard: the with blocks have cleaned up already.
        print("\ndemo: interrupted; throwaway PostgreSQL stopped and removed", file=sys.stderr)
        sys.exit(130)
