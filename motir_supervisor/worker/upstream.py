"""What a handler reads of the jobs before its own: ``j.parents`` (the jobs
it waited for, with their outputs) and ``j.batch`` (a batch callback's
batch and its members' counts), one query each, when first asked.

Handler threads (and the event loop's) call :class:`Upstream`; a
connection of its own keeps the main thread's connection (and its LISTEN)
out of their hands, and its lock lets one caller at a time use it. It is
opened the first time a handler asks, so a worker whose handlers never ask
holds none. Nothing here writes.
"""

from __future__ import annotations

import threading
from typing import Callable, TypeVar

from .. import db
from ..jobs import BatchProgress, Parent, batch_progress_from, parents_from


T = TypeVar("T")


class Upstream:
    def __init__(self, store: db.JobStore):
        #: Used only under _lock, by whichever handler asks.
        self._store = store
        self._lock = threading.Lock()

    def parents_of(self, job_id: int) -> list[Parent]:
        with self._lock:
            return parents_from(self._read(self._store.parents_of, job_id))

    def batch_of(self, job_id: int) -> BatchProgress | None:
        with self._lock:
            return batch_progress_from(self._read(self._store.batch_of_callback, job_id))

    def _read(self, read: Callable[[int], T], job_id: int) -> T:
        try:
            return read(job_id)
        except db.CONNECTION_ERRORS:
            self._store.close()  # opened again by the next read
            raise

    def close(self) -> None:
        with self._lock:
            self._store.close()
