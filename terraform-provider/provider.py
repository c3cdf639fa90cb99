"""The provider itself: its configuration (``endpoint``, ``token``, ``project``), and the list
of its resources and data sources, each built with the provider's one session (session.py).

One provider process serves one OpenTofu command (validate, plan, apply, import…); OpenTofu
configures it once, then calls the resources, which reach the API through the session.
"""

from __future__ import annotations

import re

from tf.iface import Config, DataSource, Provider, Resource
from tf.schema import Attribute, Schema
from tf.types import String, Unknown
from tf.utils import Diagnostics

from enclave_queue.admin import sendable_token
from enclave_queue.settings import ClientSettings

from .data_sources import QueueDataSource, SecretDataSource
from .queue_model import PROJECT, PROJECT_RULE
from .queue_resource import QueueResource
from .session import ProviderSession

#: the address OpenTofu knows the provider by (``required_providers { enclave = { source = … } }``)
SOURCE = "registry.opentofu.org/enclave/enclave"
#: the API's own address: the API answers a path it does not serve with a 404 ("There is no route
#: …"), so an endpoint with a path (a typo, a proxy's prefix) would make every queue look deleted
ENDPOINT = re.compile(r"https?://[^/\s?#]+/?")
ENDPOINT_RULE = "an http:// or https:// URL of the API itself: no path other than '/', no query and no spaces"


class EnclaveProvider(Provider):
    def __init__(self) -> None:
        self.session = ProviderSession()

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
        if isinstance(endpoint, str) and not ENDPOINT.fullmatch(endpoint):
            diags.add_error("Invalid endpoint", f"endpoint must be {ENDPOINT_RULE} (got {endpoint!r}).",
                            path=["endpoint"])
        if isinstance(project, str) and not PROJECT.fullmatch(project):
            diags.add_error("Invalid project", f"project must be {PROJECT_RULE} (got {project!r}).", path=["project"])

    def configure_provider(self, diags: Diagnostics, config: Config) -> None:
        config = config or {}
        pending = [key for key in ("endpoint", "token", "project") if config.get(key) is Unknown]
        defaults = ClientSettings.from_env()
        project = config.get("project") if isinstance(config.get("project"), str) else defaults.project
        if pending:
            # OpenTofu configures a provider with unknown values during a plan whose provider block
            # depends on resources not created yet; reading queues must then wait, and the queues
            # that name no project plan theirs unknown (known at apply, not the default)
            self.session.refuse(f"The provider's {', '.join(pending)} will only be known at apply; "
                                "apply the resources it depends on first (-target).", project,
                                project_known="project" not in pending)
            return
        token = config.get("token")
        # a token read with file() keeps the file's final newline: no token has spaces around it
        token = token.strip() if isinstance(token, str) else token
        if not sendable_token(token):
            diags.add_error("Invalid token", "token holds a character that is not printable ASCII (a space, a "
                                             "newline inside it): it is not an API token.", path=["token"])
            return
        endpoint = config.get("endpoint") or defaults.url
        if not ENDPOINT.fullmatch(endpoint):  # ENCLAVE_URL: the attribute was checked by validate_config
            diags.add_error("Invalid endpoint", f"ENCLAVE_URL must be {ENDPOINT_RULE} (got {endpoint!r}).")
            return
        self.session.connect(endpoint, token or defaults.token, project)

    def get_data_sources(self) -> list[type[DataSource]]:
        return [QueueDataSource, SecretDataSource]

    def get_resources(self) -> list[type[Resource]]:
        return [QueueResource]

    def new_resource(self, klass: type[Resource]) -> Resource:
        return klass(self.session)  # tf's default passes the provider itself

    def new_data_source(self, klass: type[DataSource]) -> DataSource:
        return klass(self.session)

    # -- the plugin's ------------------------------------------------------------------------------

    def stop(self) -> None:
        """StopProvider: long waits give up and report what they have."""
        self.session.stop()

    def close(self) -> None:
        self.session.close()
