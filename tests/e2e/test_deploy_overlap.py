"""A deploy's overlap: Fly's release_command migrates the database while the
machines of the release before keep running jobs, and they go on running
them, beside the new release's machines, until each is stopped.

The release before is the code of the commit before the newest migration,
taken from the repository's history (``git archive``) and run from a
directory of its own: it migrates an empty database to its schema and runs
jobs there; then the current migrations run under it, and it runs jobs of
every ending (success, retry, failure) written by plain INSERTs and by the
current enqueue(), beside a supervisor of the current code, and drains.
"""

import io
import os
import signal
import subprocess
import sys
import tarfile
import textwrap

import psycopg2
import pytest

import motir_supervisor
from motir_supervisor import db, enqueue
from testbed.polling import wait_until
from testbed.sql import Sql
from testbed.supervisors import ROOT

MIGRATIONS = db.load_migrations()
NEWEST = MIGRATIONS[-1]
NEWEST_PATHS = f"motir_supervisor/db/sql/migrations/{NEWEST.version:04d}_*.sql"

#: The handlers both releases run: each run is recorded with the package that ran it.
JOBS_MODULE = textwrap.dedent('''
    import os

    import psycopg2

    import motir_supervisor
    from motir_supervisor import job

    CODE = os.path.dirname(os.path.dirname(os.path.abspath(motir_supervisor.__file__)))


    def record(j):
        conn = psycopg2.connect(os.environ["DATABASE_URL"])
        try:
            with conn, conn.cursor() as cur:
                cur.execute("INSERT INTO overlap_runs VALUES (%s, %s, %s)", (j.id, j.attempt, CODE))
        finally:
            conn.close()


    @job("overlap.ok")
    def ok(j):
        record(j)


    @job("overlap.flaky")
    def flaky(j):
        record(j)
        if j.attempt == 1:
            raise RuntimeError("the partner is down")


    @job("overlap.doomed")
    def doomed(j):
        record(j)
        raise RuntimeError("never works")
''')


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def release_before_newest_migration() -> str:
    """The commit whose code ran on the schema before the newest migration."""
    try:
        shallow = git("rev-parse", "--is-shallow-repository")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"the deploy overlap test reads the release before from git history,"
                    f" and {ROOT} is not a git checkout: {exc}")
    if shallow != "false":
        pytest.fail("the deploy overlap test needs the repository's history, and this clone"
                    " is shallow: run `git fetch --unshallow` (in CI, clone with full depth)")
    # The first commit that added a migration of the newest version (under
    # whatever name it had before it shipped).
    added = git("log", "--diff-filter=A", "--format=%H", "--", NEWEST_PATHS).split()
    # Not committed yet: the release before is the last commit.
    return git("rev-parse", f"{added[-1]}^" if added else "HEAD")


def unpack_package(commit: str, into: str) -> None:
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit,
                              "motir_supervisor"], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


class Fleet:
    """`motir-supervisor run` of the code in ``code`` (its package's parent)."""

    def __init__(self, code: str, apps: str, url: str, log_path: str, *args: str):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "motir_supervisor", "run", "--workers", "2",
             "--app", "overlap_jobs", "--retry-base-seconds", "0.05", *args],
            cwd=code, env={**os.environ, "DATABASE_URL": url,
                           "PYTHONPATH": os.pathsep.join([code, apps])},
            stdout=self.log, stderr=subprocess.STDOUT)

    def output(self) -> str:
        with open(self.log_path, errors="replace") as log:
            return log.read()

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(20)
        finally:
            self.log.close()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.log.close()


def run_cli(code: str, url: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "motir_supervisor", *args], cwd=code,
                          env={**os.environ, "DATABASE_URL": url, "PYTHONPATH": code},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture
def overlap_database(pg):
    yield pg.create_database("overlap")
    pg.drop_database("overlap")


def insert_plain(sql, kind, count, max_attempts=None):
    """Rows as a web app's plain INSERT writes them, without the columns it leaves out."""
    if max_attempts is None:
        return [row[0] for row in sql.rows(
            "INSERT INTO job_queue (kind) SELECT %s FROM generate_series(1, %s) RETURNING id",
            (kind, count))]
    return [row[0] for row in sql.rows(
        "INSERT INTO job_queue (kind, max_attempts) SELECT %s, %s FROM generate_series(1, %s)"
        " RETURNING id", (kind, max_attempts, count))]


