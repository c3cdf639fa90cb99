"""A stand-in for OpenTofu: starts ``terraform-provider-enclave`` the way OpenTofu does and drives it
with the tfplugin6 messages that ship with ``tf``, checking what OpenTofu checks.

- ``ProviderProcess``: go-plugin's client side. The process gets ``TF_PLUGIN_MAGIC_COOKIE``,
  ``PLUGIN_PROTOCOL_VERSIONS=5,6`` and a fresh client certificate in ``PLUGIN_CLIENT_CERT``
  (ECDSA P-521, as go-plugin makes it); the handshake line on stdout
  (``1|6|unix|<path>|grpc|<base64 DER, unpadded>``, or ``tcp|127.0.0.1:PORT``) is parsed, and the
  gRPC channel trusts only the announced certificate and presents the client one. Stopped with
  ``GRPCController/Shutdown``, then by PID if it lingers.
- ``ObjectCodec``: values encoded strictly against the schema the provider returned, as cty's
  msgpack does: every attribute present, each of its type, unknowns as extension 0, refined
  unknowns (``Refined``) as extension 12. Responses are decoded as strictly ("an object with 14
  attributes is required (13 given)").
- ``Tofu``: one OpenTofu command against one provider process: validate, plan (the proposed new
  state built as OpenTofu builds it, the planned state checked as OpenTofu checks it), apply
  (the new state must be wholly known and match every known planned value), read, import.
- ``ApiProxy``: what may stand between the provider and the API (a reverse proxy), to make the
  API's answers fail on purpose: a server gone after some request, a prefix that is wrong.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import grpc
import httpx
import msgpack
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from msgpack import ExtType
from tf.gen import grpc_controller_pb2, grpc_controller_pb2_grpc, tfplugin_pb2_grpc
from tf.gen import tfplugin_pb2 as pb

BINARY = Path(sys.executable).with_name("terraform-provider-enclave")
MAGIC_COOKIE = ("TF_PLUGIN_MAGIC_COOKIE", "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2")
HANDSHAKE_TIMEOUT = 20.0  #: seconds for the handshake line (go-plugin's default start timeout is 60)
CALL_TIMEOUT = 120.0  #: seconds for one RPC (an apply waits for the queue to be Ready)
STOP_TIMEOUT = 5.0  #: seconds between Shutdown and a kill


class ProtocolError(AssertionError):
    """The provider did something OpenTofu would refuse."""


# -- values -----------------------------------------------------------------------------------------


class _Unknown:
    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN = _Unknown()  #: a wholly unknown value (msgpack extension 0)


@dataclass(frozen=True)
class Refined:
    """An unknown value with refinements (msgpack extension 12), as OpenTofu >= 1.6 sends for a
    value it partly knows: not null, a string prefix, number bounds ``(value, inclusive)``."""

    not_null: bool = False
    prefix: Optional[str] = None
    lower: Optional[tuple[float, bool]] = None
    upper: Optional[tuple[float, bool]] = None

    def ext(self) -> ExtType:
        refinements: dict[int, Any] = {}  # cty's keys: 1 nullness, 2 prefix, 3/4 number bounds
        if self.not_null:
            refinements[1] = False  # "is null: false"
        if self.prefix:
            refinements[2] = self.prefix
        if self.lower is not None:
            refinements[3] = list(self.lower)
        if self.upper is not None:
            refinements[4] = list(self.upper)
        return ExtType(12, msgpack.packb(refinements))

    @classmethod
    def from_ext(cls, data: bytes) -> Refined:
        refinements = msgpack.unpackb(data, strict_map_key=False)
        return cls(not_null=refinements.get(1) is False, prefix=refinements.get(2),
                   lower=tuple(refinements[3]) if 3 in refinements else None,  # type: ignore[arg-type]
                   upper=tuple(refinements[4]) if 4 in refinements else None)  # type: ignore[arg-type]

    def admits(self, value: Any) -> bool:
        """Whether a known value is within these refinements (OpenTofu checks it after apply)."""
        if value is None:
            return not self.not_null
        if self.prefix and not str(value).startswith(self.prefix):
            return False
        if self.lower is not None and (value < self.lower[0] or (value == self.lower[0] and not self.lower[1])):
            return False
        return not (self.upper is not None and (value > self.upper[0] or (value == self.upper[0] and not self.upper[1])))


def is_unknown(value: Any) -> bool:
    return value is UNKNOWN or isinstance(value, Refined)


def raw_equals(a: Any, b: Any) -> bool:
    """cty's RawEquals: unknowns are equal only with the same refinements."""
    if is_unknown(a) or is_unknown(b):
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(raw_equals(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _ext_hook(code: int, data: bytes) -> Any:
    if len(data) <= 1:
        return UNKNOWN
    if code != 12:
        raise ProtocolError(f"unsupported extension type 0x{code:02x} with len {len(data)}")
    return Refined.from_ext(data)


# -- the schema, strictly ---------------------------------------------------------------------------


@dataclass
class Attr:
    name: str
    type: Any  #: the cty type as JSON: "string", "number", "bool", ["list", "number"], …
    required: bool
    optional: bool
    computed: bool
    sensitive: bool


class ObjectCodec:
    """Encode and decode one schema block's objects exactly as cty's msgpack does."""

    def __init__(self, schema: pb.Schema) -> None:
        self.version = schema.version
        self.attrs = {a.name: Attr(a.name, json.loads(a.type), a.required, a.optional, a.computed, a.sensitive)
                      for a in schema.block.attributes}
        if schema.block.block_types:
            raise ProtocolError("nested blocks are not expected in this provider")

    def null_object(self) -> dict[str, Any]:
        return dict.fromkeys(self.attrs)

    def encode(self, obj: Optional[dict[str, Any]]) -> pb.DynamicValue:
        if obj is None:
            return pb.DynamicValue(msgpack=msgpack.packb(None))
        if set(obj) != set(self.attrs):
            raise ProtocolError(f"object attributes {sorted(obj)} differ from the schema's {sorted(self.attrs)}")
        return pb.DynamicValue(msgpack=msgpack.packb(
            {name: self._encode(self.attrs[name].type, value, name) for name, value in obj.items()}))

    def _encode(self, ty: Any, value: Any, path: str) -> Any:
        if value is None:
            return None
        if value is UNKNOWN:
            return ExtType(0, b"\x00")
        if isinstance(value, Refined):
            return value.ext()
        if ty == "string" and isinstance(value, str):
            return value
        if ty == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return value
        if ty == "bool" and isinstance(value, bool):
            return value
        if isinstance(ty, list) and ty[0] == "list" and isinstance(value, list):
            return [self._encode(ty[1], v, f"{path}[{i}]") for i, v in enumerate(value)]
        raise ProtocolError(f"{path}: {value!r} is not a {ty}")

    def decode(self, value: pb.DynamicValue, what: str) -> Optional[dict[str, Any]]:
        """An object from the provider; raises ProtocolError where cty would refuse it. An empty
        DynamicValue is null, as OpenTofu reads it."""
        if value.json:
            raise ProtocolError(f"{what}: JSON-encoded values are not expected")
        if not value.msgpack:
            return None
        obj = msgpack.unpackb(value.msgpack, ext_hook=_ext_hook)
        if obj is None:
            return None
        if not isinstance(obj, dict):
            raise ProtocolError(f"{what}: an object is required (got {obj!r})")
        if len(obj) != len(self.attrs):
            raise ProtocolError(f"{what}: an object with {len(self.attrs)} attributes is required ({len(obj)} given): "
                                f"missing {sorted(set(self.attrs) - set(obj))}, extra {sorted(set(obj) - set(self.attrs))}")
        for name, item in obj.items():
            if name not in self.attrs:
                raise ProtocolError(f"{what}.{name}: unsupported attribute")
            self._check(self.attrs[name].type, item, f"{what}.{name}")
        return obj

    def _check(self, ty: Any, value: Any, path: str) -> None:
        if value is None or is_unknown(value):
            return
        ok = ((ty == "string" and isinstance(value, str))
              or (ty == "number" and isinstance(value, (int, float)) and not isinstance(value, bool))
              or (ty == "bool" and isinstance(value, bool))
              or (isinstance(ty, list) and ty[0] == "list" and isinstance(value, list)))
        if not ok:
            raise ProtocolError(f"{path}: {ty} is required (got {value!r})")
        if isinstance(ty, list):
            for i, item in enumerate(value):
                self._check(ty[1], item, f"{path}[{i}]")


# -- diagnostics ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diag:
    severity: str
    summary: str
    detail: str
    path: tuple[Any, ...]

    def __str__(self) -> str:
        return f"{self.severity} {'.'.join(map(str, self.path)) or '-'}: {self.summary} ({self.detail})"


def diags_of(messages: Any) -> list[Diag]:
    out = []
    for d in messages:
        steps = tuple(s.attribute_name if s.HasField("attribute_name")
                      else s.element_key_int if s.HasField("element_key_int") else s.element_key_string
                      for s in d.attribute.steps)
        out.append(Diag(pb.Diagnostic.Severity.Name(d.severity).lower(), d.summary, d.detail, steps))
    return out


def errors_of(diags: list[Diag]) -> list[Diag]:
    return [d for d in diags if d.severity == "error"]


# -- the process ------------------------------------------------------------------------------------


def client_certificate() -> tuple[bytes, bytes]:
    """What go-plugin's client generates for automatic mTLS: (certificate PEM, key PEM)."""
    key = ec.generate_private_key(ec.SECP521R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "HashiCorp")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(seconds=30)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=True,
                                     data_encipherment=False, key_agreement=True, key_cert_sign=True,
                                     crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(key, hashes.SHA512())
    )
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                              serialization.NoEncryption()))


