"""tf 1.2.0's gRPC servicer (``tf.provider.ProviderServicer``) with the fixes this provider needs.

What tf 1.2.0 gets wrong, and what this subclass does instead (each pinned by tests/provider):

- **Refined unknowns.** OpenTofu >= 1.6 sends a value that is unknown but partly known (a
  number with bounds, a string with a known prefix, "not null") as msgpack extension 12; tf only
  recognises extension 0 and hands the raw ``ExtType`` to validation and planning, which then
  compare it with numbers and crash. Every incoming value is read here with every extension as
  ``Unknown`` (cty treats any extension as unknown). And since OpenTofu checks a plan by raw
  equality, refinements included, an attribute the plan leaves as proposed is sent back in the
  exact bytes OpenTofu sent.
- **Planning.** tf never shows the configuration to ``Resource.plan`` and does not call it for
  a create, so a default can only be applied on create (removing ``max_receives = 5`` from the
  configuration would keep 5) and a provider-level default (``project``) cannot be planned at
  all. Here ``plan`` is called for creates and updates with a context carrying ``config`` and a
  ``requires_replace`` list the resource fills.
- **Stored states.** tf upgrades a state only when its version is older than the schema's (and
  with ``version=None`` runs a default upgrade, with a warning, on every refresh), and otherwise
  hands the stored JSON back as it is, whatever attributes it has; OpenTofu refuses an object
  with more or fewer attributes than the schema. Here the resource's ``upgrade`` always
  receives the stored state and returns it in the current schema (schemas are ``version=0``).
- **Destroy plans.** tf advertises the ``plan_destroy`` capability in GetMetadata and then
  answers a destroy plan with an error; here a destroy plans null. GetProviderSchema reports the
  same capabilities as GetMetadata, and GetMetadata lists the resources and data sources.
- **Exceptions.** An exception in tf or in a resource becomes a gRPC error, which OpenTofu shows
  as a crashed plugin; here it becomes an error diagnostic of that call, with the traceback on
  stderr (OpenTofu's log), and the process keeps serving.
- **StopProvider** (Ctrl-C in OpenTofu) tells the provider to cut its waits short; it does not
  stop the server (tf's own runner stops it, losing the state of an apply in flight).
"""

from __future__ import annotations

import copy
import functools
import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

import grpc
import msgpack
from msgpack import ExtType
from tf.gen import tfplugin_pb2 as pb
from tf.iface import PlanContext, UpgradeContext
from tf.provider import ProviderServicer
from tf.schema import Attribute, NestedBlock
from tf.types import Unknown
from tf.utils import Diagnostics, to_dynamic_value

CAPABILITIES = pb.ServerCapabilities(plan_destroy=True, get_provider_schema_optional=True)
NULL = msgpack.packb(None)


@dataclass
class ConfiguredPlanContext(PlanContext):
    """tf's PlanContext plus the configuration, and the attributes whose change replaces."""

    config: dict[str, Any] = field(default_factory=dict)
    requires_replace: list[str] = field(default_factory=list)


def unpack(value: pb.DynamicValue, *, raw: bool = False) -> Any:
    """A DynamicValue's content, with every msgpack extension as ``Unknown`` (or, with ``raw``,
    as the ``ExtType`` exactly as sent); None for an empty value or null."""
    if value.msgpack:
        hook: Callable[[int, bytes], Any] = ExtType if raw else (lambda code, data: Unknown)
        return msgpack.unpackb(value.msgpack, ext_hook=hook)
    if value.json:
        return json.loads(value.json)
    return None


def pack(value: Any) -> bytes:
    """value as msgpack, tf's Unknown written as tf writes it (msgpack null for None)."""
    return to_dynamic_value(value).msgpack or NULL


def decode(diags: Diagnostics, attrs: dict[str, Attribute], blocks: dict[str, NestedBlock],
           value: Any) -> Optional[dict[str, Any]]:
    """An object as a resource sees it: every attribute and block read by its schema (an Unknown
    stays Unknown, a key the schema does not know is dropped); None for null. A value the schema
    cannot read becomes Unknown and an error diagnostic on its attribute."""
    if not isinstance(value, dict):
        return None
    decoded: dict[str, Any] = {}
    for key, item in value.items():
        if key in attrs:
            read: Callable[[Any], Any] = attrs[key].type.decode
        elif key in blocks:
            read = blocks[key].decode
        else:
            continue
        try:
            decoded[key] = item if item is Unknown else read(item)
        except Exception as exc:
            diags.add_error(f"Failed to decode field '{key}'", f"Error decoding field '{key}': {exc}", path=[key])
            decoded[key] = Unknown
    return decoded


def _normalize(request: Any) -> None:
    """Rewrite every DynamicValue of a request so that tf reads refined unknowns as Unknown."""
    for descriptor in request.DESCRIPTOR.fields:
        if descriptor.message_type is not None and descriptor.message_type.name == "DynamicValue":
            value = getattr(request, descriptor.name)
            if value.msgpack:
                value.msgpack = pack(unpack(value))


def _same(a: Any, b: Any) -> bool:
    """Equal in value and in type (an Unknown only equals itself)."""
    if a is Unknown or b is Unknown:
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


