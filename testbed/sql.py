"""A small autocommit connection for the tests' and the benchmarks' own reads
and writes, and the table the test suite's handlers record their runs in."""

from __future__ import annotations

from typing import Any

import psycopg2


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


#: Every run of the handlers in tests/apps (the sample app the supervisors of
#: testbed.supervisors run among them), created by whoever reads it.
EXECUTIONS_TABLE = """
CREATE TABLE test_executions (
    execution_id bigserial PRIMARY KEY,
    job_id       bigint NOT NULL,
    attempt      int NOT NULL,
    pid          int NOT NULL,
    checkpoint   jsonb,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at  timestamptz
)"""
