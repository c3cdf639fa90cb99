"""``enclave up``: the whole product in one asyncio process (``serve``, ``Runtime``).

runtime.py (the running control plane: every part started in order, stopped in reverse),
preflight.py (the data dir's lock, room on its filesystem, free ports: checked before anything
starts) and app.py (the HTTP application: the API and the console in one FastAPI app). The top
of the server's layers: only ``enclave up`` (cli/server.py) imports it.
"""

from .preflight import AlreadyRunning, DataDirLock, PortInUse
from .runtime import Runtime, serve

__all__ = ["AlreadyRunning", "DataDirLock", "PortInUse", "Runtime", "serve"]
