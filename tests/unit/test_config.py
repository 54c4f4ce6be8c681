"""config: the settings it refuses, and the renewal and reaper periods it
derives from the lease."""

import pytest

from motir_supervisor.config import Config, ConfigError


@pytest.mark.parametrize("kwargs, fragment", [
    ({"database_url": ""}, "no database"),
    ({"workers": 0}, "--workers"),
    ({"lease_seconds": 5}, "--lease-seconds"),
    ({"batch_size": 0}, "--batch-size"),
    ({"poll_seconds": 0}, "--poll-seconds"),
    ({"drain_seconds": -1}, "--drain-seconds"),
    ({"max_jobs_per_worker": -1}, "--max-jobs-per-worker"),
    ({"max_worker_memory_mb": -5}, "--max-worker-memory"),
    ({"retention_hours": -1}, "--retention-hours"),
    ({"keep_failed_hours": -1}, "--keep-failed-hours"),
])
def test_config_rejects_what_cannot_work(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Config(**{"database_url": "postgresql:///x", **kwargs})


def test_lease_is_renewed_well_inside_itself():
    config = Config(database_url="postgresql:///x", lease_seconds=30)
    assert config.renew_every == 10
    assert config.reaper_every <= config.lease_seconds
