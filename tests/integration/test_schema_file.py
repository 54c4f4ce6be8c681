"""motir_supervisor/db/sql/schema.sql is the schema the migrations produce,
object for object (see testbed/schema.py)."""

import difflib

from testbed.schema import REGENERATE, SCHEMA_FILE, dump_schema, normalise


def test_the_migrations_produce_exactly_schema_sql(database_url):
    migrated = dump_schema(database_url)
    kept = SCHEMA_FILE.read_text()
    if migrated != kept:
        diff = "".join(difflib.unified_diff(
            kept.splitlines(keepends=True), migrated.splitlines(keepends=True),
            "schema.sql", "what the migrations produce", n=1))
        raise AssertionError(
            f"{SCHEMA_FILE.name} is not what the migrations produce: run {REGENERATE} to write"
            f" it again, and commit it with the migration.\n{diff[:4000]}")


def test_what_depends_on_the_server_or_the_dump_is_left_out():
    dump = ("--\n-- PostgreSQL database dump\n--\n\n\\restrict AbC123\n\n"
            "-- Dumped from database version 15.18 (Debian)\n"
            "-- Dumped by pg_dump version 16.4\n\nSET statement_timeout = 0;\n"
            "SELECT pg_catalog.set_config('search_path', '', false);\n\n"
            "--\n-- Name: t; Type: TABLE; Schema: public; Owner: -\n--\n\n"
            "CREATE TABLE public.t (\n    id bigint\n);\n\n\n"
            "--\n-- PostgreSQL database dump complete\n--\n\n\\unrestrict AbC123\n")
    body = normalise(dump).split("\n\n", 1)[1]
    assert body == ("--\n-- Name: t; Type: TABLE; Schema: public\n--\n\n"
                    "CREATE TABLE public.t (\n    id bigint\n);\n")
