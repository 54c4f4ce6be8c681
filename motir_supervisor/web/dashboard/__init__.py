"""The dashboard of `motir-supervisor web`: queues, jobs, one job, running
jobs, schedules, workflows (each drawn as its graph) and batches, and the
actions retry (of a job, or of a workflow's step), cancel, pause and resume.

Flask routes and renders (Jinja2 escapes every value a template prints:
payloads, errors and even kinds are user data); Flask-WTF guards every POST
with a CSRF token. Logging in is HTTP basic auth against
MOTIR_WEB_PASSWORD, any user name. The SQL is sql/dashboard.sql's, run
through :mod:`.reads`; a workflow's layout is :mod:`.drawing`'s. This
module holds no SQL, and forks nothing.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import logging
import threading
from typing import Any

import psycopg2
import psycopg2.errors
from flask import (Flask, Response, abort, flash, redirect, render_template, request,
                   url_for)
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import HTTPException
from werkzeug.wrappers import Response as BaseResponse

from ... import db
from .drawing import NOT_DRAWN, SIBLINGS_KEPT, lay_out_steps
from .reads import DRAWN_AT_EACH_END, FAILED_LISTED, DashboardStore, EndedPerMinute

log = logging.getLogger(__name__)

REALM = "motir-supervisor"
#: The dashboard's reads take milliseconds; one that does not (a filter on a
#: kind almost no row has, on a huge table) gives up rather than hold the
#: dashboard's one connection.
STATEMENT_TIMEOUT = "10s"
#: The largest id a job can have (bigint); a larger one in a URL is no job.
MAX_ID = 2**63 - 1
#: What a large workflow's page leaves out, as the page says it.
WORKFLOW_CAPS = {"ends": DRAWN_AT_EACH_END, "siblings": SIBLINGS_KEPT, "failed": FAILED_LISTED}
#: On every response, the login's included. The pages run no script and
#: load only their stylesheet; no other site may frame them (a framed Retry
#: button can be clicked through from a page of the same site, which
#: SameSite does not stop); and a page of jobs is not kept in caches.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self' data:;"
                               " form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def session_key(password: str) -> bytes:
    """The key that signs sessions and CSRF tokens: derived from the
    password, so that every machine of the app group signs the same sessions
    (a form served by one validates on the next) and a new password ends
    them all; through scrypt, so that a cookie or token someone copies is no
    fast test of password guesses: scrypt makes every guess slow, a price
    this pays once."""
    return hashlib.scrypt(password.encode(), salt=b"motir-supervisor dashboard session",
                          n=2**14, r=8, p=1, dklen=32)


def create_app(database_url: str, password: str) -> Flask:
    if not password:
        raise ValueError("the dashboard needs a password")
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=session_key(password),
        SESSION_COOKIE_NAME="motir_dashboard",
        SESSION_COOKIE_SAMESITE="Strict",
        # A token lives as long as the browser's session: a page left open
        # over lunch still retries a job.
        WTF_CSRF_TIME_LIMIT=None,
    )
    expected = password.encode()
    store = DashboardStore(database_url, statement_timeout=STATEMENT_TIMEOUT)
    # One connection for the dashboard, one request on it at a time: a few
    # people look at a dashboard, and its reads take milliseconds.
    lock = threading.Lock()
    ended = EndedPerMinute()

    @app.before_request
    def require_login() -> Response | None:
        # Registered before CSRFProtect's own check: who may post comes first.
        auth = request.authorization
        given = (auth.password or "") if auth is not None and auth.type == "basic" else ""
        if hmac.compare_digest(given.encode(), expected):
            return None
        if auth is not None:
            # A browser's first request carries no credentials; one that
            # does and fails is someone's wrong password, or a guess.
            log.warning("dashboard: wrong password from %s for %s %s",
                        request.remote_addr, request.method, request.path)
        return Response(render_template("login.html"), 401,
                        {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})

    CSRFProtect(app)

    @app.after_request
    def secure(response: Response) -> Response:
        response.headers.update(SECURITY_HEADERS)
        return response

    @app.errorhandler(CSRFError)
    def refused_post(error: CSRFError) -> tuple[str, int]:
        return render_template("error.html", title="Refused",
                               message=f"This form was refused: {error.description}"
                                       " Reload the page and try again."), 400

    @app.errorhandler(psycopg2.Error)
    def database_error(exc: psycopg2.Error) -> tuple[str, int]:
        if isinstance(exc, db.CONNECTION_ERRORS):
            with lock:
                store.close()  # the next request connects afresh
        why = f"{db.describe_dsn(database_url)}: {db.one_line(exc, database_url)}"
        log.warning("dashboard: database error: %s", why)
        if isinstance(exc, (psycopg2.errors.UndefinedTable, psycopg2.errors.UndefinedColumn)):
            return render_template("error.html", title="Schema out of date", message=(
                "The database's schema is older than this dashboard: run"
                " motir-supervisor migrate.")), 503
        if isinstance(exc, psycopg2.errors.QueryCanceled):
            return render_template("error.html", title="Too slow", message=(
                f"The database took longer than {STATEMENT_TIMEOUT} to answer;"
                " a narrower filter may help.")), 503
        return render_template("error.html", title="Database unreachable",
                               message=why), 503

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> tuple[str, int]:
        return render_template("error.html", title=error.name,
                               message=error.description), error.code or 500

    app.jinja_env.filters.update(duration=duration, instant=instant, minute=minute)

    @app.get("/")
    def queues() -> str:
        with lock:
            rows = store.queues(ended)
            limits = store.limit_rows()
        peak = max([m["succeeded"] + m["failed"] for q in rows for m in q["minutes"]] or [0])
        return render_template("queues.html", queues=rows, limits=limits, peak=max(peak, 1))

    @app.get("/jobs")
    def jobs() -> str:
        filters = {name: _text(request.args.get(name)) or None
                   for name in ("queue", "kind", "state")}
        if filters["state"] is not None and filters["state"] not in db.STATES:
            abort(400, f"state must be one of {', '.join(db.STATES)}")
        before = _before()
        with lock:
            rows, older = store.jobs(before=before, **filters)
        return render_template("jobs.html", jobs=rows, older=older, before=before,
                               filters=filters, states=db.STATES)

    @app.get(f"/jobs/<int(max={MAX_ID}):job_id>")
    def job(job_id: int) -> str:
        with lock:
            row = store.job(job_id)
        if row is None:
            abort(404, f"no job {job_id}")
        return render_template("job.html", job=row)

    @app.get("/workflows")
    def workflows() -> str:
        before = _before()
        with lock:
            rows, older = store.workflows(before)
        return render_template("workflows.html", workflows=rows, older=older, before=before,
                               states=db.STATES)

    @app.get(f"/workflows/<int(max={MAX_ID}):workflow_id>")
    def workflow(workflow_id: int) -> str:
        with lock:
            row = store.workflow(workflow_id)
        if row is None:
            abort(404, f"no workflow {workflow_id}")
        drawing = lay_out_steps([step["id"] for step in row["steps"] if step["drawn"]],
                                row["edges"], row["step_count"])
        drawn = [step for step in row["steps"] if step["id"] in drawing.boxes]
        not_drawn = row["step_count"] - len(drawn)
        return render_template("workflow.html", workflow=row, drawn=drawn, drawing=drawing,
                               not_drawn=not_drawn, not_drawn_key=NOT_DRAWN,
                               states=db.STATES, caps=WORKFLOW_CAPS)

    @app.get("/batches")
    def batches() -> str:
        before = _before()
        with lock:
            rows, older = store.batches(before)
        return render_template("batches.html", batches=rows, older=older, before=before,
                               states=db.STATES, one=False)

    @app.get(f"/batches/<int(max={MAX_ID}):batch_id>")
    def batch(batch_id: int) -> str:
        with lock:
            rows, _ = store.batches(batch_id=batch_id)
        if not rows:
            abort(404, f"no batch {batch_id}")
        return render_template("batches.html", batches=rows, older=None, before=None,
                               states=db.STATES, one=True)

    @app.get("/running")
    def running() -> str:
        with lock:
            rows = store.running()
        return render_template("running.html", jobs=rows)

    @app.get("/schedules")
    def schedules() -> str:
        with lock:
            rows = store.schedule_rows()
        return render_template("schedules.html", schedules=rows)

    def retry_and_say(job_id: int) -> tuple[str, str]:
        """Retry the job; (what happened, "done" or "error")."""
        try:
            with lock:
                result = store.actions.retry_job(job_id)
        except psycopg2.errors.UniqueViolation:
            return (f"A job with job {job_id}'s unique key was enqueued meanwhile;"
                    " nothing was retried.", "error")
        if result is None:
            abort(404, f"no job {job_id}")
        state, changed, holder = result
        if holder is not None and state in ("failed", "cancelled"):
            return f"Job {job_id} stays {state}: job {holder} holds its unique key.", "error"
        if not changed:
            return (f"Job {job_id} is {state}; only failed or cancelled jobs can be"
                    " retried.", "error")
        return f"Job {job_id} was {state}; it is pending again with fresh attempts.", "done"

    @app.post(f"/jobs/<int(max={MAX_ID}):job_id>/retry")
    def retry(job_id: int) -> BaseResponse:
        return _back(*retry_and_say(job_id), job_id)

    @app.post(f"/workflows/<int(max={MAX_ID}):workflow_id>/steps/<int(max={MAX_ID}):job_id>"
              "/retry")
    def retry_step(workflow_id: int, job_id: int) -> BaseResponse:
        """Retry one step; the database brings back the descendants its
        failure cancelled, and the workflow's page shows them waiting."""
        with lock:
            row = store.job(job_id)
        if row is None or row["workflow_id"] != workflow_id:
            abort(404, f"no job {job_id} in workflow {workflow_id}")
        message, category = retry_and_say(job_id)
        log.info("dashboard: workflow %d, job %d: %s (from %s)", workflow_id, job_id,
                 message, request.remote_addr)
        flash(message, category)
        return redirect(url_for("workflow", workflow_id=workflow_id), 303)

    @app.post(f"/jobs/<int(max={MAX_ID}):job_id>/cancel")
    def cancel(job_id: int) -> BaseResponse:
        with lock:
            result = store.actions.cancel_job(job_id)
        if result is None:
            abort(404, f"no job {job_id}")
        state, changed = result
        if not changed:
            return _back(f"Job {job_id} is {state} already; nothing to cancel.", "error", job_id)
        if state == "running":
            return _back(f"Job {job_id} is running; its worker asks the handler to stop at"
                         " its next lease renewal.", "done", job_id)
        return _back(f"Job {job_id} was {state}; it is cancelled.", "done", job_id)

    def pause_or_resume(pausing: bool) -> BaseResponse:
        queue = _text(request.form.get("queue"))
        if not queue:
            abort(400, "which queue?")
        with lock:
            changed = (store.actions.pause_queue(queue) if pausing
                       else store.actions.resume_queue(queue))
        log.info("dashboard: queue %r %s from %s", queue,
                 "paused" if pausing else "resumed", request.remote_addr)
        said = {(True, True): "is paused", (True, False): "was paused already",
                (False, True): "is running again", (False, False): "was not paused"}
        flash(f"Queue {queue!r} {said[pausing, changed]}.", "done" if changed else "error")
        return redirect(url_for("queues"), 303)

    app.add_url_rule("/queues/pause", "pause", lambda: pause_or_resume(True),
                     methods=["POST"])
    app.add_url_rule("/queues/resume", "resume", lambda: pause_or_resume(False),
                     methods=["POST"])

    return app


