"""The SQL text the package runs: the named statements of
``sql/queries.sql`` and ``sql/dashboard.sql`` (the dashboard's reads), what
each block's header declares of how it is sent, and the prepared form of
the hot ones.

Nothing here connects; :mod:`.session` and the modules that run statements
on a connection of the caller's send exactly what these say.
"""

from __future__ import annotations

import os
import re
from typing import NamedTuple

#: A block's first line: its name, then what it declares (see queries.sql).
_BLOCK_HEADER = re.compile(r"^-- ([a-z_]+) --(.*)$", re.MULTILINE)
#: The SQL files lie beside this module: every install (a wheel, an editable
#: one, the Dockerfile's) unpacks the package as files. Read with os, not
#: importlib.resources, whose imports (tempfile, zipfile, pathlib) would be a
#: noticeable share of a supervisor's start, paid again on every restart.
SQL_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sql")


class Declared(NamedTuple):
    """What a block's header declares of how its statement is sent."""

    #: Each connection that prepares prepares it on first use.
    prepared: bool = False
    #: The statements sent before it in the same query string, hence in its
    #: implicit transaction, in this order.
    after: tuple[str, ...] = ()
    #: When it is prepared, its plan is made at once by an EXPLAIN of it
    #: sent after this statement.
    plan: str | None = None


def read_sql(*path: str) -> str:
    with open(os.path.join(SQL_FOLDER, *path), encoding="utf-8") as file:
        return file.read()


def _declared(file: str, name: str, header: str) -> Declared:
    said: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in header.split(";"))):
        key, _, value = part.partition(":")
        said[key.strip()] = value.strip()
    if set(said) - {"prepared", "after", "plan"} or said.get("prepared") \
            or "" in (said.get("after"), said.get("plan")):
        raise RuntimeError(f"{file}: statement {name!r} declares {header.strip()!r}")
    after = tuple(a.strip() for a in said["after"].split(",")) if "after" in said else ()
    return Declared("prepared" in said, after, said.get("plan"))


def _load_queries(*files: str) -> tuple[dict[str, str], dict[str, Declared]]:
    queries: dict[str, str] = {}
    declared: dict[str, Declared] = {}
    for file in files:
        parts = _BLOCK_HEADER.split(read_sql(file))
        # parts = [preamble, name1, header1, body1, name2, header2, body2, ...]
        for name, header, body in zip(parts[1::3], parts[2::3], parts[3::3]):
            if name in queries:
                raise RuntimeError(f"{file}: statement {name!r} is named twice")
            queries[name] = body.strip()
            declared[name] = _declared(file, name, header)
    for name, said in declared.items():
        for other in (*said.after, *filter(None, [said.plan])):
            if other not in queries:
                raise RuntimeError(f"statement {name!r} is sent after {other!r}, named nowhere")
    return queries, declared


QUERIES, DECLARED = _load_queries("queries.sql", "dashboard.sql")

#: The statements a worker runs for every claim and every write of outcomes,
#: declared ``prepared``: planning the claim takes longer than running it,
#: and a job waits for it.
PREPARED = frozenset(name for name, said in DECLARED.items() if said.prepared)
_PARAMETER = re.compile(r"%\((\w+)\)s")


def numbered(text: str) -> tuple[str, list[str]]:
    """``text`` with its named parameters as $1, $2, ... in order of first
    use, and their names in that order."""
    names: list[str] = []

    def number(match: re.Match) -> str:
        if match[1] not in names:
            names.append(match[1])
        return f"${names.index(match[1]) + 1}"
    return _PARAMETER.sub(number, text).replace("%%", "%"), names


def prepared_form(name: str) -> tuple[str, str]:
    """The PREPARE of a named statement, and the EXECUTE that passes its
    named parameters as $1, $2, ... in order of first use."""
    body, names = numbered(QUERIES[name].rstrip().rstrip(";"))
    arguments = ", ".join(f"%({n})s" for n in names)
    return (f"PREPARE motir_{name} AS {body}",
            f"EXECUTE motir_{name}" + (f" ({arguments})" if names else ""))


def sent_with(name: str, statement: str) -> str:
    """``statement`` (the block ``name``, or its EXECUTE) after what the
    block declares to go before it, as one query string. Read from QUERIES
    at each call, so that a statement replaced at start-up (as the tests'
    negative controls replace the claim's lock) is the one sent."""
    after = DECLARED[name].after
    if not after:
        return statement
    return "\n".join([*(QUERIES[a] for a in after), statement])


def text_of(name: str) -> str:
    """The whole query string of the block ``name``, as sent unprepared."""
    return sent_with(name, QUERIES[name])
