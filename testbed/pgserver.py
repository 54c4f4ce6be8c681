"""A throwaway PostgreSQL server for the tests, the demo and the benchmarks.

pytest-postgresql's executor starts and stops the server; this module adds
what it leaves to us: finding Debian's pg_ctl, which is not on PATH, and
running the server as an unprivileged user when we are root (PostgreSQL
refuses to run as root, and CI runs as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import tempfile
from pathlib import Path

import port_for
import psycopg2
from pytest_postgresql.executors import PostgreSQLExecutor

from testbed.polling import wait_until

WRAPPER = Path(__file__).with_name("pg_ctl_unprivileged.sh")
#: Test servers trade durability for speed. pytest-postgresql starts every
#: server with -F (fsync off); the benchmark overrides that with -c fsync=on.
FAST_AND_UNSAFE = "-c fsync=off -c full_page_writes=off -c synchronous_commit=off"


def find_pg_ctl() -> str:
    candidates = [os.environ.get("PG_CTL"), shutil.which("pg_ctl")]
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                    key=lambda p: int(Path(p).parts[-3]), reverse=True)
    for candidate in [*candidates, *debian]:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise RuntimeError("pg_ctl not found: install PostgreSQL (apt-get install postgresql)")


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no unprivileged user (postgres, nobody) exists")


class ThrowawayPostgres:
    """``with ThrowawayPostgres() as pg: pg.url("postgres")``"""

    def __init__(self, postgres_options: str = FAST_AND_UNSAFE):
        self.base = Path(tempfile.mkdtemp(prefix="motir-pg-"))
        pg_ctl = find_pg_ctl()
        executable = pg_ctl
        if os.geteuid() == 0:
            user = _unprivileged_user()
            os.chown(self.base, user.pw_uid, user.pw_gid)
            os.environ["MOTIR_PG_CTL"] = pg_ctl
            os.environ["MOTIR_PG_USER"] = user.pw_name
            executable = str(WRAPPER)
        self.port = port_for.select_random()
        self.executor = PostgreSQLExecutor(
            executable=executable, host="127.0.0.1", port=self.port,
            datadir=str(self.base / "data"), unixsocketdir=str(self.base),
            logfile=str(self.base / "postgresql.log"), startparams="-w", dbname="postgres",
            user="postgres",
            postgres_options=f"-c max_connections=200 {postgres_options}".strip())

    def start(self) -> "ThrowawayPostgres":
        self.executor.start()
        # The executor's wait can end while the server still refuses
        # connections as "starting up" (seen on a loaded machine).
        wait_until(self._accepts_connections, 30, interval=0.05,
                   message="the throwaway PostgreSQL to accept connections")
        return self

    def _accepts_connections(self) -> bool:
        try:
            psycopg2.connect(self.url("postgres")).close()
        except psycopg2.OperationalError:
            return False
        return True

    def stop(self) -> None:
        try:
            self.executor.stop()
        finally:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> "ThrowawayPostgres":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def url(self, dbname: str, password: str | None = None) -> str:
        secret = f":{password}" if password else ""
        return f"postgresql://postgres{secret}@127.0.0.1:{self.port}/{dbname}"

    def admin(self, sql: str) -> None:
        conn = psycopg2.connect(self.url("postgres"))
        conn.autocommit = True
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
        finally:
            conn.close()

    def create_database(self, name: str, template: str | None = None) -> str:
        suffix = f" TEMPLATE {template}" if template else ""
        self.admin(f"CREATE DATABASE {name}{suffix}")
        return self.url(name)

    def drop_database(self, name: str) -> None:
        self.admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
