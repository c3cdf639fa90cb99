"""The ``enclave`` entry point: the Typer app, and one place that turns errors into
``error: <sentence>`` on stderr with the exit code from errors.py (``ENCLAVE_TRACEBACK=1``
shows the traceback too). The sentence may carry the server's text: it is printed through
``output.safe_text``."""

from __future__ import annotations

import os
import sys
import traceback

import typer
from typer.exceptions import Abort, Exit, TyperException

from enclave_queue.errors import EnclaveError

from . import deadletters, queue, server  # noqa: F401 - deadletters adds commands to queue
from .output import safe_text

app = typer.Typer(
    name="enclave",
    help="Enclave Queues: managed queues over NATS JetStream.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(queue.app, name="queue")
app.command("up")(server.up)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    try:
        result = app(args=argv, standalone_mode=False)
        return result if isinstance(result, int) else 0
    except EnclaveError as exc:
        return _fail(str(exc), exc.exit_code, exc)
    except Abort:
        return _fail("aborted.", 1, None)
    except TyperException as exc:  # usage errors: a bad option value, a missing argument
        return _fail(exc.format_message(), exc.exit_code, exc)
    except Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _fail(message: str, code: int, exc: BaseException | None) -> int:
    if exc is not None and os.environ.get("ENCLAVE_TRACEBACK") == "1":
        traceback.print_exception(exc, file=sys.stderr)
    print(f"error: {safe_text(message, markup=False)}", file=sys.stderr)
    return code


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