@dataclass
class Handshake:
    core_version: int
    app_version: int
    network: str
    address: str
    protocol: str
    server_cert_pem: bytes

    @classmethod
    def parse(cls, line: str) -> Handshake:
        parts = line.rstrip("\n").split("|")
        if len(parts) != 6:
            raise ProtocolError(f"handshake line with {len(parts)} fields: {line!r}")
        core, app, network, address, protocol, cert = parts
        if "=" in cert:  # go-plugin decodes it with base64.RawStdEncoding: padding is an error
            raise ProtocolError(f"the certificate must be unpadded base64: {cert!r}")
        der = base64.b64decode(cert + "=" * (-len(cert) % 4), validate=True)
        pem = x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)
        return cls(int(core), int(app), network, address, protocol, pem)

    @property
    def target(self) -> str:
        if self.network == "unix":
            return f"unix:{self.address}"
        if self.network == "tcp":
            return self.address
        raise ProtocolError(f"unknown network {self.network!r}")


class ProviderProcess:
    """``terraform-provider-enclave``, started and connected as OpenTofu does it."""

    def __init__(self, proc: subprocess.Popen[bytes], handshake: Handshake, channel: grpc.Channel,
                 log_path: Path, stdout_rest: list[bytes]) -> None:
        self.proc = proc
        self.handshake = handshake
        self.channel = channel
        self.log_path = log_path
        self.stdout_rest = stdout_rest  #: anything written to stdout after the handshake
        self._pumping: Optional[threading.Thread] = None
        self.handshake_seconds = 0.0  #: from starting the process to reading its handshake line
        self.stub = tfplugin_pb2_grpc.ProviderStub(channel)
        self.controller = grpc_controller_pb2_grpc.GRPCControllerStub(channel)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @classmethod
    def start(cls, env: dict[str, str], log_path: Path, *, certificate: Optional[tuple[bytes, bytes]] = None,
              binary: Path = BINARY) -> ProviderProcess:
        cert_pem, key_pem = certificate or client_certificate()
        started = time.perf_counter()
        full_env = {**env, MAGIC_COOKIE[0]: MAGIC_COOKIE[1], "PLUGIN_PROTOCOL_VERSIONS": "5,6",
                    "PLUGIN_MIN_PORT": "10000", "PLUGIN_MAX_PORT": "25000", "PLUGIN_CLIENT_CERT": cert_pem.decode()}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen([str(binary)], env=full_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=log)
        lines: queue.Queue[bytes] = queue.Queue()
        rest: list[bytes] = []

        def pump() -> None:  # go-plugin keeps reading the plugin's stdout after the handshake
            assert proc.stdout is not None
            with proc.stdout:
                first = True
                for line in proc.stdout:
                    if first:
                        lines.put(line)
                        first = False
                    else:
                        rest.append(line)
            lines.put(b"")

        pumping = threading.Thread(target=pump, name=f"provider-stdout-{proc.pid}", daemon=True)
        pumping.start()
        try:
            line = lines.get(timeout=HANDSHAKE_TIMEOUT).decode()
            if not line:
                raise ProtocolError(f"the provider exited before the handshake: {log_path.read_text()[-2000:]}")
            handshake_seconds = time.perf_counter() - started
            handshake = Handshake.parse(line)
            credentials = grpc.ssl_channel_credentials(root_certificates=handshake.server_cert_pem,
                                                       private_key=key_pem, certificate_chain=cert_pem)
            channel = grpc.secure_channel(handshake.target, credentials,
                                          options=[("grpc.ssl_target_name_override", "localhost")])
            grpc.channel_ready_future(channel).result(timeout=HANDSHAKE_TIMEOUT)
        except BaseException:
            _kill(proc)
            pumping.join(STOP_TIMEOUT)
            raise
        process = cls(proc, handshake, channel, log_path, rest)
        process._pumping = pumping
        process.handshake_seconds = handshake_seconds
        return process

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> int:
        """Shutdown as go-plugin does, then by PID if it does not exit; returns the exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(grpc.RpcError):  # it may exit before answering
                self.controller.Shutdown(grpc_controller_pb2.Empty(), timeout=2)
        self.channel.close()
        try:
            self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            _kill(self.proc)
        if self._pumping is not None:
            self._pumping.join(STOP_TIMEOUT)  # it closes stdout at the end of the stream
        return self.proc.returncode


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)


# -- OpenTofu's side of one command -----------------------------------------------------------------


@dataclass
class Plan:
    prior: Optional[dict[str, Any]]
    config: Optional[dict[str, Any]]
    planned: Optional[dict[str, Any]]
    requires_replace: list[tuple[Any, ...]] = field(default_factory=list)
    diagnostics: list[Diag] = field(default_factory=list)


class Tofu:
    """What OpenTofu does with one provider process during one command."""

    def __init__(self, process: ProviderProcess) -> None:
        self.process = process
        self.stub = process.stub
        schema = self.stub.GetProviderSchema(pb.GetProviderSchema.Request(), timeout=CALL_TIMEOUT)
        errors = errors_of(diags_of(schema.diagnostics))
        if errors:
            raise ProtocolError(f"GetProviderSchema: {errors}")
        self.schema = schema
        self.provider_codec = ObjectCodec(schema.provider)
        self.resources = {name: ObjectCodec(s) for name, s in schema.resource_schemas.items()}
        self.data_sources = {name: ObjectCodec(s) for name, s in schema.data_source_schemas.items()}

    def config(self, type_name: str, **values: Any) -> dict[str, Any]:
        """A resource's configuration object (a data source's when no resource has the name): the
        given attributes, every other one null."""
        return self._config(type_name, self.resources.get(type_name) or self.data_sources[type_name], values)

    def data_config(self, type_name: str, **values: Any) -> dict[str, Any]:
        """A data source's configuration object (its schema may differ from the resource's of the
        same name): the given attributes, every other one null."""
        return self._config(f"data.{type_name}", self.data_sources[type_name], values)

    @staticmethod
    def _config(what: str, codec: ObjectCodec, values: dict[str, Any]) -> dict[str, Any]:
        unknown = set(values) - set(codec.attrs)
        if unknown:
            raise ProtocolError(f"{what} has no attributes {sorted(unknown)}")
        return {**codec.null_object(), **values}

    def configure(self, **values: Any) -> list[Diag]:
        config = {**self.provider_codec.null_object(), **values}
        encoded = self.provider_codec.encode(config)
        diags = diags_of(self.stub.ValidateProviderConfig(pb.ValidateProviderConfig.Request(config=encoded),
                                                          timeout=CALL_TIMEOUT).diagnostics)
        if errors_of(diags):
            return diags
        return diags + diags_of(self.stub.ConfigureProvider(
            pb.ConfigureProvider.Request(terraform_version="1.9.0", config=encoded), timeout=CALL_TIMEOUT).diagnostics)

    def validate(self, type_name: str, config: dict[str, Any]) -> list[Diag]:
        encoded = self.resources[type_name].encode(config)
        return diags_of(self.stub.ValidateResourceConfig(
            pb.ValidateResourceConfig.Request(type_name=type_name, config=encoded), timeout=CALL_TIMEOUT).diagnostics)

    def plan(self, type_name: str, prior: Optional[dict[str, Any]], config: Optional[dict[str, Any]]) -> Plan:
        """PlanResourceChange with OpenTofu's proposed new state; a successful plan is checked as
        OpenTofu checks it (objchange.AssertPlanValid)."""
        codec = self.resources[type_name]
        proposed = proposed_new(codec, prior, config)
        response = self.stub.PlanResourceChange(pb.PlanResourceChange.Request(
            type_name=type_name, prior_state=codec.encode(prior), proposed_new_state=codec.encode(proposed),
            config=codec.encode(config)), timeout=CALL_TIMEOUT)
        diags = diags_of(response.diagnostics)
        planned = codec.decode(response.planned_state, f"{type_name} planned state")
        replace = [tuple(s.attribute_name for s in path.steps) for path in response.requires_replace]
        if not errors_of(diags):
            assert_plan_valid(codec, prior, config, planned)
        return Plan(prior, config, planned, replace, diags)

    def apply(self, type_name: str, plan: Plan) -> tuple[Optional[dict[str, Any]], list[Diag]]:
        """ApplyResourceChange; a successful apply is checked as OpenTofu checks it (the new state
        wholly known and matching every known planned value)."""
        codec = self.resources[type_name]
        response = self.stub.ApplyResourceChange(pb.ApplyResourceChange.Request(
            type_name=type_name, prior_state=codec.encode(plan.prior), planned_state=codec.encode(plan.planned),
            config=codec.encode(plan.config)), timeout=CALL_TIMEOUT)
        diags = diags_of(response.diagnostics)
        new = codec.decode(response.new_state, f"{type_name} new state")
        if not errors_of(diags):
            assert_apply_consistent(codec, plan.planned, new)
        return new, diags

    def read(self, type_name: str, state: dict[str, Any]) -> tuple[Optional[dict[str, Any]], list[Diag]]:
        codec = self.resources[type_name]
        response = self.stub.ReadResource(pb.ReadResource.Request(type_name=type_name,
                                                                  current_state=codec.encode(state)),
                                          timeout=CALL_TIMEOUT)
        new = codec.decode(response.new_state, f"{type_name} refreshed state")
        if new is not None:
            _assert_known(new, f"{type_name} refreshed state")
        return new, diags_of(response.diagnostics)

    def import_state(self, type_name: str, import_id: str) -> tuple[list[dict[str, Any]], list[Diag]]:
        codec = self.resources[type_name]
        response = self.stub.ImportResourceState(pb.ImportResourceState.Request(type_name=type_name, id=import_id),
                                                 timeout=CALL_TIMEOUT)
        states = [codec.decode(r.state, f"{type_name} imported state") for r in response.imported_resources]
        return [s for s in states if s is not None], diags_of(response.diagnostics)

    def read_data(self, type_name: str, config: dict[str, Any]) -> tuple[Optional[dict[str, Any]], list[Diag]]:
        codec = self.data_sources[type_name]
        encoded = codec.encode(config)
        diags = diags_of(self.stub.ValidateDataResourceConfig(pb.ValidateDataResourceConfig.Request(
            type_name=type_name, config=encoded), timeout=CALL_TIMEOUT).diagnostics)
        if errors_of(diags):
            return None, diags
        response = self.stub.ReadDataSource(pb.ReadDataSource.Request(type_name=type_name, config=encoded),
                                            timeout=CALL_TIMEOUT)
        state = codec.decode(response.state, f"data.{type_name}")
        return state, diags + diags_of(response.diagnostics)

    # -- the usual sequences --------------------------------------------------------------------

    def create(self, type_name: str, **values: Any) -> dict[str, Any]:
        """validate + plan + apply of a new resource; fails the test on any error."""
        config = self.config(type_name, **values)
        _no_errors(self.validate(type_name, config), "validate")
        plan = self.plan(type_name, None, config)
        _no_errors(plan.diagnostics, "plan")
        state, diags = self.apply(type_name, plan)
        _no_errors(diags, "apply")
        assert state is not None
        return state

    def destroy(self, type_name: str, state: dict[str, Any]) -> None:
        plan = self.plan(type_name, state, None)
        _no_errors(plan.diagnostics, "destroy plan")
        assert plan.planned is None, plan.planned
        new, diags = self.apply(type_name, plan)
        _no_errors(diags, "destroy")
        assert new is None, new


def _no_errors(diags: list[Diag], what: str) -> None:
    errors = errors_of(diags)
    if errors:
        raise AssertionError(f"{what} failed: " + "; ".join(map(str, errors)))


def proposed_new(codec: ObjectCodec, prior: Optional[dict[str, Any]],
                 config: Optional[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """OpenTofu's objchange.ProposedNew for a block of plain attributes: the configuration, with
    the prior value for every computed attribute the configuration leaves null."""
    if config is None:
        return None
    base = prior if prior is not None else codec.null_object()
    return {name: base[name] if attr.computed and config[name] is None else config[name]
            for name, attr in codec.attrs.items()}


def assert_plan_valid(codec: ObjectCodec, prior: Optional[dict[str, Any]], config: Optional[dict[str, Any]],
                      planned: Optional[dict[str, Any]]) -> None:
    """OpenTofu's objchange.AssertPlanValid for plain attributes (raises "Provider produced
    invalid plan")."""
    if config is None:
        if planned is not None:
            raise ProtocolError(f"planned {planned!r} for a destroy")
        return
    if planned is None:
        raise ProtocolError("planned null for a resource that is not being destroyed")
    for name, attr in codec.attrs.items():
        planned_v, config_v = planned[name], config[name]
        prior_v = prior[name] if prior is not None else None
        if raw_equals(planned_v, config_v):
            continue
        if prior_v is not None and config_v is not None and raw_equals(planned_v, prior_v):
            continue
        if attr.computed and (not attr.optional or config_v is None):
            continue
        if config_v is None:
            raise ProtocolError(f"invalid plan: .{name}: planned value {planned_v!r} for a non-computed attribute")
        raise ProtocolError(f"invalid plan: .{name}: planned value {planned_v!r} does not match config value "
                            f"{config_v!r}" + (f" nor prior value {prior_v!r}" if prior_v is not None else ""))


