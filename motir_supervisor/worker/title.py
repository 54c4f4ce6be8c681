"""A worker's process title: what it is doing, as ps and top show it."""

from __future__ import annotations

import threading

import setproctitle


class WorkerTitle:
    """Sets worker ``index``'s process title, skipping a title already set;
    ``prefix`` goes before whatever the worker is doing (``recycling ...``)."""

    def __init__(self, index: int):
        self.index = index
        self.prefix = ""
        self._last = ""
        self._lock = threading.Lock()

    def __call__(self, doing: str) -> None:
        doing = self.prefix + doing
        if doing != self._last:
            with self._lock:  # handler threads set it too: the last one set wins
                self._last = doing
                setproctitle.setproctitle(f"motir-supervisor: worker {self.index} {doing}")
