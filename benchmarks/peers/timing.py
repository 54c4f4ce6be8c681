"""The timing both Python peer drivers share, so the two are timed alike.

Imported by the driver scripts beside it (run by the peers venv's python);
bin/bench times motir-supervisor the same way: from starting the worker
processes to the first check that finds the queue empty, checked every 10 ms.
"""

from __future__ import annotations

import subprocess
import time
from typing import Callable, Sequence

#: How often every timed run, motir-supervisor's and the peers', checks for
#: an empty queue (bin/bench imports it; timing.mjs has the same). A run
#: ends up to one interval after its last job, for every runner alike: a
#: coarse interval is a large share of a short no-op run and draws the
#: ratios between runners toward 1, while a check costs the server little.
EMPTY_QUEUE_CHECK_SECONDS = 0.01
#: The drivers' workers exit by themselves once the queue is empty.
WORKER_EXIT_TIMEOUT_SECONDS = 60


def time_workers(command: Sequence[str], processes: int,
                 queue_has_work: Callable[[], bool]) -> tuple[float, list[int]]:
    """Start ``processes`` copies of ``command``; (seconds to an empty queue, exit codes)."""
    started = time.monotonic()
    workers = [subprocess.Popen(command) for _ in range(processes)]
    while queue_has_work():
        if all(worker.poll() is not None for worker in workers):
            break
        time.sleep(EMPTY_QUEUE_CHECK_SECONDS)
    seconds = time.monotonic() - started
    return seconds, [worker.wait(WORKER_EXIT_TIMEOUT_SECONDS) for worker in workers]
