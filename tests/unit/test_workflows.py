"""The workflow and batch builders' checks, made before anything is sent:
step names, what ``after`` may name, unknown refs and cycles, callbacks;
and enqueue's depends_on and on_parent_failure. A connection of no driver
stands in for the database: reaching it is a TypeError naming it, so a
ValueError raised instead was raised before."""

import pytest

from motir_supervisor import Batch, batch, enqueue, enqueue_many, open_batch, workflow
from motir_supervisor.batches import _callback_json


class NoDriver:
    """Not a connection: sending anything to it raises TypeError."""


def test_steps_are_named_by_their_kind_then_numbered():
    wf = workflow(NoDriver(), "index")
    names = [wf.add(kind).ref for kind in ("fetch", "embed", "embed", "embed")]
    assert names == ["fetch", "embed", "embed.2", "embed.3"]
    assert wf.add("embed", ref="last").ref == "last"
    with pytest.raises(ValueError, match="has a step 'fetch' already"):
        wf.add("other", ref="fetch")
    assert [step.id for step in (wf.add("x"),)] == [None]


def test_after_names_this_workflow_s_steps_or_their_refs():
    wf, other = workflow(NoDriver(), "a"), workflow(NoDriver(), "b")
    foreign = other.add("fetch")
    with pytest.raises(ValueError, match="a step of another workflow"):
        wf.add("embed", after=[foreign])
    with pytest.raises(TypeError, match="depends_on"):
        wf.add("embed", after=[7])
    with pytest.raises(TypeError, match="after must be a list"):
        wf.add("embed", after="fetch")
    with pytest.raises(TypeError, match="workflow 'a', step 'fetch': priority must be an int"):
        wf.add("fetch", priority="high")
    wf.add("embed", after=["later"])  # a ref may come before its step


@pytest.mark.parametrize("build, message", [
    (lambda wf: [wf.add("a"), wf.add("b", after=["nope"])],
     "workflow 'w': step 'b' is after 'nope', which is no step of it"),
    (lambda wf: [wf.add("a", after=["c"]), wf.add("b", after=["a"]), wf.add("c", after=["b"]),
                 wf.add("d")],
     "workflow 'w': its steps wait for one another in a cycle: 'a' after 'c' after 'b' after"
     " 'a'"),
    (lambda wf: [wf.add("d"), wf.add("a", after=["a", "d"])],
     "workflow 'w': its steps wait for one another in a cycle: 'a' after 'a'"),
    (lambda wf: None, "workflow 'w' has no step"),
])
def test_a_bad_graph_is_one_line_raised_before_anything_is_sent(build, message):
    with pytest.raises(ValueError) as raised:
        with workflow(NoDriver(), "w") as wf:
            build(wf)
    assert str(raised.value) == message


def test_a_sound_graph_reaches_the_connection():
    with pytest.raises(TypeError, match="conn must be"):
        with workflow(NoDriver(), "w") as wf:
            a = wf.add("a")
            wf.add("b", after=[a, "c"])
            wf.add("c", after=[a])
    with pytest.raises(RuntimeError, match="inserted when its block ended"):
        wf.add("d")


def test_a_block_that_raises_sends_nothing():
    with pytest.raises(KeyError):
        with workflow(NoDriver(), "w") as wf:
            wf.add("a", after=["missing"])
            raise KeyError("the caller's")
    with pytest.raises(KeyError):
        with batch(NoDriver(), "b") as b:
            b.add("a")
            raise KeyError("the caller's")


def test_an_async_connection_asks_for_async_with_and_the_async_twins():
    psycopg = pytest.importorskip("psycopg")
    conn = psycopg.AsyncConnection.__new__(psycopg.AsyncConnection)
    with pytest.raises(TypeError, match="async with"):
        with workflow(conn, "w") as wf:
            wf.add("a")
    with pytest.raises(TypeError, match="await open_batch_async"):
        open_batch(conn)
    with pytest.raises(TypeError, match="await the Batch's _async methods"):
        Batch(conn, 1).add("a")


@pytest.mark.parametrize("callback, wanted", [
    ("notify", '{"kind": "notify", "payload": {}}'),
    (("notify", {"user": 3}), '{"kind": "notify", "payload": {"user": 3}}'),
    ({"kind": "notify", "queue": "mail", "priority": -1, "max_attempts": 2},
     '{"kind": "notify", "payload": {}, "queue": "mail", "priority": -1, "max_attempts": 2}'),
])
def test_a_callback_is_a_kind_a_pair_or_a_dict(callback, wanted):
    assert _callback_json("on_success", callback) == wanted


