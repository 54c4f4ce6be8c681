"""Saving a handler's checkpoint (``j.checkpoint(data)``) in its job's row.

Handler threads call :meth:`Checkpoints.save`; a connection of its own
keeps the main thread's connection (and its LISTEN) out of their hands,
and its lock lets one thread at a time use it. The write is fenced on this
worker's claim: a job no longer ours saves nothing.
"""

from __future__ import annotations

import threading
from typing import Any

from .. import db
from ..config import Config


class Checkpoints:
    def __init__(self, config: Config, claimant: str, index: int):
        self.claimant = claimant
        #: Used only under _lock, by whichever handler thread saves.
        self._store = db.JobStore(
            config.database_url, application_name=f"motir-supervisor worker {index} checkpoints",
            timeout_seconds=config.renew_every)
        self._lock = threading.Lock()

    def save(self, job_id: int, data: Any) -> bool:
        """Whether the checkpoint was saved (False: the claim is not ours)."""
        with self._lock:
            try:
                return self._store.save_checkpoint(job_id, self.claimant, data)
            except db.CONNECTION_ERRORS:
                self._store.close()
                raise