def wait_finished(sql, ids, fleets, timeout=20):
    try:
        wait_until(lambda: sql.value("SELECT count(*) FROM job_queue WHERE id = ANY(%s)"
                                     " AND state IN ('succeeded', 'failed')", (ids,)) == len(ids),
                   timeout, message=f"{len(ids)} jobs finished")
    except AssertionError as exc:
        logs = "\n".join(f"--- {fleet.log_path}\n{fleet.output()[-3000:]}" for fleet in fleets)
        raise AssertionError(f"{exc}\n{logs}") from None


def test_the_release_before_keeps_running_jobs_on_the_migrated_schema(
        overlap_database, tmp_path):
    url = overlap_database
    old_code, apps = str(tmp_path / "release_before"), str(tmp_path / "apps")
    os.makedirs(apps)
    with open(os.path.join(apps, "overlap_jobs.py"), "w") as module:
        module.write(JOBS_MODULE)
    unpack_package(release_before_newest_migration(), old_code)
    current_code = os.path.dirname(os.path.dirname(os.path.abspath(motir_supervisor.__file__)))

    # The release before, on its own schema, as production runs it before the deploy.
    run_cli(old_code, url, "migrate")
    sql = Sql(url)
    fleets = []
    try:
        assert 0 < sql.value("SELECT max(version) FROM motir_schema_migrations") < NEWEST.version
        sql.rows("CREATE TABLE overlap_runs (job_id bigint, attempt int, code text)")
        old = Fleet(old_code, apps, url, str(tmp_path / "old.log"))
        fleets.append(old)
        warm = insert_plain(sql, "overlap.ok", 20)
        wait_finished(sql, warm, fleets)

        # The release command, while the old fleet runs.
        store = db.JobStore(url)
        try:
            applied = [m.version for m in store.migrate()]
        finally:
            store.close()
        assert applied and applied[-1] == NEWEST.version

        # Jobs written after the migration, by a plain INSERT and by this
        # release's enqueue(), run by the old fleet alone.
        conn = psycopg2.connect(url)
        conn.autocommit = True
        try:
            ok = insert_plain(sql, "overlap.ok", 20) + [
                enqueue(conn, "overlap.ok", {"n": n}) for n in range(5)]
            flaky = insert_plain(sql, "overlap.flaky", 3) + [
                enqueue(conn, "overlap.flaky", max_attempts=3)]
            doomed = insert_plain(sql, "overlap.doomed", 2, max_attempts=2) + [
                enqueue(conn, "overlap.doomed", max_attempts=2)]
        finally:
            conn.close()
        every = ok + flaky + doomed
        wait_finished(sql, every, fleets)
        assert sql.rows("SELECT state, attempts, count(*) FROM job_queue WHERE id = ANY(%s)"
                        " GROUP BY 1, 2 ORDER BY 1, 2", (every,)) == [
            ("failed", 2, len(doomed)), ("succeeded", 1, len(ok)),
            ("succeeded", 2, len(flaky))]
        assert sql.rows("SELECT DISTINCT code FROM overlap_runs WHERE job_id = ANY(%s)",
                        (every,)) == [(old_code,)]

        # The rolling deploy: a machine of the current release beside the old one.
        new = Fleet(current_code, apps, url, str(tmp_path / "new.log"))
        fleets.append(new)
        both = insert_plain(sql, "overlap.ok", 200) + insert_plain(sql, "overlap.flaky", 10)
        wait_finished(sql, both, fleets)
        assert sql.value("SELECT count(*) FROM job_queue WHERE id = ANY(%s)"
                         " AND state <> 'succeeded'", (both,)) == 0
        assert sql.value("SELECT count(*) - count(DISTINCT (job_id, attempt)) FROM overlap_runs"
                         ) == 0, "a job's attempt ran twice"

        # Fly stops the old machine: it drains and exits cleanly.
        assert old.stop() == 0, old.output()
        assert "Traceback" not in old.output() and " ERROR " not in old.output(), old.output()
    finally:
        for fleet in fleets:
            fleet.kill()
        sql.close()
