"""The dashboard's workflows and batches over HTTP (WSGI, against the real
database): the drawing of a workflow's graph, its steps' errors and
outputs, "retry this step" and what the database then brings back, the
lists of workflows and batches, and the cap on what a large workflow draws."""

import html
import re
import time

import psycopg2.extras

from motir_supervisor.web.dashboard.drawing import SIBLINGS_KEPT
from motir_supervisor.web.dashboard.reads import DRAWN_AT_EACH_END
from tests.dashboard_client import credentials, csrf_token, page, post
from tests.helpers import state_of

#: A drawn step: <g class="step STATE" data-job=ID data-step=NAME data-state=STATE>.
STEP_BOX = re.compile(r'<g class="step (\w+)" data-job="(\d+)" data-step="([^"]*)"'
                      r' data-state="(\w+)">')
EDGE = re.compile(r'<path class="edge" d="M [^"]+" marker-end="url\(#arrow\)"\s+'
                  r'data-parent="([^"]+)" data-child="([^"]+)"/>')


def make_workflow(sql, name, steps):
    """{ref: job id} of the workflow inserted, and its id."""
    rows = sql.rows("SELECT workflow_id, ref, job_id FROM job_queue_workflow(%s, %s)",
                    (name, psycopg2.extras.Json(steps)))
    return rows[0][0], {ref: job_id for _, ref, job_id in rows}


def end(sql, job_id, state, **columns):
    """End a step as a worker's outcome would (the database then releases
    or cancels its dependents in the same transaction)."""
    sets = ", ".join(f"{name} = %s" for name in columns)
    sql.rows(f"UPDATE job_queue SET state = %s, finished_at = now()"
             f"{', ' + sets if sets else ''} WHERE id = %s",
             (state, *columns.values(), job_id))


def drawn_steps(text):
    """{job id: (step, state)} of the boxes drawn."""
    found = {}
    for css_state, job_id, step, state in STEP_BOX.findall(text):
        assert css_state == state
        found[int(job_id)] = (html.unescape(step), state)
    return found


def test_a_workflow_page_draws_its_steps_in_their_states_with_their_edges(client, sql):
    workflow_id, ids = make_workflow(sql, "index_repo", [
        {"ref": "fetch", "kind": "noop"},
        {"ref": "embed_a", "kind": "noop", "after": ["fetch"]},
        {"ref": "embed_b", "kind": "noop", "after": ["fetch"]},
        {"ref": "publish", "kind": "noop", "after": ["embed_a", "embed_b"]},
        {"ref": "notify", "kind": "noop", "after": ["publish"]},
    ])
    text = page(client, f"/workflows/{workflow_id}")
    assert f"Workflow {workflow_id}: index_repo" in text
    assert drawn_steps(text) == {
        ids["fetch"]: ("fetch", "pending"), ids["embed_a"]: ("embed_a", "waiting"),
        ids["embed_b"]: ("embed_b", "waiting"), ids["publish"]: ("publish", "waiting"),
        ids["notify"]: ("notify", "waiting")}
    edges = {(int(p), int(c)) for p, c in EDGE.findall(text)}
    assert edges == set(sql.rows("SELECT parent_id, child_id FROM job_queue_edges"))
    assert len(edges) == 5
    # The steps counted by state, waiting among them.
    counts = dict(re.findall(r'<td class="count (\w+)" data-state="\w+">(\d+)</td>', text))
    assert counts["waiting"] == "4" and counts["pending"] == "1" and counts["failed"] == "0"

    end(sql, ids["fetch"], "succeeded", output=psycopg2.extras.Json({"files": ["<a.py>"]}))
    end(sql, ids["embed_a"], "failed", attempts=3,
        last_error="ValueError: <bad> vector\nTraceback (innermost last):\n  embed.py")
    text = page(client, f"/workflows/{workflow_id}")
    states = {step: state for step, state in drawn_steps(text).values()}
    assert states == {"fetch": "succeeded", "embed_a": "failed", "embed_b": "pending",
                      "publish": "cancelled", "notify": "cancelled"}
    # Each step's error and output, escaped.
    assert "ValueError: &lt;bad&gt; vector" in text and "<bad>" not in text
    assert "&lt;a.py&gt;" in text


