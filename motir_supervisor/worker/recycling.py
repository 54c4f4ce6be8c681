"""When a worker makes way for a fresh one: after about N jobs, or once it
has grown past a size (``--max-jobs-per-worker``, ``--max-worker-memory``).

Handlers that leak (a cache that only grows, a library holding on to every
response, fragmentation of a long-lived heap) are the usual reason; a
fresh process gives the memory back. This module only decides: the worker
(see :meth:`.process.Worker.begin_recycling`) stops claiming, runs what it
holds and exits, and the supervisor starts its replacement. It reads no
database, forks nothing and handles no signal.
"""

from __future__ import annotations

import mmap
import random
import sys
import time
from typing import Callable

#: --max-worker-memory counts in mebibytes, as ps and top show sizes.
MB = 1024 * 1024
#: Each worker draws its job limit from N - N // 10 to N + N // 10. Workers
#: started together (a deploy starts all of them) and fed the same queue
#: would otherwise reach N within moments of each other and all restart at
#: once: the fleet's capacity dips while every replacement imports the apps
#: and connects, and the dip comes back each cycle. Drawing again for every
#: replacement spreads their restarts further apart with each generation,
#: while every worker stays within a tenth of the limit the operator set
#: (gunicorn's max_requests_jitter does the same, upwards only). Python
#: reseeds its random generator in each forked child, so siblings differ.
JITTER = 10
#: The size is read at most this often: reading it costs a system call, and
#: a leak that grows by the job needs no closer watch than that.
MEMORY_CHECK_SECONDS = 1.0


def jittered_job_limit(jobs: int, rng: random.Random | None = None) -> int:
    """This worker's own limit for ``--max-jobs-per-worker jobs`` (see JITTER)."""
    spread = jobs // JITTER
    return (rng or random).randint(max(jobs - spread, 1), jobs + spread)


def resident_bytes(statm: str = "/proc/self/statm") -> int | None:
    """This process's resident set size (RSS); None where Linux's /proc is not.

    RSS rather than PSS or USS: those need /proc/self/smaps_rollup, which
    has the kernel walk every mapping's pages (milliseconds for a large
    heap, and large ones are those we watch), while statm reads a counter.
    RSS also counts the pages still shared with the supervisor since the
    fork; those are the bare interpreter's (the apps are imported after the
    fork), a fixed share that does not grow, and what leaks is private to the
    worker, counted alike by all three. RSS is also the figure ps, top and
    the platform's metrics show, which the operator sets the limit against.
    """
    try:
        with open(statm, "rb") as f:
            return int(f.read().split()[1]) * mmap.PAGESIZE
    except (OSError, IndexError, ValueError):
        return None


class Recycling:
    """One worker's limits, and the reason to recycle once one is reached."""

    def __init__(self, max_jobs: int, max_memory_mb: int, rng: random.Random | None = None,
                 read_memory: Callable[[], int | None] = resident_bytes):
        #: Jobs this worker runs before it recycles; 0 for no limit.
        self.job_limit = jittered_job_limit(max_jobs, rng) if max_jobs else 0
        self.max_memory_mb = max_memory_mb
        self._read_memory = read_memory
        self._next_memory_check = 0.0

    @property
    def claim_budget(self) -> int:
        """How many jobs the worker may claim in its life (see producer.Producer.claims_left)."""
        return self.job_limit or sys.maxsize

    def warning_at_boot(self) -> str | None:
        """What the operator should know of the memory limit, once the apps are in."""
        if not self.max_memory_mb:
            return None
        size = self._read_memory()
        if size is None:
            return "cannot read its size here (no /proc/self/statm); --max-worker-memory is off"
        if size > self.max_memory_mb * MB:
            return (f"is {size // MB} MB once its apps are imported, past --max-worker-memory"
                    f" {self.max_memory_mb}: it will be replaced after every claim")
        return None

    def reason(self, claims_left: int, now: float | None = None) -> str | None:
        """Why to recycle now (``"after 1000 jobs"``, ``"at 612 MB"``), or None.

        ``claims_left`` is what the claim budget has left. A worker that has
        taken no job yet never recycles for its size: its replacement would
        be no smaller, and it would restart in a loop instead of running jobs.
        """
        if self.job_limit and claims_left <= 0:
            return f"after {self.job_limit} job{'s' if self.job_limit != 1 else ''}"
        if not self.max_memory_mb or claims_left >= self.claim_budget:
            return None
        now = time.monotonic() if now is None else now
        if now < self._next_memory_check:
            return None
        self._next_memory_check = now + MEMORY_CHECK_SECONDS
        size = self._read_memory()
        if size is not None and size > self.max_memory_mb * MB:
            return f"at {size // MB} MB"
        return None
