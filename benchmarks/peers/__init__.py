"""The peer job runners, installed apart from the project and run on bin/bench's jobs.

Peer code is only installed and called, never copied. The Python peers are
the ``bench`` extra of pyproject.toml, installed into ``.bench/peers-venv``
(the project's own environment keeps psycopg2 alone); the Node.js peers are
``package.json`` beside this file, installed into ``.bench/npm`` when node
and npm are on PATH. Both folders are gitignored.

Beside this module, one driver script per peer prepares its own database
with the peer's API (schema, then the jobs enqueued in bulk), starts the
workers, times them from their start to an empty queue the way bin/bench
times motir-supervisor, and prints one JSON line. This module installs the
peers, runs the drivers and turns their lines into ``PeerRun`` values; a
peer that cannot be installed or run becomes a ``PeerRun`` with a one-line
``failure`` instead of stopping the benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYPROJECT = ROOT / "pyproject.toml"
PACKAGE_JSON = HERE / "package.json"
PEERS_VENV = ROOT / ".bench" / "peers-venv"
NPM_PREFIX = ROOT / ".bench" / "npm"
#: The slowest rate a peer run may have before it counts as hung: far below
#: what any peer runs no-op jobs at.
SLOWEST_JOBS_PER_SECOND = 50
INSTALL_TIMEOUT_SECONDS = 600
#: How often run_driver lets its caller look at a running driver.
SAMPLE_EVERY_SECONDS = 0.1


class PeerFailure(RuntimeError):
    """A peer could not be installed or measured; the message is one line."""


@dataclasses.dataclass(frozen=True)
class PeerRun:
    peer: str
    #: How it ran, in the report's words: processes, concurrency, batch size.
    configuration: str
    #: The installed version, as the peer reports it; None when it failed first.
    version: str | None
    jobs: int
    #: From starting its workers to a queue with nothing waiting or running.
    seconds: float | None
    jobs_per_second: float | None
    #: Why there is no figure, in one line; None when measured.
    failure: str | None = None


@dataclasses.dataclass(frozen=True)
class PeerConfiguration:
    peer: str
    #: "python" (the peers venv) or "node" (.bench/npm).
    runtime: str
    #: The driver script beside this module.
    script: str
    options: tuple[str, ...]
    #: The configuration as the report names it before the driver says.
    configuration: str


def configurations(parallelism: int) -> tuple[PeerConfiguration, ...]:
    """Each peer with ``parallelism`` jobs at once, and in its fastest documented setup.

    procrastinate documents two ways to run jobs side by side: worker
    processes, or asynchronous sub-workers of one (``concurrency``); both
    are measured. pgqueuer runs at most ``parallelism`` jobs at once with
    the largest batch that allows (``max_concurrent_tasks`` must be at least
    twice ``batch_size``), and as its own benchmark tool runs it: one dequeue
    loop per worker, each with its default batch of 10 and no cap.
    graphile-worker runs ``concurrency`` jobs in one worker, and with its
    batched local queue (``localQueue`` and batched job completion, its
    documented high-throughput options). pg-boss runs ``parallelism`` workers
    fetching in batches, its documented way to raise throughput.
    """
    n = str(parallelism)
    half = str(max(1, parallelism // 2))
    return (
        PeerConfiguration("procrastinate", "python", "procrastinate_run.py",
                          ("--processes", "1", "--concurrency", n),
                          f"1 process x concurrency {n}"),
        PeerConfiguration("procrastinate", "python", "procrastinate_run.py",
                          ("--processes", n, "--concurrency", "1"),
                          f"{n} processes x concurrency 1"),
        PeerConfiguration("pgqueuer", "python", "pgqueuer_run.py",
                          ("--processes", "1", "--batch-size", half,
                           "--max-concurrent-tasks", n),
                          f"1 process x batch {half}, at most {n} at once"),
        PeerConfiguration("pgqueuer", "python", "pgqueuer_run.py",
                          ("--processes", n, "--batch-size", "10"),
                          f"{n} processes x batch 10"),
        PeerConfiguration("graphile-worker", "node", "graphile_worker_run.mjs",
                          ("--concurrency", n),
                          f"1 process x concurrency {n}"),
        PeerConfiguration("graphile-worker", "node", "graphile_worker_run.mjs",
                          ("--concurrency", n, "--local-queue"),
                          f"1 process x concurrency {n}, local queue"),
        PeerConfiguration("pg-boss", "node", "pg_boss_run.mjs",
                          ("--workers", n),
                          f"1 process x {n} workers, batch 100"),
    )


def io_configurations(slots: int) -> tuple[PeerConfiguration, ...]:
    """Each peer running ``slots`` waiting jobs at once, in its documented way.

    All four run the wait as a coroutine or a promise, many in one process:
    procrastinate with ``concurrency`` sub-workers, pgqueuer with
    ``max_concurrent_tasks`` (and a batch of half that, the most it allows),
    graphile-worker with ``concurrency``, pg-boss with ``localConcurrency``
    workers fetching batches of 4 whose jobs wait together (its burst
    fetching needs batches larger than 1; a worker of one job waits
    ``pollingIntervalSeconds``, 0.5 s at least, between two).
    """
    n = str(slots)
    half = str(max(1, slots // 2))
    boss_workers = str(max(1, slots // 4))
    return (
        PeerConfiguration("procrastinate", "python", "procrastinate_run.py",
                          ("--processes", "1", "--concurrency", n),
                          f"1 process x concurrency {n}"),
        PeerConfiguration("pgqueuer", "python", "pgqueuer_run.py",
                          ("--processes", "1", "--batch-size", half,
                           "--max-concurrent-tasks", n),
                          f"1 process x batch {half}, at most {n} at once"),
        PeerConfiguration("graphile-worker", "node", "graphile_worker_run.mjs",
                          ("--concurrency", n), f"1 process x concurrency {n}"),
        PeerConfiguration("pg-boss", "node", "pg_boss_run.mjs",
                          ("--workers", boss_workers, "--batch-size", "4"),
                          f"1 process x {boss_workers} workers, batch 4"),
    )


# -- installing ------------------------------------------------------------------


def one_line(text: str, limit: int = 160) -> str:
    """The last non-empty line of some output, short enough for the report."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = lines[-1] if lines else "no output"
    return line if len(line) <= limit else line[:limit - 1] + "…"


