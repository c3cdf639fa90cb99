"""The Typer app: ``enclave up`` (server.py) and ``enclave queue …`` (queue.py, deadletters.py).
main.py runs it and turns what it raises into ``error: …`` lines."""

from __future__ import annotations

import typer
from typer.core import TyperOption

from . import deadletters, queue, server  # noqa: F401 - deadletters adds commands to queue

app = typer.Typer(
    name="enclave",
    help="Enclave Queues: managed queues over NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(queue.app, name="queue")
app.command("up")(server.up)

_display_type = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx):
    """A flag takes no value, so --help shows no type for it (typer 0.29 shows ``<bool>``)."""
    return None if self.is_flag else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_without_type
