"""The supervisor's settings: one frozen value, validated once, read everywhere.

It reads no environment and opens nothing; the CLI builds it from options and
environment variables.
"""

from __future__ import annotations

import dataclasses


class ConfigError(ValueError):
    """A setting that cannot work; the message is one line for the operator."""


# A claim stays valid for LEASE_SECONDS unless its worker renews it, and the
# worker renews every third of the lease. So two renewals in a row can be
# lost (a network stall, a failover, a stop-the-world pause) before anyone
# may take the job over; a machine that vanished costs at most one lease plus
# one reaper pass before its jobs run elsewhere. A worker that merely dies is
# not waited for at all: its own supervisor releases its claims at once.
# 30 s keeps renewal traffic negligible (one UPDATE per running job every
# 10 s) while a lost machine's jobs return within about 45 s.
LEASE_SECONDS = 30.0
RENEWALS_PER_LEASE = 3
# A worker's connection gives up on an unresponsive server after one renewal
# interval (lease / 3), so that it can still stop its handler before the
# lease runs out; below this that interval is shorter than libpq's shortest
# connect timeout (2 s), and leases would expire under healthy workers.
MIN_LEASE_SECONDS = 6.0


# Most jobs wait: on an HTTP call, a mail API, a model. A worker therefore
# runs several at once, plain handlers on threads and async ones on its event
# loop, and a machine of 4 workers runs 32 jobs at once with 4 processes'
# memory, not 32. A thread costs little memory beside a process, and CPU-bound
# handlers lose nothing in total by sharing the interpreter (each run takes
# longer, the work done per second stays); what a higher number does cost is
# the database connections handlers open themselves, and handlers must then
# tolerate running beside each other in one process. Eight keeps a machine
# of four workers within a few dozen handler connections; CPU-bound or
# thread-unsafe handlers run with --concurrency 1, and jobs that mostly wait
# (async ones above all) go far higher.
DEFAULT_CONCURRENCY = 8
MAX_CONCURRENCY = 1000


@dataclasses.dataclass(frozen=True)
class Config:
    #: libpq URL or key=value string; the password never leaves this field.
    database_url: str
    #: Child worker processes the supervisor keeps alive.
    workers: int = 4
    #: Jobs one worker runs at once (see DEFAULT_CONCURRENCY).
    concurrency: int = DEFAULT_CONCURRENCY
    #: Modules imported in each worker to register handlers.
    apps: tuple[str, ...] = ()
    #: Queues to claim from; empty means all.
    queues: tuple[str, ...] = ()
    #: How long a claim stays valid without renewal (see LEASE_SECONDS).
    lease_seconds: float = LEASE_SECONDS
    #: On SIGTERM, how long in-flight jobs may run before their claims are released.
    drain_seconds: float = 25.0
    #: Longest idle wait between polls; wake-ups normally come from NOTIFY.
    poll_seconds: float = 15.0
    #: First retry delay after a failure; doubles each attempt (with jitter).
    retry_base_seconds: float = 5.0
    #: Cap of the retry delay.
    retry_max_seconds: float = 3600.0
    #: Most jobs one claim takes. A worker starts at one and grows toward what
    #: it can run in a tenth of a second (see batching.FAST_BATCH_SECONDS), so
    #: short jobs share round trips and long ones do not wait behind each other.
    #: For jobs that take no time this cap is what bounds a claim, and each
    #: claim costs the database a transaction of its own beside its rows, so
    #: the cap is as large as still pays. The price: an urgent job that comes
    #: while a top-up of up to 1000 rows is in flight waits for it (see
    #: batching.URGENT_WATCH_SECONDS).
    batch_size: int = 1000
    #: Succeeded and cancelled rows older than this are deleted; 0 keeps them.
    retention_hours: float = 168.0
    #: Failed rows older than this are deleted; 0 keeps them. Longer than the
    #: others: a failed job waits for a person to look at it and retry it,
    #: who may come back to it only weeks later, while a kind that fails in
    #: bulk must not grow the table without end.
    keep_failed_hours: float = 720.0
    #: Port of the fleet's Prometheus metrics; None serves none.
    metrics_port: int | None = None
    #: False: never LISTEN, only poll (for transaction-pooling PgBouncer).
    listen: bool = True
    #: A worker is replaced by a fresh one after about this many jobs (each
    #: draws its own limit within a tenth of it, see recycling.JITTER); 0: never.
    max_jobs_per_worker: int = 0
    #: ...or once its resident size passes this many MB (see recycling); 0: never.
    max_worker_memory_mb: int = 0

    def __post_init__(self) -> None:
        if not self.database_url:
            raise ConfigError("no database: pass --database-url or set DATABASE_URL")
        if not 1 <= self.workers <= 256:
            raise ConfigError(f"--workers must be between 1 and 256, got {self.workers}")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ConfigError(f"--concurrency must be between 1 and {MAX_CONCURRENCY},"
                              f" got {self.concurrency}")
        if self.lease_seconds < MIN_LEASE_SECONDS:
            raise ConfigError(
                f"--lease-seconds must be at least {MIN_LEASE_SECONDS:g}: the lease is renewed "
                f"every third of it, and shorter renewals cannot keep up with a slow round trip"
            )
        if self.drain_seconds < 0:
            raise ConfigError(f"--drain-seconds cannot be negative, got {self.drain_seconds:g}")
        if self.poll_seconds <= 0:
            raise ConfigError(f"--poll-seconds must be positive, got {self.poll_seconds:g}")
        if self.retry_base_seconds < 0 or self.retry_max_seconds < self.retry_base_seconds:
            raise ConfigError("retry delays must satisfy 0 <= base <= max")
        if not 1 <= self.batch_size <= 1000:
            raise ConfigError(f"--batch-size must be between 1 and 1000, got {self.batch_size}")
        for option, hours in (("--retention-hours", self.retention_hours),
                              ("--keep-failed-hours", self.keep_failed_hours)):
            if hours < 0:
                raise ConfigError(f"{option} cannot be negative, got {hours:g}")
        for option, value in (("--max-jobs-per-worker", self.max_jobs_per_worker),
                              ("--max-worker-memory", self.max_worker_memory_mb)):
            if value < 0:
                raise ConfigError(f"{option} cannot be negative, got {value} (0 turns it off)")
        if self.metrics_port is not None and not 0 < self.metrics_port < 65536:
            raise ConfigError(f"--metrics-port must be a TCP port, got {self.metrics_port}")

    @property
    def renew_every(self) -> float:
        """Seconds between lease renewals of a running job (see LEASE_SECONDS)."""
        return self.lease_seconds / RENEWALS_PER_LEASE

    @property
    def ledger_entries(self) -> int:
        """Jobs a worker can hold at once: a full claim beside the rest of the
        one before it and full slots, and as many again whose outcomes wait
        to be written. An entry costs 32 bytes; its page for error text is
        touched only when a run fails."""
        return 2 * (self.batch_size + self.concurrency)

    @property
    def reaper_every(self) -> float:
        """Seconds between reaper passes: expired leases wait at most this long."""
        return min(max(self.lease_seconds / 2, 1.0), 15.0)
