"""``enclave up``: run the broker, the API and the controller in the foreground."""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from enclave_queue.errors import SpecError
from enclave_queue.settings import EnclaveSettings, check_node_name, parse_routes

from .options import whole

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def up(
    data_dir: Annotated[Optional[str], typer.Option("--data-dir", metavar="PATH", help="Data directory (ENCLAVE_HOME, default ~/.enclave).")] = None,
    broker_port: Annotated[Optional[int], typer.Option("--broker-port", parser=whole(0, 65535), help="Broker port (0 = any free port; default 4222).")] = None,
    api_port: Annotated[Optional[int], typer.Option("--api-port", parser=whole(0, 65535), help="API port (0 = any free port; default 7780).")] = None,
    node_name: Annotated[Optional[str], typer.Option("--node-name", metavar="NAME", help="This node's name, unique in its cluster (ENCLAVE_NODE_NAME, default 'enclave').")] = None,
    cluster_port: Annotated[Optional[int], typer.Option("--cluster-port", parser=whole(1, 65535), help="Port this node's cluster routes listen on: makes it a cluster node (ENCLAVE_CLUSTER_PORT).")] = None,
    routes: Annotated[Optional[str], typer.Option("--routes", metavar="HOST:PORT,...", help="The other nodes' cluster ports (ENCLAVE_ROUTES).")] = None,
) -> None:
    """Run Enclave Queues in the foreground until Ctrl-C or SIGTERM (one per data dir)."""
    overrides: dict[str, object] = {}
    if data_dir is not None:
        if not data_dir.strip():  # an unset shell variable: not the current directory
            raise SpecError("--data-dir must be a directory's path (got '').")
        overrides["home"] = Path(data_dir).expanduser().resolve()
    if broker_port is not None:
        overrides["broker_port"] = broker_port
    if api_port is not None:
        overrides["api_port"] = api_port
    if node_name is not None:
        overrides["node_name"] = check_node_name(node_name, "--node-name")
    if cluster_port is not None:
        overrides["cluster_port"] = cluster_port
    if routes is not None:
        overrides["routes"] = parse_routes(routes, "--routes")
    settings = EnclaveSettings.from_env(**overrides)
    if settings.clustered and not os.environ.get("ENCLAVE_SYNC"):  # a cluster's default, as with ENCLAVE_ROUTES
        settings = replace(settings, sync="interval")
    settings = replace(settings, home=settings.home.resolve())  # absolute: in messages, in the broker's command line
    from enclave_queue.server.preflight import check_before_start

    check_before_start(settings, LOG_LEVELS)
    make_data_dir(settings.home, "--data-dir" if data_dir is not None else "ENCLAVE_HOME")
    from enclave_queue.server import serve  # the server's modules: only once the options are checked

    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings, announce=lambda line: print(line, flush=True)))


def make_data_dir(home: Path, source: str) -> None:
    """The data directory, created if missing; SpecError (exit 2) naming ``source`` if it cannot be."""
    if home.exists() and not home.is_dir():
        raise SpecError(f"{source} {str(home)!r} is not a directory.")
    try:
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecError(f"{source} {str(home)!r} cannot be created: {exc.strerror}.") from None
