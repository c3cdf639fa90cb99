"""The options the commands share (``Project``, ``Json``, the queue settings), and the checks for
what the API cannot judge, because it never gets to see it: a list that is no list, a number
that is not written as a plain number, text that is not UTF-8 (JSON carries neither), two options that
contradict each other. Each is a usage error naming the option (exit 2); the ranges are the
API's own."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Optional

import typer
from typer.exceptions import TyperException

from enclave_queue.settings import DECIMAL, WHOLE
from enclave_queue.spec import shown

#: whole seconds separated by commas, spaces around each allowed: '5,30,120', '5, 30'
BACKOFF_LIST = re.compile(r" *[0-9]+ *(?:, *[0-9]+ *)*")


class UsageError(TyperException):
    """Options that cannot go together, or a command that needs one more: exit 2."""

    exit_code = 2


def utf8(value: Optional[str]) -> Optional[str]:
    """For text that goes into a JSON body: a shell passes bytes that are not UTF-8 through as
    they are (Python holds them as surrogates), and JSON cannot carry them."""
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise typer.BadParameter("must be UTF-8 text (it holds bytes that are not).") from None
    return value


def _number(pattern: re.Pattern[str], kind: str, example: str, convert: type, low: Optional[float],
            high: Optional[float]) -> Callable[[object], object]:
    def parse(value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default
            return value
        text = str(value)
        if not pattern.fullmatch(text):
            raise typer.BadParameter(f"must be {kind} such as {example} (got {shown(text)}).")
        number = convert(text)
        if low is not None and number < low or high is not None and number > high:
            bounds = (f"between {low:g} and {high:g}" if low is not None and high is not None
                      else f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise typer.BadParameter(f"must be {bounds} (got {text}).")
        return number

    return parse


def whole(low: Optional[int] = None, high: Optional[int] = None) -> Callable[[object], object]:
    """An option's parser for a whole number, in [low, high] when given (a parser replaces
    Typer's own min and max)."""
    return _number(WHOLE, "a whole number", "30", int, low, high)


def decimal(low: Optional[float] = None, high: Optional[float] = None) -> Callable[[object], object]:
    """An option's parser for a decimal number such as 0.5, in [low, high] when given."""
    return _number(DECIMAL, "a decimal number", "2.5", float, low, high)


def backoff_text(value: Optional[str]) -> Optional[str]:
    if value is not None and not BACKOFF_LIST.fullmatch(value):
        raise typer.BadParameter(f"must be whole seconds separated by commas, such as 5,30,120 (got {shown(value)}).")
    return value


def backoff_list(text: Optional[str]) -> Optional[list[int]]:
    """'5, 30,120' -> [5, 30, 120] (the text checked by backoff_text); the API checks the range."""
    return None if text is None else [int(part) for part in text.split(",")]


def exclusive(**given: bool) -> None:
    """Raise UsageError naming the options (keyword: option name with '_' for '-') that were
    given together."""
    names = [f"--{key.replace('_', '-')}" for key, on in given.items() if on]
    if len(names) > 1:
        raise UsageError(f"{' and '.join(names)} cannot be used together; give one of them.")


Project = Annotated[Optional[str], typer.Option("--project", "-p", help="Project (default: ENCLAVE_PROJECT, else 'default').")]
Json = Annotated[bool, typer.Option("--json", help="Print the API's JSON object.")]
Wait = Annotated[bool, typer.Option("--wait", help="Return once the queue is Ready.")]
Name = Annotated[str, typer.Argument(help="Queue name.", callback=utf8)]
VisibilityTimeout = Annotated[Optional[int], typer.Option("--visibility-timeout-seconds", parser=whole(), help="Seconds a received message stays hidden (1–43200; default 30).")]
MaxReceives = Annotated[Optional[int], typer.Option("--max-receives", parser=whole(), help="Receives allowed per message (0–1000; 0 = no limit).")]
DeadLetterQueue = Annotated[Optional[str], typer.Option("--dead-letter-queue", metavar="QUEUE", callback=utf8, help="Queue in the same project that receives dead letters.")]
RetentionHours = Annotated[Optional[int], typer.Option("--retention-hours", parser=whole(), help="Hours a message is kept (1–336; default 96).")]
MaxMessageBytes = Annotated[Optional[int], typer.Option("--max-message-bytes", parser=whole(), help="Largest message (1024–1048576; default 262144).")]
MaxBytes = Annotated[Optional[int], typer.Option("--max-bytes", parser=whole(), help="Bytes the queue stores at most (1048576–1099511627776; default 256 of its largest message, 16 MiB–1 GiB); a full queue refuses new messages.")]
MaxMessages = Annotated[Optional[int], typer.Option("--max-messages", parser=whole(), help="Messages the queue holds at most (0–10000000; 0 = no limit); a full queue refuses new ones.")]
DedupeWindow = Annotated[Optional[int], typer.Option("--dedupe-window-seconds", parser=whole(), help="Seconds a dedupe key is remembered (1–86400, at most the retention; default 3600).")]
RetryBackoff = Annotated[Optional[str], typer.Option("--retry-backoff-seconds", metavar="LIST", callback=backoff_text, help="Whole seconds before each retry, separated by commas (e.g. 5,30,120; the last repeats).")]
Replicas = Annotated[Optional[int], typer.Option("--replicas", parser=whole(), help="Nodes that keep the queue's messages: 1, or 3 on a cluster of three nodes or more (the default there; 1 on one node).")]
Priorities = Annotated[bool, typer.Option("--priorities", help="Messages may carry a priority (0–9, higher taken first). Once on it cannot be turned off: there is no option to.")]