def _text(value: str | None) -> str:
    """A form's or filter's text as given; NUL, which no text column can
    hold, is a bad request rather than a failed statement."""
    if value and "\0" in value:
        abort(400, "text with a NUL character")
    return value or ""


def _before() -> int | None:
    """The id a page of a list starts before, if any."""
    before = request.args.get("before", type=int)
    if before is not None and not 0 < before <= MAX_ID:
        abort(400, "before must be an id")
    return before


def _back(message: str, category: str, job_id: int) -> BaseResponse:
    """After an action on a job: its page, with what happened."""
    log.info("dashboard: job %d: %s (from %s)", job_id, message, request.remote_addr)
    flash(message, category)
    return redirect(url_for("job", job_id=job_id), 303)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = float(seconds)
    sign, seconds = ("-" if seconds < 0 else ""), abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{sign}{seconds:.1f} s"
    if seconds < 7200:
        return f"{sign}{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{sign}{seconds / 3600:.1f} h"
    return f"{sign}{seconds / 86400:.1f} d"


def minute(value: datetime.datetime) -> str:
    return value.astimezone(datetime.timezone.utc).strftime("%H:%M UTC")


def instant(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, datetime.datetime):
        utc = value.astimezone(datetime.timezone.utc)
        return utc.strftime("%Y-%m-%d %H:%M:%S.") + f"{utc.microsecond // 1000:03d} UTC"
    return str(value)
