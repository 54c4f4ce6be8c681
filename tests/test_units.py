"""Unit tests: no database, no processes."""

import datetime
import json
import logging
import os
import random
import re
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from motir_supervisor import cli, db, logs, outcomes, registry
from motir_supervisor.ipc import ledger
from motir_supervisor.worker import batching as sizing, recycling
from motir_supervisor.config import Config, ConfigError
from motir_supervisor.registry import job
from motir_supervisor.maintenance.scheduler import Schedule, ScheduleError, instant_text


def test_every_query_the_code_names_exists():
    source = Path(db.store.__file__).read_text()
    named = set(re.findall(r'(?:_run|_count)\("([a-z_]+)"', source))
    named |= set(re.findall(r'QUERIES\["([a-z_]+)"\]', source))
    assert len(named) > 15
    assert named <= set(db.QUERIES)
    assert all(body.strip() for body in db.QUERIES.values())


def test_migrations_are_numbered_without_gaps():
    versions = [m.version for m in db.load_migrations()]
    assert versions == list(range(1, len(versions) + 1))


def test_retry_delay_grows_exponentially_with_jitter_and_a_cap():
    random.seed(7)
    for attempt in range(1, 8):
        full = min(3600, 5 * 2 ** (attempt - 1))
        for _ in range(50):
            assert full / 2 <= outcomes.retry_delay(attempt, 5, 3600) <= full
    assert outcomes.retry_delay(40, 5, 3600) <= 3600
    assert outcomes.retry_delay(5000, 5, 3600) <= 3600  # no overflow on huge attempt counts
    assert len({outcomes.retry_delay(3, 5, 3600) for _ in range(20)}) > 1


def test_failure_text_names_the_exception_and_is_bounded():
    try:
        raise KeyError("x" * 10_000)
    except KeyError as exc:
        text = outcomes.describe_failure(exc)
    assert text.startswith("KeyError: ")
    assert len(text) <= outcomes.MAX_ERROR_CHARS
    assert "raise KeyError" in text  # the tail of the traceback survives


