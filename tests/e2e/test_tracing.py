"""OpenTelemetry across real processes: enqueue() inside a span stores its
trace context, and the forked worker's run is a CONSUMER span in that
trace; under opentelemetry-instrument, with the console exporter."""

import json
import signal
import sys
from pathlib import Path

import psycopg2
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

from motir_supervisor import enqueue
from tests.helpers import state_of, wait_until

INSTRUMENT = str(Path(sys.executable).parent / "opentelemetry-instrument")


def spans_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def producer_span():
    """A span of the producer's own, current while a test enqueues."""
    tracer = TracerProvider().get_tracer("the web app")
    with tracer.start_as_current_span("POST /invoices", kind=SpanKind.SERVER) as span:
        yield span.get_span_context()


def test_a_run_is_a_span_in_the_trace_of_the_code_that_enqueued_it(
        database_url, sql, start_supervisor, tmp_path, producer_span):
    conn = psycopg2.connect(database_url)
    with conn:
        ok = enqueue(conn, "traced", {})
        failed = enqueue(conn, "traced", {"fail": True})
    conn.close()
    trace_id = f"{producer_span.trace_id:032x}"
    parent_id = f"{producer_span.span_id:016x}"
    assert sql.value("SELECT trace_context->>'traceparent' FROM job_queue WHERE id = %s",
                     (ok,)) == f"00-{trace_id}-{parent_id}-{producer_span.trace_flags:02x}"
    # A producer in SQL sets it itself.
    from_sql = sql.value("INSERT INTO job_queue (kind, trace_context) VALUES ('traced',"
                         " '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-"
                         "b7ad6b7169203331-01\"}') RETURNING id")
    untraced = sql.value("INSERT INTO job_queue (kind) VALUES ('traced') RETURNING id")
    # What a producer may get wrong starts a trace of its own, and costs the run nothing.
    malformed = [sql.value("INSERT INTO job_queue (kind, trace_context) VALUES ('traced', %s)"
                           " RETURNING id", (value,))
                 for value in ('{"traceparent": 5}', '{"tracestate": 7}', '"00-a-b-01"', '[1]',
                               '{"traceparent": "not a traceparent"}')]
    # A plain handler past its timeout: its thread may never return, its span ends anyway.
    slow = sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('traced_slow', 1)"
                     " RETURNING id")
    spans_file = tmp_path / "spans.jsonl"
    supervisor = start_supervisor("--app", "tests.apps.traced", "--workers", "2",
                                  env={"SPANS_FILE": str(spans_file)})
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state IN"
                                 " ('succeeded', 'failed')") == 10, 15)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(20) == 0
    assert "Traceback" not in supervisor.output()
    spans = {span["attributes"]["motir.job.id"]: span for span in spans_of(spans_file)}
    assert sorted(spans) == sorted([ok, failed, from_sql, untraced, *malformed, slow])
    timed_out = spans.pop(slow)
    assert timed_out["name"] == "run traced_slow"
    assert timed_out["attributes"]["motir.job.outcome"] == "failed"
    assert timed_out["status"]["status_code"] == "ERROR"
    assert timed_out["events"][0]["attributes"]["exception.type"].endswith("TimeoutError")
    for job_id in malformed:
        assert spans[job_id]["parent_id"] is None
    for job_id, span in spans.items():
        assert span["name"] == "run traced" and span["kind"] == "SpanKind.CONSUMER"
        attributes = span["attributes"]
        assert (attributes["motir.job.kind"], attributes["motir.job.queue"],
                attributes["motir.job.attempt"]) == ("traced", "default", 1)
        assert attributes["app.saw_span"] is True
    for job_id in (ok, failed):
        assert spans[job_id]["context"]["trace_id"] == f"0x{trace_id}"
        assert spans[job_id]["parent_id"] == f"0x{parent_id}"
    assert spans[from_sql]["context"]["trace_id"] == "0x0af7651916cd43dd8448eb211c80319c"
    assert spans[untraced]["parent_id"] is None
    assert spans[ok]["attributes"]["motir.job.outcome"] == "succeeded"
    assert spans[ok]["status"]["status_code"] == "UNSET"
    failure = spans[failed]
    assert failure["attributes"]["motir.job.outcome"] == "failed"
    assert failure["status"]["status_code"] == "ERROR"
    [event] = failure["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"].endswith("PermanentFailure")


CONSOLE = {"OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}


@pytest.mark.parametrize("configured_by", ["opentelemetry-instrument", "OTEL_* variables"])
def test_with_the_sdk_configured_by_its_standard_means_each_run_is_a_span(
        sql, start_supervisor, configured_by):
    [job_id] = [sql.value("INSERT INTO job_queue (kind, max_attempts) VALUES ('permanent', 1)"
                          " RETURNING id")]
    if configured_by == "opentelemetry-instrument":
        supervisor = start_supervisor(
            "--workers", "1",
            entry=[INSTRUMENT, "--traces_exporter", "console", "--metrics_exporter", "none",
                   "--logs_exporter", "none", sys.executable, "-m", "motir_supervisor"])
    else:
        # No instrumenting command, and an app that never imports
        # OpenTelemetry: the worker configures the SDK from the variables.
        supervisor = start_supervisor("--workers", "1", env=CONSOLE)
    wait_until(lambda: state_of(sql, job_id) == "failed", 20)
    supervisor.signal(signal.SIGTERM)
    assert supervisor.wait(20) == 0
    output = supervisor.output()
    assert '"name": "run permanent"' in output, output[-2000:]
    assert '"kind": "SpanKind.CONSUMER"' in output
    assert f'"motir.job.id": {job_id}' in output
