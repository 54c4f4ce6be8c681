"""Handlers of the demo (bin/demo): what an app module passed with --app looks like."""

import random
import time

from motir_supervisor import job


@job("send_email")
def send_email(j):
    time.sleep(random.uniform(0.002, 0.02))  # talking to the mail provider


@job("resize_image", timeout=30)
def resize_image(j):
    time.sleep(random.uniform(0.01, 0.05))


@job("flaky_webhook")
def flaky_webhook(j):
    if j.attempt == 1:
        raise ConnectionError(f"webhook {j.payload['url']} timed out")


@job("broken_report")
def broken_report(j):
    raise ValueError(f"report {j.payload['report']} refers to a deleted account")


@job("reminder")
def reminder(j):
    pass
