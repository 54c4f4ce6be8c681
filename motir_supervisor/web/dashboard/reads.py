"""What the dashboard's pages read, as rows of named columns, over the
dashboard's one connection.

The statements are sql/dashboard.sql's; the actions (retry, cancel, pause,
resume) are :class:`db.Operations`' own verbs, the ones the commands use, so
the dashboard and the command line cannot disagree on what they do. It
claims nothing and writes no outcome.
"""

from __future__ import annotations

import datetime
from typing import Any

from ... import db
from ...schedule import Schedule

#: Jobs on one page of the jobs list.
PAGE_SIZE = 50
#: Minutes of the throughput chart.
CHART_MINUTES = 15
#: Running jobs listed at most; a fleet runs fewer.
RUNNING_SHOWN = 500
#: Workflows or batches on one page of their lists.
GROUPS_PAGE_SIZE = 50
#: A workflow's first and last steps drawn: at most twice this many boxes,
#: which grandalf lays out in a few tens of milliseconds and a screen can
#: still show; a larger workflow's other steps are one box that says so.
DRAWN_AT_EACH_END = 60
#: Failed steps listed beyond those drawn, each with its retry.
FAILED_LISTED = 100
#: A job's parents listed at most (a batch's callback has one per member).
PARENTS_LISTED = 50

#: A minute's count is kept once the minute is this long over and no
#: transaction begun before its end is still open: an outcome is stamped with
#: its transaction's now(), and becomes visible only when it commits.
SETTLED_SECONDS = 5.0


class EndedPerMinute:
    """Jobs ended per minute and queue over the last CHART_MINUTES minutes.

    Counting a busy fleet's last quarter hour reads every row it ended, too
    many for each page load; a minute that is over does not change once every
    transaction that could still stamp it has ended, so each is counted
    then, and kept, and a page load counts only the minutes since. The open
    transactions of roles this one may not see (pg_stat_activity hides
    their start) are covered by SETTLED_SECONDS alone. Callers hold the
    dashboard's lock.
    """

    def __init__(self) -> None:
        self.settled: dict[datetime.datetime, dict[str, tuple[int, int]]] = {}

    def count(self, store: "DashboardStore", now: datetime.datetime | None = None,
              ) -> dict[datetime.datetime, dict[str, tuple[int, int]]]:
        """{minute's start: {queue: (succeeded, failed)}}, oldest first;
        ``now`` is the database's unless given."""
        now = now or store.database_now()
        current = now.replace(second=0, microsecond=0)
        shown = [current - datetime.timedelta(minutes=back)
                 for back in range(CHART_MINUTES - 1, -1, -1)]
        self.settled = {m: v for m, v in self.settled.items() if m >= shown[0]}
        since = next(m for m in shown if m not in self.settled)
        oldest_open = store.oldest_open_transaction()
        counted: dict[datetime.datetime, dict[str, tuple[int, int]]] = {
            m: {} for m in shown if m >= since}
        for row in store.ended_since(since):
            if row["minute"] in counted:
                counted[row["minute"]][row["queue"]] = (row["succeeded"], row["failed"])
        for minute, per_queue in counted.items():
            end = minute + datetime.timedelta(minutes=1)
            if ((now - end).total_seconds() >= SETTLED_SECONDS
                    and (oldest_open is None or oldest_open >= end)):
                self.settled[minute] = per_queue
        return {m: self.settled[m] if m in self.settled else counted[m] for m in shown}


