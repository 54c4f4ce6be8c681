"""A worker's process title: what it is doing, as ps and top show it."""

from __future__ import annotations

import threading

import setproctitle


class WorkerTitle:
    """Sets worker ``index``'s process title, skipping a title already set;
    ``prefix`` goes before whatever the worker is doing (``recycling ...``)."""

    def __init__(self, index: int):
        self.index = index
        #: Written by the main thread (a recycle), read by any.
        self.prefix = ""
        #: The title last set, written under _lock. Read without it to skip
        #: a title already set: a stale read sets a title once more, or
        #: leaves another thread's, which is as true a second later.
        self._last = ""
        self._lock = threading.Lock()

    def __call__(self, doing: str) -> None:
        doing = self.prefix + doing
        if doing != self._last:
            with self._lock:  # handler threads set it too: the last one set wins
                self._last = doing
                setproctitle.setproctitle(f"motir-supervisor: worker {self.index} {doing}")


def running_jobs(job_id: int, kind: str, count: int, short: bool) -> str:
    """What a worker running ``count`` jobs, job ``job_id`` of ``kind`` the
    latest, is doing. Runs too ``short`` to name one by one share one
    title: a title per run would cost more than the run."""
    if short:
        return "running short jobs"
    if count <= 1:
        return f"running job {job_id} {kind}"
    return f"running {count} jobs"
