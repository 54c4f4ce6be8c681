"""The benchmark's only handler, passed to the supervisor with --app.

It does nothing, so every measured microsecond belongs to the supervisor,
the workers and the database, which is what the benchmark compares.
"""

from motir_supervisor import job


@job("noop")
def noop(j):
    pass
