"""The package's public names: all importable, every error class among them, and the SDK's surface
exactly what docs/sdk.md documents (parsed from the doc, so an undocumented public name fails, and
so does a documented one that is missing or has another signature)."""

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import enclave_queue
import enclave_queue.admin
import enclave_queue.client
from enclave_queue import errors
from enclave_queue.client import DeadLetter, Message, PeekedMessage, Queue, SyncMessage, SyncQueue

DOC = (Path(__file__).parents[2] / "docs" / "sdk.md").read_text(encoding="utf-8")
#: the modules a doc's ``from … import …`` may name, and where each name must then be public
IMPORTABLE = {"enclave_queue": enclave_queue.__all__, "enclave_queue.client": enclave_queue.client.__all__,
              "enclave_queue.errors": enclave_queue.__all__, "enclave_queue.admin": dir(enclave_queue.admin)}


def test_every_public_name_exists():
    for name in enclave_queue.__all__:
        assert getattr(enclave_queue, name) is not None, name
    assert sorted(enclave_queue.__all__) == enclave_queue.__all__


def test_every_error_class_is_public():
    classes = {name for name, value in vars(errors).items()
               if isinstance(value, type) and issubclass(value, errors.EnclaveError)}
    assert classes <= set(enclave_queue.__all__)


# -- what docs/sdk.md documents -------------------------------------------------------------------

def section(title: str) -> str:
    """The text of the doc's section (any level) whose heading starts with ``title``, up to the next
    heading of the same level or above."""
    match = re.search(rf"^(#+) {re.escape(title)}.*?$", DOC, re.M)
    assert match is not None, f"docs/sdk.md has no section {title!r}"
    level = len(match.group(1))
    end = re.search(rf"^#{{1,{level}}} ", DOC[match.end():], re.M)
    return DOC[match.end():match.end() + end.start() if end else len(DOC)]


def backticked_names(text: str) -> set[str]:
    """Every name the text sets in backticks, as the last part of a dotted path:
    ``enclave_queue.admin.AdminClient(url, …)`` gives AdminClient."""
    return {path.rsplit(".", 1)[-1] for path in re.findall(r"`(?:await )?([A-Za-z_][\w.]*)", text)}


def doc_imports() -> set[tuple[str, str]]:
    """(module, name) of every ``from enclave_queue… import …`` in the doc's examples."""
    found = set()
    for module, names in re.findall(r"^from (enclave_queue[\w.]*) import ([\w, ]+)$", DOC, re.M):
        found.update((module, name.strip()) for name in names.split(","))
    return found


def documented_calls(receiver: str) -> set[str]:
    """The methods the doc calls on ``receiver`` (``queue.put(``, ``message.ack(``), and the aliases
    the sections of its verbs name as the same verb (``(`ack_many` is the same)``, ```delete()` is
    the same verb``)."""
    names = set(re.findall(rf"\b{receiver}\.(\w+)\(", DOC))
    for title in re.findall(rf"^### (`(?:await )?{receiver}\.\w+\()", DOC, re.M):
        names |= set(re.findall(r"`(\w+)(?:\(\))?` is\s+the same", section(title)))
    return names


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_")}


def sentence(starting: str) -> str:
    match = re.search(rf"{re.escape(starting)}.*?\.(?:\s|$)", DOC, re.S)
    assert match is not None, f"docs/sdk.md has no sentence starting {starting!r}"
    return match.group(0)


def headings(receiver: str) -> dict[str, str]:
    """Method name → the parameter list its ``###`` heading gives (``### `await queue.put(body, *, …) -> int```)."""
    return dict(re.findall(rf"^### `(?:await )?{receiver}\.(\w+)\((.*?)\)(?: -> [^`]*)?`", DOC, re.M))