def assert_apply_consistent(codec: ObjectCodec, planned: Optional[dict[str, Any]],
                            new: Optional[dict[str, Any]]) -> None:
    """OpenTofu's check after apply ("Provider produced inconsistent result after apply")."""
    if planned is None:
        if new is not None:
            raise ProtocolError(f"the destroy returned {new!r}")
        return
    if new is None:
        raise ProtocolError("the apply returned null for a planned object")
    _assert_known(new, "the new state")
    for name in codec.attrs:
        _assert_compatible(planned[name], new[name], f".{name}")


def _assert_compatible(planned: Any, actual: Any, path: str) -> None:
    if isinstance(planned, Refined):
        if not planned.admits(actual):
            raise ProtocolError(f"inconsistent result after apply: {path}: {actual!r} is outside {planned!r}")
        return
    if planned is UNKNOWN:
        return
    if isinstance(planned, list) and isinstance(actual, list) and len(planned) == len(actual):
        for i, (p, a) in enumerate(zip(planned, actual, strict=True)):
            _assert_compatible(p, a, f"{path}[{i}]")
        return
    if planned != actual:
        raise ProtocolError(f"inconsistent result after apply: {path}: was {planned!r}, but now {actual!r}")


def _assert_known(obj: dict[str, Any], what: str) -> None:
    def walk(value: Any, path: str) -> None:
        if is_unknown(value):
            raise ProtocolError(f"{what}{path} is unknown: a provider must return known values")
        if isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    for name, value in obj.items():
        walk(value, f".{name}")


