"""db.statements: every query the code names exists in the SQL files, each
block's header declares what it names, and the migrations are numbered
without gaps."""

import re
from pathlib import Path

from motir_supervisor import db


def test_every_query_the_code_names_exists():
    package = Path(db.__file__).parent.parent
    source = "\n".join(path.read_text() for folder in ("db", "web/dashboard")
                       for path in sorted((package / folder).glob("*.py")))
    named = set(re.findall(r'(?:run|count|text_of)\("([a-z_]+)"', source))
    named |= set(re.findall(r'QUERIES\["([a-z_]+)"\]', source))
    assert len(named) > 15
    assert named <= set(db.QUERIES)
    assert all(body.strip() for body in db.QUERIES.values())


def test_migrations_are_numbered_without_gaps():
    versions = [m.version for m in db.load_migrations()]
    assert versions == list(range(1, len(versions) + 1))


def test_a_statement_is_sent_after_what_its_header_declares():
    assert db.text_of("claim_limited_jobs") == "\n".join(
        [db.QUERIES["lock_limited_claims"], db.QUERIES["claim_limited_jobs"]])
    assert db.text_of("record_successes_handing_on").startswith(
        db.QUERIES["read_committed"] + "\n" + db.QUERIES["generic_plan"] + "\n")
    assert db.text_of("claim_due_jobs") == db.QUERIES["claim_due_jobs"]
    assert db.DECLARED["claim_limited_jobs"].plan == "generic_plan"
    read_committed = {name for name, said in db.DECLARED.items()
                      if said.after[:1] == ("read_committed",)}
    assert {"record_successes", "record_outcomes", "record_successes_handing_on",
            "release_claims_of", "expire_stale_leases", "pause_queue"} <= read_committed
    assert db.PREPARED == {"claim_due_jobs", "claim_limited_jobs", "record_successes",
                           "record_successes_handing_on", "record_outcomes", "renew_leases",
                           "seconds_until_next_due"}
