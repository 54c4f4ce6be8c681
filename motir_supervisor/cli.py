"""The ``motir-supervisor`` command: options, environment, logging, one-line errors.

The only place that configures logging and reads the environment. It turns
bad input into a one-line error and hands a validated :class:`Config` to the
supervisor; it runs no SQL itself.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import json
import os
import sys
from typing import Any, Callable, Iterator, TypeVar

import click
import psycopg2
import psycopg2.errors

from . import db, registry
from .config import DEFAULT_CONCURRENCY, Config, ConfigError
from .logs import configure_logging
from .schedule import Schedule, instant_text
from .supervisor.arbiter import Supervisor

DATABASE_ENV = ("MOTIR_DATABASE_URL", "DATABASE_URL")

Command = TypeVar("Command", bound=Callable[..., Any])


class DefaultToRun(click.Group):
    """``motir-supervisor --workers 4`` means ``motir-supervisor run --workers 4``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Skip the group's own options, then default the command to run.
        i = 0
        while i < len(args) and args[i].startswith(("--log-level", "--log-format")):
            i += 1 if "=" in args[i] else 2
        rest = args[i:]
        if not rest or (rest[0] not in self.commands and rest[0] not in ("--help", "-h")):
            args = [*args[:i], "run", *rest]
        return super().parse_args(ctx, args)


def database_option(f: Command) -> Command:
    return click.option(
        "--database-url", envvar=list(DATABASE_ENV), show_envvar=True,
        help="PostgreSQL URL (the Fly convention is DATABASE_URL).")(f)


def require_database(url: str | None) -> str:
    if not url:
        raise click.ClickException("no database: pass --database-url or set DATABASE_URL")
    return url


@contextlib.contextmanager
def database(url: str | None, purpose: str) -> Iterator[db.JobStore]:
    """A store for one command; a database error becomes a one-line exit."""
    store = db.JobStore(require_database(url), application_name=f"motir-supervisor {purpose}")
    try:
        yield store
    except psycopg2.Error as exc:
        raise database_error(exc, store.dsn) from None
    finally:
        store.close()


def database_error(exc: psycopg2.Error, url: str) -> click.ClickException:
    return click.ClickException(
        f"database {db.describe_dsn(url)}: {db.one_line(exc, url)}")


