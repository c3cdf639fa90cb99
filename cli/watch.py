"""``enclave queue status NAME --watch``: a queue's state, counts and rates, refreshed until Ctrl-C;
and the status conditions as ``status`` shows them. What the server sends goes through
``output.safe_text`` (``cell``)."""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from typing import Any, Optional

from rich.text import Text

from enclave_queue.errors import Conflict

from .output import Col, ago, cell, list_table, out, safe_text, span, stamp

CONDITION_COLUMNS = {"type": Col("CONDITION"), "status": Col("STATUS"), "reason": Col("REASON"),
                     "message": Col("MESSAGE", free=True), "since": Col("SINCE")}


def condition_rows(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [{**c, "since": ago(c.get("last_transition_time"))} for c in status["conditions"]]


COUNT_COLUMNS = {"waiting": Col("WAITING", numeric=True), "in_flight": Col("IN FLIGHT", numeric=True),
                 "delayed": Col("DELAYED", numeric=True), "dead": Col("DEAD", numeric=True),
                 "oldest": Col("OLDEST", numeric=True)}
RATE_COLUMNS = {"sent": Col("SENT/S", numeric=True), "received": Col("RECEIVED/S", numeric=True),
                "removed": Col("DELETED/S", numeric=True)}


def watch_status(client: Any, project: str, name: str, interval: float) -> None:
    """``status --watch``: the state, counts and rates, redrawn in place on a terminal (printed
    again each time otherwise) every ``interval`` seconds until Ctrl-C, which ends it with exit 0."""
    from rich.console import Group
    from rich.live import Live

    previous: Optional[tuple[float, dict[str, Any]]] = None

    def view() -> Any:
        nonlocal previous
        status = client.queue_status(project, name)
        try:
            depth: Optional[dict[str, Any]] = client.stats(project, name)
        except Conflict:  # not ready yet: its stream is not there
            depth = None
        now = time.monotonic()
        rates = {key: "–" for key in RATE_COLUMNS}
        if depth is not None and previous is not None and now > previous[0]:
            rates = {key: f"{max(depth[key] - previous[1][key], 0) / (now - previous[0]):.1f}" for key in RATE_COLUMNS}
        previous = (now, depth) if depth is not None else None
        counts = {key: "–" if not depth or depth.get(key) is None else depth[key] for key in COUNT_COLUMNS}
        if depth and depth.get("oldest_age_seconds") is not None:
            counts["oldest"] = span(depth["oldest_age_seconds"])
        head = Text.assemble((f"{name}  ", "bold"), (status["state"], "bold"), f"  {safe_text(status['message'], markup=False)}")
        numbers = list_table({**COUNT_COLUMNS, **RATE_COLUMNS})
        numbers.add_row(*(cell(v) for v in {**counts, **rates}.values()))
        conditions = list_table(CONDITION_COLUMNS, condition_rows(status))
        for row in condition_rows(status):
            conditions.add_row(*(cell(row.get(c)) for c in CONDITION_COLUMNS))
        foot = Text(f"Every {interval:g} s; the last at {stamp(datetime.now(UTC).isoformat())}. Ctrl-C stops.",
                    style="dim")
        return Group(head, numbers, conditions, foot)

    try:
        if out.is_terminal:
            with Live(view(), console=out, auto_refresh=False, transient=False) as live:
                while True:
                    time.sleep(interval)
                    live.update(view(), refresh=True)
        else:
            while True:
                out.print(view())
                out.print()
                sys.stdout.flush()
                time.sleep(interval)
    except KeyboardInterrupt:  # the way to stop watching: not an error
        return
