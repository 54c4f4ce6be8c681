"""Per-key limits and rate limits through real motir-supervisor processes:
two fleets of 4 workers × --concurrency 8 keep both through worker kills, a
rolling restart and a supervisor whose database link hangs until its leases
lapse; a backlog uses its allowance; and naive fleets whose claim runs
without its lock overshoot both, as the negative control."""

import datetime
import os
import select
import signal
import socket
import threading
import time

import pytest

from tests.apps.flow import PER_KEY, RATE
from tests.helpers import (TRANSITIONS_TABLE, alive, most_at_once_per_key, most_in_a_window,
                           running_spans, wait_for_limits, wait_until)
from tests.supervisors import NAIVE_LIMIT_CLI, cli

FLEET = ("--workers", "4", "--concurrency", "8", "--app", "tests.apps.flow")
KEYS = 12


def _enqueue_keyed(sql, jobs, sleep=0.02):
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, payload)"
             " SELECT 'per_account', 'account-' || (g %% %s), jsonb_build_object('sleep', %s)"
             " FROM generate_series(1, %s) AS g", (KEYS, sleep, jobs))


def _enqueue_rated(sql, jobs):
    sql.rows("INSERT INTO job_queue (kind) SELECT 'partner_call' FROM generate_series(1, %s)",
             (jobs,))


def _all_succeeded(sql):
    return sql.value("SELECT count(*) FILTER (WHERE state <> 'succeeded') = 0 AND count(*) > 0"
                     " FROM job_queue")


def _runs(sql, kind, ended_at):
    """(key, start, end, claimed_at) of every run of ``kind``; a run whose
    process died before it could record its end ended when ``ended_at``
    says its process was seen gone (None: such runs are left out, and only
    the database's spans count them)."""
    runs = []
    for key, start, end, claimed, pid in sql.rows(
            "SELECT e.checkpoint->>'key', e.started_at, e.finished_at,"
            " (e.checkpoint->>'claimed_at')::float8, e.pid"
            " FROM test_executions AS e JOIN job_queue AS j ON j.id = e.job_id"
            " WHERE j.kind = %s", (kind,)):
        if end is None:
            assert pid in (ended_at or ()), f"a run in pid {pid} never ended"
            if ended_at is None or ended_at[pid] is None:
                continue
            end = max(ended_at[pid], start)
        runs.append((key, start, end, claimed))
    return runs


def _database_spans(sql, kind):
    """(key, start, end, None) of every time a job of ``kind`` was `running`
    in the database: what the limit counts, killed runs included."""
    key_of = dict(sql.rows("SELECT id, concurrency_key FROM job_queue WHERE kind = %s", (kind,)))
    return [(key_of[job], start, end, None) for start, end, job in running_spans(sql, kind)]


def _most_per_key(runs):
    """The most runs of one key going on at one instant."""
    return most_at_once_per_key([(key, start, end) for key, start, end, _ in runs])


def _stamps(sql, kind):
    """Every start of ``kind`` as its claim stamped it, killed runs' too."""
    return sorted(t for t, in sql.rows(
        "SELECT (e.checkpoint->>'claimed_at')::float8 FROM test_executions AS e"
        " JOIN job_queue AS j ON j.id = e.job_id WHERE j.kind = %s", (kind,)))


