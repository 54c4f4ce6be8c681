"""The statements of a handler's own transaction (``j.transaction()``, see
worker/transactions.py), run on its connection in whatever transaction it
is in: nothing here commits, rolls back or opens a connection."""

from __future__ import annotations

import psycopg2.extensions

from .statements import text_of


def reset_session(conn: psycopg2.extensions.connection) -> None:
    """Make a kept connection as new: what a block before set for its
    session is gone. Fails on a connection the server dropped."""
    with conn.cursor() as cur:
        cur.execute(text_of("reset_session"))


def record_success_in_transaction(conn: psycopg2.extensions.connection, job_id: int,
                                  claimant: str) -> bool:
    """Write the job's success in the connection's transaction, fenced on
    its claim: False, and nothing written, when the claim is no longer
    ``claimant``'s."""
    with conn.cursor() as cur:
        cur.execute(text_of("record_success_in_transaction"),
                    {"ids": [job_id], "claimant": claimant})
        return cur.rowcount == 1
