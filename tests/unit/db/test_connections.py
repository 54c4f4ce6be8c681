"""db.connections: a database URL named and an error scrubbed without its
password."""

from motir_supervisor import db


def test_passwords_never_survive_describe_or_scrub():
    url = "postgresql://app:s3cret-pw@db.internal:5433/motir"
    assert db.describe_dsn(url) == "app@db.internal:5433/motir"
    assert "s3cret-pw" not in db.scrub(f"could not connect to {url}", url)
    assert "s3cret-pw" not in db.scrub("postgres://u:s3cret-pw@h/x oops", "not a url")
