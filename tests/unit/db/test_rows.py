"""db.rows: rows read by their columns' names, whatever order a statement
returns them in."""

from typing import NamedTuple

import pytest

from motir_supervisor import db


class Pair(NamedTuple):
    id: int
    state: str


def test_a_row_is_read_by_its_columns_names_in_any_order():
    rows = db.Rows(Pair)
    assert rows.of(db.Result(("id", "state"), [(1, "a"), (2, "b")])) == [(1, "a"), (2, "b")]
    assert rows.of(db.Result(("state", "extra", "id"), [("a", 0, 1)])) == [Pair(1, "a")]
    assert rows.of(db.Result(("id", "state"), [(1, "a"), (2, "b")]), start=1) == [Pair(2, "b")]
    assert type(rows.of(db.Result(("id", "state"), [(1, "a")]))[0]) is Pair


def test_a_claim_is_read_with_the_names_a_run_gives_its_columns():
    names = ("id", "queue", "kind", "payload", "attempts", "max_attempts", "checkpoint",
             "priority", "more_due", "waited", "trace_context", "generation")
    result = db.Result(names, [(7, "q", "k", "{}", 1, 5, None, 2, True, 0.5, None, 3)])
    job, = db.rows.CLAIMED.of(result)
    assert job == db.ClaimedJob(7, "q", "k", "{}", 1, 5, None, 2, 0.5, None, 3)
    assert result.value("more_due") is True


def test_a_column_missing_or_named_twice_is_an_error():
    with pytest.raises(LookupError):
        db.Rows(Pair).of(db.Result(("id", "status"), [(1, "a")]))
    with pytest.raises(LookupError):
        db.Rows(Pair).of(db.Result(("id", "state", "state"), [(1, "a", "b")]))


def test_a_value_or_a_column_is_read_by_its_name():
    result = db.Result(("written", "id"), [([1, 2], None)])
    assert result.value("written") == [1, 2] and result.column("id") == [None]
    assert db.Result((), []).value("x", False) is False
