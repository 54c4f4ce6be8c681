"""cli, in-process: input refused before the database is reached, the
recycling limits from the environment, and run as the default command."""

import pytest
from click.testing import CliRunner

from motir_supervisor import cli


@pytest.mark.parametrize("payload, message", [
    ("{nope", "--payload is not valid JSON"),
    # json.loads takes NaN; PostgreSQL's jsonb does not.
    ('{"ratio": NaN}', "--payload: payload cannot be stored as JSON: Out of range float values"),
])
def test_enqueue_rejects_a_payload_it_cannot_store_before_touching_the_database(
        payload, message):
    result = CliRunner().invoke(cli.main, ["enqueue", "x", "--payload", payload,
                                           "--database-url", "postgresql://u:pw@127.0.0.1:1/x"])
    assert result.exit_code != 0
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_recycling_limits_come_from_the_environment_too():
    for name, option in (("MOTIR_MAX_JOBS_PER_WORKER", "--max-jobs-per-worker"),
                         ("MOTIR_MAX_WORKER_MEMORY", "--max-worker-memory")):
        result = CliRunner().invoke(cli.main, ["run", "--database-url", "postgresql:///x"],
                                    env={name: "-1"})
        assert result.exit_code != 0
        assert f"{option} cannot be negative" in result.output


def test_run_is_the_default_command():
    """`motir-supervisor --workers 0` reaches run's validation."""
    result = CliRunner().invoke(cli.main, ["--workers", "0", "--database-url", "postgresql:///x"])
    assert result.exit_code != 0
    assert "--workers must be between 1 and 256" in result.output


@pytest.mark.parametrize("options, message", [
    (["--depends-on", "7", "--depends-on", "x"],
     "--depends-on takes a job id (a whole number from 1), not 'x'"),
    (["--depends-on", "0"], "--depends-on takes a job id (a whole number from 1), not '0'"),
    (["--depends-on", "7", "--on-parent-failure", "skip"],
     "--on-parent-failure must be cancel or run, not 'skip'"),
])
def test_enqueue_refuses_a_bad_dependency_in_one_line_before_touching_the_database(
        options, message):
    result = CliRunner().invoke(cli.main, ["enqueue", "x", *options,
                                           "--database-url", "postgresql://u:pw@127.0.0.1:1/x"])
    assert result.exit_code != 0
    assert result.output.strip() == f"Error: {message}"
