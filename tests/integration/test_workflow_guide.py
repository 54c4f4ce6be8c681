"""The SQL of docs/workflows.md run against the migrated schema, in the
page's order, as a role with only the grants the page documents: every
statement runs, and the statements whose transcript shows an error fail
with that error."""

from __future__ import annotations

import re
import uuid

import psycopg2
import pytest
from psycopg2.extensions import TRANSACTION_STATUS_IDLE

from tests.helpers import ROOT

GUIDE = ROOT / "docs" / "workflows.md"
FENCE = re.compile(r"^```(\w*)\s*$")
#: A statement of the page ends a line with its semicolon (a comment may follow).
STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?\n")
#: The grants a role that enqueues needs without dependencies (job-model.md).
ENQUEUE_GRANTS = ("GRANT SELECT, INSERT ON job_queue TO {role};"
                  " GRANT SELECT ON job_queue_limits, job_queue_kinds TO {role}")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, in order; "" for a plain one."""
    blocks, language, body = [], None, []
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if language is None and match:
            language, body = match.group(1), []
        elif language is not None and line.strip() == "```":
            blocks.append((language, "\n".join(body) + "\n"))
            language = None
        elif language is not None:
            body.append(line)
    return blocks


def sql_examples(text: str) -> list[tuple[list[str], list[str]]]:
    """Each sql block's statements, with the errors the transcript after it shows."""
    blocks = fenced_blocks(text)
    examples = []
    for i, (language, body) in enumerate(blocks):
        if language != "sql":
            continue
        shown = blocks[i + 1][1] if i + 1 < len(blocks) and blocks[i + 1][0] == "" else ""
        errors = [line[len("ERROR:"):].strip() for line in shown.splitlines()
                  if line.startswith("ERROR:")]
        statements = [s.strip() for s in STATEMENT_END.split(body) if s and s.strip()]
        examples.append((statements, errors))
    return examples


def ids_masked(message: str) -> str:
    # The ids of an error depend on what ran before it on that database.
    return re.sub(r"\d+", "N", message)


@pytest.fixture
def guide_role(sql):
    role = f"guide_{uuid.uuid4().hex[:12]}"
    sql.rows(f"CREATE ROLE {role}")
    yield role
    sql.rows(f"DROP OWNED BY {role}")
    sql.rows(f"DROP ROLE {role}")


def test_the_guides_sql_runs_as_shown_with_the_grants_it_documents(
        database_url, sql, guide_role):
    examples = sql_examples(GUIDE.read_text())
    grants = [statements for statements, _ in examples
              if statements and all(s.startswith("GRANT ") for s in statements)]
    assert len(grants) == 1, "the page's Permissions section has one block of GRANTs"
    for statement in grants[0]:
        sql.rows(statement.replace("webapp", guide_role))
    sql.rows(ENQUEUE_GRANTS.format(role=guide_role))

    conn = psycopg2.connect(database_url)
    conn.autocommit = True
    problems = []
    try:
        with conn.cursor() as cur:
            cur.execute(f"SET ROLE {guide_role}")
            # The transcripts were taken with the examples of errors last: the
            # ids the others name follow from that order.
            ordered = sorted((e for e in examples if e[0] is not grants[0]),
                             key=lambda example: bool(example[1]))
            for statements, shown in ordered:
                raised = []
                for statement in statements:
                    try:
                        cur.execute(statement)
                    except psycopg2.Error as e:
                        raised.append(e.diag.message_primary)
                        if conn.info.transaction_status != TRANSACTION_STATUS_IDLE:
                            cur.execute("ROLLBACK")
                if [ids_masked(m) for m in raised] != [ids_masked(m) for m in shown]:
                    problems.append(f"{statements[0][:60]!r}...: raised {raised}, the page shows"
                                    f" {shown}")
    finally:
        conn.close()
    assert not problems, problems
