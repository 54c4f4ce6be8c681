"""The fleet's ``--metrics-port``: a process of the supervisor's own that
serves the sum of every worker's metrics (see :mod:`..metrics`) and the
worker group's ``/healthz`` (see :mod:`.health`), started again when it
dies. A process, not a thread, so that the supervisor never forks a worker
while a server thread runs."""

from __future__ import annotations

import logging
import signal
import time
from typing import Callable

import setproctitle

from .. import metrics
from ..ipc.lifecycle import HANDLED_SIGNALS, set_parent_death_signal
from . import health
from .forking import describe_exit, send_signal

log = logging.getLogger(__name__)

#: A metrics server that died is started again after this long.
METRICS_RESTART_SECONDS = 5.0


class MetricsServer:
    """Owned by the supervisor's loop (one thread)."""

    def __init__(self, port: int | None, fork: Callable[[Callable[[], int]], int],
                 fleet_health: health.FleetHealth, database_url: str):
        self.port = port
        #: What the supervisor's loop reports, read at each probe of /healthz.
        self.fleet_health = fleet_health
        self.database_url = database_url
        #: The supervisor's fork, which closes what a child must not inherit.
        self._fork = fork
        #: Where every process writes its metrics; None until enabled.
        self.directory: str | None = None
        self.pid: int | None = None
        self._restart_at = 0.0

    def enable(self) -> None:
        """Before the first fork: the workers inherit the directory."""
        # Imported here, like everything only some fleets use: a deploy's
        # first jobs wait for every import of the supervisor's start.
        import tempfile
        self.directory = tempfile.mkdtemp(prefix="motir-metrics-")
        metrics.enable(self.directory)

    def keep_running(self) -> None:
        if self.directory is None or self.pid is not None:
            return
        if time.monotonic() < self._restart_at:
            return
        self._restart_at = time.monotonic() + METRICS_RESTART_SECONDS
        self.pid = self._fork(self._serve)
        log.info("metrics on port %d (pid %d)", self.port, self.pid)

    def exited(self, pid: int, status: int) -> bool:
        """Whether ``pid``, just reaped, was the server."""
        if pid != self.pid:
            return False
        log.warning("metrics server (pid %d) %s", pid, describe_exit(status)[1])
        self.pid = None
        return True

    def stop(self) -> None:
        if self.pid:
            send_signal(self.pid, signal.SIGTERM)
        if self.directory:
            import shutil
            shutil.rmtree(self.directory, ignore_errors=True)

    def _serve(self) -> int:
        assert self.port is not None  # enabled only with a port
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, HANDLED_SIGNALS)
        set_parent_death_signal(signal.SIGTERM)
        setproctitle.setproctitle(f"motir-supervisor: metrics on :{self.port}")
        metrics.serve_forever(
            self.port, lambda: health.check(self.fleet_health, self.database_url))
        return 0
