"""Opening a connection that notices a dead peer, and naming or quoting a
database URL without its password (logs, titles, error lines)."""

from __future__ import annotations

import re

import psycopg2
import psycopg2.extensions


def describe_dsn(dsn: str) -> str:
    """``user@host:port/dbname`` for logs and titles: never the password."""
    try:
        params = psycopg2.extensions.parse_dsn(dsn)
    except psycopg2.ProgrammingError:
        return "<unparsable database URL>"
    host = params.get("host", "local socket")
    port = params.get("port", "5432")
    user = params.get("user", "")
    where = f"{host}:{port}/{params.get('dbname', '')}"
    return f"{user}@{where}" if user else where


def scrub(message: str, dsn: str) -> str:
    """Remove the password of ``dsn`` from an error message, whatever its form."""
    try:
        password = psycopg2.extensions.parse_dsn(dsn).get("password")
    except psycopg2.ProgrammingError:
        password = None
    if not password:
        # An unparsable URL may still carry one: hide whatever stands
        # between "user:" and "@".
        return re.sub(r"(://[^:/@\s]*:)[^@\s]*@", r"\1***@", message)
    return message.replace(password, "***")


def one_line(error: BaseException, dsn: str) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return scrub(text, dsn)


def connect(dsn: str, application_name: str,
            timeout_seconds: float = 20.0) -> psycopg2.extensions.connection:
    """Open an autocommit connection that notices a dead peer.

    Each statement of ours is its own transaction (the claim is a single
    statement), so autocommit costs nothing and leaves no transaction open
    while a handler runs. ``timeout_seconds`` bounds how long connecting, or
    waiting on a half-open connection (a failed-over or unplugged server),
    can hang the caller, instead of the kernel's two hours: the TCP user
    timeout covers unacknowledged writes, keepalives an idle socket. A worker
    passes a third of its lease, so that it notices in time to stop.
    """
    probe = max(1, int(timeout_seconds / 3))
    conn = psycopg2.connect(
        dsn,
        application_name=application_name[:63],
        connect_timeout=max(2, int(timeout_seconds)),
        keepalives=1,
        keepalives_idle=probe,
        keepalives_interval=probe,
        keepalives_count=2,
        tcp_user_timeout=int(timeout_seconds * 1000),
    )
    conn.autocommit = True
    return conn