def run_installer(command: list[str], cwd: Path) -> None:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        raise PeerFailure(f"{Path(command[0]).name} did not finish within"
                          f" {INSTALL_TIMEOUT_SECONDS}s") from None
    if done.returncode != 0:
        raise PeerFailure(f"{' '.join(command[:3])} failed: {one_line(done.stderr + done.stdout)}")


def python_requirements() -> list[str]:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    return extras["bench"]


def install_python_peers() -> Path:
    """The peers venv's python, with the ``bench`` extra installed; made when missing."""
    python = PEERS_VENV / "bin" / "python"
    requirements = python_requirements()
    # Installed once per list of requirements: a second --peers run reuses it.
    stamp = PEERS_VENV / ".installed"
    if python.exists() and stamp.exists() and stamp.read_text() == "\n".join(requirements):
        return python
    if not python.exists():
        run_installer([sys.executable, "-m", "venv", str(PEERS_VENV)], ROOT)
    run_installer([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                   *requirements], ROOT)
    stamp.write_text("\n".join(requirements))
    return python


def install_node_peers() -> Path:
    """The node_modules folder of ``.bench/npm``, installed from package.json here."""
    npm = shutil.which("npm")
    if not shutil.which("node") or not npm:
        raise PeerFailure("node and npm are not both on PATH")
    NPM_PREFIX.mkdir(parents=True, exist_ok=True)
    wanted = PACKAGE_JSON.read_text()
    installed = NPM_PREFIX / "package.json"
    modules = NPM_PREFIX / "node_modules"
    if modules.exists() and installed.exists() and installed.read_text() == wanted:
        return modules
    installed.write_text(wanted)
    run_installer([npm, "install", "--no-audit", "--no-fund", "--loglevel", "error"],
                  NPM_PREFIX)
    return modules


