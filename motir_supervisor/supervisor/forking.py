"""Starting and ending the supervisor's children: a fork that hands the
child nothing it must not have, a signal to a process that may be gone,
and the words for how one ended.

Nothing here knows what a child runs; :mod:`arbiter` decides that.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
from typing import Callable, Iterable

from ..logs import flush_logs

# The supervisor's own logger: "process 4711 crashed" is a line of the
# supervisor's, not of this helper's.
log = logging.getLogger(__name__)

#: The exit code of a child whose body raised: the child itself broke.
EXIT_SOFTWARE = 70


def fork_child(body: Callable[[], int], blocked: Iterable[signal.Signals],
               close_fds: Iterable[int]) -> int:
    """Fork; the child closes ``close_fds``, runs ``body`` and exits with its
    code, never returning here. The parent gets the child's pid.

    The ``blocked`` signals stay blocked across the fork, so one that lands
    before the child has installed its own handlers waits for them instead
    of running the parent's handler in the child. Buffered log lines are
    written first, or the child would write them again.
    """
    flush_logs()
    blocked = tuple(blocked)
    signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    # What the child inherits (every object of the imports) is frozen
    # in it, as the gc module advises before a fork: its collections never
    # walk those objects again, nor write to their headers, which would copy
    # each page they share with the parent. The parent thaws them at once,
    # so that its own garbage stays collectable across respawns, unless it
    # had frozen objects itself: those it keeps frozen, with ours.
    thaw = gc.get_freeze_count() == 0
    gc.freeze()
    try:
        pid = os.fork()
    except OSError:
        if thaw:
            gc.unfreeze()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        raise
    if pid:
        if thaw:
            gc.unfreeze()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)
        return pid
    code = EXIT_SOFTWARE
    try:
        signal.set_wakeup_fd(-1)
        for fd in close_fds:
            os.close(fd)
        code = body()
    except BaseException:  # noqa: BLE001 - whatever it was, this process ends here
        log.exception("process %d crashed", os.getpid())
    finally:
        flush_logs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def send_signal(pid: int, signum: int) -> None:
    """Signal a child that may have exited already."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def describe_exit(status: int) -> tuple[int, str]:
    """(exit code, words) from a waitpid status; a signal gives a negative code."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return code, f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:  # a real-time signal has no name
        name = f"signal {-code}"
    words = f"was killed by {name}"
    if -code == signal.SIGKILL:
        words += " (perhaps out of memory?)"
    elif -code == signal.SIGALRM:
        words += " (its lease was about to run out without a renewal)"
    return code, words
