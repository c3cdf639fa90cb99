"""Output: results to stdout (tables, or JSON with ``--json``), progress and errors to stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

#: piped output is never cut to a terminal's width
out = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000)
err = Console(stderr=True, highlight=False, soft_wrap=True, width=None if sys.stderr.isatty() else 1000)

#: the list's columns: field -> header
QUEUE_COLUMNS = {
    "name": "NAME",
    "visibility_timeout_seconds": "VISIBILITY (S)",
    "max_receives": "MAX RECEIVES",
    "retention_hours": "RETENTION (H)",
    "max_message_bytes": "MAX BYTES",
    "dead_letter_queue": "DEAD-LETTER QUEUE",
    "priorities": "PRIORITIES",
}


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data), indent=2) if out.is_terminal else print(json.dumps(data, indent=2))


def show_object(data: dict[str, Any], *, as_json: bool = False) -> None:
    """One object as a two-column table (or JSON)."""
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        table.add_row(key, "" if value is None else str(value))
    out.print(table)


def show_list(rows: Iterable[dict[str, Any]], columns: dict[str, str], *, as_json: bool = False,
              empty: str = "Nothing here.") -> None:
    """Rows as a table with ``columns`` (field -> header), or as a JSON array."""
    rows = list(rows)
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print(empty)
        return
    table = Table(*columns.values(), box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*("" if row.get(c) is None else str(row.get(c)) for c in columns))
    out.print(table)
