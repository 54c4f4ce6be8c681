"""motir-supervisor whose limited claim counts without the lock, for the
negative control of tests/e2e/test_limits.py: concurrent claims each see the
same free slots and together run more than max_running jobs of a kind."""

from motir_supervisor import cli, db

db.QUERIES["lock_limited_claims"] = "SELECT 1;"

if __name__ == "__main__":
    cli.main()
