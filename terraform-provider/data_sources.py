"""The data sources: values of objects that exist already, read by name through the HTTP API.

- ``enclave_queue``: a queue's settings and outputs (made by the CLI, the console or another
  configuration);
- ``enclave_secret``: a managed secret's value (today: a queue's password, ``<queue>-password``,
  the queue's ``password_secret``), so a configuration can hand it to an app. The value is
  sensitive: OpenTofu hides it in plans and output, though it is kept in the state file like
  every other attribute (protect the state).
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from tf.iface import DataSource, ReadDataContext
from tf.schema import Attribute, Schema
from tf.types import Bool, List, Number, String

from enclave_queue.admin import AdminClient
from enclave_queue.errors import EnclaveError

from . import queue_model as model
from .diagnostics import api_error
from .session import ProviderSession

QUEUE_SCHEMA = Schema(version=0, description="An existing queue's settings and outputs.", attributes=[
    Attribute("name", String(), required=True, description="Queue name."),
    Attribute("project", String(), optional=True, computed=True,
              description="Project (the provider's `project` when unset)."),
    Attribute("dead_letter_queue", String(), computed=True),
    Attribute("max_message_bytes", Number(), computed=True),
    Attribute("max_messages", Number(), computed=True),
    Attribute("max_bytes", Number(), computed=True),
    Attribute("dedupe_window_seconds", Number(), computed=True),
    Attribute("max_receives", Number(), computed=True),
    Attribute("retention_hours", Number(), computed=True),
    Attribute("visibility_timeout_seconds", Number(), computed=True),
    Attribute("retry_backoff_seconds", List(Number()), computed=True),
    Attribute("priorities", Bool(), computed=True),
    Attribute("replicas", Number(), computed=True),
    *(Attribute(output, String(), computed=True) for output in model.OUTPUTS),
])

SECRET_SCHEMA = Schema(version=0, description="A managed secret's value, such as a queue's password.", attributes=[
    Attribute("name", String(), required=True, description="Secret name, e.g. a queue's `password_secret`."),
    Attribute("project", String(), optional=True, computed=True,
              description="Project (the provider's `project` when unset)."),
    Attribute("value", String(), computed=True, sensitive=True, description="The secret's value."),
])


class _ApiDataSource(DataSource):
    """One API read by name and project; an API error becomes a diagnostic."""

    NAME: ClassVar[str]
    SCHEMA: ClassVar[Schema]

    def __init__(self, session: ProviderSession) -> None:
        self.session = session

    @classmethod
    def get_name(cls) -> str:
        return cls.NAME

    @classmethod
    def get_schema(cls) -> Schema:
        return cls.SCHEMA

    def fetch(self, api: AdminClient, project: str, name: str) -> dict[str, Any]:
        raise NotImplementedError

    def read(self, ctx: ReadDataContext, config: dict[str, Any]) -> Optional[dict[str, Any]]:
        name, project = config["name"], self.session.project_of(config.get("project"))
        try:
            return self.fetch(self.session.api(), project, name)
        except EnclaveError as exc:
            api_error(ctx.diagnostics, "read", self.NAME, name, exc)
            return None


class QueueDataSource(_ApiDataSource):
    NAME, SCHEMA = "queue", QUEUE_SCHEMA

    def fetch(self, api: AdminClient, project: str, name: str) -> dict[str, Any]:
        return model.state_from_api(api.get_queue(project, name))


class SecretDataSource(_ApiDataSource):
    NAME, SCHEMA = "secret", SECRET_SCHEMA

    def fetch(self, api: AdminClient, project: str, name: str) -> dict[str, Any]:
        secret = api.read_secret(project, name)
        return {"name": secret["name"], "project": secret["project"], "value": secret["value"]}
