"""The schema's migrations (``sql/migrations/NNNN_name.sql``) and applying
them: each in its own transaction, one supervisor at a time, each applied
version recorded in motir_schema_migrations."""

from __future__ import annotations

import dataclasses
import os
import re

import psycopg2.errors

from .session import Session
from .statements import SQL_FOLDER, read_sql, text_of


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


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