def _kill(pids, ended_at):
    """SIGKILL: the runs cut short recorded no end, and the test cannot
    tell when their process died exactly (a rerun may start before it saw
    the process gone), so only the database's spans count them."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # gone already (its runs are counted as the killed ones are)
    wait_until(lambda: not any(alive(pid) for pid in pids), 5, message="killed workers gone")
    ended_at.update({pid: None for pid in pids})


def test_two_fleets_keep_per_key_and_rate_limits_through_kills_and_a_restart(
        database_url, executions, start_supervisor):
    sql = executions
    first, second = start_supervisor(*FLEET), start_supervisor(*FLEET)
    first.wait_for_workers(4)
    second.wait_for_workers(4)
    wait_for_limits(sql, "per_account", "partner_call")
    sql.rows(TRANSITIONS_TABLE)
    _enqueue_keyed(sql, 360)
    _enqueue_rated(sql, 60)
    ended_at: dict[int, object] = {}
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'"
                                 " AND kind = 'per_account'") >= 80, 30, message="80 keyed")
    running = wait_until(lambda: sql.value(
        "SELECT array_agg(DISTINCT pid) FROM test_executions WHERE finished_at IS NULL"), 10,
        message="jobs running")
    _kill(running[:2], ended_at)
    wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE state = 'succeeded'"
                                 " AND kind = 'per_account'") >= 180, 30, message="180 keyed")
    third = start_supervisor(*FLEET)  # a rolling restart of the second fleet
    third.wait_for_workers(4)
    second.signal(signal.SIGTERM)
    assert second.wait(30) == 0
    wait_until(lambda: _all_succeeded(sql), 60, message="every job")
    keyed = _runs(sql, "per_account", ended_at)
    rated = _runs(sql, "partner_call", ended_at)
    assert len(keyed) >= 360 and len(rated) >= 60
    # The kills cut runs short, which ran again.
    assert sql.value("SELECT count(*) FROM job_queue WHERE attempts > 1") > 0
    # Never a key twice at once, in the database nor in the handlers, and
    # keys side by side: the fleets used their slots across keys.
    assert _most_per_key(_database_spans(sql, "per_account")) == PER_KEY
    assert _most_per_key(keyed) == PER_KEY
    assert _most_per_key([("all", s, e, c) for _, s, e, c in keyed]) >= KEYS // 2
    assert most_in_a_window(_stamps(sql, "partner_call"), RATE[1]) <= RATE[0]
    status = cli(database_url, "status").stdout
    assert "per_account          0 running, 0 waiting" in status
    assert "at most 1 running per key" in status
    assert f"of at most {RATE[0]} starts in the last {RATE[1]:g}s" in status


def test_keys_whose_runs_return_values_hand_their_slots_on(executions, start_supervisor):
    sql = executions
    fleet = start_supervisor("--workers", "2", "--concurrency", "4", "--app", "tests.apps.flow")
    fleet.wait_for_workers(2)
    wait_for_limits(sql, "account_report")
    jobs = 40
    # One value jsonb refuses, in the middle of a key's backlog.
    sql.rows("INSERT INTO job_queue (kind, concurrency_key, payload)"
             " SELECT 'account_report', 'account-' || (g %% %s),"
             " jsonb_build_object('deep', g = %s) FROM generate_series(1, %s) g",
             (KEYS, KEYS + 1, jobs))
    deep = sql.value("SELECT id FROM job_queue WHERE payload = '{\"deep\": true}'")
    wait_until(lambda: _all_succeeded(sql), 30, message="every job")
    # Each value stored with its success but the refused one, and each run
    # written by a hand-on, which handed its key's slot to the next job (a
    # run it writes leaves running no longer limited), but the one written
    # again without its value.
    assert sql.rows("SELECT count(*) FILTER (WHERE output = jsonb_build_object("
                    " 'job', id, 'attempt', attempts)), count(*) FILTER (WHERE NOT limited)"
                    " FROM job_queue") == [(jobs - 1, jobs - 1)]
    assert sql.value("SELECT output FROM job_queue WHERE id = %s", (deep,)) is None
    assert f"the database refused the output of job {deep} account_report" in fleet.output()


def test_a_rate_limited_backlog_uses_its_allowance_and_idle_workers_wait_for_it(
        database_url, executions, start_supervisor):
    sql = executions
    for _ in range(2):
        start_supervisor(*FLEET).wait_for_workers(4)
    wait_for_limits(sql, "partner_call")
    windows = 6
    _enqueue_rated(sql, RATE[0] * windows)
    wait_until(lambda: _all_succeeded(sql), 30, message="every job")
    starts = _stamps(sql, "partner_call")
    assert most_in_a_window(starts, RATE[1]) == RATE[0]
    # Every full window from the first start on holds at least 90 % of N.
    for n in range(windows - 1):
        begin = starts[0] + n * RATE[1]
        count = sum(1 for t in starts if begin <= t < begin + RATE[1])
        assert count >= 0.9 * RATE[0], (n, count, starts)


def test_negative_control_naive_fleets_overshoot_both_limits(
        database_url, executions, start_supervisor):
    fleets = [start_supervisor(*FLEET, entry=NAIVE_LIMIT_CLI) for _ in range(2)]
    for fleet in fleets:
        fleet.wait_for_workers(4)
    sql = executions
    # The claim overshoots, not rows enqueued before the limits were written.
    wait_for_limits(sql, "per_account", "partner_call")
    per_key_caught = rate_caught = False
    for _ in range(3):
        sql.rows("TRUNCATE test_executions")
        sql.rows("DELETE FROM job_queue")
        _enqueue_keyed(sql, 240, sleep=0.03)
        _enqueue_rated(sql, 60)
        wait_until(lambda: _all_succeeded(sql), 60, message="every job")
        per_key_caught |= _most_per_key(_runs(sql, "per_account", {})) > PER_KEY
        rate_caught |= most_in_a_window(_stamps(sql, "partner_call"), RATE[1]) > RATE[0]
        if per_key_caught and rate_caught:
            return
    pytest.fail(f"three runs of two naive fleets: per key caught {per_key_caught},"
                f" rate caught {rate_caught}")


# -- a hung link ------------------------------------------------------------------------


class Relay(threading.Thread):
    """A TCP relay to PostgreSQL that can stop forwarding, as a network
    partition does: connections stay open, bytes stop moving."""

    def __init__(self, target_port):
        super().__init__(daemon=True)
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.frozen = threading.Event()
        self.done = threading.Event()
        self.pairs: dict[socket.socket, socket.socket] = {}

    def run(self):
        while not self.done.is_set():
            watched = [self.listener] + ([] if self.frozen.is_set() else list(self.pairs))
            ready, _, _ = select.select(watched, [], [], 0.05)
            for sock in ready:
                if sock is self.listener:
                    client, _ = self.listener.accept()
                    server = socket.create_connection(("127.0.0.1", self.target_port))
                    self.pairs[client], self.pairs[server] = server, client
                    continue
                if sock not in self.pairs:
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                if not data:
                    self._close(sock)
                else:
                    self.pairs[sock].sendall(data)

    def _close(self, sock):
        other = self.pairs.pop(sock, None)
        if other is not None:
            self.pairs.pop(other, None)
            other.close()
        sock.close()

    def stop(self):
        self.done.set()
        self.join(5)
        for sock in list(self.pairs):
            sock.close()
        self.listener.close()


def _watch_ends(pids):
    """{pid: when it was first seen gone}, filled by a thread that looks
    every 10 ms for up to a minute."""
    ended_at: dict[int, datetime.datetime] = {}

    def watch():
        deadline = time.monotonic() + 60
        while len(ended_at) < len(pids) and time.monotonic() < deadline:
            for pid in pids:
                if pid not in ended_at and not alive(pid):
                    ended_at[pid] = datetime.datetime.now(datetime.timezone.utc)
            time.sleep(0.01)
    threading.Thread(target=watch, daemon=True).start()
    return ended_at


def test_a_supervisor_whose_link_hangs_frees_no_key_twice(
        database_url, executions, start_supervisor):
    sql = executions
    port = int(database_url.rsplit(":", 1)[1].split("/")[0])
    relay = Relay(port)
    relay.start()
    hung_url = database_url.replace(f":{port}/", f":{relay.port}/")
    try:
        lease = ("--lease-seconds", "6")
        cut_off = start_supervisor("--workers", "2", "--concurrency", "4",
                                   "--app", "tests.apps.flow", *lease,
                                   env={"DATABASE_URL": hung_url})
        cut_off.wait_for_workers(2)
        wait_for_limits(sql, "per_account")
        # Every key's job runs on the fleet about to be cut off, long enough
        # to be running when the link hangs.
        _enqueue_keyed(sql, 4, sleep=30)
        wait_until(lambda: sql.value("SELECT count(*) FROM test_executions") == 4, 10,
                   message="the long runs started")
        long_runs = [job_id for job_id, in sql.rows("SELECT id FROM job_queue")]
        cut_pids = [pid for pid, in sql.rows("SELECT DISTINCT pid FROM test_executions")]
        _enqueue_keyed(sql, 8, sleep=0.05)  # their keys' next jobs wait
        # When each of those workers is first seen gone, watched from now on
        # whatever the test waits for meanwhile: a run ends no later.
        ended_at = _watch_ends(cut_pids)
        relay.frozen.set()
        # The healthy fleet, whose reaper takes the lapsed leases over.
        healthy = start_supervisor(*FLEET, *lease)
        healthy.wait_for_workers(4)
        # The cut-off workers running them end themselves before their
        # leases lapse (the others, idle, wait on their hung connections).
        wait_until(lambda: len(ended_at) == len(cut_pids), 15,
                   message="the cut-off workers ended")
        sql.rows("UPDATE job_queue SET payload = '{\"sleep\": 0.05}'")
        wait_until(lambda: _all_succeeded(sql), 40, message="every job")
        cut_off.kill()
    finally:
        relay.stop()
    runs = _runs(sql, "per_account", ended_at)
    # The taken-over runs started again only after their old runs had ended.
    assert _most_per_key(runs) == PER_KEY
    # Each long run was taken over by the reaper once its lease lapsed (so
    # may the jobs the cut-off workers had claimed beside them).
    assert sql.rows("SELECT DISTINCT attempts FROM job_queue WHERE id = ANY(%s)",
                    (long_runs,)) == [(2,)]
    assert healthy.output().count("had an expired lease; now pending") >= 4


def test_enqueue_takes_a_concurrency_key_and_refuses_an_empty_one(database_url, sql):
    result = cli(database_url, "enqueue", "per_account", "--concurrency-key", "account:7")
    assert result.returncode == 0, result.stderr
    assert sql.value("SELECT concurrency_key FROM job_queue WHERE id = %s",
                     (int(result.stdout),)) == "account:7"
    empty = cli(database_url, "enqueue", "per_account", "--concurrency-key", "")
    assert empty.returncode == 1
    assert empty.stderr.strip().splitlines()[-1] == "Error: --concurrency-key must not be empty"
    assert sql.value("SELECT count(*) FROM job_queue") == 1
