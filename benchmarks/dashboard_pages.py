"""bin/bench's dashboard section: how long each page of the
dashboard takes on a big table.

The table gets ``--bloat-rows`` succeeded jobs (1,000,000 by default), ended
over the last 20 minutes as a busy fleet would, one in a thousand failed,
50,000 pending jobs due tomorrow, and a kind that only 10 rows have. Each
page is then rendered through the dashboard's WSGI app in this process
(Flask, the templates and the real SQL; no socket), the median of a few
loads; the queues page's first load also, which counts the chart's
minutes that later loads keep.
"""

from __future__ import annotations

import base64
import dataclasses
import statistics
import time

from werkzeug.test import Client

from benchmarks.support import Bench
from motir_supervisor.web.dashboard import create_app

PASSWORD = "bench"
LOADS = 5
PENDING = 50_000
RARE_ROWS = 10
#: (what the page is, its path); {deep} is an id halfway down the table.
PAGES = (
    ("queues", "/"),
    ("jobs, newest", "/jobs"),
    ("jobs, failed", "/jobs?state=failed"),
    ("jobs, pending", "/jobs?state=pending"),
    ("jobs, one queue", "/jobs?queue=mail"),
    ("jobs, a common kind", "/jobs?kind=kind3"),
    (f"jobs, a kind of {RARE_ROWS} rows", "/jobs?kind=rare"),
    ("jobs, a page halfway down", "/jobs?before={deep}"),
    ("one job", "/jobs/{deep}"),
    ("running", "/running"),
)


@dataclasses.dataclass(frozen=True)
class PageTime:
    page: str
    path: str
    median_ms: float
    max_ms: float


@dataclasses.dataclass(frozen=True)
class DashboardRun:
    rows: int
    first_queues_load_ms: float
    pages: tuple[PageTime, ...]


def _fill(bench: Bench, rows: int) -> None:
    bench.prepare_queue(0)
    bench.sql.rows(
        "INSERT INTO job_queue (queue, kind, state, attempts, created_at, run_at, started_at,"
        "                       finished_at, last_error)"
        " SELECT CASE WHEN g %% 10 = 0 THEN 'mail' ELSE 'default' END,"
        "        CASE WHEN g %% (%(rows)s / %(rare)s) = 7 THEN 'rare' ELSE 'kind' || (g %% 10) END,"
        "        CASE WHEN g %% 1000 = 0 THEN 'failed' ELSE 'succeeded' END, 1, at, at, at, at,"
        "        CASE WHEN g %% 1000 = 0 THEN 'ValueError: boom' END"
        " FROM generate_series(1, %(rows)s) AS g, LATERAL"
        "      (SELECT now() - (%(rows)s - g) * (interval '20 minutes' / %(rows)s)) AS t(at)",
        {"rows": rows, "rare": RARE_ROWS})
    bench.sql.rows("INSERT INTO job_queue (kind, run_at) SELECT 'kind' || (g %% 10),"
                   " now() + interval '1 day' FROM generate_series(1, %s) AS g", (PENDING,))
    bench.sql.rows("VACUUM ANALYZE job_queue")


def _load(client: Client, path: str) -> float:
    token = base64.b64encode(f"bench:{PASSWORD}".encode()).decode()
    started = time.perf_counter()
    response = client.get(path, headers={"Authorization": f"Basic {token}"})
    took = (time.perf_counter() - started) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"dashboard {path}: HTTP {response.status_code}")
    return took


def measure_dashboard(bench: Bench) -> DashboardRun:
    rows = bench.settings.bloat_rows
    bench.progress(f"dashboard: pages on {rows:,} finished and {PENDING:,} pending jobs")
    _fill(bench, max(rows, RARE_ROWS * 10))
    deep = bench.sql.value("SELECT (min(id) + max(id)) / 2 FROM job_queue")
    client = Client(create_app(bench.url, PASSWORD))
    first = _load(client, "/")
    pages = []
    for page, path in PAGES:
        path = path.format(deep=deep)
        times = [_load(client, path) for _ in range(LOADS)]
        pages.append(PageTime(page, path, round(statistics.median(times), 2),
                              round(max(times), 2)))
    bench.prepare_queue(0)
    return DashboardRun(rows=rows, first_queues_load_ms=round(first, 2), pages=tuple(pages))


def format_dashboard(run: DashboardRun) -> list[str]:
    lines = [f"dashboard: each page through its WSGI app, median of {LOADS} loads, on"
             f" {run.rows:,} finished jobs (1 in 1,000 failed) and {PENDING:,} pending",
             f"  {'page':<34} {'median ms':>10} {'max ms':>8}"]
    for page in run.pages:
        lines.append(f"  {page.page:<34} {page.median_ms:>10.2f} {page.max_ms:>8.2f}")
    lines.append(f"  (the queues page's first load, which counts the last 15 minutes:"
                 f" {run.first_queues_load_ms:,.0f} ms)")
    return lines
