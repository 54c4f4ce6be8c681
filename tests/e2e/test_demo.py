"""bin/demo --dashboard stops what it started on SIGTERM and on SIGHUP (its
terminal closed) as it does on Ctrl-C: the supervisor, the dashboard and the
throwaway PostgreSQL, whose folder it removes.

The demo runs as bin/demo execs it, without bin/setup before it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import port_for
import pytest

from tests.helpers import alive, wait_until
from tests.supervisors import title_of

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ADDRESS = re.compile(r"the dashboard: http://127\.0\.0\.1:\d+/ .*\(log: (\S+)\)")


def children_of(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_demo_dashboard_cleans_up_on_signal(signum, tmp_path):
    output = tmp_path / "demo.out"
    with open(output, "w") as out:
        # A session of its own: whatever the demo leaves running can be killed
        # by its process group below, and no signal of ours reaches it.
        demo = subprocess.Popen(
            [sys.executable, "-m", "examples.demo", "--dashboard",
             "--port", str(port_for.select_random())],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = None
    postmaster = None
    try:
        address = wait_until(lambda: ADDRESS.search(output.read_text()), timeout=90,
                             interval=0.1, message="the demo's dashboard address")
        base = Path(address.group(1)).parent
        postmaster = int((base / "data" / "postmaster.pid").read_text().split()[0])
        supervisor = wait_until(
            lambda: [pid for pid in children_of(demo.pid)
                     if title_of(pid).startswith("motir-supervisor: master")],
            timeout=10, message="the demo's supervisor")[0]
        children = children_of(demo.pid)
        assert alive(postmaster) and alive(supervisor)

        demo.send_signal(signum)
        demo.wait(30)

        log = output.read_text()
        assert not [pid for pid in children if alive(pid)], \
            f"the demo left its supervisor or dashboard running:\n{log}"
        wait_until(lambda: not alive(postmaster), timeout=10,
                   message=f"the demo's PostgreSQL (pid {postmaster}) to stop\n{log}")
        assert not base.exists(), f"the demo left {base}:\n{log}"
        assert demo.returncode == 0, log
    finally:
        clean_up(demo, postmaster, base)


def clean_up(demo: subprocess.Popen, postmaster: int | None, base: Path | None) -> None:
    """Stop whatever a failing demo left behind."""
    try:
        os.killpg(demo.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    demo.wait()
    if postmaster and alive(postmaster):
        os.kill(postmaster, signal.SIGQUIT)  # PostgreSQL's immediate shutdown
        wait_until(lambda: not alive(postmaster), timeout=10, message="PostgreSQL to stop")
    if base:
        shutil.rmtree(base, ignore_errors=True)
