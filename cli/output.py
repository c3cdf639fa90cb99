"""Output: results to stdout (tables, or JSON with ``--json``), progress and errors to stderr.

Text from a message or the server (bodies, error notes, names, any value in a table) is
untrusted: it goes through ``safe_text`` before it reaches the terminal, so it can neither
send escape sequences (a window title, a hidden line) nor be read as Rich markup (a link, a
crash on ``[/]``). JSON is written as ``json.dumps`` makes it, never through Rich, and strict: a
server that answers NaN or Infinity (Python's json reads them, no JSON parser has to) is not the
API, and is said to be (exit 1) rather than passed on as output that is not JSON.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Optional

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from enclave_queue.errors import EnclaveError

#: piped output is never cut to a terminal's width; ':name:' in a body stays text (no emoji)
out = Console(highlight=False, emoji=False, soft_wrap=True, width=None if sys.stdout.isatty() else 1000)
err = Console(stderr=True, highlight=False, emoji=False, soft_wrap=True,
              width=None if sys.stderr.isatty() else 1000)

#: the characters a terminal may act on: C0 (tab and line feed too), DEL and C1
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")

#: an RFC 3339 time as the API writes them: ``Z`` or an offset, any fraction of a second
RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?")
#: the fields of an object that hold a time (``show_object`` writes them as ``stamp`` does)
TIME_FIELD = re.compile(r".*(_at|_until|_time)$")


@dataclass(frozen=True)
class Col:
    """A table column: its header, and how its cells fit a narrow terminal: ``numeric`` ones are
    right-aligned, ``free`` ones (bodies, error notes) are cut with an ellipsis to leave room for
    the rest, and the others (names, times, counts) are never wrapped or cut."""

    header: str
    numeric: bool = False
    free: bool = False


def parse_time(value: Any) -> Optional[datetime]:
    """An RFC 3339 time (as the API writes them: ``Z`` or ``+00:00``, up to nanoseconds) as an
    aware datetime; None for anything else."""
    match = RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        return None
    whole, fraction, zone = match.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    return datetime.fromisoformat(f"{whole}.{(fraction or '').ljust(6, '0')[:6]}{zone}").astimezone(UTC)


def stamp(value: Any) -> str:
    """A time the one way the CLI writes times: RFC 3339 in UTC to the second, with ``Z``
    (``2026-11-29T17:37:32Z``); anything that is no time as it is ('' for None)."""
    when = parse_time(value)
    if when is None:
        return "" if value is None else str(value)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def span(seconds: float) -> str:
    """A duration as people say it: '3 s', '12 min', '5 h', '3 d' (rounded down)."""
    seconds = abs(seconds)
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 120 * 60:
        return f"{int(seconds // 60)} min"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86400)} d"


def ago(value: Any, now: Optional[datetime] = None) -> str:
    """A time relative to now: '3 s ago', 'in 10 s'; '–' for no time."""
    when = parse_time(value)
    if when is None:
        return "–"
    delta = ((now or datetime.now(UTC)) - when).total_seconds()
    return f"{span(delta)} ago" if delta >= 0 else f"in {span(delta)}"


#: the list's columns: field -> column (``queue list`` adds the counts of each queue's depth)
QUEUE_COLUMNS = {
    "name": Col("NAME"),
    "state": Col("STATE"),
    "waiting": Col("WAITING", numeric=True),
    "in_flight": Col("IN FLIGHT", numeric=True),
    "delayed": Col("DELAYED", numeric=True),
    "dead": Col("DEAD", numeric=True),
    "oldest": Col("OLDEST", numeric=True),
    "dead_letter_queue": Col("DLQ"),
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


def strict_json(data: Any, **options: Any) -> str:
    """``data`` (the server's answer) as JSON any parser reads; EnclaveError (exit 1) for a NaN or
    an infinity in it, which JSON has no way to write."""
    try:
        return json.dumps(data, allow_nan=False, **options)
    except ValueError:
        raise EnclaveError("The server answered a number that JSON cannot carry (NaN or Infinity), not the Enclave "
                           "API's JSON; is ENCLAVE_URL the API's own address?") from None


def print_json(data: Any) -> None:
    """``data`` as exact JSON (control and non-ASCII characters as \\u escapes), not through Rich."""
    sys.stdout.write(strict_json(data, indent=2) + "\n")
    sys.stdout.flush()


def show_object(data: dict[str, Any], *, as_json: bool = False) -> None:
    """One object as a two-column table (or JSON)."""
    if as_json:
        print_json(data)
        return
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in data.items():
        if isinstance(value, list):  # a node's URLs, a retry schedule: as a person reads a list, not Python's repr
            value = ", ".join(str(item) for item in value)
        table.add_row(cell(key), cell(stamp(value) if TIME_FIELD.fullmatch(key) else value))
    out.print(table)


def list_table(columns: dict[str, Col | str], rows: Iterable[dict[str, Any]] = (),
               width: Optional[int] = None) -> Table:
    """An empty table with ``columns`` (field -> column or header), laid out for ``rows`` on a
    terminal of ``width`` columns (stdout's): counts and headers keep their width, names and
    times are folded onto another line rather than cut (only if they cannot fit at all), and the
    free text columns share what is left, cut with an ellipsis."""
    cols = [column if isinstance(column, Col) else Col(column) for column in columns.values()]
    texts = [[safe_text(row.get(key), markup=False) for key in columns] for row in rows]
    natural = [max([len(col.header), *(len(text[i]) for text in texts)]) for i, col in enumerate(cols)]
    room = (width or out.width) - 2 * (len(cols) - 1) - sum(n for n, col in zip(natural, cols, strict=True)
                                                             if not col.free)
    shares: dict[int, int] = {}
    free = sorted((i for i, col in enumerate(cols) if col.free), key=lambda i: natural[i])
    for left, i in enumerate(free):  # the narrowest first: what one does not need, the next may use
        shares[i] = max(min(natural[i], room // (len(free) - left)), len(cols[i].header), 8)
        room -= shares[i]
    table = Table(box=None, pad_edge=False, header_style="bold")
    for i, col in enumerate(cols):
        table.add_column(col.header, justify="right" if col.numeric else "left", no_wrap=col.numeric or col.free,
                         overflow="ellipsis" if col.free else "fold", max_width=shares.get(i),
                         min_width=len(col.header) if col.numeric else None)
    return table


def show_list(rows: Iterable[dict[str, Any]], columns: dict[str, Col | str], *, as_json: bool = False,
              empty: str = "Nothing here.") -> None:
    """Rows as a table with ``columns`` (field -> column or header), or as a JSON array; ``empty``
    is printed as it is (no markup)."""
    rows = list(rows)
    if as_json:
        print_json(rows)
        return
    if not rows:
        err.print(safe_text(empty, markup=False), markup=False)
        return
    table = list_table(columns, rows)
    for row in rows:
        table.add_row(*(cell(row.get(c)) for c in columns))
    out.print(table)
