"""The ``enclave_queue`` resource: tf's Resource class as glue between OpenTofu and the HTTP API.

Validation, defaults, the plan and the state ↔ API mapping are queue_model.py's; this class
calls the API with them, waits like ``enclave queue create --wait`` (apply returns once the
queue is Ready, or fails with the status message), rotates the password when the plan raises
``password_version`` (``rotate-password`` with ``password_grace_seconds``), and turns every API
error into a diagnostic (``Unable to create queue 'emails': …``), never an exception. The
password in the state is the one the API gives out now: read after a create, an import and
every refresh, and the rotation's answer after a rotation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Optional

from tf.iface import (
    CreateContext,
    DeleteContext,
    ImportContext,
    PlanContext,
    ReadContext,
    Resource,
    UpdateContext,
    UpgradeContext,
)
from tf.schema import Attribute, Schema
from tf.types import Bool, List, Number, String, Unknown
from tf.utils import Diagnostics

from enclave_queue.admin import AdminClient
from enclave_queue.errors import EnclaveError, NotFound
from enclave_queue.spec import BACKOFF_RULE, DEFAULT_GRACE, LIMITS, MAX_GRACE, MAX_PRIORITY, MIN_PRIORITY, NAME_RULE

from . import queue_model as model
from .diagnostics import api_error, tf_path
from .session import ProviderSession

APPLY_TIMEOUT = 300.0  #: seconds an apply waits for a queue to be Ready, or gone
POLL_STEP = 2.0  #: seconds one status long-poll may wait (StopProvider is noticed between polls)


def _range(field: str) -> str:
    low, default, high = LIMITS[field]
    return f"{low}–{high}, default {default}"


SCHEMA = Schema(version=0, description="A queue of Enclave Queues: a JetStream stream, its worker consumer "
                                       "and a broker user with a managed password.", attributes=[
    Attribute("name", String(), required=True, requires_replace=True,
              description=f"Queue name: {NAME_RULE}. Changing it replaces the queue."),
    Attribute("project", String(), optional=True, computed=True, requires_replace=True,
              description="Project (the provider's `project` when unset). Changing it replaces the queue."),
    Attribute("dead_letter_queue", String(), optional=True,
              description="Another queue of the same project that receives the messages that ran out of receives."),
    Attribute("max_message_bytes", Number(), optional=True, computed=True,
              description=f"Largest message the queue accepts, headers included ({_range('max_message_bytes')})."),
    Attribute("max_messages", Number(), optional=True, computed=True,
              description=f"Messages the queue holds at most (waiting, in flight and dead); a full queue refuses "
                          f"new ones; 0 = no limit ({_range('max_messages')})."),
    Attribute("max_bytes", Number(), optional=True, computed=True,
              description="Bytes the queue stores at most; a full queue refuses new messages. Reserved out of the "
                          "broker's store (1048576–1099511627776; default 256 messages of max_message_bytes, "
                          "16 MiB–1 GiB)."),
    Attribute("dedupe_window_seconds", Number(), optional=True, computed=True,
              description=f"Seconds a dedupe key (Nats-Msg-Id) is remembered; at most retention_hours × 3600 "
                          f"({_range('dedupe_window_seconds')})."),
    Attribute("max_receives", Number(), optional=True, computed=True,
              description=f"Receives before a message is dead-lettered; 0 = no limit ({_range('max_receives')})."),
    Attribute("retention_hours", Number(), optional=True, computed=True,
              description=f"Hours a message is kept, received or not ({_range('retention_hours')})."),
    Attribute("visibility_timeout_seconds", Number(), optional=True, computed=True,
              description=f"Seconds a received message stays hidden ({_range('visibility_timeout_seconds')})."),
    Attribute("retry_backoff_seconds", List(Number()), optional=True,
              description=f"Seconds before each retry, the last repeating: {BACKOFF_RULE}; fewer entries than "
                          "max_receives when that is not 0."),
    Attribute("priorities", Bool(), optional=True, computed=True,
              description=f"Messages may carry a priority ({MIN_PRIORITY}–{MAX_PRIORITY}, higher taken first); "
                          "default false. It can be turned on in place but never off again: a plan from true to "
                          "false is an error."),
    Attribute("replicas", Number(), optional=True, computed=True,
              description="Nodes that keep the queue's messages: 1, or 3 on a cluster of three nodes or more "
                          "(the default there; 1 on one node). Changes in place."),
    Attribute("password_version", Number(), optional=True, computed=True,
              description="The password's version, as this configuration counts it (default 1). Raising it "
                          "rotates the password at the next apply; lowering it is an error. Import and refresh "
                          "keep the state's value."),
    Attribute("password_grace_seconds", Number(), optional=True, computed=True,
              description=f"Seconds the old password keeps logging in after a rotation (0–{MAX_GRACE}, default "
                          f"{DEFAULT_GRACE}); 0 refuses it at once and closes its connections."),
    Attribute("broker_url", String(), computed=True, description="Where apps on this machine reach the broker."),
    Attribute("id", String(), computed=True, description="The queue's stable random id."),
    Attribute("internal_broker_url", String(), computed=True, description="Where containers reach the broker."),
    Attribute("password", String(), computed=True, sensitive=True,
              description="The app user's password; a new one after each rotation (known after apply)."),
    Attribute("password_secret", String(), computed=True,
              description="Name of the secret holding the app user's password (read it with data.enclave_secret)."),
    Attribute("subject", String(), computed=True, description="The subject apps publish to."),
    Attribute("username", String(), computed=True, description="The app user's name on the broker."),
])


class QueueResource(Resource):
    def __init__(self, session: ProviderSession) -> None:
        self.session = session

    @classmethod
    def get_name(cls) -> str:
        return "queue"

    @classmethod
    def get_schema(cls) -> Schema:
        return SCHEMA

    def validate(self, diags: Diagnostics, type_name: str, config: dict[str, Any]) -> None:
        super().validate(diags, type_name, config)
        for problem in model.validate(config or {}):
            diags.add_error(problem.summary, problem.detail, path=tf_path(problem.path))

    def plan(self, ctx: PlanContext, current: Optional[dict[str, Any]], planned: dict[str, Any]) -> dict[str, Any]:
        config = getattr(ctx, "config", None) or {}
        project = self.session.project if self.session.project_known else Unknown
        result, replace = model.plan(current, config, planned, project)
        for problem in [*model.validate(config), *model.refused_changes(current, result)]:
            ctx.diagnostics.add_error(problem.summary, problem.detail, path=tf_path(problem.path))
        if hasattr(ctx, "requires_replace"):
            ctx.requires_replace.extend(replace)
        return result

    def create(self, ctx: CreateContext, planned: dict[str, Any]) -> Optional[dict[str, Any]]:
        name, project = planned["name"], self.session.project_of(planned.get("project"))
        try:
            api = self.session.api()
            created = api.create_queue(project, model.create_body({**planned, "project": project}))
        except EnclaveError as exc:
            _report(ctx.diagnostics, "create", name, exc)
            return None
        return self._settle(ctx.diagnostics, api, project, name, "create", created, planned,
                            lambda: api.credentials(project, name)["password"])

    def read(self, ctx: ReadContext, current: dict[str, Any]) -> Optional[dict[str, Any]]:
        name, project = current["name"], self.session.project_of(current.get("project"))
        try:
            api = self.session.api()
            queue = api.get_queue(project, name)
            password = api.credentials(project, name)["password"]  # rotated outside OpenTofu: the new one
        except EnclaveError as exc:
            if _gone(exc, project, name):
                return None  # deleted outside OpenTofu: gone from state, the next plan creates it again
            _report(ctx.diagnostics, "read", name, exc)
            return current
        return model.resource_state(queue, password, current)  # the state's password_version, as it is

    def update(self, ctx: UpdateContext, current: dict[str, Any], planned: dict[str, Any]) -> Optional[dict[str, Any]]:
        name, project = current["name"], self.session.project_of(current.get("project"))
        refused = model.refused_changes(current, planned)  # again: a version unknown at plan time is known now
        for problem in refused:
            ctx.diagnostics.add_error(problem.summary, problem.detail, path=tf_path(problem.path))
        if refused:
            return current
        changes, rotate = model.patch_body(current, planned), model.rotates(current, planned)
        if not changes and not rotate:  # the grace alone changed, or an unknown version stayed the same
            return {**current, **model.rotation_of(planned)}
        try:
            api = self.session.api()
            updated = api.update_queue(project, name, changes) if changes else current
        except EnclaveError as exc:
            _report(ctx.diagnostics, "update", name, exc)
            return current
        rotation, password = planned, current.get(model.PASSWORD)
        if rotate:
            grace = model.whole(model.rotation_of(planned)["password_grace_seconds"])
            try:
                password = api.rotate_password(project, name, grace)["password"]
            except EnclaveError as exc:  # the settings changed, the password did not: a new apply rotates it
                _report(ctx.diagnostics, "rotate the password of", name, exc)
                rotation = {**planned, "password_version": current.get("password_version")}
        return self._settle(ctx.diagnostics, api, project, name, "update", updated, rotation, lambda: password)

    def delete(self, ctx: DeleteContext, current: dict[str, Any]) -> Optional[dict[str, Any]]:
        name, project = current["name"], self.session.project_of(current.get("project"))
        try:
            api = self.session.api()
            api.delete_queue(project, name)
            api.wait_deleted(project, name, APPLY_TIMEOUT, step=POLL_STEP, stop=self.session.stopping.is_set)
        except EnclaveError as exc:
            if _gone(exc, project, name):
                return None
            _report(ctx.diagnostics, "delete", name, exc)
            return current  # still there: keep it in state
        return None

    def import_(self, ctx: ImportContext, id: str) -> Optional[dict[str, Any]]:
        try:
            project, name = model.parse_import_id(id, self.session.project)
        except ValueError as exc:
            ctx.diagnostics.add_error(f"Unable to import queue {id!r}", str(exc))
            return None
        try:
            api = self.session.api()
            queue = api.get_queue(project, name)
            password = api.credentials(project, name)["password"]
        except EnclaveError as exc:
            _report(ctx.diagnostics, "import", name, exc)
            return None
        return model.resource_state(queue, password, {})  # password_version starts at 1 (the default)

    def upgrade(self, ctx: UpgradeContext, version: int, old: dict[str, Any]) -> dict[str, Any]:
        return model.conform(old)

    # -- waiting like --wait ----------------------------------------------------------------------

    def _settle(self, diags: Diagnostics, api: AdminClient, project: str, name: str, action: str,
                answered: Mapping[str, Any], rotation: dict[str, Any],
                password: Callable[[], Optional[str]]) -> dict[str, Any]:
        """Wait until the queue's latest spec is Ready and return its state, with ``password()``
        and the rotation's arguments of ``rotation``. If it is Errored, or the wait ends early
        (APPLY_TIMEOUT, StopProvider, the API gone), return the queue as it is with an error, or
        as the create or update ``answered`` it if it cannot be read: OpenTofu keeps it in state
        (tainted after a create) so nothing is orphaned, and a rotation done is not forgotten."""
        try:
            queue = api.wait_ready(project, name, APPLY_TIMEOUT, step=POLL_STEP, stop=self.session.stopping.is_set)
        except EnclaveError as exc:
            _report(diags, action, name, exc)
            try:
                queue = api.get_queue(project, name)
            except EnclaveError:
                queue = answered
        try:
            secret = password()
        except EnclaveError as exc:
            _report(diags, action, name, exc)
            secret = None
        return model.resource_state(queue, secret, rotation)


def _report(diags: Diagnostics, action: str, name: Any, exc: EnclaveError) -> None:
    api_error(diags, action, "queue", name, exc)


def _gone(exc: EnclaveError, project: str, name: str) -> bool:
    """Whether ``exc`` is the API's answer that this queue does not exist: a 404 whose problem
    says ``Queue '<name>' does not exist in project '<project>'.``. Another 404, for a path the
    API does not serve ("There is no route …": an endpoint with a wrong path, a proxy's wrong
    prefix), says nothing about the queue and must not drop it from the state."""
    return isinstance(exc, NotFound) and str(exc).startswith(f"Queue '{name}' does not exist in project '{project}'")
