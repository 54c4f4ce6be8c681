"""Sentry through the hooks, as docs/observability.md shows it, with a
transport that writes each event as a JSON line to $SENTRY_EVENTS instead
of sending it."""

import json
import os

import sentry_sdk
from sentry_sdk.transport import Transport

from motir_supervisor import hooks, job


class FileTransport(Transport):
    def capture_envelope(self, envelope):
        event = envelope.get_event()
        if event is not None:
            with open(os.environ["SENTRY_EVENTS"], "a") as events:
                events.write(json.dumps(event, default=repr) + "\n")


sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=FileTransport)


# The hooks of docs/observability.md, word for word.
@hooks.on_run_end
def report_failures(j, ended):
    if ended.outcome != "failed" or ended.error is None:
        return
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("job.kind", j.kind)
        scope.set_tag("job.queue", j.queue)
        scope.set_context("job", {"id": j.id, "kind": j.kind, "attempt": j.attempt,
                                  "max_attempts": j.max_attempts})
        sentry_sdk.capture_exception(ended.error)


@hooks.on_worker_exit
def flush_reports(worker_number):
    sentry_sdk.flush()


@job("reported")
def reported(j):
    if j.attempt < j.payload["succeed_on_attempt"]:
        raise ValueError(f"attempt {j.attempt} of job {j.id} went wrong")
