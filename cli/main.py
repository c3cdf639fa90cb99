"""The ``enclave`` entry point: runs the Typer app (app.py), and is the one place that turns
what it raises into ``error: <sentence>`` on stderr with the exit code from errors.py
(``ENCLAVE_TRACEBACK=1`` shows the traceback too). The sentence may carry the server's text:
it is printed through ``output.safe_text``.

A command line of the wrong shape (a missing argument, an unknown option or command) adds the
command's usage and ``Try '… --help' for help.`` under the error line.

No command prints a traceback: an exception nothing expected becomes
``error: <ClassName>: <message>`` and exit 1; Ctrl-C is exit 130, at any moment (the app is
imported inside ``main``, so an early Ctrl-C is caught too); a stdout closed early
(``enclave queue list | head -1``) ends the command quietly with exit 1, and a stdout that
cannot be written for another reason (``> /dev/full``) is one ``error:`` line and exit 1."""

from __future__ import annotations

import io
import os
import sys
import traceback
from typing import Any

UNEXPECTED = 1  #: exit code of an error nothing expected
INTERRUPTED = 130  #: exit code after Ctrl-C (128 + SIGINT), as a shell reports it
CLOSED_STDOUT = 1  #: exit code when stdout is closed early, as Typer itself exits then
UNWRITABLE_STDOUT = 1  #: exit code when stdout fails otherwise (a full disk): an error, not bad input


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    _whole_writes()
    try:
        code = _run(argv)
        sys.stdout.flush()  # what is still buffered: a stdout closed early fails here, not unseen at exit
        return code
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return CLOSED_STDOUT
    except _StdoutFailed as exc:  # what is left in the buffer would fail again at exit, with a traceback
        _silence_stdout()
        return _fail(f"could not write the output: {exc.strerror or exc}.", UNWRITABLE_STDOUT, exc)
    except Exception as exc:  # the promise: no traceback, whatever went wrong
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        hint = "" if _tracebacks() else " (unexpected: ENCLAVE_TRACEBACK=1 shows the traceback)"
        return _fail(text + hint, UNEXPECTED, exc)


def _run(argv: list[str] | None) -> int:
    from typer.exceptions import Abort, Exit, TyperException

    from enclave_queue.errors import EnclaveError

    from .app import app

    try:
        result = app(args=argv, standalone_mode=False)
        return result if isinstance(result, int) else 0
    except EnclaveError as exc:
        return _fail(str(exc), exc.exit_code, exc)
    except Abort as exc:  # a declined confirmation, or Ctrl-C / end of input at its prompt
        if isinstance(exc.__context__, KeyboardInterrupt):
            print(file=sys.stderr)  # end the prompt's line
            return INTERRUPTED
        if not _answer_echoed(exc):
            print(file=sys.stderr)  # end the prompt's line: the error goes on a line of its own
        return _fail("aborted.", 1, None)
    except TyperException as exc:  # usage errors: a bad option value, a missing argument
        message = exc.format_message()
        if not message.strip():  # no command given (no_args_is_help): the help is printed already
            return exc.exit_code
        code = _fail(message, exc.exit_code, exc)
        hint = _usage_hint(exc)
        if hint:
            print(hint, file=sys.stderr)
        return code
    except Exit as exc:
        return exc.exit_code


def _answer_echoed(exc: BaseException) -> bool:
    """Whether the answer to the prompt ended its line: only a terminal echoes what is typed, line
    feed included. At the end of the input, or with the answer read from a pipe, the prompt's line
    is still open."""
    if isinstance(exc.__context__, EOFError):
        return False
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):  # stdin closed
        return False


def _usage_hint(exc: Exception) -> str:
    """For a command line of the wrong shape (an argument missing or one too many, an option or a
    command that does not exist): the command's usage and where its help is, under the error
    line. Not for a bad value (the error names the option and the rule already)."""
    from typer._click.exceptions import BadParameter, MissingParameter, UsageError

    ctx = getattr(exc, "ctx", None)
    if ctx is None or not isinstance(exc, UsageError) or (isinstance(exc, BadParameter)
                                                          and not isinstance(exc, MissingParameter)):
        return ""
    return f"{ctx.get_usage()}\nTry '{ctx.command_path} --help' for help."


def _fail(message: str, code: int, exc: BaseException | None) -> int:
    if exc is not None and _tracebacks():
        traceback.print_exception(exc, file=sys.stderr)
    print(f"error: {_plain(message)}", file=sys.stderr)
    return code


def _plain(message: str) -> str:
    try:
        from .output import safe_text
    except Exception:  # the error may be that the CLI's own modules do not import
        return message.encode("ascii", "backslashreplace").decode()
    return safe_text(message, markup=False)


def _tracebacks() -> bool:
    return os.environ.get("ENCLAVE_TRACEBACK") == "1"


class _StdoutFailed(OSError):
    """A write to stdout that failed other than by a closed pipe (a full disk, an I/O error): told
    apart from the other OSErrors so that ``main`` says it is the output that was lost."""


class _WholeWrites(io.RawIOBase):
    """A file descriptor written in full or not at all: CPython's buffered stdout takes a write to a
    pipe the reader closed midway for done (the kernel writes part, the rest is dropped without an
    error: ``enclave queue peek --json | head -c1`` exited 0 with most of its output lost)."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd = fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self.fd)

    def fileno(self) -> int:
        return self.fd

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        while view:  # BrokenPipeError once the reader has gone
            try:
                view = view[os.write(self.fd, view):]
            except BrokenPipeError:
                raise
            except OSError as exc:
                raise _StdoutFailed(exc.errno, exc.strerror) from exc
        return len(data)


def _whole_writes() -> None:
    """Give sys.stdout a descriptor written in full (``_WholeWrites``), when it has one."""
    try:
        fd, old = sys.stdout.fileno(), sys.stdout
    except (AttributeError, OSError, ValueError):  # not a file (a test's capture)
        return
    old.flush()
    sys.stdout = io.TextIOWrapper(io.BufferedWriter(_WholeWrites(fd)), encoding=old.encoding, errors=old.errors,
                                  line_buffering=old.line_buffering)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
