"""motir-supervisor whose limited claim is a naive one, for the negative
controls of tests/e2e/test_limits.py and test_flow_control.py: it counts
without the lock, and locks each row as its scan reads it (FOR UPDATE SKIP
LOCKED, as the claim of a queue without limits does). Concurrent claims
then each see the same free slots, keys and allowance, read past each
other's rows, and together run more than max_running jobs of a kind, a key
twice at once, or more starts than a rate limit allows."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from motir_supervisor import cli, db  # noqa: E402
from tests.helpers import LOCKING_AS_READ  # noqa: E402

db.QUERIES["lock_limited_claims"] = "SELECT 1;"
db.QUERIES["claim_limited_jobs"] = LOCKING_AS_READ

if __name__ == "__main__":
    cli.main()
