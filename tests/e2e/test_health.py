"""The worker group's /healthz, as Fly's check calls it: a supervisor with
--metrics-port answers 200 while its workers live and the database answers,
503 with the reason while either is missing, and 200 again once it is back."""

import os
import signal
import urllib.error
import urllib.request

import port_for

from tests.helpers import wait_until


def probe(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as response:
            return response.status, response.read().decode().strip()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode().strip()
    except OSError:
        return None, ""


def answers(port, status, reason):
    found = probe(port)
    return found if found[0] == status and found[1].startswith(reason) else None


def test_healthz_fails_while_the_database_is_out_of_reach(pg, database_url, start_supervisor):
    port = port_for.select_random()
    supervisor = start_supervisor("--workers", "2", "--metrics-port", str(port))
    wait_until(lambda: answers(port, 200, "ok: 2 workers alive"), 15, message="healthy")
    name = database_url.rsplit("/", 1)[1]
    pg.admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")
    pg.admin(f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'")
    try:
        status, why = wait_until(lambda: answers(port, 503, "database unreachable: "), 15,
                                 message="unhealthy without the database")
        assert "not currently accepting connections" in why, why
    finally:
        pg.admin(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    wait_until(lambda: answers(port, 200, "ok: "), 15, message="healthy again",
               interval=0.1)
    assert supervisor.process.poll() is None


def test_healthz_fails_while_no_worker_is_alive(start_supervisor):
    port = port_for.select_random()
    supervisor = start_supervisor("--workers", "1", "--metrics-port", str(port))
    wait_until(lambda: answers(port, 200, "ok: 1 worker alive"), 15, message="healthy")

    def kill_workers_until_unhealthy():
        # Workers that keep dying are restarted after a growing delay: a
        # window with none alive.
        for pid in supervisor.worker_pids():
            os.kill(pid, signal.SIGKILL)
        return answers(port, 503, "no live workers")
    wait_until(kill_workers_until_unhealthy, 20, interval=0.05,
               message="unhealthy without workers")
    wait_until(lambda: answers(port, 200, "ok: 1 worker alive"), 15, interval=0.1,
               message="healthy once a worker is back")
