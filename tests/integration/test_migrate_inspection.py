"""`migrate --sql` and `migrate --status`: what a database has applied and
what migrate would run on it, read without writing anything."""

import re

import pytest
from click.testing import CliRunner

from motir_supervisor import cli, db
from testbed.schema import SCHEMA_FILE, dump_schema
from testbed.sql import Sql

MIGRATIONS = db.load_migrations()


def migrate(url, *args):
    result = CliRunner().invoke(cli.main, ["migrate", "--database-url", url, *args])
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture
def empty_database(pg):
    yield pg.create_database("never_migrated")
    pg.drop_database("never_migrated")


def test_on_a_database_never_migrated_every_migration_is_pending(empty_database):
    lines = migrate(empty_database, "--status").splitlines()
    assert lines[0] == "never migrated: no motir_schema_migrations table"
    assert lines[1:-1] == [f"{m.version:04d}_{m.name:<28} pending" for m in MIGRATIONS]
    assert lines[-1].startswith(f"{len(MIGRATIONS)} pending: run motir-supervisor migrate")


def test_the_printed_sql_is_every_pending_migration_in_order_and_runs_nothing(empty_database):
    script = migrate(empty_database, "--sql")
    headers = re.findall(r"^-- (\d{4})_(\w+): in a transaction", script, re.M)
    assert headers == [(f"{m.version:04d}", m.name) for m in MIGRATIONS]
    for migration in MIGRATIONS:
        assert migration.sql.strip() in script
    check = Sql(empty_database)
    try:
        assert check.value("SELECT count(*) FROM pg_class"
                           " WHERE relnamespace = 'public'::regnamespace") == 0
        # What it prints is what migrate runs: run by hand, it builds the same schema.
        check.rows(script)
    finally:
        check.close()
    assert dump_schema(empty_database) == SCHEMA_FILE.read_text()


def test_status_says_when_each_was_applied_and_sql_shows_only_the_pending(database_url):
    newest = MIGRATIONS[-1]
    sql = Sql(database_url)
    try:
        sql.rows("UPDATE motir_schema_migrations SET applied_at = '2026-01-02 03:04:05+00'")
        sql.rows("DELETE FROM motir_schema_migrations WHERE version = %s", (newest.version,))
        sql.rows("INSERT INTO motir_schema_migrations (version, name, applied_at)"
                 " VALUES (9999, 'from_a_newer_release', '2026-01-03 00:00:00+00')")
    finally:
        sql.close()
    lines = migrate(database_url, "--status").splitlines()
    assert lines[:len(MIGRATIONS) - 1] == [
        f"{m.version:04d}_{m.name:<28} applied 2026-01-02 03:04:05 UTC" for m in MIGRATIONS[:-1]]
    assert lines[len(MIGRATIONS) - 1:] == [
        f"9999_{'from_a_newer_release':<28} applied 2026-01-03 00:00:00 UTC"
        "  (not in this release: a newer one applied it)",
        f"{newest.version:04d}_{newest.name:<28} pending",
        "1 pending: run motir-supervisor migrate (--sql shows what it runs)"]
    script = migrate(database_url, "--sql")
    assert re.findall(r"^-- (\d{4})_\w+:", script, re.M) == [f"{newest.version:04d}"]


def test_an_up_to_date_database_has_nothing_to_print(database_url):
    assert migrate(database_url, "--sql") == "-- schema is up to date: nothing would run\n"
    assert migrate(database_url, "--status").splitlines()[-1] == "schema is up to date"


def test_sql_and_status_are_one_or_the_other(database_url):
    result = CliRunner().invoke(cli.main, ["migrate", "--database-url", database_url,
                                           "--sql", "--status"])
    assert result.exit_code == 2 and "not both" in result.output
