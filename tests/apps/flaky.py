"""A kind for the dashboard tests: it fails while its marker file exists,
so a test can make a failed job and then let its retry succeed."""

import os

from motir_supervisor import PermanentFailure, job


@job("flaky")
def flaky(j):
    if os.path.exists(j.payload["marker"]):
        raise PermanentFailure(f"the marker {j.payload['marker']} is still there")
