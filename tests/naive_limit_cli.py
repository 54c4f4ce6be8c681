"""motir-supervisor whose limited claim counts without the lock, for the
negative controls of tests/e2e/test_limits.py and test_flow_control.py:
concurrent claims each see the same free slots, keys and allowance, and
together run more than max_running jobs of a kind, a key twice at once, or
more starts than a rate limit allows."""

from motir_supervisor import cli, db

db.QUERIES["lock_limited_claims"] = "SELECT 1;"

if __name__ == "__main__":
    cli.main()
