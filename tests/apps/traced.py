"""Kinds for the tracing tests, and an OpenTelemetry SDK configured as an app
would: spans go to the SDK's in-memory exporter, and each worker writes the
spans it finished to $SPANS_FILE as it exits (one JSON line a span)."""

import os
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from motir_supervisor import PermanentFailure, hooks, job

EXPORTER = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(provider)


@hooks.on_worker_exit
def write_spans(worker_number):
    with open(os.environ["SPANS_FILE"], "a") as spans:
        for span in EXPORTER.get_finished_spans():
            spans.write(span.to_json(indent=None) + "\n")


@hooks.around_run
def inside(j):
    # The app's own hooks run inside the run's span.
    span = trace.get_current_span()
    span.set_attribute("app.saw_span", span.get_span_context().is_valid)
    yield


@job("traced")
def traced(j):
    if j.payload.get("fail"):
        raise PermanentFailure("asked to fail")


@job("traced_slow", timeout=0.3)
def traced_slow(j):
    time.sleep(3)
