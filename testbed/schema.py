"""``motir_supervisor/db/sql/schema.sql``: the schema as the migrations leave
it, dumped by pg_dump from a freshly migrated database and cleared of what
depends on the server and the dump rather than on the schema (versions,
session settings, owners, pg_dump's random restrict key).

``bin/schema`` writes the file; tests/integration/test_schema_file.py checks
that the migrations still produce it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from testbed.pgserver import ThrowawayPostgres, find_pg_ctl

SCHEMA_FILE = (Path(__file__).resolve().parent.parent
               / "motir_supervisor" / "db" / "sql" / "schema.sql")
#: The one command that writes SCHEMA_FILE again.
REGENERATE = "bin/schema"

HEADER = f"""\
-- The schema of motir-supervisor as the migrations (sql/migrations/) leave it:
-- every table, index, trigger and function body as it stands now, in one
-- place. For reading: a database is created and upgraded by
-- `motir-supervisor migrate`, never from this file. Written by {REGENERATE} from
-- pg_dump of a freshly migrated database; a test checks that the migrations
-- produce exactly this.
"""

#: Lines that say how and by what the dump was taken, not what the schema is.
_NOISE = re.compile(
    r"^(\\restrict .*|\\unrestrict .*|-- Dumped (from|by) .*"
    r"|SET (statement_timeout|lock_timeout|idle_in_transaction_session_timeout"
    r"|transaction_timeout|client_encoding|standard_conforming_strings|check_function_bodies"
    r"|xmloption|client_min_messages|row_security|default_tablespace"
    r"|default_table_access_method) = .*;"
    r"|SELECT pg_catalog\.set_config\('search_path', '', false\);"
    r"|-- PostgreSQL database dump( complete)?)$")


def find_pg_dump() -> str:
    """The pg_dump beside the pg_ctl the test servers run: never older
    than the server it dumps."""
    pg_dump = Path(os.path.realpath(find_pg_ctl())).with_name("pg_dump")
    if not os.access(pg_dump, os.X_OK):
        raise RuntimeError(f"pg_dump not found beside pg_ctl ({pg_dump})")
    return str(pg_dump)


def normalise(dump: str) -> str:
    lines = [line.replace("; Owner: -", "") for line in dump.splitlines()
             if not _NOISE.match(line)]
    # A lone "--" frames an object's "-- Name:" line; the others framed noise.
    kept = [line for i, line in enumerate(lines)
            if line != "--" or any(near.startswith("-- Name: ")
                                   for near in lines[max(i - 1, 0):i + 2])]
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept))
    return HEADER + "\n" + text.strip() + "\n"


def dump_schema(database_url: str) -> str:
    """The schema of a database, as SCHEMA_FILE holds it."""
    dump = subprocess.run(
        [find_pg_dump(), "--schema-only", "--no-owner", "--no-privileges",
         "--no-tablespaces", database_url],
        capture_output=True, text=True, check=True).stdout
    return normalise(dump)


def migrated_schema() -> str:
    """The schema the migrations produce, on a throwaway server."""
    from motir_supervisor import db

    with ThrowawayPostgres() as pg:
        url = pg.create_database("motir_schema")
        store = db.JobStore(url)
        try:
            store.migrate()
        finally:
            store.close()
        return dump_schema(url)


def main() -> int:
    schema = migrated_schema()
    before = SCHEMA_FILE.read_text() if SCHEMA_FILE.exists() else ""
    SCHEMA_FILE.write_text(schema)
    said = "unchanged" if schema == before else "written"
    print(f"{SCHEMA_FILE}: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
