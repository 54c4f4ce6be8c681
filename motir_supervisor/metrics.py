"""The fleet's Prometheus metrics, summed across the forked workers.

prometheus_client's multiprocess mode keeps each process's values in files
of one directory, and a collector adds them up at scrape time. The mode is
chosen when prometheus_client is first imported, so :func:`enable` sets the
directory and imports it; nothing here imports it before. Until then (and in
processes started without ``--metrics-port``) every ``record_*`` call does
nothing. The supervisor serves the sum from a process of its own, so the
parent never runs a server thread it could fork with.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from .outcomes import Outcome

_fleet: Any = None

#: Handler durations: 1 ms to 10 min, for jobs that range from a cache write
#: to a report.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600)
#: Waits from due to start: a few milliseconds on an idle fleet, up to an
#: hour behind a backlog.
WAIT_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


class _Fleet:
    def __init__(self) -> None:
        from prometheus_client import Counter, Histogram

        self.claimed = Counter("motir_jobs_claimed", "Jobs claimed by workers", ["queue"])
        self.finished = Counter(
            "motir_jobs_finished", "Runs that ended, by outcome: succeeded, retried,"
            " failed, cancelled, snoozed, released (given back unfinished), lost (claim taken"
            " over), timed out",
            ["kind", "outcome"])
        self.duration = Histogram("motir_job_duration_seconds", "Handler run time",
                                  ["kind"], buckets=DURATION_BUCKETS)
        self.wait = Histogram("motir_job_wait_seconds",
                              "From a job falling due to its handler's start", ["queue"],
                              buckets=WAIT_BUCKETS)
        self.released = Counter("motir_claims_released", "Claims given back by the supervisor",
                                ["reason"])
        self.restarts = Counter("motir_worker_restarts",
                                "Workers replaced (died, timeout, recycled)", ["reason"])
        self.drains = Histogram("motir_drain_duration_seconds",
                                "From the first stop signal to the supervisor's exit",
                                buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300))


_process_name = "supervisor"


def enable(directory: str) -> None:
    """Turn metrics on for this process and the workers it forks later."""
    global _fleet
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import values

    # Files are named after the worker's slot, not its pid: a replacement
    # worker goes on counting in its predecessor's file, so however many
    # workers die over a long life, the directory holds one file per slot.
    values.ValueClass = values.MultiProcessValue(process_identifier=lambda: _process_name)
    _fleet = _Fleet()


def name_this_process(name: str) -> None:
    """Which slot's files this process writes (see enable); call it after the fork."""
    global _process_name
    _process_name = name


def enabled() -> bool:
    return _fleet is not None


def record_claim(queue: str) -> None:
    if _fleet is not None:
        _fleet.claimed.labels(queue).inc()


def record_run(kind: str, outcome: Outcome, seconds: float, queue: str | None = None,
               waited: float | None = None) -> None:
    """A run that ended: its outcome and run time by kind, and, for one that
    started, its wait from due to start by queue."""
    if _fleet is not None:
        _fleet.finished.labels(kind, outcome).inc()
        _fleet.duration.labels(kind).observe(seconds)
        if queue is not None and waited is not None:
            _fleet.wait.labels(queue).observe(max(waited, 0.0))


def record_release(reason: str, count: int) -> None:
    if _fleet is not None and count:
        _fleet.released.labels(reason).inc(count)


def record_restart(reason: str) -> None:
    if _fleet is not None:
        _fleet.restarts.labels(reason).inc()


def record_drain(seconds: float) -> None:
    if _fleet is not None:
        _fleet.drains.observe(seconds)


def serve_forever(port: int, healthz: Callable[[], tuple[bool, str]]) -> None:
    """Serve on ``port`` (blocks): at ``/healthz`` the answer of ``healthz``
    (healthy, why), 200 or 503; at every other path the sum over every
    process of the fleet."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import CollectorRegistry, make_wsgi_app, multiprocess
    from prometheus_client.exposition import ThreadingWSGIServer

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    fleet = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            healthy, why = healthz()
            start_response("200 OK" if healthy else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [why.encode() + b"\n"]
        return fleet(environ, start_response)

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """A probe every few seconds is no news."""

    make_server("0.0.0.0", port, app, ThreadingWSGIServer, handler_class=Quiet).serve_forever()
