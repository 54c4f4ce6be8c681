"""How every process of the package writes its logs.

Text or JSON, one line per event, to stderr. The supervisor's processes write
through a buffer flushed at the end of each batch of work (a busy worker
writes a line per job), and a record may stand for many lines (see LINES).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Callable, TextIO

#: A record whose ``extra`` carries ``lines`` (a list of messages) stands for
#: that many log lines, one per message, sharing the record's time, level and
#: pid: a worker writes one line per job, and a record per job would cost a
#: noticeable share of its throughput. The record's own message is the lines
#: joined by newlines, so that a formatter that knows nothing of this still
#: shows them all.
LINES = "lines"
_PLACEHOLDER = "\x00line\x00"


def _format_lines(record: logging.LogRecord, format_one: Callable[[logging.LogRecord], str],
                  encode: Callable[[str], str]) -> str:
    """Format ``record`` once around a placeholder message, then put each line in."""
    lines = getattr(record, LINES, None)
    if not lines:
        return format_one(record)
    shell = logging.makeLogRecord(record.__dict__)  # other handlers still see the record
    shell.msg, shell.args = _PLACEHOLDER, None
    head, tail = format_one(shell).split(encode(_PLACEHOLDER), 1)
    return "\n".join([head + encode(line) + tail for line in lines])


class TextFormatter(logging.Formatter):
    """The standard line; a record of many ``lines`` becomes one line each."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return _format_lines(record, super().format, str)


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log pipelines that parse fields."""

    def format(self, record: logging.LogRecord) -> str:
        return _format_lines(record, self._format_one, json.dumps)

    def _format_one(self, record: logging.LogRecord) -> str:
        entry = {"time": self.formatTime(record), "level": record.levelname,
                 "pid": record.process, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


class BatchedStreamHandler(logging.StreamHandler):
    """Writes records through a buffer that is flushed at warnings, when full,
    and whenever a process says a batch of work is done (``handler.flush()``,
    which the worker and the supervisor call at least every fraction of a
    second). A busy worker logs a line per job; a system call for each one
    would cost a good share of the throughput."""

    def __init__(self) -> None:
        stream: TextIO
        try:
            stream = self.stream_on(sys.stderr.fileno())
        except (AttributeError, OSError, ValueError):  # stderr is no file (a test runner's)
            stream = sys.stderr
        super().__init__(stream)

    @staticmethod
    def stream_on(fd: int) -> TextIO:
        """A buffered stream on ``fd``, which stays open when it is closed."""
        return open(fd, "w", buffering=1 << 16, encoding="utf-8", errors="backslashreplace",
                    closefd=False)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
            if record.levelno >= logging.WARNING:
                self.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


def configure_logging(level: str, log_format: str, batched: bool) -> None:
    handler = BatchedStreamHandler() if batched else logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    # The logging HOWTO's optimisations for what our lines never show: the
    # caller's file and line, thread and multiprocessing names. A busy worker
    # writes a line per job, so each record's cost counts.
    logging._srcfile = None
    logging.logThreads = False
    logging.logMultiprocessing = False


def keep_off_standard_fds() -> None:
    """In a worker, before any handler runs: its log, ``sys.stdout`` and
    ``sys.stderr`` move to private duplicates of file descriptors 1 and 2.

    A handler may close fd 1 or 2 (a daemonising library, a careless
    cleanup), and the next socket or file opened then takes that number: a
    log line written to fd 2 would land in, say, a database connection. The
    duplicates are the same open files, so every line still goes where the
    worker's output went.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    for name, fd in (("stdout", 1), ("stderr", 2)):
        try:
            private = os.dup(fd)
        except OSError:  # not open: nothing to keep apart
            continue
        old = getattr(sys, name)
        line_buffering = getattr(old, "line_buffering", False)
        setattr(sys, name, open(private, "w", buffering=1 if line_buffering else -1,
                                encoding=getattr(old, "encoding", None) or "utf-8",
                                errors=getattr(old, "errors", None) or "backslashreplace"))
    for handler in logging.getLogger().handlers:
        if isinstance(handler, BatchedStreamHandler):
            handler.flush()
            try:  # its own buffer, on the private duplicate sys.stderr now writes to
                handler.setStream(handler.stream_on(sys.stderr.fileno()))
            except (AttributeError, OSError, ValueError):  # stderr is no file
                pass


def flush_logs() -> None:
    """Write out what the log handlers buffered (see BatchedStreamHandler)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