class EnclaveServicer(ProviderServicer):
    """tf's servicer, corrected as the module docstring says."""

    def GetMetadata(self, request: pb.GetMetadata.Request, context: grpc.ServicerContext) -> pb.GetMetadata.Response:
        return pb.GetMetadata.Response(
            server_capabilities=CAPABILITIES,
            resources=[pb.GetMetadata.ResourceMetadata(type_name=name) for name in self._load_res_cls_map()],
            data_sources=[pb.GetMetadata.DataSourceMetadata(type_name=name) for name in self._load_ds_cls_map()],
        )

    def GetProviderSchema(self, request: pb.GetProviderSchema.Request,
                          context: grpc.ServicerContext) -> pb.GetProviderSchema.Response:
        response = super().GetProviderSchema(request, context)
        response.server_capabilities.CopyFrom(CAPABILITIES)
        return response

    def PlanResourceChange(self, request: pb.PlanResourceChange.Request,
                           context: grpc.ServicerContext) -> pb.PlanResourceChange.Response:
        Response = pb.PlanResourceChange.Response
        diags = Diagnostics()
        type_name = request.type_name
        attrs, blocks = self._get_res_attrs(type_name), self._get_res_blocks(type_name)
        raw = unpack(request.proposed_new_state, raw=True)
        prior = decode(diags, attrs, blocks, unpack(request.prior_state))
        proposed = decode(diags, attrs, blocks, unpack(request.proposed_new_state))
        config = decode(diags, attrs, blocks, unpack(request.config))
        if diags.has_errors():
            return Response(diagnostics=diags.to_pb())
        if proposed is None:  # destroy
            return Response(planned_state=pb.DynamicValue(msgpack=NULL))

        resource = self.app.new_resource(self._get_res_cls(type_name))
        changed = {k for k in attrs if prior is None or not _same(prior.get(k), proposed.get(k))}
        ctx = ConfiguredPlanContext(diags, type_name, changed_fields=changed, config=config or {})
        planned = resource.plan(ctx, copy.deepcopy(prior), copy.deepcopy(proposed))
        if planned is None or diags.has_errors():
            return Response(diagnostics=diags.to_pb())

        encoded: dict[str, Any] = {}
        for key, value in planned.items():
            if isinstance(raw, dict) and key in raw and _same(value, proposed.get(key)):
                encoded[key] = raw[key]  # as OpenTofu sent it: an unknown keeps its refinements
            elif value is Unknown:
                encoded[key] = Unknown
            else:
                encoded[key] = attrs[key].type.encode(value) if key in attrs else blocks[key].encode(value)
        return Response(
            planned_state=pb.DynamicValue(msgpack=pack(encoded)),
            requires_replace=[pb.AttributePath(steps=[pb.AttributePath.Step(attribute_name=key)])
                              for key in ctx.requires_replace],
            diagnostics=diags.to_pb(),
        )

    def UpgradeResourceState(self, request: pb.UpgradeResourceState.Request,
                             context: grpc.ServicerContext) -> pb.UpgradeResourceState.Response:
        diags = Diagnostics()
        if not request.raw_state.json:
            diags.add_error("Unable to read the stored state", "Only JSON states are supported (no flatmap).")
            return pb.UpgradeResourceState.Response(diagnostics=diags.to_pb())
        resource = self.app.new_resource(self._get_res_cls(request.type_name))
        state = resource.upgrade(UpgradeContext(diags, request.type_name), request.version,
                                 json.loads(request.raw_state.json))
        return pb.UpgradeResourceState.Response(upgraded_state=to_dynamic_value(state), diagnostics=diags.to_pb())

    def StopProvider(self, request: pb.StopProvider.Request, context: grpc.ServicerContext) -> pb.StopProvider.Response:
        stop: Optional[Callable[[], None]] = getattr(self.app, "stop", None)
        if stop is not None:
            stop()
        return pb.StopProvider.Response()


def _guarded(name: str, method: Callable[..., Any], *, normalize: bool) -> Callable[..., Any]:
    response = getattr(pb, name).Response

    @functools.wraps(method)
    def call(self: EnclaveServicer, request: Any, context: grpc.ServicerContext) -> Any:
        if normalize:
            _normalize(request)
        try:
            return method(self, request, context)
        except Exception as exc:  # the last line of defence: a diagnostic, never a crashed plugin
            traceback.print_exc(file=sys.stderr)
            diags = Diagnostics().add_error(
                f"The Enclave provider failed in {name}: {type(exc).__name__}: {exc}",
                "This is a bug in the provider; its traceback is in OpenTofu's log (TF_LOG=debug).")
            return response(diagnostics=diags.to_pb())

    return call


#: every call whose response carries diagnostics (CallFunction and StopProvider do not)
for _name in ("GetMetadata", "GetProviderSchema", "ValidateProviderConfig", "ValidateResourceConfig",
              "ValidateDataResourceConfig", "UpgradeResourceState", "ConfigureProvider", "ReadResource",
              "PlanResourceChange", "ApplyResourceChange", "ImportResourceState", "MoveResourceState",
              "ReadDataSource", "GetFunctions"):
    setattr(EnclaveServicer, _name,
            _guarded(_name, getattr(EnclaveServicer, _name), normalize=_name != "PlanResourceChange"))
