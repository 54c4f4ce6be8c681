"""OpenTelemetry, when its packages are installed (``pip install
'motir-supervisor[otel]'``): each run a span named ``run <kind>``, in the
trace of the code that enqueued the job.

Enqueueing inside an active span stores the span's W3C trace context in the
job's ``trace_context``; a worker whose process has a tracer provider
(configured by ``opentelemetry-instrument`` before the supervisor forked, by
the app module, or here from the standard ``OTEL_*`` variables) wraps every
run in a CONSUMER span whose parent is that context. Without the packages,
or with no provider configured, nothing here costs a run anything: no hook
is registered.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any, Generator

from . import hooks
from .registry import Job

log = logging.getLogger(__name__)

#: Any of these set asks for traces even with no provider configured yet:
#: the worker configures the SDK from the environment, as
#: opentelemetry-instrument would.
ASKING_FOR_TRACES = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                     "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
#: The outcomes that put a span's status at ERROR, its exception recorded.
FAILED_OUTCOMES = frozenset({hooks.RETRIED, hooks.FAILED})
#: How long a worker that exits waits for its last spans to be exported.
FLUSH_MILLIS = 5000


def current_trace_context() -> str | None:
    """The active span's W3C trace context as JSON for ``trace_context``;
    None outside a span. A process that never imported OpenTelemetry has no
    span, and pays nothing to find so (the import alone costs milliseconds)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import propagate, trace
    if not trace.get_current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return json.dumps(carrier) if carrier else None


def install() -> bool:
    """In a worker, once its apps are imported: trace every run if a tracer
    provider is configured (or the environment asks for one). True if so."""
    asking = any(name in os.environ for name in ASKING_FOR_TRACES)
    if "opentelemetry.trace" not in sys.modules and not asking:
        return False  # nobody configured one: there is none
    try:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
    except ImportError:
        log.warning("OTEL_* variables ask for traces, but OpenTelemetry is not installed:"
                    " pip install 'motir-supervisor[otel]'")
        return False
    if not _configured(trace) and asking:
        try:
            from opentelemetry.instrumentation.auto_instrumentation import initialize
        except ImportError:
            log.warning("OTEL_* variables ask for traces, but opentelemetry-instrumentation is"
                        " not installed: pip install 'motir-supervisor[otel]'")
            return False
        initialize()
    if not _configured(trace):
        return False
    tracer = trace.get_tracer("motir_supervisor")
    #: Each run's span while it is open, and the thread it was started in.
    open_spans: dict[int, tuple[Any, int]] = {}

    def end(span: Any, ended: hooks.RunEnd) -> None:
        span.set_attribute("motir.job.outcome", ended.outcome)
        if ended.error is not None and ended.outcome in FAILED_OUTCOMES:
            span.record_exception(ended.error)
            span.set_status(Status(StatusCode.ERROR, type(ended.error).__name__))
        span.end()

    def traced(j: Job) -> Generator[None, hooks.RunEnd, None]:
        with tracer.start_as_current_span(
                f"run {j.kind}", context=_parent(propagate, j.trace_context),
                kind=SpanKind.CONSUMER,
                attributes={"motir.job.id": j.id, "motir.job.kind": j.kind,
                            "motir.job.queue": j.queue, "motir.job.attempt": j.attempt,
                            "messaging.system": "motir_supervisor",
                            "messaging.operation.type": "process",
                            "messaging.destination.name": j.queue,
                            "messaging.message.id": str(j.id)},
                record_exception=False, set_status_on_exception=False,
                end_on_exit=False) as span:
            open_spans[j.id] = (span, threading.get_ident())
            ended = yield
            if open_spans.pop(j.id, None) is not None:
                end(span, ended)

    def ended_elsewhere(j: Job, ended: hooks.RunEnd) -> None:
        """A plain handler past its timeout, whose thread may never return
        (and end its span): its end is told from another thread."""
        opened = open_spans.get(j.id)
        if opened is not None and opened[1] != threading.get_ident() \
                and open_spans.pop(j.id, None) is not None:
            end(opened[0], ended)

    def flush(worker_number: int) -> None:
        """A worker ends without atexit handlers: its spans still queued go now."""
        force_flush: Any = getattr(trace.get_tracer_provider(), "force_flush", None)
        if force_flush is not None:
            force_flush(FLUSH_MILLIS)

    # The outermost hook: the app's own hooks run inside the run's span.
    hooks.around_run(traced, first=True)
    hooks.on_run_end(ended_elsewhere)
    hooks.on_worker_exit(flush)
    return True


def _parent(propagate: Any, trace_context: Any) -> Any:
    """The context a row's trace_context names; None (a trace of its own)
    for one that is not an object of strings, as a producer may write."""
    if not isinstance(trace_context, dict):
        return None
    carrier = {key: value for key, value in trace_context.items()
               if isinstance(key, str) and isinstance(value, str)}
    try:
        return propagate.extract(carrier) if carrier else None
    except Exception:  # noqa: BLE001 - a producer's value, whatever it holds
        return None


def _configured(trace: Any) -> bool:
    provider = trace.get_tracer_provider()
    return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
