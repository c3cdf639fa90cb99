"""Output: results to stdout (tables, or JSON with ``--json``), progress and errors to stderr.

Text from a message or the server (bodies, error notes, names, any value in a table) is
untrusted: it goes through ``safe_text`` before it reaches the terminal, so it can neither
send escape sequences (a window title, a hidden line) nor be read as Rich markup (a link, a
crash on ``[/]``). JSON is written as ``json.dumps`` makes it, never through Rich.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

#: piped output is never cut to a terminal's width; ':name:' in a body stays text (no emoji)
out = Console(highlight=False, emoji=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000)
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True,
              width=None if sys.stderr.isatty() else 1000)

#: the characters a terminal may act on: C0 (tab and line feed too), DEL and C1
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

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


def safe_text(value: Any, *, markup: bool = True) -> str:
    """``value`` (None: '') as text that is safe for the terminal: each control character shown
    as its escape, ESC as the four characters ``\\x1b``; with ``markup`` (text placed in a
    string that Rich reads as markup: ``out.print(f"[bold]{safe_text(x)}[/bold]")``) Rich markup
    escaped as well. Without it, for ``print``, ``markup=False`` and ``Text``."""
    text = CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", "" if value is None else str(value))
    return escape(text) if markup else text


def cell(value: Any) -> Text:
    """A table cell of untrusted ``value``: ``safe_text`` as plain Text (never read as markup)."""
    return Text(safe_text(value, markup=False))


def print_json(data: Any) -> None:
    """``data`` as exact JSON (control and non-ASCII characters as \\u escapes), not through Rich."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")
    sys.stdout.flush()


def show_object(data: dict[str, Any], *, as_json: bool = False) -> None:
    """One object as a two-column table (or JSON)."""
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in data.items():
        table.add_row(cell(key), cell(value))
    out.print(table)


def show_list(rows: Iterable[dict[str, Any]], columns: dict[str, str], *, as_json: bool = False,
              empty: str = "Nothing here.") -> None:
    """Rows as a table with ``columns`` (field -> header), or as a JSON array; ``empty`` is
    printed as it is (no markup)."""
    rows = list(rows)
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print(safe_text(empty, markup=False), markup=False)
        return
    table = Table(*columns.values(), box=None, pad_edge=False, header_style="bold")
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    out.print(table)
