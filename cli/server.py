"""``enclave up``: run the broker, the API and the controller in the foreground."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer

from enclave_queue.settings import EnclaveSettings


def up(
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="Data directory (ENCLAVE_HOME, default ~/.enclave).")] = None,
    broker_port: Annotated[Optional[int], typer.Option("--broker-port", min=0, max=65535, help="Broker port (0 = any free port; default 4222).")] = None,
    api_port: Annotated[Optional[int], typer.Option("--api-port", min=0, max=65535, help="API port (0 = any free port; default 7780).")] = None,
) -> None:
    """Run Enclave Queues in the foreground until Ctrl-C or SIGTERM (one per data dir)."""
    from enclave_queue.server import serve

    overrides: dict[str, object] = {}
    if data_dir is not None:
        overrides["home"] = data_dir.expanduser().resolve()
    if broker_port is not None:
        overrides["broker_port"] = broker_port
    if api_port is not None:
        overrides["api_port"] = api_port
    settings = EnclaveSettings.from_env(**overrides)
    settings = replace(settings, home=settings.home.resolve())  # absolute: in messages, in the broker's command line
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(serve(settings, announce=lambda line: print(line, flush=True)))
