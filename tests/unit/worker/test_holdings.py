"""worker.holdings and the worker's services: what a worker holds changes
only through the holdings' verbs (entries, budget, claims closing in order,
hand-on claims started once), and a claim in doubt at a reconnect is looked
for twice, a pass the database failed being tried again."""

import json
import types

from motir_supervisor import db
from motir_supervisor.ipc import ledger
from motir_supervisor.maintenance import services
from motir_supervisor.worker import recheck
from motir_supervisor.worker.claims import Claim
from motir_supervisor.worker.holdings import Holdings


def _jobs(*ids):
    return [db.ClaimedJob(job_id, "default", "k", json.dumps(None), 1, 5, None, 0)
            for job_id in ids]


def test_held_jobs_take_entries_and_budget_until_settled_or_withdrawn():
    entries = ledger.Ledger(8)
    holdings = Holdings(entries, 10)
    first, second = Claim(0.0, 2, 2, open=2), Claim(1.0, 1, 1, open=1)
    runs = holdings.hold(_jobs(1, 2), first) + holdings.hold(_jobs(3), second)
    assert len(holdings) == 3 and holdings.job_ids() == [1, 2, 3]
    assert holdings.claims_left == 7 and holdings.capacity() == 5
    # Claims close once all their runs have, in the order they closed.
    assert holdings.close([runs[0]]) == []
    assert holdings.close([runs[2], runs[1]]) == [second, first]
    assert holdings.open_claims() == []
    # Settled: held no more, its entry free again; the budget stays spent.
    for run in runs[:2]:
        holdings.settle(run)
    assert holdings.job_ids() == [3] and entries.free_entries() == 7
    assert holdings.claims_left == 7
    # Withdrawn: its share of the budget comes back.
    third = Claim(2.0, 1, 1, open=1)
    [run] = holdings.hold(_jobs(4), third)
    assert holdings.withdraw([run]) == [third] and holdings.claims_left == 7


def test_what_a_hand_on_claims_is_held_at_once_and_started_once():
    holdings = Holdings(ledger.Ledger(8), 10)
    claim = Claim(0.0, 1, 1, open=1, limited=True, handed_on=True)
    holdings.hold_handed_on(_jobs(5), claim)
    # Held at once, so a second hand-on in the same write sees less room.
    assert holdings.job_ids() == [5] and holdings.capacity() == 7
    assert holdings.take_handed_on() == [claim]
    assert holdings.take_handed_on() == []


class Store:
    def __init__(self, fail_first=False):
        self.fail = fail_first
        self.asked = []

    def release_claims_not_held(self, claimant, held):
        if self.fail:
            self.fail = False
            raise OSError("the database went away")
        self.asked.append(held)
        return []


def test_a_claim_in_doubt_at_a_reconnect_is_looked_for_now_and_once_more_later():
    holdings = Holdings(ledger.Ledger(8), 10)
    store = Store(fail_first=True)
    service = recheck.ClaimRecheck(store, "c", 1, holdings)
    service.after_reconnect()  # nothing was in doubt
    assert service.next_due() == float("inf")
    holdings.claim_sent()
    holdings.hold(_jobs(7), Claim(0.0, 1, 1, open=1))
    service.after_reconnect()
    now = service.next_due()
    try:
        services.run_due([service], now)
    except OSError:
        pass  # the worker reconnects; the pass is still due
    assert service.next_due() == now
    services.run_due([service], now)
    assert store.asked == [[7]]
    later = service.next_due()
    assert later == now + recheck.CLAIM_RECHECK_SECONDS
    assert services.next_due([service, types.SimpleNamespace(next_due=lambda: later + 1)]) == later
    services.run_due([service], later - 0.01)  # not due yet
    services.run_due([service], later)
    assert store.asked == [[7], [7]] and service.next_due() == float("inf")
    # The doubt was cleared by the reconnect that asked about it.
    service.after_reconnect()
    assert service.next_due() == float("inf")
