"""The SQL text the package runs: the named statements of
``sql/queries.sql`` and ``sql/dashboard.sql`` (the dashboard's reads), the
prepared form of the hot ones, and the migrations.

Nothing here connects; :mod:`.store` and :mod:`.enqueueing` run these statements.
"""

from __future__ import annotations

import dataclasses
import os
import re

_BLOCK_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)
#: The SQL files lie beside this module: every install (a wheel, an editable
#: one, the Dockerfile's) unpacks the package as files. Read with os, not
#: importlib.resources, whose imports (tempfile, zipfile, pathlib) would be a
#: noticeable share of a supervisor's start, paid again on every restart.
_SQL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")


def _read(*path: str) -> str:
    with open(os.path.join(_SQL, *path), encoding="utf-8") as file:
        return file.read()


def _load_queries(*files: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    for file in files:
        text = _read(file)
        parts = _BLOCK_HEADER.split(text)
        # parts = [preamble, name1, body1, name2, body2, ...]
        for name, body in zip(parts[1::2], parts[2::2]):
            if name in queries:
                raise RuntimeError(f"{file}: statement {name!r} is named twice")
            queries[name] = body.strip()
    return queries


QUERIES: dict[str, str] = _load_queries("queries.sql", "dashboard.sql")

#: The statements a worker runs for every claim and every write of outcomes.
#: Each connection prepares them on first use: planning the claim takes
#: longer than running it, and a job waits for it.
PREPARED = frozenset({"claim_due_jobs", "claim_limited_jobs", "record_successes",
                      "record_successes_handing_on", "record_outcomes", "renew_leases",
                      "seconds_until_next_due"})
_PARAMETER = re.compile(r"%\((\w+)\)s")


def prepared_form(name: str) -> tuple[str, str]:
    """The PREPARE of a named statement, and the EXECUTE that passes its
    named parameters as $1, $2, ... in order of first use."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"
    body = _PARAMETER.sub(number, QUERIES[name]).rstrip().rstrip(";").replace("%%", "%")
    arguments = ", ".join(f"%({n})s" for n in names)
    return (f"PREPARE motir_{name} AS {body}",
            f"EXECUTE motir_{name}" + (f" ({arguments})" if names else ""))


@dataclasses.dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations() -> list[Migration]:
    migrations = []
    for name in os.listdir(os.path.join(_SQL, "migrations")):
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", name)
        if match:
            migrations.append(Migration(int(match[1]), match[2], _read("migrations", name)))
    return sorted(migrations, key=lambda m: m.version)