def test_retry_this_step_brings_its_cancelled_descendants_back_to_waiting(client, sql):
    workflow_id, ids = make_workflow(sql, "charge", [
        {"ref": "charge", "kind": "noop"},
        {"ref": "receipt", "kind": "noop", "after": ["charge"]},
        {"ref": "thank", "kind": "noop", "after": ["receipt"]},
    ])
    end(sql, ids["charge"], "failed", last_error="CardDeclined")
    assert [state_of(sql, ids[r]) for r in ("receipt", "thank")] == ["cancelled", "cancelled"]
    text = page(client, f"/workflows/{workflow_id}")
    action = f"/workflows/{workflow_id}/steps/{ids['charge']}/retry"
    assert f'action="{action}"' in text
    # The steps its failure cancelled point at it rather than offer a retry
    # of their own.
    assert text.count(f'back to waiting when <a href="/jobs/{ids["charge"]}">') == 2
    assert f"/steps/{ids['receipt']}/retry" not in text
    # Only with the session's token.
    assert post(client, action, "forged").status_code == 400
    assert state_of(sql, ids["charge"]) == "failed"
    # A job of another workflow is not retried through this one.
    other, other_ids = make_workflow(sql, "other", [{"ref": "x", "kind": "noop"}])
    end(sql, other_ids["x"], "failed")
    assert post(client, f"/workflows/{workflow_id}/steps/{other_ids['x']}/retry",
                csrf_token(text)).status_code == 404
    assert state_of(sql, other_ids["x"]) == "failed"

    response = post(client, action, csrf_token(text))
    assert response.status_code == 303
    assert response.headers["Location"].endswith(f"/workflows/{workflow_id}")
    assert [state_of(sql, ids[r]) for r in ("charge", "receipt", "thank")] == [
        "pending", "waiting", "waiting"]
    text = page(client, f"/workflows/{workflow_id}")
    assert "it is pending again with fresh attempts" in text
    assert {step: state for step, state in drawn_steps(text).values()} == {
        "charge": "pending", "receipt": "waiting", "thank": "waiting"}


def test_a_steps_page_links_to_its_workflow_and_its_parents(client, sql):
    workflow_id, ids = make_workflow(sql, "pair", [
        {"ref": "first", "kind": "noop"},
        {"ref": "second", "kind": "noop", "after": ["first"], "on_parent_failure": "run"},
    ])
    text = page(client, f"/jobs/{ids['second']}")
    assert f'href="/workflows/{workflow_id}">workflow {workflow_id}: pair</a>, step second' in text
    assert f'<a href="/jobs/{ids["first"]}">job {ids["first"]}</a> (first)' in text
    assert "this job runs anyway" in text
    assert "Waited for by</th><td>1 job<" in page(client, f"/jobs/{ids['first']}")


def test_the_workflows_list_counts_each_ones_steps_by_state(client, sql):
    first, _ = make_workflow(sql, "older", [{"ref": "a", "kind": "noop"}])
    second, ids = make_workflow(sql, "<newer>", [
        {"ref": "a", "kind": "noop"}, {"ref": "b", "kind": "noop", "after": ["a"]}])
    text = page(client, "/workflows")
    assert text.index(f'data-workflow="{second}"') < text.index(f'data-workflow="{first}"')
    assert "&lt;newer&gt;" in text and "<newer>" not in text
    assert "<th class=\"count\">Waiting</th>" in text
    row = text[text.index(f'data-workflow="{second}"'):text.index(f'data-workflow="{first}"')]
    assert '<td class="count waiting" data-state="waiting">1</td>' in row
    assert '<td class="count pending" data-state="pending">1</td>' in row
    assert 'href="/workflows"' in page(client, "/")  # in the menu


