"""The testing helpers that check what a piece of code enqueued:
assert_enqueued, refute_enqueued and all_enqueued, on the test's connection
and in its transaction, each passing and failing, and what a failure says."""

import datetime

import psycopg2
import pytest

from motir_supervisor import enqueue
from motir_supervisor.testing import all_enqueued, assert_enqueued, refute_enqueued

UTC = datetime.timezone.utc


@pytest.fixture
def conn(database_url):
    """The test's own connection, in a transaction it never commits."""
    connection = psycopg2.connect(database_url)
    yield connection
    connection.close()


def sign_up(conn, email):
    """The code under test: enqueues two jobs in the caller's transaction."""
    enqueue(conn, "send_email", {"to": email, "template": {"name": "welcome", "lang": "fr"}},
            queue="mail", priority=-5, unique_key=f"welcome:{email}", max_attempts=3)
    enqueue(conn, "sync_crm", {"email": email}, delay=3600)


def test_assert_enqueued_finds_the_job_by_kind_payload_and_options(conn):
    sign_up(conn, "a@b.c")
    job = assert_enqueued(conn, "send_email", {"to": "a@b.c"})
    assert job.kind == "send_email" and job.payload["to"] == "a@b.c"
    assert_enqueued(conn, "send_email", {"template": {"name": "welcome"}}, queue="mail",
                    priority=-5, unique_key="welcome:a@b.c", max_attempts=3,
                    concurrency_key=None, count=1)
    in_an_hour = datetime.datetime.now(UTC) + datetime.timedelta(hours=1)
    assert_enqueued(conn, "sync_crm", run_at=in_an_hour, within=5)
    assert_enqueued(conn, "sync_crm", run_at=in_an_hour, within=datetime.timedelta(seconds=5))
    assert_enqueued(conn, "sync_crm", unique_key=None)


def test_assert_enqueued_fails_listing_what_was_enqueued_instead(conn):
    sign_up(conn, "a@b.c")
    with pytest.raises(AssertionError) as failed:
        assert_enqueued(conn, "send_email", {"to": "x@y.z"}, queue="mail")
    message = str(failed.value)
    assert message.startswith("expected a pending job of kind 'send_email', with a payload"
                              " holding {'to': 'x@y.z'}, queue 'mail'; none matched\n")
    assert "Pending jobs (2), oldest first:" in message
    lines = message.splitlines()
    assert "'send_email' payload={'to': 'a@b.c'" in lines[2] and lines[2].endswith(
        "<- payload differs")
    assert "'sync_crm'" in lines[3] and lines[3].endswith(
        "<- kind 'sync_crm'; payload differs; queue 'default'")


@pytest.mark.parametrize("expectation", [
    {"kind": "send_sms"},
    {"kind": "send_email", "payload": {"template": {"name": "goodbye"}}},
    {"kind": "send_email", "payload": {"to": "a@b.c", "cc": "d@e.f"}},
    {"kind": "send_email", "priority": 0},
    {"kind": "send_email", "max_attempts": 5},
    {"kind": "send_email", "unique_key": None},
    {"kind": "send_email", "queue": "default"},
    {"kind": "sync_crm", "run_at": datetime.datetime.now(UTC), "within": 5},
    {"kind": "send_email", "count": 2},
])
def test_assert_enqueued_fails_on_each_thing_that_differs(conn, expectation):
    sign_up(conn, "a@b.c")
    with pytest.raises(AssertionError):
        assert_enqueued(conn, **expectation)


def test_only_pending_jobs_count_and_only_what_the_transaction_sees(conn, sql, database_url):
    sql.rows("INSERT INTO job_queue (kind, state, finished_at)"
             " VALUES ('send_email', 'succeeded', now())")
    with pytest.raises(AssertionError, match="none matched\nNo job is pending."):
        assert_enqueued(conn, "send_email")
    other = psycopg2.connect(database_url)
    enqueue(other, "send_email")  # not committed: this transaction cannot see it
    refute_enqueued(conn)
    other.close()


def test_refute_enqueued_passes_when_nothing_matches_and_lists_what_did(conn):
    refute_enqueued(conn)
    sign_up(conn, "a@b.c")
    refute_enqueued(conn, "send_sms")
    refute_enqueued(conn, "send_email", {"to": "x@y.z"})
    refute_enqueued(conn, "sync_crm", queue="mail")
    with pytest.raises(AssertionError) as failed:
        refute_enqueued(conn, "send_email", {"to": "a@b.c"})
    message = str(failed.value)
    assert message.startswith("expected no pending job of kind 'send_email', with a payload"
                              " holding {'to': 'a@b.c'}; 1 matched\n")
    assert "sync_crm" not in message
    with pytest.raises(AssertionError, match="expected no pending job of any kind; 2 matched"):
        refute_enqueued(conn)


def test_all_enqueued_gives_the_matching_jobs_oldest_first(conn):
    assert all_enqueued(conn) == []
    sign_up(conn, "a@b.c")
    sign_up(conn, "d@e.f")
    assert [(j.kind, j.payload.get("to") or j.payload["email"]) for j in all_enqueued(conn)] == [
        ("send_email", "a@b.c"), ("sync_crm", "a@b.c"), ("send_email", "d@e.f"),
        ("sync_crm", "d@e.f")]
    assert [j.payload["to"] for j in all_enqueued(conn, "send_email", queue="mail")] == [
        "a@b.c", "d@e.f"]
    assert [j.payload["email"] for j in all_enqueued(conn, payload={"email": "d@e.f"})] == [
        "d@e.f"]
    with pytest.raises(AssertionError, match="2 matched"):
        assert_enqueued(conn, "send_email", count=1)
    conn.rollback()
    assert all_enqueued(conn) == []


def test_bad_expectations_raise_at_once(conn):
    with pytest.raises(TypeError, match="aware datetime"):
        assert_enqueued(conn, "x", run_at=datetime.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="count"):
        assert_enqueued(conn, "x", count=0)
    with pytest.raises(TypeError, match="JSON"):
        all_enqueued(conn, payload={"at": datetime.datetime.now(UTC)})
