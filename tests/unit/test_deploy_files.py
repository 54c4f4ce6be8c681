"""fly.toml, the Procfile and the Dockerfile say what the operator relies on."""

import shlex
import tomllib

from click.testing import CliRunner

from motir_supervisor import cli
from motir_supervisor.supervisor.arbiter import EXIT_GRACE_SECONDS
from motir_supervisor.supervisor.health import DATABASE_SECONDS
from tests.helpers import ROOT

FLY = tomllib.loads((ROOT / "fly.toml").read_text())
PROCFILE = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines()
                if line.strip())


def test_two_process_groups_with_http_only_on_app():
    assert FLY["processes"]["worker"] == "motir-supervisor --workers 4"
    assert FLY["processes"]["app"] == "motir-supervisor web"
    assert FLY["http_service"]["processes"] == ["app"]
    assert FLY["http_service"]["min_machines_running"] >= 1
    assert FLY["http_service"]["internal_port"] == int(FLY["env"]["PORT"])


def _keys(table, path=()):
    for key, value in table.items():
        yield (*path, key)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dict):
                yield from _keys(item, (*path, key))


def test_the_worker_group_is_declared_never_sized():
    keys = list(_keys(FLY))
    assert not [k for k in keys if k[-1] == "count"]
    sizing = [k for k in keys if k[-1].endswith("machines_running")]
    assert sizing == [("http_service", "min_machines_running")]


def test_shutdown_settings_match_the_drain():
    assert FLY["kill_signal"] == "SIGTERM"
    drain = float(FLY["env"]["MOTIR_DRAIN_SECONDS"])
    assert FLY["kill_timeout"] >= drain + EXIT_GRACE_SECONDS + 2


def test_migrations_run_on_release_and_metrics_come_from_the_workers():
    assert FLY["deploy"]["release_command"] == "motir-supervisor migrate"
    [scrape] = FLY["metrics"]
    assert scrape["processes"] == ["worker"]
    assert scrape["port"] == int(FLY["env"]["MOTIR_METRICS_PORT"])


def test_the_worker_group_is_checked_on_its_supervisors_healthz():
    [check] = FLY["checks"].values()
    assert check["processes"] == ["worker"]
    assert (check["type"], check["method"], check["path"]) == ("http", "GET", "/healthz")
    # Served by the supervisor's metrics process, on the port the group is given.
    assert check["port"] == int(FLY["env"]["MOTIR_METRICS_PORT"])
    # A database that hangs must read as unhealthy, not as a probe timing out.
    assert float(check["timeout"].removesuffix("s")) > DATABASE_SECONDS


def test_procfile_names_the_same_processes():
    assert PROCFILE["web"] == FLY["processes"]["app"]
    assert PROCFILE["worker"] == FLY["processes"]["worker"]
    assert PROCFILE["release"] == FLY["deploy"]["release_command"]


def test_every_declared_command_parses():
    commands = [*FLY["processes"].values(), FLY["deploy"]["release_command"], *PROCFILE.values()]
    for command in commands:
        argv = shlex.split(command)
        assert argv[0] == "motir-supervisor"
        result = CliRunner().invoke(cli.main, [*argv[1:], "--help"])
        assert result.exit_code == 0, (command, result.output)


def test_the_image_starts_the_supervisor_in_exec_form():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert 'CMD ["motir-supervisor", "--workers", "4"]' in dockerfile
