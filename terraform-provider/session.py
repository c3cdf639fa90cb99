"""What the resources and data sources share with the provider: the configured API client, the
project of the queues that name none, and the stop signal.

provider.py configures one ``ProviderSession`` per provider process (one OpenTofu command) and
builds every resource and data source with it, so they depend on this module and never on the
provider. OpenTofu calls the resources from up to ``-parallelism`` threads at a time: the one
``AdminClient`` (an httpx client, safe to share between threads) serves them all.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

from enclave_queue.admin import AdminClient
from enclave_queue.errors import EnclaveError

HTTP_TIMEOUT = 30.0  #: seconds for one API request (status long-polls add their wait to it)


class ProviderError(EnclaveError):
    """The provider cannot call the API (not configured, or configured with unknown values)."""


class ProviderSession:
    """The API client once configured, the default project, and ``stopping`` (StopProvider)."""

    def __init__(self) -> None:
        self._client: Optional[AdminClient] = None
        self._unusable: Optional[str] = "The provider was not configured (OpenTofu calls ConfigureProvider first)."
        self.project = "default"
        #: False while the provider's ``project`` is known only at apply (``refuse``): the queues
        #: that name no project plan theirs unknown, not ``project``
        self.project_known = True
        #: set by StopProvider (Ctrl-C in OpenTofu): long waits give up and report what they have
        self.stopping = threading.Event()

    def connect(self, url: str, token: Optional[str], project: str) -> None:
        """Call the API at url with token from now on (closing the client used so far)."""
        self.project, self.project_known = project, True
        if self._client is not None:
            self._client.close()
        self._client = AdminClient(url, token, timeout=HTTP_TIMEOUT)
        self._unusable = None

    def refuse(self, reason: str, project: str, *, project_known: bool = True) -> None:
        """Make every API call raise ProviderError(reason) until the next ``connect``
        (``project_known``: False if the provider's project is unknown until then)."""
        self.project, self.project_known = project, project_known
        self._unusable = reason

    def api(self) -> AdminClient:
        """The configured API client; raises ProviderError if there is none."""
        if self._client is None or self._unusable:
            raise ProviderError(self._unusable or "The provider is not configured.")
        return self._client

    def project_of(self, value: Any) -> str:
        """A resource's or data source's ``project``, else the provider's."""
        return value if isinstance(value, str) else self.project

    def stop(self) -> None:
        self.stopping.set()

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
