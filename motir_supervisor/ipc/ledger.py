"""What a worker holds, in memory it shares with its supervisor.

The supervisor creates one :class:`Ledger` per worker before forking it. The
worker writes an entry for every job it claims and moves it through the
states below as the job starts and ends; once an outcome is in the database
the entry is free again. When the worker dies, however it dies, the
supervisor reads the ledger and knows, job by job, what to do: an outcome
that was decided but not written yet is written (so finished work never runs
again), a job whose handler was running spends its attempt (it may be what
killed the worker), and everything else goes back untouched.

An entry's fields are written before its state byte, and a one-byte store
cannot tear, so a reader never sees a state with half-written fields. This
module holds no SQL and knows nothing of threads or signals. The decided
states stand for outcomes (outcomes.Outcome); outcomes.LEDGER_STATES maps
one to the other.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple

FREE = 0
#: Claimed, handler not started: given back untouched.
CLAIMED = 1
#: Handler running: the attempt counts if the worker dies now.
RUNNING = 2
#: Outcome decided, perhaps not written yet: the supervisor writes it.
SUCCEEDED = 3
FAILED = 4
#: The handler stopped at a checkpoint, or the job was withdrawn: give it back.
RELEASE = 5
#: A synchronous handler ran past its kind's timeout; the worker is retiring.
TIMED_OUT = 6
#: Still running when the worker left at its drain deadline: given back
#: untouched, since the worker, not the job, ended the run.
ABANDONED = 7
#: The handler raised Snooze: pending again after retry_in_seconds, its
#: attempt handed back.
SNOOZED = 8

#: id, state, permanent, retry_in_seconds, error length in bytes, run seconds.
_ENTRY = struct.Struct("<qBBxxxxxxdIf")
#: The fields after the state byte, as decide() writes them.
_FIELDS = struct.Struct("<BxxxxxxdIf")
_SECONDS = struct.Struct("<f")
_HEADER_BYTES = 64
#: Each entry's error text has a page of its own, touched only when a run
#: fails (or returns a value), so a worker whose jobs succeed with nothing
#: to say never pays memory for it.
ERROR_BYTES = mmap.PAGESIZE
#: Header flag: the worker is leaving (a sync timeout, recycling): the
#: supervisor may start its replacement now instead of when it exits.
_RETIRING = 0
#: Header flag the supervisor sets the moment it is told to stop: the worker
#: starts no handler from then on, even before the forwarded signal lands.
_STOP = 1
#: Why the worker is leaving, for the supervisor's log: its length in bytes
#: at _WHY_SIZE, the text from _WHY up to the header's end.
_WHY_SIZE = 2
_WHY = 8


class Entry(NamedTuple):
    job_id: int
    state: int
    permanent: bool
    retry_in_seconds: float
    error: str | None
    seconds: float
    #: A success's output (JSON text), when it fitted; else None.
    output: str | None = None


class Ledger:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._entries_at = _HEADER_BYTES
        errors_at = _HEADER_BYTES + capacity * _ENTRY.size
        self._errors_at = -(-errors_at // mmap.PAGESIZE) * mmap.PAGESIZE
        # Anonymous and shared: both sides of the fork see the same pages.
        self._memory = mmap.mmap(-1, self._errors_at + capacity * ERROR_BYTES)
        self._free = list(range(capacity - 1, -1, -1))

    # -- the worker's side -----------------------------------------------------

    def free_entries(self) -> int:
        return len(self._free)

    def claim(self, job_id: int) -> int:
        """Record a claimed job; returns its entry (the caller checked there is room)."""
        entry = self._free.pop()
        _ENTRY.pack_into(self._memory, self._entries_at + entry * _ENTRY.size,
                         job_id, CLAIMED, 0, 0.0, 0, 0.0)
        return entry

    def mark(self, entry: int, state: int) -> None:
        self._memory[self._entries_at + entry * _ENTRY.size + 8] = state

    def decide(self, entry: int, state: int, seconds: float, error: str | None = None,
               retry_in_seconds: float = 0.0, permanent: bool = False,
               output: str | None = None) -> None:
        """Store an outcome (the error first, the state byte last). A
        success's output goes where a failure's error would, if it fits whole."""
        at = self._entries_at + entry * _ENTRY.size
        if state == SUCCEEDED:
            encoded = output.encode("utf-8") if output is not None else b""
            if not encoded or len(encoded) > ERROR_BYTES:
                _SECONDS.pack_into(self._memory, at + 28, seconds)
                self._memory[at + 8] = state
                return
            error = output
        size = 0
        if error is not None:
            encoded = error.encode("utf-8", "backslashreplace")[:ERROR_BYTES]
            size = len(encoded)
            text_at = self._errors_at + entry * ERROR_BYTES
            self._memory[text_at:text_at + size] = encoded
        # Fields only: the state byte keeps saying RUNNING until the outcome is whole.
        _FIELDS.pack_into(self._memory, at + 9, int(permanent), retry_in_seconds, size, seconds)
        self.mark(entry, state)

    def release(self, entry: int) -> None:
        """The database has what the entry said: the entry is free again."""
        self.mark(entry, FREE)
        self._free.append(entry)

    def set_retiring(self, why: str = "") -> None:
        """Say the worker is leaving (the reason first, the flag last)."""
        encoded = why.encode("utf-8", "replace")[:_HEADER_BYTES - _WHY]
        self._memory[_WHY:_WHY + len(encoded)] = encoded
        self._memory[_WHY_SIZE] = len(encoded)
        self._memory[_RETIRING] = 1

    @property
    def stop_asked(self) -> bool:
        return self._memory[_STOP] == 1

    # -- the supervisor's side ---------------------------------------------------

    @property
    def retiring(self) -> bool:
        return self._memory[_RETIRING] == 1

    @property
    def retiring_why(self) -> str:
        return self._memory[_WHY:_WHY + self._memory[_WHY_SIZE]].decode("utf-8", "replace")

    def ask_to_stop(self) -> None:
        self._memory[_STOP] = 1

    def entries(self) -> list[Entry]:
        """Every entry in use, as the worker left it."""
        found = []
        for entry in range(self.capacity):
            job_id, state, permanent, retry_in, size, seconds = _ENTRY.unpack_from(
                self._memory, self._entries_at + entry * _ENTRY.size)
            if state == FREE:
                continue
            text = None
            if state in (FAILED, SUCCEEDED) and size:
                at = self._errors_at + entry * ERROR_BYTES
                text = self._memory[at:at + size].decode("utf-8", "replace")
            if state == SUCCEEDED:
                found.append(Entry(job_id, state, False, 0.0, None, seconds, text))
            else:
                found.append(Entry(job_id, state, bool(permanent), retry_in, text, seconds))
        return found

    def close(self) -> None:
        self._memory.close()
