"""A periodic job for the schedule tests: one run a second, recorded in
test_executions like the sample app's jobs (whose helpers it uses)."""

from motir_supervisor import job
from tests.apps.sample import _record_end, _record_start


@job("tick", schedule=1)
def tick(j):
    _record_end(_record_start(j))
