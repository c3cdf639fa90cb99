"""The provider itself: its configuration (``endpoint``, ``token``, ``project``), the API client
every resource and data source shares, and how an API error becomes a diagnostic.

One provider process serves one OpenTofu command (validate, plan, apply, import…); OpenTofu
configures it once and then calls the resources from up to ``-parallelism`` threads at a time,
so the one ``AdminClient`` (an httpx client, safe to share between threads) is built here.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Optional

from tf.iface import Config, DataSource, Provider, Resource
from tf.schema import Attribute, Schema
from tf.types import String, Unknown
from tf.utils import Diagnostics

from enclave_queue.admin import AdminClient
from enclave_queue.settings import ClientSettings

from .data_sources import QueueDataSource, SecretDataSource
from .diagnostics import ProviderError
from .queue_model import PROJECT, PROJECT_RULE
from .queue_resource import QueueResource

#: the address OpenTofu knows the provider by (``required_providers { enclave = { source = … } }``)
SOURCE = "registry.opentofu.org/enclave/enclave"
HTTP_TIMEOUT = 30.0  #: seconds for one API request (status long-polls add their wait to it)


class EnclaveProvider(Provider):
    def __init__(self) -> None:
        self._client: Optional[AdminClient] = None
        self._unusable: Optional[str] = "The provider was not configured (OpenTofu calls ConfigureProvider first)."
        self.project = "default"
        #: set by StopProvider (Ctrl-C in OpenTofu): long waits give up and report what they have
        self.stopping = threading.Event()

    # -- tf's Provider protocol -------------------------------------------------------------------

    def get_model_prefix(self) -> str:
        return "enclave_"

    def full_name(self) -> str:
        return SOURCE

    def get_provider_schema(self, diags: Diagnostics) -> Schema:
        return Schema(version=0, attributes=[
            Attribute("endpoint", String(), optional=True,
                      description="URL of the Enclave Queues HTTP API. Default: `ENCLAVE_URL`, else the running "
                                  "`enclave up` found through `ENCLAVE_HOME`, else `http://127.0.0.1:7780`."),
            Attribute("token", String(), optional=True, sensitive=True,
                      description="API token. Default: `ENCLAVE_TOKEN`, else the admin token file in `ENCLAVE_HOME`."),
            Attribute("project", String(), optional=True,
                      description="Project of the queues that do not name one. Default: `ENCLAVE_PROJECT`, else "
                                  "`default`."),
        ])

    def validate_config(self, diags: Diagnostics, config: Config) -> None:
        endpoint, project = (config or {}).get("endpoint"), (config or {}).get("project")
        if isinstance(endpoint, str) and not re.match(r"^https?://[^/\s]+", endpoint):
            diags.add_error("Invalid endpoint", f"endpoint must be an http:// or https:// URL (got {endpoint!r}).",
                            path=["endpoint"])
        if isinstance(project, str) and not PROJECT.match(project):
            diags.add_error("Invalid project", f"project must be {PROJECT_RULE} (got {project!r}).", path=["project"])

    def configure_provider(self, diags: Diagnostics, config: Config) -> None:
        config = config or {}
        pending = [key for key in ("endpoint", "token", "project") if config.get(key) is Unknown]
        defaults = ClientSettings.from_env()
        self.project = config.get("project") if isinstance(config.get("project"), str) else defaults.project
        if pending:
            # OpenTofu configures a provider with unknown values during a plan whose provider block
            # depends on resources not created yet; reading or planning queues must then wait
            self._unusable = (f"The provider's {', '.join(pending)} will only be known at apply; "
                              "apply the resources it depends on first (-target).")
            return
        url = config.get("endpoint") or defaults.url
        token = config.get("token") or defaults.token
        if self._client is not None:
            self._client.close()
        self._client = AdminClient(url, token, timeout=HTTP_TIMEOUT)
        self._unusable = None

    def get_data_sources(self) -> list[type[DataSource]]:
        return [QueueDataSource, SecretDataSource]

    def get_resources(self) -> list[type[Resource]]:
        return [QueueResource]

    # -- shared by the resources ------------------------------------------------------------------

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
