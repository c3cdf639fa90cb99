"""The Compose files (compose/compose.yaml: one node; compose/cluster.yaml: three), checked
without a container engine: each is valid by the Compose specification (the compose_spec parser,
after YAML's merge keys are resolved as Compose resolves them), names only services and volumes
it declares, and runs real `enclave` commands whose options the CLI takes."""

import re
from pathlib import Path

import pytest
import typer
import yaml
from compose_spec import PyCompose

from enclave_cli.app import app
from enclave_queue.settings import parse_routes

COMPOSE = Path(__file__).resolve().parents[2] / "compose"
FILES = ["compose.yaml", "cluster.yaml"]


def load(name: str) -> dict:
    data = yaml.safe_load((COMPOSE / name).read_text())
    PyCompose.from_yaml(yaml.safe_dump(data))  # raises on anything the specification does not allow
    return data


def image_command() -> list[str]:
    """The Dockerfile's CMD (what a service without a command runs)."""
    [line] = [line for line in (COMPOSE / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")]
    return yaml.safe_load(line.removeprefix("CMD "))


def parse_enclave(argv: list[str]) -> typer.Context:
    """Parse ``enclave ARGS`` as the CLI would, without running it: a usage error (typer's click's
    UsageError, BadParameter among them) if it would refuse."""
    assert argv[0] == "enclave", argv
    command = typer.main.get_command(app)
    ctx = command.make_context("enclave", list(argv[1:]))
    while hasattr(command, "resolve_command"):  # a group: on to its subcommand
        # what is left after the group's own options (click keeps the subcommand's name apart)
        left = [*(getattr(ctx, "_protected_args", None) or getattr(ctx, "protected_args", [])), *ctx.args]
        name, command, rest = command.resolve_command(ctx, left)
        assert command is not None, f"no command {name!r}"
        ctx = command.make_context(name, rest, parent=ctx)
    return ctx


@pytest.mark.parametrize("name", FILES)
def test_each_file_is_valid_compose_and_refers_only_to_what_it_declares(name):
    data = load(name)
    volumes = set(data.get("volumes") or {})
    for service in data["services"].values():
        for mount in service.get("volumes", []):
            source = mount.split(":", 1)[0]
            assert source.startswith((".", "/")) or source in volumes, f"undeclared volume {source!r}"
        for other in service.get("depends_on", []):
            assert other in data["services"]
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{port}: published on 127.0.0.1 only"


@pytest.mark.parametrize("name", FILES)
def test_every_service_runs_a_real_enclave_command(name):
    for service in load(name)["services"].values():
        ctx = parse_enclave(service.get("command") or image_command())
        assert ctx.command.name == "up"


def test_the_cluster_nodes_route_to_each_other_with_the_same_master_key():
    services = load("cluster.yaml")["services"]
    assert len(services) == 3
    names = set(services)
    for name, service in services.items():
        params = parse_enclave(service["command"]).params
        assert params["node_name"] == name
        routes = {route.split(":")[0] for route in parse_routes(params["routes"])}
        assert routes == names - {name}  # every other node, not itself
        assert re.fullmatch(r"\$\{ENCLAVE_MASTER_KEY:\?.+\}", service["environment"]["ENCLAVE_MASTER_KEY"])


def test_a_wrong_option_would_be_caught():
    """The check above can fail: a command the CLI does not take is refused."""
    usage_error = type(typer.BadParameter("")).__mro__[1]  # click's UsageError, as typer ships it
    with pytest.raises(usage_error, match="no-such-option"):
        parse_enclave(["enclave", "up", "--no-such-option"])
    with pytest.raises(usage_error, match="serve"):
        parse_enclave(["enclave", "serve"])
    with pytest.raises(typer.BadParameter):
        parse_enclave(["enclave", "up", "--cluster-port", "not-a-port"])
