"""worker.recycling: each worker's jittered job limit, its resident size,
how often that is read, and when a worker's claims have spent its limit."""

import random
import re
from pathlib import Path

import pytest

from motir_supervisor.worker import recycling


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
