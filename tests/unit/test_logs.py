"""logs: a record of many lines written as one full line each, as text and
as JSON."""

import json
import logging

import pytest

from motir_supervisor import logs


@pytest.mark.parametrize("formatter", [logs.TextFormatter(), logs.JsonFormatter()],
                         ids=["text", "json"])
def test_a_record_of_many_lines_is_written_as_one_full_line_each(formatter):
    lines = ["job 1 noop attempt 1/5 succeeded in 0.001s", 'job 2 "quoted" \\ in 0.002s']
    record = logging.LogRecord("motir_supervisor.worker", logging.INFO, __file__, 1, "%s",
                               ("\n".join(lines),), None)
    record.lines = lines
    written = formatter.format(record).split("\n")
    assert len(written) == 2
    if isinstance(formatter, logs.JsonFormatter):
        entries = [json.loads(line) for line in written]
        assert [e["message"] for e in entries] == lines
        assert {e["level"] for e in entries} == {"INFO"}
    else:
        assert all(w.endswith(line) and " INFO [" in w for w, line in zip(written, lines))
    # The record itself is untouched: another handler's plain formatter shows every line.
    assert logging.Formatter("%(message)s").format(record) == "\n".join(lines)
