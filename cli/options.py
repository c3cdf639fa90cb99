"""The options the commands share (``Project``, ``Json``, the queue settings), and the checks for
what the API cannot judge, because it never gets to see it: a list that is no list, a number
that is not written as a plain number, text that is not UTF-8 (JSON carries neither), two options that
contradict each other. Each is a usage error naming the option (exit 2); the ranges are the
API's own, except for a number too large for anything to hold (a float that would be infinite,
which JSON cannot carry; a whole number of more digits than int() converts): that one is out of
range here, with the API's rule for the option (its ``rule``)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable
from typing import Annotated, Optional

import typer
from typer.exceptions import TyperException

from enclave_queue.settings import DECIMAL, WHOLE
from enclave_queue.spec import BACKOFF_RULE, MAX_SHOWN, REPLICAS_RULE, shown
from enclave_queue.spec import rule as rule_of

#: whole seconds separated by commas, spaces around each allowed: '5,30,120', '5, 30'
BACKOFF_LIST = re.compile(r" *[0-9]+ *(?:, *[0-9]+ *)*")
#: the most digits int() converts (Python's guard against slow conversions): sys.get_int_max_str_digits()
MAX_DIGITS = sys.get_int_max_str_digits()


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
            high: Optional[float], rule: Optional[str]) -> Callable[[object], object]:
    def parse(value: object) -> object:
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # a default
            return value
        text = str(value)
        if not pattern.fullmatch(text):
            raise typer.BadParameter(f"must be {kind} such as {example} (got {shown(text)}).")
        number, got = _convert(convert, text), _as_written(text)
        if low is not None and number < low or high is not None and number > high:
            bounds = (f"between {low:g} and {high:g}" if low is not None and high is not None
                      else f"at least {low:g}" if low is not None else f"at most {high:g}")
            raise typer.BadParameter(f"must be {bounds} (got {got}).")
        if not math.isfinite(number):  # no bounds of its own: any range the API has is far below this
            limit = rule or (f"a number of at most {MAX_DIGITS} digits" if convert is int
                             else f"a number from {-sys.float_info.max:.2g} to {sys.float_info.max:.2g}")
            raise typer.BadParameter(f"out of range: must be {limit} (got {got}).")
        return number

    return parse


def _as_written(text: str) -> str:
    """A refused number as it was written, cut as ``shown`` cuts text (a 5000-digit one is no line)."""
    return text if len(text) <= MAX_SHOWN else f"{text[:40]}… ({len(text)} characters)"


def _convert(convert: type, text: str) -> float:
    """``text`` (checked digits) as ``convert`` makes it; one too long for int() as an infinity,
    so that the range checks refuse it as they would a float that overflows."""
    try:
        return convert(text)
    except ValueError:  # int(): more than MAX_DIGITS digits
        return -math.inf if text.startswith("-") else math.inf


def whole(low: Optional[int] = None, high: Optional[int] = None,
          rule: Optional[str] = None) -> Callable[[object], object]:
    """An option's parser for a whole number, in [low, high] when given (a parser replaces
    Typer's own min and max); ``rule`` is the API's, said for a number too long to convert."""
    return _number(WHOLE, "a whole number", "30", int, low, high, rule)


def decimal(low: Optional[float] = None, high: Optional[float] = None,
            rule: Optional[str] = None) -> Callable[[object], object]:
    """An option's parser for a decimal number such as 0.5, in [low, high] when given; ``rule``
    is the API's, said for a number too large to be finite."""
    return _number(DECIMAL, "a decimal number", "2.5", float, low, high, rule)


def backoff_text(value: Optional[str]) -> Optional[str]:
    """The list's shape; its range is the API's, except for an entry too long to be a number at all
    (int() refuses more than MAX_DIGITS digits), refused here with the API's rule."""
    if value is not None and not BACKOFF_LIST.fullmatch(value):
        raise typer.BadParameter(f"must be whole seconds separated by commas, such as 5,30,120 (got {shown(value)}).")
    if value is not None and any(len(part.strip()) > MAX_DIGITS for part in value.split(",")):
        raise typer.BadParameter(f"out of range: must be {BACKOFF_RULE} (got {shown(value)}).")
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
VisibilityTimeout = Annotated[Optional[int], typer.Option("--visibility-timeout-seconds", parser=whole(rule=rule_of("visibility_timeout_seconds")), help="Seconds a received message stays hidden (1–43200; default 30).")]
MaxReceives = Annotated[Optional[int], typer.Option("--max-receives", parser=whole(rule=rule_of("max_receives")), help="Receives allowed per message (0–1000; 0 = no limit).")]
DeadLetterQueue = Annotated[Optional[str], typer.Option("--dead-letter-queue", metavar="QUEUE", callback=utf8, help="Queue in the same project that receives dead letters.")]
RetentionHours = Annotated[Optional[int], typer.Option("--retention-hours", parser=whole(rule=rule_of("retention_hours")), help="Hours a message is kept (1–336; default 96).")]
MaxMessageBytes = Annotated[Optional[int], typer.Option("--max-message-bytes", parser=whole(rule=rule_of("max_message_bytes")), help="Largest message (1024–1048576; default 262144).")]
MaxBytes = Annotated[Optional[int], typer.Option("--max-bytes", parser=whole(rule=rule_of("max_bytes")), help="Bytes the queue stores at most (1048576–1099511627776; default 256 of its largest message, 16 MiB–1 GiB); a full queue refuses new messages.")]
MaxMessages = Annotated[Optional[int], typer.Option("--max-messages", parser=whole(rule=rule_of("max_messages")), help="Messages the queue holds at most (0–10000000; 0 = no limit); a full queue refuses new ones.")]
DedupeWindow = Annotated[Optional[int], typer.Option("--dedupe-window-seconds", parser=whole(rule=rule_of("dedupe_window_seconds")), help="Seconds a dedupe key is remembered (1–86400, at most the retention; default 3600).")]
RetryBackoff = Annotated[Optional[str], typer.Option("--retry-backoff-seconds", metavar="LIST", callback=backoff_text, help="Whole seconds before each retry, separated by commas (e.g. 5,30,120; the last repeats).")]
Replicas = Annotated[Optional[int], typer.Option("--replicas", parser=whole(rule=REPLICAS_RULE), help="Nodes that keep the queue's messages: 1, or 3 on a cluster of three nodes or more (the default there; 1 on one node).")]
Priorities = Annotated[bool, typer.Option("--priorities", help="Messages may carry a priority (0–9, higher taken first). Once on it cannot be turned off: there is no option to.")]
