"""The schema's migrations (``sql/migrations/NNNN_name.sql``) and applying
them: each in its own transaction, one supervisor at a time, each applied
version recorded in motir_schema_migrations. What a database has applied
and what is pending are read without writing anything, so that an operator
can look before a deploy. ``sql/schema.sql`` is what they all produce
(written by ``bin/schema``)."""

from __future__ import annotations

import dataclasses
import datetime
import os
import re
from typing import NamedTuple

import psycopg2.errors

from .rows import Rows
from .session import Session
from .statements import SQL_FOLDER, read_sql, text_of


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


class Applied(NamedTuple):
    """A row of motir_schema_migrations."""

    version: int
    name: str
    applied_at: datetime.datetime


APPLIED = Rows(Applied)


def load_migrations() -> list[Migration]:
    migrations = []
    for name in os.listdir(os.path.join(SQL_FOLDER, "migrations")):
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", name)
        if match:
            migrations.append(Migration(int(match[1]), match[2], read_sql("migrations", name)))
    return sorted(migrations, key=lambda m: m.version)


def migrate(session: Session) -> list[Migration]:
    """Apply the migrations not applied yet, each in its own transaction."""
    applied_now = []
    session.run("lock_migrations")
    try:
        session.run("create_migrations_table")
        done = set(session.run("applied_migrations").column("version"))
        for migration in load_migrations():
            if migration.version in done:
                continue
            conn = session.conn
            conn.autocommit = False
            try:
                # One transaction: committed whole, or rolled back whole.
                with conn, conn.cursor() as cur:
                    cur.execute(migration.sql)
                    cur.execute(text_of("record_migration"),
                                {"version": migration.version, "name": migration.name})
            finally:
                conn.autocommit = True
            applied_now.append(migration)
    finally:
        if session.connected:
            session.run("unlock_migrations")
    return applied_now


def schema_version(session: Session) -> int:
    """The newest migration applied; 0 on a database never migrated."""
    try:
        return session.run("schema_version").value("version")
    except psycopg2.errors.UndefinedTable:
        return 0


def applied_migrations(session: Session) -> list[Applied] | None:
    """What the database records as applied, oldest first; None where it
    has no record at all (never migrated). Writes nothing."""
    try:
        return APPLIED.of(session.run("migrations_applied"))
    except psycopg2.errors.UndefinedTable:
        return None


def pending_migrations(applied: list[Applied] | None) -> list[Migration]:
    """The migrations of this release not among ``applied``, in the order
    migrate runs them."""
    done = {row.version for row in applied or ()}
    return [m for m in load_migrations() if m.version not in done]


def pending_sql(applied: list[Applied] | None) -> str:
    """The SQL migrate would run on a database that has ``applied``: the
    table of applied migrations where there is none yet, then each pending
    migration, each headed by its name. Empty when nothing is pending."""
    parts = []
    if applied is None:
        parts.append("-- motir_schema_migrations: what migrate records each migration in\n"
                     + text_of("create_migrations_table") + "\n")
    for migration in pending_migrations(applied):
        parts.append(f"-- {migration.version:04d}_{migration.name}: in a transaction of its own,"
                     " recorded in motir_schema_migrations as it commits\n"
                     + migration.sql.strip() + "\n")
    return "\n".join(parts)