@pytest.mark.parametrize("kwargs, fragment", [
    ({"database_url": ""}, "no database"),
    ({"workers": 0}, "--workers"),
    ({"lease_seconds": 5}, "--lease-seconds"),
    ({"batch_size": 0}, "--batch-size"),
    ({"poll_seconds": 0}, "--poll-seconds"),
    ({"drain_seconds": -1}, "--drain-seconds"),
    ({"max_jobs_per_worker": -1}, "--max-jobs-per-worker"),
    ({"max_worker_memory_mb": -5}, "--max-worker-memory"),
])
def test_config_rejects_what_cannot_work(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Config(**{"database_url": "postgresql:///x", **kwargs})


def test_lease_is_renewed_well_inside_itself():
    config = Config(database_url="postgresql:///x", lease_seconds=30)
    assert config.renew_every == 10
    assert config.reaper_every <= config.lease_seconds


def test_passwords_never_survive_describe_or_scrub():
    url = "postgresql://app:s3cret-pw@db.internal:5433/motir"
    assert db.describe_dsn(url) == "app@db.internal:5433/motir"
    assert "s3cret-pw" not in db.scrub(f"could not connect to {url}", url)
    assert "s3cret-pw" not in db.scrub("postgres://u:s3cret-pw@h/x oops", "not a url")


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


@pytest.mark.parametrize("formatter", [logs.TextFormatter(), logs.JsonFormatter()],
                         ids=["text", "json"])
def test_a_record_of_many_lines_is_written_as_one_full_line_each(formatter):
    lines = ["job 1 noop attempt 1/5 succeeded in 0.001s", 'job 2 "quoted" \\ in 0.002s']
    record = logging.LogRecord("motir_supervisor.worker", logging.INFO, __file__, 1, "%s",
                               ("\n".join(lines),), None)
    record.lines = lines
    written = formatter.format(record).split("\n")
    assert len(written) == 2
    if isinstance(formatter, logs.JsonFormatter):
        entries = [json.loads(line) for line in written]
        assert [e["message"] for e in entries] == lines
        assert {e["level"] for e in entries} == {"INFO"}
    else:
        assert all(w.endswith(line) and " INFO [" in w for w, line in zip(written, lines))
    # The record itself is untouched: another handler's plain formatter shows every line.
    assert logging.Formatter("%(message)s").format(record) == "\n".join(lines)


def test_batches_grow_with_the_room_left_and_shrink_after_a_slow_one():
    nbs = sizing.next_batch_size
    assert nbs(1, 1, 1, 0.0, 512) == 8  # no time at all: the most growth
    assert nbs(64, 64, 64, 0.001, 512) == 512  # capped by --batch-size
    assert nbs(10, 10, 10, 0.05, 512) == 20  # half the target: doubles
    assert nbs(10, 10, 10, 0.099, 512) == 11  # just under: still grows
    assert nbs(10, 10, 10, 0.2, 512) == 10  # between fast and slow: stays
    assert nbs(10, 10, 4, 0.001, 512) == 1  # the queue ran dry: start small again
    assert nbs(512, 512, 0, 0.0, 512) == 1
    assert nbs(512, 512, 512, 0.6, 512) == 1  # slow: one at a time again
    # Free slots asked for 32 jobs of 0.15 s: they do not make the batch grow.
    assert nbs(1, 32, 32, 0.15, 512) == 1
    assert nbs(4, 32, 20, 0.01, 512) == 1  # short of the slots: dry too


def test_the_reserve_covers_the_round_trips_of_runs_that_end_often():
    rs = sizing.reserve_size
    # No-ops: what 10 ms of starts need, up to the claims' size.
    assert rs(8, 0.00002, 512, 0.0, 0.004) == 512
    assert rs(8, 0.00002, 1, 0.0, 0.004) == 1  # after the queue ran dry
    # 32 slots of 100 ms jobs ending 320 times a second, round trips of
    # 5 ms: the next 40 ms of endings (eight round trips, since runs end in
    # bursts), whatever the claims' size; never more than the slots.
    assert rs(32, 0.1, 1, 320.0, 0.005) == 12
    assert rs(32, 0.1, 1, 320.0, 0.01) == 25
    assert rs(32, 0.1, 1, 320.0, 0.03) == 32
    # Slots that have just filled: nothing ended lately, so only the
    # claims' size of one, as for jobs that take no time.
    assert rs(32, 0.1, 1, 0.0, 0.03) == 1
    # Never more than the slots.
    assert rs(8, 0.1, 1, 5000.0, 0.05) == 8
    # Long jobs: none.
    assert rs(8, 30.0, 1, 0.2, 0.005) == 0
    # Short runs gave way to long ones (2 s running now): the endings of the
    # short ones say nothing of when these will end.
    assert rs(8, 2.0, 1, 4000.0, 0.005) == 0


def test_a_round_trip_stuck_behind_a_lock_counts_for_little():
    nrt = sizing.next_round_trip
    assert nrt(0.005, 0.005) == pytest.approx(0.005)
    assert nrt(0.005, 0.010) == pytest.approx(0.006)
    # Four seconds behind a lock count as 50 ms.
    assert nrt(0.005, 4.0) == pytest.approx(0.005 + 0.2 * 0.045)
    # A slower database is followed, doubling at most per round trip.
    average = 0.005
    for _ in range(30):
        average = nrt(average, 0.2)
    assert average == pytest.approx(0.2, rel=0.05)


def test_turnover_counts_the_runs_that_ended_within_its_window():
    turnover = sizing.Turnover()
    assert turnover.per_second(100.0) == 0
    turnover.add(100.0, 30)
    turnover.add(100.5, 10)
    assert turnover.per_second(100.6) == 40 / sizing.TURNOVER_WINDOW_SECONDS
    assert turnover.per_second(101.2) == 10 / sizing.TURNOVER_WINDOW_SECONDS
    assert turnover.per_second(102.0) == 0


# -- the ledger ------------------------------------------------------------------

def test_the_ledger_hands_the_supervisor_every_field_a_forked_worker_wrote():
    book = ledger.Ledger(4)
    pid = os.fork()
    if pid == 0:  # the worker's side, in a real child process
        done, failed, running = book.claim(11), book.claim(12), book.claim(13)
        book.decide(done, ledger.SUCCEEDED, 0.25)
        book.decide(failed, ledger.FAILED, 1.5, "ValueError: boom \u00e9", 60.0, True)
        book.mark(running, ledger.RUNNING)
        book.release(book.claim(14))
        book.set_retiring("at 612 MB \u00e9" + "x" * 100)
        os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0
    entries = {entry.job_id: entry for entry in book.entries()}
    assert entries[11] == ledger.Entry(11, ledger.SUCCEEDED, False, 0.0, None, 0.25)
    assert entries[12] == ledger.Entry(12, ledger.FAILED, True, 60.0, "ValueError: boom \u00e9",
                                       1.5)
    assert entries[13].state == ledger.RUNNING and 14 not in entries
    assert book.retiring and not book.stop_asked
    # The reason is cut to what the header holds, never into the entries.
    assert book.retiring_why.startswith("at 612 MB \u00e9x") and len(book.retiring_why) < 64
    book.close()


def test_a_ledger_error_longer_than_its_page_is_cut_not_spilled_into_the_next():
    book = ledger.Ledger(2)
    first, second = book.claim(1), book.claim(2)
    book.decide(first, ledger.FAILED, 0.0, "x" * (ledger.ERROR_BYTES * 2))
    book.decide(second, ledger.FAILED, 0.0, "second")
    by_id = {entry.job_id: entry.error for entry in book.entries()}
    assert by_id == {1: "x" * ledger.ERROR_BYTES, 2: "second"}


@pytest.mark.parametrize("schedule, fragment", [
    ("* * *", "five-field"), ("61 * * * *", "not a cron expression"), (0, "at least 1"),
    (True, "cron expression or seconds"), ("*/5 * * * * *", "five-field"),
])
def test_a_bad_schedule_fails_at_registration_naming_the_kind(schedule, fragment):
    with pytest.raises(ScheduleError, match=fragment) as raised:
        job("bad_schedule", schedule=schedule)(lambda j: None)
    assert "'bad_schedule'" in str(raised.value)
    assert "bad_schedule" not in registry.registered_kinds()


def test_schedule_instants_are_utc_and_the_same_on_every_machine():
    at = datetime.datetime(2026, 12, 3, 10, 5, 0, tzinfo=datetime.timezone.utc)
    cron = Schedule.parse("k", "*/5 * * * *")
    assert cron.latest(at) == at  # an instant equal to now is the latest
    assert cron.latest(at + datetime.timedelta(seconds=299.5)) == at
    assert cron.following(at) == at + datetime.timedelta(minutes=5)
    every = Schedule.parse("k", 90)
    # Multiples of 90 s since the epoch, whoever computes them.
    assert every.latest(at).timestamp() % 90 == 0
    assert every.following(at) - every.latest(at) == datetime.timedelta(seconds=90)
    assert Schedule.from_spec("k", every.spec) == every
    assert Schedule.from_spec("k", cron.spec) == cron
    assert instant_text(at) == "2026-12-03T10:05:00+00:00"


@pytest.mark.parametrize("seconds", [-1, 1e13, float("nan"), True, "5"])
def test_snooze_takes_a_sane_number_of_seconds(seconds):
    from motir_supervisor import Snooze
    with pytest.raises(ValueError, match="Snooze takes seconds"):
        Snooze(seconds)


def test_an_urgent_run_starts_before_the_ready_runs_of_a_batch_claimed_earlier():
    from motir_supervisor.worker.executor import Executor
    from motir_supervisor.worker.claims import Claim, Run

    release, order = threading.Event(), []

    def handler(j):
        if j.payload == "first":
            release.wait(5)
        order.append(j.payload)

    registration = registry.Registration("ordered", handler, None)
    entries = ledger.Ledger(8)
    executor = Executor(1, entries, retry_base=1, retry_cap=1, wake=lambda: None,
                        save_checkpoint=lambda *a: True, title=lambda text: None)

    ids = iter(range(1, 100))

    def runs(names, priority):
        claim = Claim(0.0, 1, len(names))
        return [Run(db.ClaimedJob(job_id, "default", "ordered", json.dumps(name), 1, 5, None,
                                  priority),
                    claim, entries.claim(job_id), registration)
                for job_id, name in zip(ids, names)]

    executor.submit(runs(["first", "batch-2", "batch-3"], 5))
    executor.submit(runs(["urgent"], -1))
    executor.submit(runs(["later"], 5))
    release.set()
    deadline = time.monotonic() + 5
    while len(order) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert order == ["first", "urgent", "batch-2", "batch-3", "later"]


# -- recycling ---------------------------------------------------------------------

@pytest.mark.parametrize("jobs, low, high", [(10, 9, 11), (1000, 900, 1100), (5, 5, 5),
                                             (1, 1, 1), (15, 14, 16)])
def test_each_worker_draws_its_job_limit_within_a_tenth(jobs, low, high):
    rng = random.Random(11)
    drawn = {recycling.jittered_job_limit(jobs, rng) for _ in range(2000)}
    assert min(drawn) == low and max(drawn) == high
    if high - low <= 20:
        assert drawn == set(range(low, high + 1))  # every value, not just the ends
    assert recycling.Recycling(jobs, 0, rng).job_limit in range(low, high + 1)


def test_the_resident_size_is_read_from_statm_and_follows_what_is_written():
    before = recycling.resident_bytes()
    status = Path("/proc/self/status").read_text()
    vm_rss = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) * 1024
    assert abs(before - vm_rss) < 4 * recycling.MB  # the same counter, read a moment apart
    kept = b"\x01" * (64 * recycling.MB)
    assert recycling.resident_bytes() - before >= 60 * recycling.MB
    del kept
    assert recycling.resident_bytes("/nonexistent/statm") is None