@click.group(cls=DefaultToRun, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", envvar="MOTIR_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
@click.option("--log-format", envvar="MOTIR_LOG_FORMAT", default="text", show_default=True,
              type=click.Choice(["text", "json"]))
@click.pass_context
def main(ctx: click.Context, log_level: str, log_format: str) -> None:
    """Run Motir's background jobs from the PostgreSQL table job_queue."""
    # Only `run` flushes its logs at the end of each batch of work.
    configure_logging(log_level, log_format, batched=ctx.invoked_subcommand == "run")


@main.command()
@database_option
@click.option("--workers", envvar="MOTIR_WORKERS", type=int, default=4, show_default=True,
              help="Child worker processes.")
@click.option("--concurrency", envvar="MOTIR_CONCURRENCY", type=int,
              default=DEFAULT_CONCURRENCY, show_default=True,
              help="Jobs one worker runs at once: threads for def handlers, one event loop"
                   " for async def handlers.")
@click.option("--app", "apps", envvar="MOTIR_APP", multiple=True,
              help="Module that registers handlers (repeatable).")
@click.option("--queue", "queues", envvar="MOTIR_QUEUE", multiple=True,
              help="Only claim jobs of this queue (repeatable; default: all).")
@click.option("--lease-seconds", envvar="MOTIR_LEASE_SECONDS", type=float, default=30.0,
              show_default=True, help="How long a claim stays valid without renewal.")
@click.option("--drain-seconds", envvar="MOTIR_DRAIN_SECONDS", type=float, default=25.0,
              show_default=True, help="On SIGTERM, how long in-flight jobs may finish.")
@click.option("--poll-seconds", envvar="MOTIR_POLL_SECONDS", type=float, default=15.0,
              show_default=True, help="Longest idle wait between polls (NOTIFY wakes sooner).")
@click.option("--retry-base-seconds", envvar="MOTIR_RETRY_BASE_SECONDS", type=float,
              default=5.0, show_default=True,
              help="First retry delay after a failure; doubles per attempt, with jitter.")
@click.option("--batch-size", envvar="MOTIR_BATCH_SIZE", type=int, default=1000, show_default=True,
              help="Most jobs one claim takes (a worker grows to it while jobs finish fast).")
@click.option("--retention-hours", envvar="MOTIR_RETENTION_HOURS", type=float, default=168.0,
              show_default=True, help="Delete succeeded/cancelled jobs older than this; 0 keeps.")
@click.option("--keep-failed-hours", envvar="MOTIR_KEEP_FAILED_HOURS", type=float, default=720.0,
              show_default=True, help="Delete failed jobs older than this; 0 keeps.")
@click.option("--metrics-port", envvar="MOTIR_METRICS_PORT", type=int, default=None,
              help="Serve the fleet's Prometheus metrics, and its /healthz, on this port.")
@click.option("--listen/--no-listen", envvar="MOTIR_LISTEN", default=True, show_default=True,
              help="--no-listen polls only (for PgBouncer in transaction mode).")
@click.option("--max-jobs-per-worker", envvar="MOTIR_MAX_JOBS_PER_WORKER", type=int, default=0,
              help="Replace a worker by a fresh one after about this many jobs (each worker"
                   " within a tenth of it, so they do not all restart at once); 0: never.")
@click.option("--max-worker-memory", "max_worker_memory_mb", envvar="MOTIR_MAX_WORKER_MEMORY",
              type=int, default=0, metavar="MB",
              help="Replace a worker by a fresh one once its resident size passes this many"
                   " MB; 0: never.")
def run(database_url: str | None, workers: int, concurrency: int, apps: tuple[str, ...],
        queues: tuple[str, ...], lease_seconds: float, drain_seconds: float,
        poll_seconds: float, retry_base_seconds: float, batch_size: int,
        retention_hours: float, keep_failed_hours: float, metrics_port: int | None,
        listen: bool, max_jobs_per_worker: int, max_worker_memory_mb: int) -> None:
    """Run the supervisor and its workers until SIGTERM or SIGINT."""
    try:
        config = Config(
            database_url=require_database(database_url), workers=workers,
            concurrency=concurrency, apps=tuple(apps),
            queues=tuple(queues), lease_seconds=lease_seconds, drain_seconds=drain_seconds,
            poll_seconds=poll_seconds, retry_base_seconds=retry_base_seconds,
            batch_size=batch_size, retention_hours=retention_hours,
            keep_failed_hours=keep_failed_hours, metrics_port=metrics_port,
            listen=listen, max_jobs_per_worker=max_jobs_per_worker,
            max_worker_memory_mb=max_worker_memory_mb)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    _import_from_working_directory()
    for module in config.apps:
        if not _module_exists(module):
            raise click.ClickException(f"cannot import --app module {module!r}: no such module")
    registry.preload_asyncio_for(config.apps)
    with database(config.database_url, "run") as store:
        current = store.schema_is_current()
    if not current:
        raise click.ClickException(
            "the job_queue schema is missing or out of date: run `motir-supervisor migrate`")
    sys.exit(Supervisor(config).run())


def _import_from_working_directory() -> None:
    """An --app module in the directory the command runs in imports by its
    name, as under ``python -m`` or gunicorn, without PYTHONPATH: the
    console script's own path starts at its bin directory instead."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def _module_exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@main.command()
@database_option
@click.option("--sql", "show_sql", is_flag=True,
              help="Print the SQL of the pending migrations, in order, and run nothing.")
@click.option("--status", "show_status", is_flag=True,
              help="List the migrations applied (with when) and pending; run nothing.")
def migrate(database_url: str | None, show_sql: bool, show_status: bool) -> None:
    """Create or upgrade the schema; running it again changes nothing."""
    if show_sql and show_status:
        raise click.UsageError("give --sql or --status, not both")
    with database(database_url, "migrate") as store:
        if show_sql or show_status:
            applied = store.applied_migrations()
            (_print_pending_sql if show_sql else _print_migration_status)(applied)
            return
        done = store.migrate()
    if done:
        for migration in done:
            click.echo(f"applied {migration.version:04d}_{migration.name}")
    else:
        click.echo("schema is up to date")


def _print_pending_sql(applied: list[db.Applied] | None) -> None:
    script = db.pending_sql(applied)
    if script:
        click.echo(script, nl=False)
    else:
        click.echo("-- schema is up to date: nothing would run", err=True)


def _print_migration_status(applied: list[db.Applied] | None) -> None:
    if applied is None:
        click.echo("never migrated: no motir_schema_migrations table")
    known = {m.version for m in db.load_migrations()}
    for row in applied or ():
        unknown = "" if row.version in known else "  (not in this release: a newer one applied it)"
        when = row.applied_at.astimezone(datetime.timezone.utc)
        click.echo(f"{row.version:04d}_{row.name:<28} applied {when:%Y-%m-%d %H:%M:%S} UTC"
                   f"{unknown}")
    pending = db.pending_migrations(applied)
    for migration in pending:
        click.echo(f"{migration.version:04d}_{migration.name:<28} pending")
    click.echo(f"{len(pending)} pending: run motir-supervisor migrate (--sql shows what it runs)"
               if pending else "schema is up to date")


@main.command()
@database_option
@click.argument("kind")
@click.option("--payload", default="{}", help="JSON input of the handler.")
@click.option("--delay", type=click.FloatRange(min=0), default=0.0,
              help="Seconds before the job is due.")
@click.option("--queue", default=None,
              help="Its queue (default: its kind's, else 'default').")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None,
              help="Runs before the job ends failed (default: its kind's, else 25).")
@click.option("--priority", type=click.IntRange(-32768, 32767), default=None,
              help="Smaller runs first among due jobs (default: its kind's, else 0).")
@click.option("--unique-key", default=None,
              help="At most one pending or running job of the queue has this key.")
@click.option("--concurrency-key", default=None,
              help="What the kind's max_running_per_key counts by.")
def enqueue(database_url: str | None, kind: str, payload: str, delay: float,
            queue: str | None, max_attempts: int | None, priority: int | None,
            unique_key: str | None, concurrency_key: str | None) -> None:
    """Insert one job and print its id (or the id of the job holding --unique-key)."""
    try:
        decoded = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise click.ClickException(f"--payload is not valid JSON: {exc}") from None
    try:
        db.encode_payload(decoded)  # json.loads takes NaN, which jsonb refuses
    except ValueError as exc:
        raise click.ClickException(f"--payload: {exc}") from None
    if concurrency_key == "":
        raise click.ClickException("--concurrency-key must not be empty")
    with database(database_url, "enqueue") as store:
        job_id, inserted = store.enqueue(kind, decoded, queue=queue, delay_seconds=delay,
                                         max_attempts=max_attempts, priority=priority,
                                         unique_key=unique_key,
                                         concurrency_key=concurrency_key)
    click.echo(job_id)
    if not inserted:
        click.echo(f"job {job_id} is already pending or running with unique key"
                   f" {unique_key!r} in its queue; nothing was inserted", err=True)


@main.command()
@database_option
@click.argument("queue")
def pause(database_url: str | None, queue: str) -> None:
    """Stop claiming QUEUE's jobs on every supervisor; running ones finish."""
    with database(database_url, "pause") as store:
        changed = store.pause_queue(queue)
    click.echo(f"queue {queue!r} is paused" if changed else f"queue {queue!r} was paused already")


@main.command()
@database_option
@click.argument("queue")
def resume(database_url: str | None, queue: str) -> None:
    """Claim QUEUE's jobs again, on every supervisor."""
    with database(database_url, "resume") as store:
        changed = store.resume_queue(queue)
    click.echo(f"queue {queue!r} is running again" if changed
               else f"queue {queue!r} was not paused")


@main.command()
@database_option
def status(database_url: str | None) -> None:
    """Queue depth, the oldest due job, running jobs and expired leases."""
    with database(database_url, "status") as store:
        report = store.queue_status()
    click.echo("jobs by queue and state:")
    if not report["counts"]:
        click.echo("  (none)")
    for queue, state, count in report["counts"]:
        click.echo(f"  {queue:<20} {state:<10} {count:>10}")
    oldest = report["oldest_due_seconds"]
    click.echo("oldest due job: " + ("none" if oldest is None else f"waiting {oldest:.1f}s"))
    click.echo(f"running: {len(report['running'])}")
    for job_id, queue, kind, attempts, claimant, lease_left in report["running"]:
        click.echo(f"  job {job_id} {kind} ({queue}) attempt {attempts} by {claimant},"
                   f" lease {'expired' if lease_left < 0 else f'{lease_left:.0f}s left'}")
    click.echo(f"expired leases: {report['expired_leases']}")
    click.echo("paused queues: " + (", ".join(
        f"{queue} (for {seconds:.0f}s)" for queue, seconds in report["paused"]) or "none"))
    click.echo("limits:" + ("" if report["limits"] else " none"))
    for (kind, max_running, per_key, rate_limit, rate_seconds, running, waiting, recent,
         busiest) in report["limits"]:
        said = [f"{running} running" + (f" of at most {max_running}" if max_running else ""),
                f"{waiting} waiting"]
        if rate_limit is not None:
            said.append(f"{recent} of at most {rate_limit} starts in the last {rate_seconds:g}s")
        click.echo(f"  {kind:<20} {', '.join(said)}")
        if per_key is not None:
            click.echo(f"  {'':<20} at most {per_key} running per key; busiest keys: "
                       + (", ".join(f"{key} ({r} running, {w} waiting)" for key, r, w in busiest)
                          or "none"))
    click.echo("schedules:" + ("" if report["schedules"] else " none"))
    for kind, spec, tz, last in report["schedules"]:
        schedule = Schedule.from_spec(kind, spec, tz)
        upcoming = schedule.following(report["now"])
        local = f" ({upcoming.astimezone(schedule.zone):%Y-%m-%d %H:%M %Z})" if tz else ""
        click.echo(f"  {kind:<20} {spec:<16} {tz or 'UTC':<16} last {instant_text(last)},"
                   f" next {instant_text(upcoming)}{local}")


@main.command()
@database_option
@click.argument("job_id", type=int, required=False)
@click.option("--kind", help="Retry every failed job of this kind instead of one job.")
def retry(database_url: str | None, job_id: int | None, kind: str | None) -> None:
    """Put a failed or cancelled job (or all failed jobs of a kind) back to pending."""
    if (job_id is None) == (kind is None):
        raise click.UsageError("give either a JOB_ID or --kind KIND")
    with database(database_url, "retry") as store:
        if kind is not None:
            try:
                ids = store.retry_failed_of_kind(kind)
            except psycopg2.errors.UniqueViolation:
                raise click.ClickException(
                    f"a {kind} job was enqueued with the unique key of a failed one while"
                    " retrying; nothing was retried, try again") from None
            click.echo(f"{len(ids)} failed {kind} jobs are pending again")
            return
        assert job_id is not None  # given, as kind is not
        try:
            result = store.retry_job(job_id)
        except psycopg2.errors.UniqueViolation:
            raise click.ClickException(
                f"a job with job {job_id}'s unique key was enqueued while retrying it;"
                " nothing was retried") from None
    if result is None:
        raise click.ClickException(f"no job {job_id}")
    state, changed, holder = result
    if holder is not None and state in ("failed", "cancelled"):
        raise click.ClickException(
            f"job {job_id} stays {state}: job {holder} holds its unique key and runs instead")
    if not changed:
        raise click.ClickException(
            f"job {job_id} is {state}; only failed or cancelled jobs can be retried")
    click.echo(f"job {job_id} was {state}; it is pending again with fresh attempts")


@main.command()
@database_option
@click.argument("job_id", type=int)
def cancel(database_url: str | None, job_id: int) -> None:
    """Cancel a pending or failed job; ask a running one to stop."""
    with database(database_url, "cancel") as store:
        result = store.cancel_job(job_id)
    if result is None:
        raise click.ClickException(f"no job {job_id}")
    state, changed = result
    if not changed:
        raise click.ClickException(f"job {job_id} is already {state}; nothing to cancel")
    if state == "running":
        click.echo(f"job {job_id} is running; its worker will ask the handler to stop at its"
                   " next lease renewal, and it ends cancelled unless it completes first")
    else:
        click.echo(f"job {job_id} was {state}; it is cancelled")


@main.command()
@database_option
@click.option("--older-than", "older_than_hours", type=click.FloatRange(min=0), required=True,
              help="Hours since a job finished.")
@click.option("--state", "states", multiple=True,
              type=click.Choice([s for group in db.PRUNED_TOGETHER for s in group]),
              help="Delete jobs that ended in this state; repeatable."
                   "  [default: succeeded and cancelled]")
def prune(database_url: str | None, older_than_hours: float, states: tuple[str, ...]) -> None:
    """Delete succeeded and cancelled jobs (or those of --state) that finished
    long enough ago. A job stays while a job that depends on it has not
    ended; a workflow goes whole, once its last job is old enough."""
    chosen = set(states) or set(db.PRUNED_TOGETHER[0])
    total = 0
    with database(database_url, "prune") as store:
        for group in db.PRUNED_TOGETHER:
            these = [state for state in group if state in chosen]
            while these and (deleted := store.prune_finished(these, older_than_hours * 3600)):
                total += deleted
        # A workflow goes whole: with a failed job only when failed ones are pruned too.
        if chosen & set(db.PRUNED_TOGETHER[0]):
            failed = older_than_hours * 3600 if "failed" in chosen else None
            while deleted := store.prune_workflows(older_than_hours * 3600, failed):
                total += deleted
    named = " or ".join(s for group in db.PRUNED_TOGETHER for s in group if s in states)
    click.echo(f"deleted {total} {named or 'finished'} jobs")


@main.command()
@database_option
@click.option("--host", envvar="MOTIR_WEB_HOST", default="0.0.0.0", show_default=True)
@click.option("--port", envvar="PORT", type=int, default=8080, show_default=True)
def web(database_url: str | None, host: str, port: int) -> None:
    """Serve /healthz, /metrics and, when MOTIR_WEB_PASSWORD is set, the dashboard at /."""
    from .web import server as web_server  # prometheus_client is imported only here

    # From the environment only: an option's value would show in `ps`.
    password = os.environ.get("MOTIR_WEB_PASSWORD", "")
    web_server.serve(require_database(database_url), host, port, password)
