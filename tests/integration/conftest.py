"""Fixtures of the integration tests beyond those of tests/conftest.py."""

import pytest
from werkzeug.test import Client

from motir_supervisor import db
from motir_supervisor.web import server as web
from motir_supervisor.web.dashboard import create_app
from tests.dashboard_client import PASSWORD


@pytest.fixture
def client(database_url):
    """The web app with the dashboard on, over WSGI."""
    store = db.JobStore(database_url)
    yield Client(web.make_app(store, create_app(database_url, PASSWORD)))
    store.close()
