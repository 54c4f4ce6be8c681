"""How a worker process starts and ends, as its supervisor sees it: the
ready pipe, the exit codes, the signals a worker handles (the supervisor
forks with them blocked), the signal a child gets when its parent dies, and
the exception that ends a worker at once.

Whatever the code, the supervisor settles what the worker's ledger still
holds: a code is only a hint (a handler can end its process with any).
"""

from __future__ import annotations

import ctypes
import os
import signal

#: The exit codes a worker uses to tell its supervisor how it ended.
EXIT_OK = 0
#: Configuration error (an --app module that does not import): do not restart.
#: Trusted only from a worker that never reported itself booted.
EXIT_BOOT_FAILURE = 4
#: A handler ran past its timeout; the worker left it behind and asks to be replaced.
EXIT_TIMEOUT = 5
#: The worker reached --max-jobs-per-worker or --max-worker-memory, ran all it
#: held and asks to be replaced: no crash. Trusted only with the ledger's word.
EXIT_RECYCLED = 6

_PR_SET_PDEATHSIG = 1

#: The signals a worker handles; the supervisor forks with them blocked.
HANDLED_SIGNALS = {signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGCHLD,
                   signal.SIGTTIN, signal.SIGTTOU}


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send ``signum`` when the parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class ExitNow(Exception):
    """End this process now with ``code``; the supervisor settles what is held."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def report_ready(fd: int) -> None:
    """The worker's side of the ready pipe: one byte once its apps imported."""
    if fd >= 0:
        os.write(fd, b"R")
        os.close(fd)


def read_ready(fd: int) -> bool:
    """The supervisor's side, once the worker has exited: whether it had
    booted. Only a worker that never did is trusted with EXIT_BOOT_FAILURE."""
    try:
        return os.read(fd, 1) == b"R"
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


#: True in a process that a handler forked from its worker (see
#: watch_for_handler_forks); False in the worker itself.
forked_by_handler = False


def watch_for_handler_forks() -> None:
    """In a worker, before any handler runs. A process a handler forks and
    lets return from the handler must end there: its ledger, its database
    connection and its claims are the worker's, and it would act as a
    second copy of the worker. The executor ends such a process where a run
    returns (a child that execs or exits on its own, as subprocess and
    multiprocessing do, never gets there)."""
    os.register_at_fork(after_in_child=_forked)


def _forked() -> None:
    global forked_by_handler
    forked_by_handler = True
