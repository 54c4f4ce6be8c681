"""What a worker holds: every run whose claim is its own until the run's
outcome or release is written, the claims those runs came in, their
entries in the worker's ledger, and the claim budget (how many more jobs
it may claim before it recycles).

These change only through :class:`Holdings`' verbs: the producer holds what
its claims return and withdraws what must not start, the completer holds
what its hand-on claims and settles what it writes, the leases read what
is held. It decides nothing (what to claim is the producer's choice, when
to write the completer's), runs no SQL and starts no handler.
"""

from __future__ import annotations

from typing import Iterable, ValuesView

from .. import db, metrics, registry
from ..ipc.ledger import Ledger
from .claims import Claim, Run


class Holdings:
    """One worker's holdings. The worker's main thread owns every field and
    calls every verb: handler threads never touch it, so it takes no lock."""

    def __init__(self, entries: Ledger, claim_budget: int):
        #: The supervisor's view of what is held, entry by entry: an entry
        #: is taken as a job is held and freed once its run is settled.
        self.ledger = entries
        #: Every held run by job id, from its claim until its outcome or
        #: release is written.
        self._runs: dict[int, Run] = {}
        #: Claims with runs neither ended nor withdrawn yet.
        self._open_claims: list[Claim] = []
        #: Jobs still to claim before the worker recycles (see recycling): no
        #: claim asks for more, so a worker runs its limit exactly, and a job
        #: given back before it started gives its share back.
        self._claims_left = claim_budget
        #: Claims the completer's hand-on held, for the producer to start.
        self._handed_on: list[Claim] = []
        #: A claim statement was sent and its answer is not in yet: if the
        #: connection breaks meanwhile, its rows may be this worker's unknown
        #: to it (see recheck.ClaimRecheck).
        self._claim_in_doubt = False

    # -- reading ---------------------------------------------------------------

    def __bool__(self) -> bool:
        """Whether anything is held."""
        return bool(self._runs)

    def __len__(self) -> int:
        return len(self._runs)

    def runs(self) -> ValuesView[Run]:
        """The held runs (a view: not to be kept across verbs)."""
        return self._runs.values()

    def unstarted(self) -> int:
        """How many held runs have not started and will (none withdrawn)."""
        return sum(1 for run in self._runs.values() if run.started is None and not run.withdrawn)

    def job_ids(self) -> list[int]:
        return list(self._runs)

    def open_claims(self) -> list[Claim]:
        """A copy of the claims with runs still open."""
        return list(self._open_claims)

    @property
    def claims_left(self) -> int:
        return self._claims_left

    def capacity(self) -> int:
        """How many more jobs may be held now: free ledger entries, within
        the claim budget."""
        return min(self.ledger.free_entries(), self._claims_left)

    def free_entries(self) -> int:
        return self.ledger.free_entries()

    # -- claims ----------------------------------------------------------------

    def claim_sent(self) -> None:
        """A claim statement goes out (see _claim_in_doubt)."""
        self._claim_in_doubt = True

    def claim_answered(self) -> None:
        """The claim statement's answer is in, or the server refused it."""
        self._claim_in_doubt = False

    def take_doubt(self) -> bool:
        """Whether a claim was in doubt when the connection broke; asked once
        after a reconnect, which clears it."""
        in_doubt, self._claim_in_doubt = self._claim_in_doubt, False
        return in_doubt

    def hold(self, jobs: list[db.ClaimedJob], claim: Claim) -> list[Run]:
        """Hold the jobs one statement claimed, each with a ledger entry, as
        ``claim``'s runs; they count against the claim budget."""
        self._claims_left -= len(jobs)
        claim.runs = [Run(job, claim, self.ledger.claim(job.id),
                          registry.registration_for(job.kind)) for job in jobs]
        runs = self._runs
        for run in claim.runs:
            runs[run.claimed.id] = run
            metrics.record_claim(run.claimed.queue)
        self._open_claims.append(claim)
        return claim.runs

    def hold_handed_on(self, jobs: list[db.ClaimedJob], claim: Claim) -> None:
        """Hold the jobs a hand-on claimed; the producer starts them (see
        take_handed_on)."""
        self.hold(jobs, claim)
        self._handed_on.append(claim)

    def take_handed_on(self) -> list[Claim]:
        """The hand-on claims held since the last call, to start."""
        claims, self._handed_on = self._handed_on, []
        return claims

    # -- runs ending -----------------------------------------------------------

    def close(self, runs: Iterable[Run]) -> list[Claim]:
        """These runs ended or were withdrawn; the claims they closed (every
        run of it done), in the order they closed."""
        closed = []
        for run in runs:
            claim = run.claim
            claim.open -= 1
            if claim.open == 0:
                self._open_claims.remove(claim)
                closed.append(claim)
        return closed

    def withdraw(self, runs: list[Run]) -> list[Claim]:
        """These runs never start here: their share of the claim budget comes
        back, and they close as ended runs do."""
        self._claims_left += len(runs)
        return self.close(runs)

    def settle(self, run: Run) -> None:
        """The run's outcome or release is written: it is held no more, and
        its ledger entry is free."""
        run.written = True
        self._runs.pop(run.claimed.id, None)
        self.ledger.release(run.entry)
