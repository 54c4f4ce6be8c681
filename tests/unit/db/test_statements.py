"""db.statements: every query the store names exists in the SQL files, and
the migrations are numbered without gaps."""

import re
from pathlib import Path

from motir_supervisor import db


def test_every_query_the_code_names_exists():
    source = Path(db.store.__file__).read_text()
    named = set(re.findall(r'(?:_run|_count)\("([a-z_]+)"', source))
    named |= set(re.findall(r'QUERIES\["([a-z_]+)"\]', source))
    assert len(named) > 15
    assert named <= set(db.QUERIES)
    assert all(body.strip() for body in db.QUERIES.values())


def test_migrations_are_numbered_without_gaps():
    versions = [m.version for m in db.load_migrations()]
    assert versions == list(range(1, len(versions) + 1))
