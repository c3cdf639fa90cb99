"""The Typer app: ``enclave up`` (server.py), ``enclave queue …`` (queue.py, deadletters.py) and
``enclave access-key …`` (access_keys.py).
main.py runs it and turns what it raises into ``error: …`` lines."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer
from typer.core import TyperOption

from . import access_keys, deadletters, queue, server  # noqa: F401 - deadletters adds commands to queue

app = typer.Typer(
    name="enclave",
    help="Enclave Queues: managed queues over NATS JetStream.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        try:
            number = version("enclave-queue")
        except PackageNotFoundError:  # run from a checkout that was never installed
            number = "unknown"
        print(f"enclave {number}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Enclave Queues: managed queues over NATS JetStream."""


app.add_typer(queue.app, name="queue")
app.add_typer(access_keys.app, name="access-key")
app.command("up")(server.up)

_display_type = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx):
    """A flag takes no value, so --help shows no type for it (typer 0.29 shows ``<bool>``)."""
    return None if self.is_flag else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_without_type