class DashboardStore:
    """The dashboard's reads, as dicts for templates, and its actions, over
    one connection whose statements give up after ``statement_timeout``."""

    def __init__(self, dsn: str, *, statement_timeout: str = "10s",
                 application_name: str = "motir-supervisor dashboard",
                 timeout_seconds: float = 20.0):
        self.session = db.Session(dsn, application_name, timeout_seconds=timeout_seconds,
                                  prepare=False,
                                  opening=[("dashboard_session", {"timeout": statement_timeout})])
        #: Retry, cancel, pause and resume, as the command line does them.
        self.actions = db.Operations(self.session)

    def close(self) -> None:
        """Close the connection; the next read opens another."""
        self.session.close()

    def _dicts(self, name: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        return self.session.run(name, params).dicts()

    def database_now(self) -> datetime.datetime:
        return self.actions.database_now()

    def queues(self, ended: "EndedPerMinute") -> list[dict[str, Any]]:
        """Each queue's depth, and its jobs ended per minute, oldest minute
        first (as a chart reads); a queue whose jobs all succeeded is listed
        while it has some in the chart."""
        queues = {q["queue"]: q for q in self._dicts("dashboard_queues")}
        minutes = ended.count(self)
        for per_queue in minutes.values():
            for name in per_queue:
                queues.setdefault(name, {
                    "queue": name, "waiting": 0, "due": 0, "scheduled": 0, "running": 0,
                    "failed": 0,
                    "cancelled": 0, "oldest_due_seconds": None, "paused": False,
                    "paused_seconds": None})
        for name, queue in queues.items():
            queue["minutes"] = [
                {"start": start, "succeeded": per_queue.get(name, (0, 0))[0],
                 "failed": per_queue.get(name, (0, 0))[1]}
                for start, per_queue in minutes.items()]
        return [queues[name] for name in sorted(queues)]

    def ended_since(self, since: datetime.datetime) -> list[dict[str, Any]]:
        """Jobs succeeded and failed per minute and queue since ``since``."""
        return self._dicts("dashboard_ended", {"since": since})

    def oldest_open_transaction(self) -> datetime.datetime | None:
        return self.session.run("dashboard_oldest_transaction").value("began")

    def jobs(self, queue: str | None, kind: str | None, state: str | None,
             before: int | None) -> tuple[list[dict[str, Any]], int | None]:
        """One page, and the id the next (older) page starts before, if any."""
        rows = self._dicts("dashboard_jobs", {"queue": queue, "kind": kind, "state": state,
                                              "before": before, "limit": PAGE_SIZE + 1})
        if len(rows) > PAGE_SIZE:
            return rows[:PAGE_SIZE], rows[PAGE_SIZE - 1]["id"]
        return rows, None

    def job(self, job_id: int) -> dict[str, Any] | None:
        """The job's row, its error history under "errors"; None for an unknown id."""
        rows = self._dicts("dashboard_job", {"id": job_id})
        if not rows:
            return None
        rows[0]["errors"] = self._dicts("dashboard_job_errors", {"id": job_id})
        rows[0]["parents"] = self._dicts("dashboard_job_parents",
                                         {"id": job_id, "limit": PARENTS_LISTED})
        return rows[0]

    def workflows(self, before: int | None) -> tuple[list[dict[str, Any]], int | None]:
        """One page of workflows, newest first, each with "states" ({state:
        count of its steps}); and the id the next page starts before."""
        return self._page("dashboard_workflows", {"before": before, "id": None})

    def workflow(self, workflow_id: int) -> dict[str, Any] | None:
        """The workflow's row with its steps counted by state; under "steps"
        those the page shows (see dashboard_workflow_steps), each "drawn" or
        not; under "edges" (parent id, child id) between the drawn ones,
        with None for a step of the workflow not drawn. None for an unknown id."""
        rows = self._dicts("dashboard_workflows", {"before": None, "id": workflow_id,
                                                   "limit": 1})
        if not rows:
            return None
        workflow = rows[0]
        workflow["steps"] = self._dicts("dashboard_workflow_steps", {
            "id": workflow_id, "ends": DRAWN_AT_EACH_END, "failed": FAILED_LISTED})
        drawn = [step["id"] for step in workflow["steps"] if step["drawn"]]
        workflow["edges"] = self.session.run("dashboard_workflow_edges", {
            "ids": drawn, "workflow": workflow_id}).rows
        return workflow

    def batches(self, before: int | None = None, batch_id: int | None = None,
                ) -> tuple[list[dict[str, Any]], int | None]:
        """One page of batches, newest first (or the one ``batch_id``), each
        with "states" ({state: count of its members}) and its callbacks'
        states; and the id the next page starts before."""
        return self._page("dashboard_batches", {"before": before, "id": batch_id})

    def _page(self, name: str, params: dict[str, Any]
              ) -> tuple[list[dict[str, Any]], int | None]:
        rows = self._dicts(name, {**params, "limit": GROUPS_PAGE_SIZE + 1})
        if len(rows) > GROUPS_PAGE_SIZE:
            return rows[:GROUPS_PAGE_SIZE], rows[GROUPS_PAGE_SIZE - 1]["id"]
        return rows, None

    def running(self) -> list[dict[str, Any]]:
        return self._dicts("dashboard_running", {"limit": RUNNING_SHOWN})

    def limit_rows(self) -> list[dict[str, Any]]:
        """Each limited kind, as `status` shows it (see status_limits)."""
        return self._dicts("status_limits")

    def schedule_rows(self) -> list[dict[str, Any]]:
        now = self.database_now().astimezone(datetime.timezone.utc)
        rows = []
        for kind, spec, tz, last in self.actions.schedules():
            local = None
            try:
                schedule = Schedule.from_spec(kind, spec, tz)
                following: Any = schedule.following(now)
                if tz is not None:
                    local = following.astimezone(schedule.zone).strftime("%Y-%m-%d %H:%M %Z")
            except (ValueError, OverflowError) as exc:  # ScheduleError among them
                # A row written by hand, or by a release with other rules:
                # shown as it is, not a page that fails.
                following = f"invalid: {exc}"
            rows.append({"kind": kind, "spec": spec, "tz": tz or "UTC", "last": last,
                         "next": following, "next_local": local})
        return rows
