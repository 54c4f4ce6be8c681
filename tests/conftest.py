import itertools
import os

import pytest

from motir_supervisor import db
from tests.helpers import Sql
from tests.pgserver import ThrowawayPostgres

# The fixtures users get from the pytest11 entry point once the package is
# installed; named as the entry point is, so that pytest loads it once.
pytest_plugins = ["motir_supervisor.pytest_plugin"]

TEMPLATE = "motir_template"
_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg():
    with ThrowawayPostgres() as server:
        yield server


@pytest.fixture(scope="session")
def migrated_template(pg):
    url = pg.create_database(TEMPLATE)
    store = db.JobStore(url)
    store.migrate()
    store.close()
    return TEMPLATE


@pytest.fixture
def database_url(pg, migrated_template):
    """A fresh, migrated database of its own for each test."""
    name = f"t{os.getpid()}_{next(_names)}"
    url = pg.create_database(name, template=migrated_template)
    yield url
    pg.drop_database(name)


@pytest.fixture
def sql(database_url):
    conn = Sql(database_url)
    yield conn
    conn.close()


@pytest.fixture
def store(database_url):
    s = db.JobStore(database_url)
    yield s
    s.close()


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


@pytest.fixture
def executions(sql):
    """The table tests/apps/sample.py records every handler run in."""
    sql.rows(EXECUTIONS_TABLE)
    return sql


@pytest.fixture
def start_supervisor(database_url):
    """Start `motir-supervisor run` processes; all are stopped after the test."""
    from tests.supervisors import RunningSupervisor

    started = []

    def start(*args, **kwargs):
        supervisor = RunningSupervisor(database_url, *args, **kwargs)
        started.append(supervisor)
        return supervisor

    yield start
    for supervisor in started:
        supervisor.stop()
