"""registry: kinds registered once, an --app module that cannot be imported,
Snooze's range, a job's payload decoded once when first read, and the
supervisor's import of asyncio for an app with async handlers only."""

import json
import os
import sys
import threading

import pytest

from motir_supervisor import registry


def test_job_kinds_register_once():
    @registry.job("unit_kind")
    def handler(j):
        return None

    assert registry.registration_for("unit_kind").handler is handler
    with pytest.raises(ValueError, match="already handled"):
        @registry.job("unit_kind")
        def other(j):
            return None
    with pytest.raises(ValueError):
        registry.job("bad", timeout=0)


def test_app_import_error_is_one_line_and_names_the_module():
    with pytest.raises(registry.AppImportError) as info:
        registry.import_apps(["no_such_module_here"])
    message = str(info.value)
    assert "no_such_module_here" in message and "\n" not in message


@pytest.mark.parametrize("seconds", [-1, 1e13, float("nan"), True, "5"])
def test_snooze_takes_a_sane_number_of_seconds(seconds):
    from motir_supervisor import Snooze
    with pytest.raises(ValueError, match="Snooze takes seconds"):
        Snooze(seconds)


def test_a_claimed_job_s_payload_is_decoded_when_its_handler_first_reads_it():
    from motir_supervisor.worker.claims import StopFlag

    def handle(payload_json):
        return registry.Job(id=7, kind="send", queue="default", attempt=1, max_attempts=5,
                            checkpoint_data=None, stopping=StopFlag(),
                            save_checkpoint=lambda data: True, payload_json=payload_json)

    j = handle('{"to": "a@b.c", "tries": [1, 2]}')
    assert j.payload == {"to": "a@b.c", "tries": [1, 2]}
    assert j.payload is j.payload  # decoded once: a handler's changes to it stay
    j.payload = {"to": "x@y.z"}
    assert j.payload == {"to": "x@y.z"}
    assert handle('"plain"').payload == "plain" and handle("null").payload is None
    # Nothing is decoded until it is read: a handle whose text is not JSON
    # is built, and only reading its payload fails.
    unread = handle("not json")
    with pytest.raises(json.JSONDecodeError):
        unread.payload


def test_a_payload_read_by_several_threads_at_once_is_decoded_once():
    big = json.dumps({"rows": [{"n": i, "text": "x" * 20} for i in range(20_000)]})
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads take turns often: a race shows
    try:
        _read_from_threads(big)
    finally:
        sys.setswitchinterval(switch)


def _read_from_threads(big):
    from motir_supervisor.worker.claims import StopFlag

    for _ in range(5):
        j = registry.Job(id=1, kind="k", queue="default", attempt=1, max_attempts=5,
                         checkpoint_data=None, stopping=StopFlag(),
                         save_checkpoint=lambda data: True, payload_json=big)
        start, seen = threading.Barrier(4), []

        def read():
            start.wait()
            seen.append(j.payload)

        threads = [threading.Thread(target=read) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert all(value is seen[0] for value in seen)


def test_a_supervisor_imports_asyncio_before_its_forks_only_for_an_app_with_async_def(
        tmp_path):
    # A deploy's first jobs wait for every import before the fork: a fleet of
    # def handlers never imports asyncio, and one whose --app module defines
    # an async def handler imports it once, in the supervisor, for all its
    # workers to share.
    import subprocess
    (tmp_path / "plain_jobs.py").write_text(
        "from motir_supervisor import job\n\n@job('plain')\ndef plain(j):\n    pass\n")
    (tmp_path / "waiting_jobs.py").write_text(
        "from motir_supervisor import job\n\n@job('wait')\nasync def wait(j):\n    pass\n")
    probe = ("import sys, motir_supervisor.cli, motir_supervisor.worker;"
             " from motir_supervisor import registry;"
             " said = registry.preload_asyncio_for(sys.argv[1:]);"
             " print(said, 'asyncio' in sys.modules)")

    def supervisor_imports(*apps):
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
        done = subprocess.run([sys.executable, "-c", probe, *apps], capture_output=True,
                              text=True, check=True, env=env)
        return done.stdout.strip()

    assert supervisor_imports("plain_jobs") == "False False"
    assert supervisor_imports("plain_jobs", "waiting_jobs") == "True True"
    assert supervisor_imports("no_such_module") == "False False"


def test_a_generator_function_is_refused_as_a_handler_naming_its_kind():
    def yields(j):
        yield j

    async def yields_async(j):
        yield j

    for handler in (yields, yields_async):
        with pytest.raises(TypeError, match="'unit_generator'.*generator function"):
            registry.job("unit_generator")(handler)
    assert "unit_generator" not in registry.registered_kinds()


@pytest.mark.parametrize("limits, message", [
    ({"max_running": 0}, "max_running of 'flow_bad' must be a whole number of at least 1"),
    ({"max_running_per_key": True}, "max_running_per_key of 'flow_bad' must be a whole number"),
    ({"max_running_per_key": 1.5}, "max_running_per_key of 'flow_bad' must be a whole number"),
    ({"rate_limit": 100}, "rate_limit of 'flow_bad' must be \\(starts, seconds\\)"),
    ({"rate_limit": (0, 60)}, "rate_limit of 'flow_bad' must be"),
    ({"rate_limit": (10, 0)}, "rate_limit of 'flow_bad' must be"),
    ({"rate_limit": (10, float("inf"))}, "rate_limit of 'flow_bad' must be"),
])
def test_a_bad_limit_is_refused_at_import_naming_the_kind(limits, message):
    with pytest.raises(ValueError, match=message):
        registry.job("flow_bad", **limits)


def test_the_registry_limits_name_every_kind_and_none_for_a_kind_without_any():
    @registry.job("flow_keyed", max_running_per_key=2, rate_limit=(100, 60))
    def keyed(j):
        return None

    @registry.job("flow_plain")
    def plain(j):
        return None

    found = registry.limits()
    assert found["flow_keyed"] == (None, 2, 100, 60.0)
    assert found["flow_plain"] is None