def parameters(text: str) -> list[inspect.Parameter]:
    """A documented parameter list as ``inspect.Parameter``s (defaults as literals)."""
    arguments = ast.parse(f"def f({text}): pass").body[0].args  # type: ignore[attr-defined]
    found = []
    positional = arguments.posonlyargs + arguments.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(arguments.defaults)) + [
        ast.literal_eval(d) for d in arguments.defaults]
    for arg, default in zip(positional, defaults, strict=True):
        found.append(inspect.Parameter(arg.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    if arguments.vararg:
        found.append(inspect.Parameter(arguments.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
    for arg, kw_default in zip(arguments.kwonlyargs, arguments.kw_defaults, strict=True):
        default = inspect.Parameter.empty if kw_default is None else ast.literal_eval(kw_default)
        found.append(inspect.Parameter(arg.arg, inspect.Parameter.KEYWORD_ONLY, default=default))
    if arguments.kwarg:
        found.append(inspect.Parameter(arguments.kwarg.arg, inspect.Parameter.VAR_KEYWORD))
    return found


def assert_signature(function: Any, documented: str, context: str) -> None:
    """``function`` takes the documented parameters, as documented (kind and default); one the
    heading leaves out must at least be shown in its section as ``name=``."""
    actual = {name: p for name, p in inspect.signature(function).parameters.items() if name != "self"}
    shown = {p.name: p for p in parameters(documented)}
    for name, param in shown.items():
        assert name in actual, f"{function.__qualname__} has no parameter {name!r} (documented: ({documented}))"
        assert (actual[name].kind, actual[name].default) == (param.kind, param.default), (
            f"{function.__qualname__}({name}) is {actual[name]}, documented as {param} (({documented}))")
    for name in actual.keys() - shown.keys():
        assert f"{name}=" in context, f"{function.__qualname__}({name}) is not documented"


# -- the pins -------------------------------------------------------------------------------------

def test_every_public_sdk_name_is_documented():
    error_classes = {name for name in enclave_queue.__all__ if isinstance(getattr(enclave_queue, name), type)
                     and issubclass(getattr(enclave_queue, name), errors.EnclaveError)}  # pinned to errors.py above
    names = (set(enclave_queue.__all__) - error_classes) | set(enclave_queue.client.__all__)
    assert sorted(names - backticked_names(DOC)) == []


def test_every_documented_import_is_public():
    missing = [f"{module}.{name}" for module, name in doc_imports() if name not in IMPORTABLE[module]]
    assert missing == []


def test_every_type_a_heading_returns_is_public():
    returned = set(re.findall(r"^### `[^`]*-> (?:list\[)?([A-Z]\w+)", DOC, re.M))
    assert "Message" in returned
    assert sorted(returned - set(enclave_queue.client.__all__)) == []


def test_connect_and_connect_sync_are_as_documented():
    for function in (enclave_queue.client.connect, enclave_queue.client.connect_sync):
        documented = re.search(rf"`{function.__name__}\(([^`]+?)\)`", DOC)  # the first with parameters
        assert documented is not None, f"docs/sdk.md does not give {function.__name__}'s parameters"
        assert_signature(function, documented.group(1), DOC)
        assert getattr(enclave_queue, function.__name__) is function


def test_queue_has_the_documented_verbs_and_no_others():
    assert public(Queue) == documented_calls("queue")


@pytest.mark.parametrize("verb", sorted(headings("queue")))
def test_queue_verb_takes_the_documented_parameters(verb):
    heading = f"`await queue.{verb}(" if f"`await queue.{verb}(" in DOC else f"`queue.{verb}("
    assert_signature(getattr(Queue, verb), headings("queue")[verb], section(heading))


def test_message_has_the_documented_fields_and_verbs_and_no_others():
    table = re.findall(r"^\| (`[^|]*`) \|", section("A received message"), re.M)  # the attribute column
    fields = backticked_names(" ".join(table))
    assert "body" in fields
    assert public(Message) == fields | documented_calls("message")


@pytest.mark.parametrize("verb", sorted(headings("message")))
def test_message_verb_takes_the_documented_parameters(verb):
    assert_signature(getattr(Message, verb), headings("message")[verb], section(f"`await message.{verb}("))


def test_sync_queue_has_the_async_verbs_the_doc_lists():
    listed = sentence("`SyncQueue` has the async queue's verbs")
    verbs = set(re.findall(r"`(\w+)`", listed)) - {"SyncQueue", "Queue"}  # not `retry()`: a dead letter's
    assert public(SyncQueue) == verbs
    assert verbs <= public(Queue)
    absent = set(re.findall(r"`(\w+)\(\)`", sentence("There is no blocking")))
    assert absent and not absent & public(SyncQueue)


def test_sync_message_has_the_verbs_the_doc_lists():
    verbs = set(re.findall(r"`(\w+)\(", sentence("`SyncMessage` has every field of `Message`")))
    assert public(SyncMessage) == verbs
    assert verbs <= public(Message)


def test_peeked_message_and_dead_letter_have_the_documented_fields():
    peeked = backticked_names(sentence("A `PeekedMessage` has"))
    assert {"id", "sequence", "body", "data", "headers", "enqueued_at"} <= peeked
    assert {f.name for f in PeekedMessage.__dataclass_fields__.values()} | {"id", "body"} <= peeked
    letter = backticked_names(sentence("A `DeadLetter` has")) | backticked_names(section("`await queue.dead_letters("))
    assert {name for name in DeadLetter.__dataclass_fields__ if not name.startswith("_")} <= letter
    assert {"retry", "discard"} <= letter
