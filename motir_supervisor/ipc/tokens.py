"""How one notification wakes one worker, not all of them.

Of a supervisor's workers only one LISTENs at a time: the holder of the
listener's :class:`Token`, a POSIX record lock on a file the supervisor
opened before forking. Such locks belong to a process, so the kernel frees
the token the instant its holder dies, and the supervisor then kicks the
others so that one of them takes it over at once. (Another token picks the
one worker that runs the scheduler, see maintenance/scheduler.py.)

The listener claims what a notification announced when it has a free slot;
when it has none, or when its claim suggests more is due, it drops one byte
into :class:`Kicks`, a pipe every worker with a free slot waits on, and the
one worker whose read gets the byte claims. So a job inserted into an idle
fleet costs one claim, and a burst still spreads over every idle worker.
This module runs no SQL and knows nothing of jobs.
"""

from __future__ import annotations

import fcntl
import os


class Token:
    """Held by at most one process of a supervisor's workers at a time."""

    def __init__(self, name: str) -> None:
        try:
            self._fd = os.memfd_create(f"motir-{name}", os.MFD_CLOEXEC)
        except (AttributeError, OSError):  # not Linux: any file will do
            import tempfile
            self._fd = os.dup(tempfile.TemporaryFile().fileno())
        self.held = False

    def try_take(self) -> bool:
        if not self.held:
            try:
                fcntl.lockf(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.held = True
            except OSError:
                pass
        return self.held

    def give_up(self) -> None:
        if self.held:
            fcntl.lockf(self._fd, fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        os.close(self._fd)


class Kicks:
    """A pipe of wake-ups: each byte asks one worker with room to claim once."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def fileno(self) -> int:
        return self._read

    def kick(self, count: int = 1) -> None:
        try:
            os.write(self._write, b"k" * count)
        except BlockingIOError:
            pass  # the pipe is full of kicks already: nobody is missing one

    def take(self) -> bool:
        """Take the kicks waiting, if any are left (several workers may race
        for them). All of them: the claim that follows takes what it has
        room for and, when more is due after that, kicks again; kicks left
        to pile up while every worker was busy would only cost empty claims."""
        try:
            return bool(os.read(self._read, 65536))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self._read)
        os.close(self._write)