# -- what stands between the provider and the API ---------------------------------------------------


class ApiProxy:
    """A reverse proxy in front of the API, in a thread of the test process: each request goes to
    the path ``route(method, path)`` gives (the path as asked, a wrong prefix…), or, if it gives
    None, is answered 502 as a proxy answers when the server behind it is gone. ``requests`` lists
    what was asked (``"GET /v1/…"``). Stopped with ``stop`` (the ``api_proxy`` fixture does)."""

    def __init__(self, upstream: str, route: Callable[[str, str], Optional[str]]) -> None:
        self.requests: list[str] = []
        self._client = httpx.Client(base_url=upstream, timeout=CALL_TIMEOUT)
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _forward(self) -> None:
                proxy.requests.append(f"{self.command} {self.path}")
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                target = route(self.command, self.path)
                if target is None:
                    self._answer(502, "text/plain", b"Bad Gateway: the server behind this proxy is gone\n")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "content-type")}
                response = proxy._client.request(self.command, target, content=body, headers=headers)
                self._answer(response.status_code, response.headers.get("content-type", ""), response.content)

            def _answer(self, status: int, media: str, content: bytes) -> None:
                self.send_response(status)
                if media:
                    self.send_header("Content-Type", media)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            do_GET = do_POST = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="api-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(STOP_TIMEOUT)
        self._client.close()