def test_memory_is_read_at_most_once_a_second_and_only_after_a_first_job():
    sizes = [10 * recycling.MB]
    reads = []

    def read():
        reads.append(sizes[0])
        return sizes[0]
    policy = recycling.Recycling(0, 50, read_memory=read)
    budget = policy.claim_budget
    sizes[0] = 80 * recycling.MB
    assert policy.reason(budget, now=100.0) is None and reads == []  # no job taken yet
    sizes[0] = 10 * recycling.MB
    assert policy.reason(budget - 1, now=100.0) is None and len(reads) == 1
    sizes[0] = 80 * recycling.MB
    assert policy.reason(budget - 1, now=100.9) is None and len(reads) == 1
    assert policy.reason(budget - 1, now=101.0) == "at 80 MB" and len(reads) == 2


def test_the_job_limit_is_reached_when_the_claim_budget_is_spent():
    policy = recycling.Recycling(10, 0, random.Random(3))
    limit = policy.job_limit
    assert policy.claim_budget == limit
    assert policy.reason(1) is None
    assert policy.reason(0) == f"after {limit} jobs"
    assert recycling.Recycling(1, 0).reason(0) == "after 1 job"
    assert recycling.Recycling(0, 0).reason(-5) is None  # off: never


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


def test_a_forked_child_inherits_the_parent_s_objects_frozen_and_the_parent_thaws():
    import gc
    import signal
    from motir_supervisor.supervisor.forking import fork_child

    read, write = os.pipe()

    def body():
        os.write(write, str(gc.get_freeze_count()).encode())
        return 0

    pid = fork_child(body, (signal.SIGTERM,), [read])
    os.close(write)
    try:
        assert gc.get_freeze_count() == 0
        frozen_in_child = int(os.read(read, 64))
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    # Every object the child had at the fork: its collections never walk them.
    assert frozen_in_child > 1000


def test_a_fork_keeps_frozen_what_its_parent_had_frozen_itself():
    import gc
    import signal
    from motir_supervisor.supervisor.forking import fork_child

    gc.freeze()
    try:
        pid = fork_child(lambda: 0, (signal.SIGTERM,), [])
        os.waitpid(pid, 0)
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
