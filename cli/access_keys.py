"""``enclave access-key …``: the access keys of the SQS endpoint (docs/sqs.md), each command one
API call (``/v1/access-keys``). A key's secret is printed once, by ``create``; the server keeps it
sealed and never shows it again. Text arguments go into a JSON body or a query string, so text
that is not UTF-8 is refused (``options.utf8``, exit 2) before any request."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from .client import api
from .options import Json, utf8
from .output import err, safe_text, show_list, show_object

app = typer.Typer(help="Issue, list and revoke access keys for the SQS endpoint.", no_args_is_help=True)

KEY_COLUMNS = {"access_key_id": "ACCESS KEY ID", "project": "PROJECT", "name": "NAME", "created_at": "CREATED"}

ScopeProject = Annotated[Optional[str], typer.Option(
    "--project", "-p", callback=utf8, help="The one project the key may use (default: every project).")]


@app.command()
def create(
    project: ScopeProject = None,
    name: Annotated[str, typer.Option("--name", callback=utf8, help="What the key is for (shown by list).")] = "",
    json: Json = False,
) -> None:
    """Create an access key: its id and secret (shown this once) for any AWS SDK or the AWS CLI."""
    with api() as client:
        key = client.request("POST", "/v1/access-keys", json={"project": project, "name": name})
    if json:
        show_object(key, as_json=True)
        return
    show_object({"access_key_id": key["access_key_id"], "secret_access_key": key["secret_access_key"],
                 "project": key["project"] or "(every project)", "name": key["name"]})
    err.print("Save the secret access key now: it cannot be shown again.")


@app.command("list")
def list_(json: Json = False) -> None:
    """List the access keys (never their secrets)."""
    with api() as client:
        keys = client.request("GET", "/v1/access-keys")
    rows = [{**k, "project": k["project"] or "(every project)"} for k in keys] if not json else keys
    show_list(rows, KEY_COLUMNS, as_json=json, empty="No access keys.")


@app.command()
def revoke(
    access_key_id: Annotated[str, typer.Argument(callback=utf8, help="The access key id (EQAK…).")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Revoke an access key: requests signed with it are refused from now on."""
    if not yes:
        typer.confirm(f"Revoke access key '{safe_text(access_key_id, markup=False)}'?", abort=True, err=True)
    with api() as client:
        client.request("DELETE", "/v1/access-keys", params={"access_key_id": access_key_id})
    err.print(f"Access key '{safe_text(access_key_id)}' revoked.")
