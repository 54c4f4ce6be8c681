"""Kinds and hooks for the tests of hooks and outputs. Every hook writes what
it saw as one JSON line to the file named by $OBSERVED_LOG (appends of one
line each: the workers share the file).

What a job does is in its payload: {"do": "return", "value": ...},
"raise", "permanent", "snooze", "sleep" (for "seconds", past the kind's
timeout), "wait_for_stop" (until j.stopping, then Interrupted). A payload's
"break" names the part of the around hook that raises: "before" or "after".
"""

import asyncio
import contextvars
import json
import os
import sys
import time

from motir_supervisor import Interrupted, PermanentFailure, Snooze, hooks, job

#: Set by the around hook, read by the handler: context crosses into it.
CONTEXT: contextvars.ContextVar[str | None] = contextvars.ContextVar("observed", default=None)


def note(**event):
    path = os.environ.get("OBSERVED_LOG")
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"pid": os.getpid(), **event}, default=repr) + "\n")


def _ended(ended):
    return {"outcome": ended.outcome, "output": ended.output, "timed_out": ended.timed_out,
            "error": type(ended.error).__name__ if ended.error is not None else None}


@hooks.around_run
def around(j):
    if j.payload.get("break") == "before":
        raise RuntimeError("an around hook broken before its yield")
    token = CONTEXT.set(f"set around job {j.id}")
    started = time.monotonic()
    ended = yield
    CONTEXT.reset(token)
    note(event="around", id=j.id, seconds=time.monotonic() - started, **_ended(ended))
    if j.payload.get("break") == "after":
        raise RuntimeError("an around hook broken after its yield")


@hooks.on_run_start
def started(j):
    note(event="start", id=j.id, kind=j.kind, attempt=j.attempt)


@hooks.on_run_end
def ended(j, ended):
    note(event="end", id=j.id, **_ended(ended))
    if j.payload.get("break") == "end":
        raise RuntimeError("an on_run_end hook broken")


@hooks.on_worker_start
def worker_up(index):
    note(event="worker_start", index=index)


@hooks.on_worker_exit
def worker_down(index):
    note(event="worker_exit", index=index)


def _act(j):
    note(event="handler", id=j.id, context=CONTEXT.get())
    do = j.payload.get("do", "return")
    if do == "return":
        return j.payload.get("value")
    if do == "raise":
        raise ValueError("asked to fail")
    if do == "permanent":
        raise PermanentFailure("asked to fail for good")
    if do == "snooze":
        raise Snooze(3600)
    if do == "return_unstorable":
        return UNSTORABLE[j.payload["what"]]()
    if do == "return_deep":
        # JSON takes it (the app raised its recursion limit), PostgreSQL's
        # jsonb does not: nested past the server's stack.
        sys.setrecursionlimit(100_000)
        value = []
        for _ in range(20_000):
            value = [value]
        return value
    return do


#: Return values the output column cannot hold, each with why.
UNSTORABLE = {
    "object": object,
    "nan": lambda: {"ratio": float("nan")},
    "nul": lambda: ["a\x00b"],
    "surrogate": lambda: "\ud800",
    "big": lambda: "x" * (256 * 1024),
}


@job("observed", timeout=0.5)
def observed(j):
    do = _act(j)
    if do == "sleep":
        time.sleep(j.payload["seconds"])
    elif do == "wait_for_stop":
        while not j.stopping:
            time.sleep(0.01)
        raise Interrupted()
    return do


@job("observed_async", timeout=0.5)
async def observed_async(j):
    do = _act(j)
    if do == "sleep":
        await asyncio.sleep(j.payload["seconds"])
    elif do == "wait_for_stop":
        while not j.stopping:
            await asyncio.sleep(0.01)
        raise Interrupted()
    return do