def test_batches_show_their_members_by_state_and_their_callbacks(client, sql):
    batch_id = sql.value(
        "SELECT job_queue_batch('import', %s, %s, %s)",
        (psycopg2.extras.Json([{"kind": "noop"}, {"kind": "noop"}, {"kind": "noop"}]),
         psycopg2.extras.Json({"kind": "notify"}), psycopg2.extras.Json({"kind": "tidy"})))
    members = [row[0] for row in sql.rows(
        "SELECT id FROM job_queue WHERE batch_id = %s ORDER BY id", (batch_id,))]
    on_success, on_complete = sql.rows(
        "SELECT on_success, on_complete FROM job_queue_batches WHERE id = %s", (batch_id,))[0]
    end(sql, members[0], "succeeded")
    end(sql, members[1], "failed")
    for text in (page(client, "/batches"), page(client, f"/batches/{batch_id}")):
        row = text[text.index(f'data-batch="{batch_id}"'):]
        assert '<td class="count succeeded" data-state="succeeded">1</td>' in row
        assert '<td class="count failed" data-state="failed">1</td>' in row
        assert '<td class="count pending" data-state="pending">1</td>' in row
        success = row[row.index('class="on-success"'):row.index('class="on-complete"')]
        assert f"job {on_success}</a>" in success and ">cancelled<" in success
        complete = row[row.index('class="on-complete"'):]
        assert f"job {on_complete}</a>" in complete and ">waiting<" in complete
    assert f'href="/batches/{batch_id}">batch {batch_id}</a>' in page(client, f"/jobs/{members[0]}")
    assert f'href="/batches/{batch_id}">batch {batch_id}</a>' in page(client, f"/jobs/{on_success}")


def test_a_large_workflow_draws_its_ends_and_says_how_many_it_leaves_out(client, sql):
    chain = [{"ref": "s0", "kind": "noop"}] + [
        {"ref": f"s{n}", "kind": "noop", "after": [f"s{n - 1}"]} for n in range(1, 1000)]
    chain_id, chain_ids = make_workflow(sql, "chain", chain)
    fan = [{"ref": "split", "kind": "noop"}] + [
        {"ref": f"part{n}", "kind": "noop", "after": ["split"]} for n in range(10_000)] + [
        {"ref": "join", "kind": "noop", "after": [f"part{n}" for n in range(10_000)]}]
    fan_id, fan_ids = make_workflow(sql, "fan", fan)
    end(sql, fan_ids["split"], "succeeded")
    end(sql, fan_ids["part5000"], "failed", last_error="one part failed")

    # The chain's first and last steps; the fan's split and join, and the
    # first of its parts.
    for workflow_id, steps, boxes in ((chain_id, 1000, 2 * DRAWN_AT_EACH_END),
                                      (fan_id, 10_002, 2 + SIBLINGS_KEPT)):
        began = time.monotonic()
        text = page(client, f"/workflows/{workflow_id}")
        assert time.monotonic() - began < 5
        drawn = drawn_steps(text)
        assert len(drawn) == boxes
        assert f"This workflow has {steps} steps" in text
        assert f">{steps - boxes} more steps</text>" in text
    # The fan-in is drawn, the box of the parts not drawn leading to it.
    assert fan_ids["join"] in drawn and fan_ids["split"] in drawn
    assert (str(fan_ids["split"]), "not drawn") in EDGE.findall(text)
    assert ("not drawn", str(fan_ids["join"])) in EDGE.findall(text)
    # The failed part is not drawn but listed, with its retry.
    assert fan_ids["part5000"] not in drawn
    assert f"/workflows/{fan_id}/steps/{fan_ids['part5000']}/retry" in text
    drawn = drawn_steps(page(client, f"/workflows/{chain_id}"))
    assert chain_ids["s0"] in drawn and chain_ids["s999"] in drawn
    assert chain_ids["s500"] not in drawn


def test_an_unknown_workflow_or_batch_is_not_found(client):
    for path in ("/workflows/987654", "/batches/987654", f"/workflows/{2**63}"):
        assert client.get(path, headers=credentials()).status_code == 404
    assert client.get("/workflows?before=0", headers=credentials()).status_code == 400


def test_the_queues_count_their_waiting_jobs(client, sql):
    make_workflow(sql, "three", [
        {"ref": "a", "kind": "noop", "queue": "mail"},
        {"ref": "b", "kind": "noop", "queue": "mail", "after": ["a"]},
        {"ref": "c", "kind": "noop", "queue": "mail", "after": ["a"]}])
    text = page(client, "/")
    assert "<th>Waiting</th>" in text
    mail = re.search(r'<tr data-queue="mail">(.*?)</tr>', text, re.S)[1]
    assert re.search(
        r'<td class="waiting"><a class="waiting-count" href="[^"]*state=waiting">2</a>', mail)
    jobs = page(client, "/jobs?state=waiting")
    assert jobs.count('<td class="state">waiting</td>') == 2
