"""The worker group's health, as a platform's probe asks for it: ``GET
/healthz`` on ``--metrics-port`` (Fly's ``[checks]``, a Kubernetes
liveness probe) answers 200 while the supervisor's loop runs, at least one
worker is alive and the database answers, else 503 with the reason.

The supervisor's loop writes its beat and its count of live workers to a
page of shared memory (:class:`FleetHealth`); the metrics process, which
serves the probe, reads them and asks the database at each probe
(:func:`check`) on a connection of its own, closed again at once. Nothing
here forks, handles a signal or holds SQL text.
"""

from __future__ import annotations

import mmap
import struct
import time

import psycopg2

from .. import db

#: The supervisor's loop runs at least once a second (arbiter.MAX_TICK_SECONDS);
#: a loop silent this long is stuck, whatever its workers do.
STALE_SECONDS = 10.0
#: How long a probe waits for the database: under the 5 s that fly.toml's
#: check waits for the answer, so that a hung database reads as one.
DATABASE_SECONDS = 3.0


class FleetHealth:
    """Written by the supervisor's loop only (:meth:`report`), read by the
    metrics process it forks (:meth:`read`). A read that falls between the
    two fields of a write mixes two reports a second apart: harmless."""

    _LAYOUT = struct.Struct("dq")  # the loop's last beat (time.monotonic), live workers

    def __init__(self) -> None:
        # Anonymous and shared: the metrics process, forked later, sees every write.
        self._page = mmap.mmap(-1, self._LAYOUT.size)
        self.report(0)

    def report(self, live_workers: int) -> None:
        self._LAYOUT.pack_into(self._page, 0, time.monotonic(), live_workers)

    def read(self) -> tuple[float, int]:
        """(seconds since the loop's last report, live workers it counted)."""
        beat, live = self._LAYOUT.unpack_from(self._page, 0)
        return time.monotonic() - beat, live


def check(health: FleetHealth, database_url: str) -> tuple[bool, str]:
    """Whether the worker group is healthy, and why (the probe's answer)."""
    silent, live = health.read()
    if silent > STALE_SECONDS:
        return False, f"supervisor loop silent for {silent:.0f}s"
    if live == 0:
        return False, "no live workers"
    store = db.JobStore(database_url, application_name="motir-supervisor health",
                        timeout_seconds=DATABASE_SECONDS, prepare=False)
    try:
        store.schema_version()
    except psycopg2.Error as exc:
        return False, f"database unreachable: {db.one_line(exc, database_url)}"
    finally:
        store.close()
    return True, f"ok: {live} worker{'' if live == 1 else 's'} alive"