@pytest.mark.parametrize("callback, error, message", [
    ({"kind": "n", "delay": 3}, TypeError, "on_success takes kind, payload, queue, priority"
                                           " and max_attempts, not 'delay'"),
    ({"payload": {}}, TypeError, "on_success needs a kind"),
    (("n", float("nan")), ValueError, "on_success: payload cannot be stored as JSON"),
    (["n", {}], TypeError, "on_success must be a kind, (kind, payload) or a dict"),
])
def test_a_bad_callback_is_refused_before_anything_is_sent(callback, error, message):
    for make in (lambda: batch(NoDriver(), on_success=callback),
                 lambda: open_batch(NoDriver(), on_success=callback)):
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            make()


def test_a_batch_member_is_checked_as_enqueue_checks_a_job():
    b = batch(NoDriver(), "b")
    with pytest.raises(TypeError) as raised:
        b.add("a", after=[])
    assert str(raised.value) == "batch 'b', member 1: enqueue takes no argument 'after'"
    with pytest.raises(ValueError, match="batch 'b', member 1: on_parent_failure must be"):
        b.add("a", on_parent_failure="skip")
    assert b.add("a", depends_on=[1]).ref is None
    with pytest.raises(ValueError, match="batch 'b', member 2: concurrency_key must not be"):
        b.add("a", concurrency_key="")
    with pytest.raises(TypeError) as raised:
        Batch(NoDriver(), 7).add("a", priority="high")
    assert str(raised.value) == "batch 7's member: priority must be an int or None, not 'high'"
    with pytest.raises(TypeError, match="jobs\\[1\\]: a job needs a kind"):
        Batch(NoDriver(), 7).add_many([{"kind": "a"}, {}])


@pytest.mark.parametrize("depends_on, error, message", [
    ("12", TypeError, "depends_on must be a list of job ids, not '12'"),
    (12, TypeError, "depends_on must be a list of job ids, not 12"),
    ([1, "2"], TypeError, "depends_on must hold job ids \\(int\\), not '2'"),
    ([True], TypeError, "depends_on must hold job ids \\(int\\), not True"),
    ([0], ValueError, "depends_on must hold job ids \\(1 and up\\), not 0"),
    ([2 ** 63], ValueError, "depends_on must hold job ids"),
])
def test_depends_on_takes_job_ids_only(depends_on, error, message):
    with pytest.raises(error, match=message):
        enqueue(NoDriver(), "a", depends_on=depends_on)
    with pytest.raises(error, match="jobs\\[1\\]: " + message):
        enqueue_many(NoDriver(), [{"kind": "a"}, {"kind": "a", "depends_on": depends_on}])


def test_on_parent_failure_is_cancel_or_run():
    for policy in ("skip", None, "CANCEL"):
        with pytest.raises(ValueError, match="on_parent_failure must be 'cancel' or 'run'"):
            enqueue(NoDriver(), "a", depends_on=[1], on_parent_failure=policy)
    for policy in ("cancel", "run"):  # reach the connection
        with pytest.raises(TypeError, match="conn must be"):
            enqueue(NoDriver(), "a", depends_on=(1, 2), on_parent_failure=policy)


def test_steps_go_to_the_database_each_after_those_it_waits_for_else_as_added():
    from motir_supervisor.workflows import _in_order

    assert _in_order({"a": ["c"], "b": [], "c": ["b"], "d": [], "e": ["a", "d"]}) == (
        ["b", "c", "a", "d", "e"], [])
    assert _in_order({"a": [], "b": ["c"], "c": ["b"]}) == (["a"], ["b", "c", "b"])


def test_a_job_that_waits_cannot_have_a_unique_key():
    message = "a job that waits for others \\(depends_on\\) cannot have a unique_key"
    with pytest.raises(ValueError, match=message):
        enqueue(NoDriver(), "a", depends_on=[1], unique_key="k")
    with pytest.raises(ValueError, match="jobs\\[0\\]: " + message):
        enqueue_many(NoDriver(), [{"kind": "a", "depends_on": [1], "unique_key": "k"}])
    wf = workflow(NoDriver(), "w")
    first = wf.add("a", unique_key="k")  # a first step is pending at once: it may
    with pytest.raises(ValueError, match="workflow 'w', step 'b': " + message):
        wf.add("b", after=[first], unique_key="k2")
    with pytest.raises(ValueError, match="workflow 'w', step 'c': " + message):
        wf.add("c", depends_on=[1], unique_key="k2")
    with pytest.raises(ValueError, match="batch 'b', member 1: " + message):
        batch(NoDriver(), "b").add("m", depends_on=[1], unique_key="k")
