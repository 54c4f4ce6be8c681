"""Waiting for conditions and reading the database, shared by the tests."""

from __future__ import annotations

import time
from typing import Any, Callable

import psycopg2


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.02,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class Sql:
    """A small autocommit connection for a test's own reads and writes."""

    def __init__(self, url: str):
        self.conn = psycopg2.connect(url)
        self.conn.autocommit = True

    def rows(self, sql: str, params: Any = None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def value(self, sql: str, params: Any = None) -> Any:
        rows = self.rows(sql, params)
        return rows[0][0] if rows else None

    def close(self) -> None:
        self.conn.close()
