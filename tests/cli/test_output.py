"""``safe_text``: untrusted text made safe for the terminal (pure, no stack)."""

import json

import pytest
from rich.console import Console
from rich.table import Table
from rich.text import Text

from enclave_cli.output import cell, safe_text


@pytest.mark.parametrize(("text", "shown"), [
    ("plain text, ünïcödé – 日本", "plain text, ünïcödé – 日本"),
    ("\x1b]0;pwned\x07", r"\x1b]0;pwned\x07"),
    ("\x1b[2J\x1b[31mred", r"\x1b[2J\x1b[31mred"),
    ("over\rwrite\b", r"over\x0dwrite\x08"),
    ("tab\there\nnext", r"tab\x09here\x0anext"),
    ("\x00\x7f\x80\x9b\x9f\xa0", "\\x00\\x7f\\x80\\x9b\\x9f\xa0"),
    (None, ""),
    (42, "42"),
])
def test_control_characters_are_shown_as_escapes(text, shown):
    assert safe_text(text, markup=False) == shown


MARKUP = ["[/]", "[link=https://example.invalid]x[/link]", "[bold red]loud[/]", "trailing\\", "\\[b]x[/b]",
          ":smile:", "[b]\x1b]0;pwned\x07[/b]", "[", "]"]


@pytest.mark.parametrize("text", MARKUP)
def test_markup_inside_markup_is_shown_literally(text):
    shown = Text.from_markup(f"[bold]{safe_text(text)}[/bold]", emoji=False)  # as out and err print
    assert shown.plain == safe_text(text, markup=False)
    assert [(span.start, span.end, str(span.style)) for span in shown.spans] == [(0, len(shown.plain), "bold")]


@pytest.mark.parametrize("text", MARKUP)
def test_a_table_cell_is_the_text_itself(text):
    console = Console(force_terminal=True, color_system="truecolor", highlight=False, emoji=False, width=200)
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column()
    table.add_row(cell(text))
    with console.capture() as captured:
        console.print(table)
    assert captured.get().rstrip(" \n") == safe_text(text, markup=False).rstrip()  # no style, no link, no emoji


def test_json_is_exact():
    body = "[/] \x1b]0;pwned\x07\r\x9b"
    assert json.loads(json.dumps(body)) == body
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in json.dumps({"body": body}))


def test_an_object_s_lists_are_shown_as_lists_not_python_reprs(monkeypatch):
    from enclave_cli import output

    console = Console(force_terminal=False, highlight=False, emoji=False, width=200)
    monkeypatch.setattr(output, "out", console)
    with console.capture() as captured:
        output.show_object({"broker_urls": ["nats://a:4222", "nats://b:4222"], "retry_backoff_seconds": [5, 30],
                            "dead_letter_queue": None})
    lines = [line.split(None, 1) for line in captured.get().rstrip().splitlines()]
    lines = [[part.rstrip() for part in line] for line in lines]
    assert lines == [["broker_urls", "nats://a:4222, nats://b:4222"], ["retry_backoff_seconds", "5, 30"],
                     ["dead_letter_queue"]]
