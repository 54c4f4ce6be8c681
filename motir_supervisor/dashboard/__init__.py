"""The dashboard of `motir-supervisor web`: queues, jobs, one job, running
jobs and schedules, and the actions retry, cancel, pause and resume.

Flask routes and renders (Jinja2 escapes every value a template prints:
payloads, errors and even kinds are user data); Flask-WTF guards every POST
with a CSRF token. Logging in is HTTP basic auth against
MOTIR_WEB_PASSWORD, any user name. The SQL is sql/dashboard.sql's, run
through :mod:`.reads`; this module holds none, and forks nothing.
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

from .. import db
from .reads import STATES, DashboardStore, EndedPerMinute

log = logging.getLogger(__name__)

REALM = "motir-supervisor"
#: The dashboard's reads take milliseconds; one that does not (a filter on a
#: kind almost no row has, on a huge table) gives up rather than hold the
#: dashboard's one connection.
STATEMENT_TIMEOUT = "10s"


def create_app(database_url: str, password: str) -> Flask:
    if not password:
        raise ValueError("the dashboard needs a password")
    app = Flask(__name__)
    app.config.update(
        # Derived from the password, so that every machine of the app group
        # signs the same sessions (a form served by one validates on the
        # next), and changing the password ends every session.
        SECRET_KEY=hmac.new(password.encode(), b"motir-supervisor dashboard session",
                            hashlib.sha256).digest(),
        SESSION_COOKIE_NAME="motir_dashboard",
        SESSION_COOKIE_SAMESITE="Strict",
        # A token lives as long as the browser's session: a page left open
        # over lunch still retries a job.
        WTF_CSRF_TIME_LIMIT=None,
    )
    expected = password.encode()
    store = DashboardStore(database_url, application_name="motir-supervisor dashboard",
                           prepare=False, statement_timeout=STATEMENT_TIMEOUT)
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
        return Response(render_template("login.html"), 401,
                        {"WWW-Authenticate": f'Basic realm="{REALM}", charset="UTF-8"'})

    CSRFProtect(app)

    @app.errorhandler(CSRFError)
    def refused_post(error: CSRFError) -> tuple[str, int]:
        return render_template("error.html", title="Refused",
                               message=f"This form was refused: {error.description}"
                                       " Reload the page and try again."), 400

    @app.errorhandler(psycopg2.Error)
    def database_error(exc: psycopg2.Error) -> tuple[str, int]:
        with lock:
            store.close()
        why = f"{db.describe_dsn(database_url)}: {db.one_line(exc, database_url)}"
        log.warning("dashboard: database error: %s", why)
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
        peak = max([m["succeeded"] + m["failed"] for q in rows for m in q["minutes"]] or [0])
        return render_template("queues.html", queues=rows, peak=max(peak, 1))

    @app.get("/jobs")
    def jobs() -> str:
        filters = {name: request.args.get(name, "").strip() or None
                   for name in ("queue", "kind", "state")}
        if filters["state"] is not None and filters["state"] not in STATES:
            abort(400, f"state must be one of {', '.join(STATES)}")
        before = request.args.get("before", type=int)
        with lock:
            rows, older = store.jobs(before=before, **filters)
        return render_template("jobs.html", jobs=rows, older=older, before=before,
                               filters=filters, states=STATES)

    @app.get("/jobs/<int:job_id>")
    def job(job_id: int) -> str:
        with lock:
            row = store.job(job_id)
        if row is None:
            abort(404, f"no job {job_id}")
        return render_template("job.html", job=row)

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

    @app.post("/jobs/<int:job_id>/retry")
    def retry(job_id: int) -> Response:
        try:
            with lock:
                result = store.retry_job(job_id)
        except psycopg2.errors.UniqueViolation:
            return _back(f"A job with job {job_id}'s unique key was enqueued meanwhile;"
                         " nothing was retried.", "error", job_id)
        if result is None:
            abort(404, f"no job {job_id}")
        state, changed, holder = result
        if holder is not None and state in ("failed", "cancelled"):
            return _back(f"Job {job_id} stays {state}: job {holder} holds its unique key.",
                         "error", job_id)
        if not changed:
            return _back(f"Job {job_id} is {state}; only failed or cancelled jobs can be"
                         " retried.", "error", job_id)
        return _back(f"Job {job_id} was {state}; it is pending again with fresh attempts.",
                     "done", job_id)

    @app.post("/jobs/<int:job_id>/cancel")
    def cancel(job_id: int) -> Response:
        with lock:
            result = store.cancel_job(job_id)
        if result is None:
            abort(404, f"no job {job_id}")
        state, changed = result
        if not changed:
            return _back(f"Job {job_id} is {state} already; nothing to cancel.", "error", job_id)
        if state == "running":
            return _back(f"Job {job_id} is running; its worker asks the handler to stop at"
                         " its next lease renewal.", "done", job_id)
        return _back(f"Job {job_id} was {state}; it is cancelled.", "done", job_id)

    def pause_or_resume(pausing: bool) -> Response:
        queue = request.form.get("queue", "")
        with lock:
            changed = store.pause_queue(queue) if pausing else store.resume_queue(queue)
        said = {(True, True): "is paused", (True, False): "was paused already",
                (False, True): "is running again", (False, False): "was not paused"}
        flash(f"Queue {queue!r} {said[pausing, changed]}.", "done" if changed else "error")
        return redirect(url_for("queues"), 303)

    app.add_url_rule("/queues/pause", "pause", lambda: pause_or_resume(True),
                     methods=["POST"])
    app.add_url_rule("/queues/resume", "resume", lambda: pause_or_resume(False),
                     methods=["POST"])

    return app


def _back(message: str, category: str, job_id: int) -> Response:
    """After an action on a job: its page, with what happened."""
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
