"""db.drivers: psycopg and SQLAlchemy stay optional (nothing the supervisor
or its workers run imports them), and a connection no driver of theirs
made is refused before anything is sent. tests/integration/test_drivers.py
runs every driver against PostgreSQL."""

import subprocess
import sys

import pytest
import sqlalchemy
import sqlalchemy.orm

from motir_supervisor import enqueue, enqueue_many


def test_the_package_the_supervisor_and_its_workers_import_neither_psycopg_nor_sqlalchemy():
    loaded = subprocess.run([sys.executable, "-c", (
        "import sys\n"
        "import motir_supervisor, motir_supervisor.cli, motir_supervisor.async_api\n"
        "import motir_supervisor.supervisor.arbiter, motir_supervisor.worker.process\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('psycopg', 'sqlalchemy')))")],
        capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"


def test_a_sqlalchemy_session_on_another_database_is_refused_before_anything_is_sent():
    engine = sqlalchemy.create_engine("sqlite://")
    sent = []
    sqlalchemy.event.listen(engine, "before_cursor_execute", lambda *args: sent.append(args))
    with sqlalchemy.orm.Session(engine) as session:
        with pytest.raises(TypeError, match=r"needs PostgreSQL through psycopg2, psycopg or"
                                            r" asyncpg .*, not sqlite\+pysqlite$"):
            enqueue(session, "x")
        assert enqueue_many(session, []) == []  # nothing to send: nothing asked of it
    assert sent == []


@pytest.mark.parametrize("conn", [None, "postgresql://localhost/app", object()])
def test_what_is_no_connection_is_refused(conn):
    with pytest.raises(TypeError, match=f"conn must be a psycopg2 connection, .* not"
                                        f" {type(conn).__name__}$"):
        enqueue(conn, "x")