INSTALLERS: dict[str, Callable[[], Path]] = {
    "python": install_python_peers,
    "node": install_node_peers,
}


class Runtimes:
    """Installs each runtime's peers once, on first use, and remembers a failure."""

    def __init__(self) -> None:
        self.installed: dict[str, Path | PeerFailure] = {}

    def get(self, runtime: str) -> Path:
        if runtime not in self.installed:
            try:
                self.installed[runtime] = INSTALLERS[runtime]()
            except PeerFailure as exc:
                self.installed[runtime] = exc
        found = self.installed[runtime]
        if isinstance(found, PeerFailure):
            raise found
        return found


# -- running -----------------------------------------------------------------------


def driver_command(config: PeerConfiguration, installed: Path, url: str, jobs: int) -> list[str]:
    script = str(HERE / config.script)
    if config.runtime == "python":
        return [str(installed), script, url, "--jobs", str(jobs), *config.options]
    return [shutil.which("node") or "node", script, url, "--jobs", str(jobs),
            "--node-modules", str(installed), *config.options]


def driver_environment() -> dict[str, str]:
    # Nothing of the project's environment leaks into a peer: no MOTIR_*,
    # no PYTHONPATH to this checkout, no virtual environment of ours.
    return {name: value for name, value in os.environ.items()
            if not name.startswith(("MOTIR_", "PYTHON", "VIRTUAL_ENV"))}


def run_driver(config: PeerConfiguration, installed: Path, url: str, jobs: int,
               log_path: Path, wait_ms: float = 0.0,
               sample: Callable[[int], None] | None = None) -> dict:
    """The driver's JSON line; ``sample(driver_pid)`` is called every
    SAMPLE_EVERY_SECONDS while it runs (to watch its workers)."""
    timeout = 120 + jobs / SLOWEST_JOBS_PER_SECOND + jobs * wait_ms / 1000
    command = driver_command(config, installed, url, jobs)
    if wait_ms:
        command += ["--wait-ms", f"{wait_ms:g}"]
    with open(log_path, "w") as log, tempfile.TemporaryFile("w+") as out:
        driver = subprocess.Popen(command, env=driver_environment(), cwd=ROOT, stdout=out,
                                  stderr=log, text=True)
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    driver.wait(SAMPLE_EVERY_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    if time.monotonic() > deadline:
                        raise PeerFailure(f"no result within {timeout:.0f}s") from None
                    if sample is not None:
                        sample(driver.pid)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
        out.seek(0)
        stdout = out.read()
    if driver.returncode != 0:
        raise PeerFailure(f"driver exited {driver.returncode}:"
                          f" {one_line(log_path.read_text(errors='replace'))}")
    try:
        result = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        raise PeerFailure(f"driver printed no JSON line: {one_line(stdout)}") from None
    if result["succeeded"] != jobs:
        raise PeerFailure(f"{result['succeeded']} of {jobs} jobs succeeded")
    if any(code != 0 for code in result.get("worker_exit_codes", [])):
        raise PeerFailure(f"a worker exited with {result['worker_exit_codes']}:"
                          f" {one_line(log_path.read_text(errors='replace'))}")
    return result


def measure(config: PeerConfiguration, runtimes: Runtimes, url: str, jobs: int,
            log_path: Path, wait_ms: float = 0.0,
            sample: Callable[[int], None] | None = None) -> PeerRun:
    """One peer configuration on ``jobs`` jobs in the empty database at ``url``:
    no-ops, or jobs that each wait ``wait_ms`` (see run_driver for ``sample``)."""
    try:
        result = run_driver(config, runtimes.get(config.runtime), url, jobs, log_path,
                            wait_ms, sample)
    except PeerFailure as exc:
        return PeerRun(peer=config.peer, configuration=config.configuration, version=None,
                       jobs=jobs, seconds=None, jobs_per_second=None, failure=str(exc))
    seconds = result["seconds"]
    return PeerRun(peer=config.peer, configuration=config.configuration,
                   version=result["version"], jobs=jobs, seconds=round(seconds, 3),
                   jobs_per_second=round(jobs / seconds, 1))
