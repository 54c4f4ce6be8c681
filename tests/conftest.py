"""The levels of the suite, and the fixtures of the two that use PostgreSQL.

tests/unit needs neither a database nor a motir-supervisor process;
tests/integration runs the package in-process against the throwaway
PostgreSQL below; tests/e2e starts motir-supervisor processes against it
(tests/e2e/conftest.py). Each test is marked with its level by the
directory it sits in, so that `-m "not e2e"` and the like select by what
a test does.
"""

import itertools
import os
from pathlib import Path

import pytest

from motir_supervisor import db
from testbed.pgserver import ThrowawayPostgres
from testbed.sql import EXECUTIONS_TABLE, Sql

# The fixtures users get from the pytest11 entry point once the package is
# installed; named as the entry point is, so that pytest loads it once.
pytest_plugins = ["motir_supervisor.pytest_plugin"]

LEVELS = ("unit", "integration", "e2e")
TESTS = Path(__file__).resolve().parent
TEMPLATE = "motir_template"
_names = itertools.count(1)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # First, so that -m selects by the marks given here.
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        level = item.path.relative_to(TESTS).parts[0]
        if level not in LEVELS:
            raise pytest.UsageError(f"{item.nodeid}: a test belongs in tests/unit,"
                                    " tests/integration or tests/e2e")
        if level == "unit" and "pg" in item.fixturenames:
            raise pytest.UsageError(f"{item.nodeid}: a unit test uses no database;"
                                    " it belongs in tests/integration")
        item.add_marker(level)


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


@pytest.fixture
def executions(sql):
    """The table the handlers of tests/apps record every run in."""
    sql.rows(EXECUTIONS_TABLE)
    return sql


@pytest.fixture
def handler_runs():
    """The runs tests/apps/handlers_under_test.py records, none yet."""
    from tests.apps import handlers_under_test

    handlers_under_test.RUNS.clear()
    return handlers_under_test.RUNS
