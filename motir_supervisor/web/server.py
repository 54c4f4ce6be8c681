"""`motir-supervisor web`: the app group's HTTP face: /healthz and /metrics,
open to all, and the dashboard (:mod:`.dashboard`) at every other path when
MOTIR_WEB_PASSWORD is set.

The HTTP server and the text format are prometheus_client's; this module
routes, and turns the queue's state into gauges at scrape time. It runs no
SQL itself (it calls :mod:`db`) and forks nothing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Iterable
from wsgiref.simple_server import WSGIRequestHandler, make_server

import psycopg2
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer

from .. import db

log = logging.getLogger(__name__)


class QueueCollector:
    """Reads job_queue when Prometheus scrapes, so the figures are never stale."""

    def __init__(self, store: db.JobStore, lock: threading.Lock):
        self.store = store
        self.lock = lock

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            with self.lock:
                report = self.store.queue_status()
        except psycopg2.Error as exc:
            with self.lock:
                self.store.close()
            log.warning("metrics: database unreachable: %s", db.one_line(exc, self.store.dsn))
            up = GaugeMetricFamily("motir_queue_up", "1 when job_queue could be read")
            up.add_metric([], 0)
            yield up
            return
        up = GaugeMetricFamily("motir_queue_up", "1 when job_queue could be read")
        up.add_metric([], 1)
        yield up
        depth = GaugeMetricFamily("motir_queue_jobs", "Jobs by queue and state",
                                  labels=["queue", "state"])
        seen_queues = {queue for queue, _, _ in report["counts"]} or {"default"}
        counts = {(queue, state): n for queue, state, n in report["counts"]}
        for queue in sorted(seen_queues):
            for state in db.STATES:
                depth.add_metric([queue, state], counts.get((queue, state), 0))
        yield depth
        oldest = GaugeMetricFamily("motir_queue_oldest_due_seconds",
                                   "How long the oldest due pending job has waited")
        oldest.add_metric([], report["oldest_due_seconds"] or 0.0)
        yield oldest
        expired = GaugeMetricFamily("motir_queue_expired_leases",
                                    "Running jobs whose lease has passed")
        expired.add_metric([], report["expired_leases"])
        yield expired


def health(store: db.JobStore, lock: threading.Lock) -> tuple[bool, str]:
    try:
        with lock:
            if not store.schema_is_current():
                return False, "schema out of date: run motir-supervisor migrate"
    except psycopg2.Error as exc:
        with lock:
            store.close()
        return False, f"database unreachable: {db.one_line(exc, store.dsn)}"
    return True, "ok"


def make_app(store: db.JobStore, dashboard: Callable | None = None) -> Callable:
    lock = threading.Lock()
    registry = CollectorRegistry()
    registry.register(QueueCollector(store, lock))
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable) -> list[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/healthz":
            ok, why = health(store, lock)
            start_response("200 OK" if ok else "503 Service Unavailable",
                           [("Content-Type", "text/plain; charset=utf-8")])
            return [why.encode() + b"\n"]
        if dashboard is not None:
            return dashboard(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found: try /healthz or /metrics; the dashboard at / is off until"
                b" MOTIR_WEB_PASSWORD is set\n"]

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)


def serve(database_url: str, host: str, port: int, password: str | None = None) -> None:
    """Serve until interrupted; the dashboard only with a password."""
    store = db.JobStore(database_url, application_name="motir-supervisor web")
    dashboard = None
    if password:
        from .dashboard import create_app  # Flask is imported only for the dashboard
        dashboard = create_app(database_url, password)
    server = make_server(host, port, make_app(store, dashboard), ThreadingWSGIServer,
                         handler_class=_QuietHandler)
    log.info("web: %s/healthz and /metrics on %s:%d for %s",
             "the dashboard at / (basic auth), " if dashboard else "", host, port,
             db.describe_dsn(database_url))
    try:
        server.serve_forever()
    finally:
        server.server_close()
        store.close()
