"""``enclave queue …``: each command is option parsing plus one API call.

Arguments are checked where they go into a URL (``admin.check_path_part``): a bad one is
``error: <field> must be …`` and exit 2, before any prompt; options.py checks what the API
cannot judge. What the server sends back is printed through ``output.safe_text``."""

from __future__ import annotations

import base64
import itertools
import os
import re
import shlex
import sys
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from enclave_queue.admin import check_path_part
from enclave_queue.errors import DELAY_RULE, EnclaveError, SpecError
from enclave_queue.settings import ClientSettings
from enclave_queue.spec import MAX_RECEIVE_WAIT, PEEK_LIMIT_RULE, RECEIVE_MAX_RULE, RECEIVE_WAIT_RULE

from .client import api
from .options import (
    DeadLetterQueue,
    DedupeWindow,
    Json,
    MaxBytes,
    MaxMessageBytes,
    MaxMessages,
    MaxReceives,
    Name,
    Priorities,
    Project,
    Replicas,
    RetentionHours,
    RetryBackoff,
    UsageError,
    VisibilityTimeout,
    Wait,
    backoff_list,
    decimal,
    exclusive,
    utf8,
    whole,
)
from .output import (
    QUEUE_COLUMNS,
    Col,
    ago,
    err,
    out,
    print_json,
    safe_text,
    show_list,
    show_object,
    span,
    stamp,
    strict_json,
)
from .watch import CONDITION_COLUMNS, condition_rows, watch_status

app = typer.Typer(help="Declare, inspect and use queues.", no_args_is_help=True)

ENV_PREFIX = "ENCLAVE_QUEUE_"
INTERVAL_RULE = "a number of seconds from 0.5 to 60"  #: status --watch's refresh (the CLI's own)


def project_of(project: Optional[str]) -> str:
    """``--project`` if given (an empty one too, refused as it is), else ENCLAVE_PROJECT or 'default'."""
    return project if project is not None else ClientSettings.from_env().project


def checked(project: Optional[str], name: str) -> str:
    """The project, once it and the queue's name follow their rules (SpecError otherwise):
    for the commands that ask before they call the API."""
    project = project_of(project)
    check_path_part("project", project)
    check_path_part("queue name", name)
    return project


def settings_from_options(**options: Any) -> dict[str, Any]:
    return {key: value for key, value in options.items() if value is not None}


@app.command()
def create(
    name: Name, project: Project = None,
    visibility_timeout_seconds: VisibilityTimeout = None, max_receives: MaxReceives = None,
    dead_letter_queue: DeadLetterQueue = None, retention_hours: RetentionHours = None,
    max_message_bytes: MaxMessageBytes = None, retry_backoff_seconds: RetryBackoff = None,
    max_messages: MaxMessages = None, dedupe_window_seconds: DedupeWindow = None, priorities: Priorities = False,
    max_bytes: MaxBytes = None, replicas: Replicas = None, wait: Wait = False, json: Json = False,
) -> None:
    """Create a queue."""
    project = project_of(project)
    spec = settings_from_options(
        name=name, visibility_timeout_seconds=visibility_timeout_seconds, max_receives=max_receives,
        dead_letter_queue=dead_letter_queue, retention_hours=retention_hours, max_message_bytes=max_message_bytes,
        retry_backoff_seconds=backoff_list(retry_backoff_seconds), max_messages=max_messages,
        dedupe_window_seconds=dedupe_window_seconds, priorities=priorities or None, max_bytes=max_bytes,
        replicas=replicas,
    )
    with api() as client:
        queue = client.create_queue(project, spec)
        if wait:
            with err.status(f"Waiting for queue '{name}' to be ready…"):
                queue = client.wait_ready(project, name)
    show_object(queue, as_json=json)
    lease_note(queue)


def lease_note(queue: dict[str, Any]) -> None:
    """Say on stderr that a retry backoff, not the visibility timeout, is what a receive is leased for."""
    backoff = queue.get("retry_backoff_seconds")
    if backoff:
        steps = " s, then ".join(str(step) for step in backoff[:3]) + " s" + (", …" if len(backoff) > 3 else "")
        err.print(f"Note: with a retry backoff, each receive is leased for its entry ({steps}; the last repeats); "
                  f"the visibility timeout ({safe_text(queue.get('visibility_timeout_seconds'))} s) is not used.",
                  markup=False)


@app.command("list")
def list_(project: Project = None, json: Json = False) -> None:
    """List the queues of a project with their state and counts (--json: their settings)."""
    with api() as client:
        if json:
            print_json(client.list_queues(project_of(project)))
            return
        rows = client.overview(project_of(project))
    show_list([overview_row(row) for row in rows], QUEUE_COLUMNS,
              empty="No queues yet: create one with 'enclave queue create NAME'.")


def overview_row(row: dict[str, Any]) -> dict[str, Any]:
    """A row of the overview as ``list`` shows it: '–' where a count is not known (a queue not
    ready yet, or one without a dead-letter queue)."""
    depth = row.get("depth") or {}
    shown = {key: ("–" if depth.get(key) is None else depth[key]) for key in ("waiting", "in_flight", "delayed", "dead")}
    oldest = depth.get("oldest_age_seconds")
    return {"name": row["name"], "state": row["state"], **shown, "oldest": "–" if oldest is None else span(oldest),
            "dead_letter_queue": row.get("dead_letter_queue") or ""}


@app.command()
def get(name: Name, project: Project = None, json: Json = False) -> None:
    """Show a queue's settings and outputs."""
    with api() as client:
        show_object(client.get_queue(project_of(project), name), as_json=json)


@app.command()
def status(
    name: Name, project: Project = None, json: Json = False,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Keep showing the state and counts, refreshed every --interval seconds, until Ctrl-C.")] = False,
    interval: Annotated[float, typer.Option("--interval", metavar="SECONDS", parser=decimal(rule=INTERVAL_RULE), help="Seconds between refreshes with --watch (0.5–60).")] = 2.0,
) -> None:
    """Show a queue's state and status conditions (--watch: live, with its counts and rates)."""
    exclusive(json=json, watch=watch)
    if not 0.5 <= interval <= 60:
        raise typer.BadParameter(f"must be from 0.5 to 60 seconds (got {interval:g}).", param_hint="'--interval'")
    project = project_of(project)
    with api() as client:
        if watch:
            watch_status(client, project, name, interval)
            return
        data = client.queue_status(project, name)
    if json:
        print_json(data)
        return
    show_object({k: data[k] for k in ("state", "message", "generation", "observed_generation", "dead_lettered",
                                      "discarded")})
    show_list(condition_rows(data), CONDITION_COLUMNS)


@app.command()
def update(
    name: Name, project: Project = None,
    visibility_timeout_seconds: VisibilityTimeout = None, max_receives: MaxReceives = None,
    dead_letter_queue: DeadLetterQueue = None,
    no_dead_letter_queue: Annotated[bool, typer.Option("--no-dead-letter-queue", help="Remove the dead-letter queue.")] = False,
    retention_hours: RetentionHours = None, max_message_bytes: MaxMessageBytes = None,
    retry_backoff_seconds: RetryBackoff = None,
    no_retry_backoff: Annotated[bool, typer.Option("--no-retry-backoff", help="Remove the retry schedule.")] = False,
    max_messages: MaxMessages = None, dedupe_window_seconds: DedupeWindow = None, priorities: Priorities = False,
    max_bytes: MaxBytes = None, replicas: Replicas = None, wait: Wait = False, json: Json = False,
) -> None:
    """Change a queue's settings in place."""
    exclusive(dead_letter_queue=dead_letter_queue is not None, no_dead_letter_queue=no_dead_letter_queue)
    exclusive(retry_backoff_seconds=retry_backoff_seconds is not None, no_retry_backoff=no_retry_backoff)
    project = project_of(project)
    changes = settings_from_options(
        visibility_timeout_seconds=visibility_timeout_seconds, max_receives=max_receives,
        dead_letter_queue=dead_letter_queue, retention_hours=retention_hours, max_message_bytes=max_message_bytes,
        retry_backoff_seconds=backoff_list(retry_backoff_seconds), max_messages=max_messages,
        dedupe_window_seconds=dedupe_window_seconds, priorities=priorities or None, max_bytes=max_bytes,
        replicas=replicas,
    )
    if no_dead_letter_queue:
        changes["dead_letter_queue"] = None
    if no_retry_backoff:
        changes["retry_backoff_seconds"] = None
    with api() as client:
        queue = client.update_queue(project, name, changes)
        if wait:
            with err.status(f"Waiting for queue '{name}' to be ready…"):
                queue = client.wait_ready(project, name)
    show_object(queue, as_json=json)
    lease_note(queue)


@app.command()
def delete(
    name: Name, project: Project = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Return without waiting for the deletion to finish.")] = False,
) -> None:
    """Delete a queue with its messages and credentials."""
    project = checked(project, name)
    if not yes:
        typer.confirm(f"Delete queue '{name}' in project '{project}' and all its messages?", abort=True, err=True)
    with api() as client:
        client.delete_queue(project, name)
        if not no_wait:
            with err.status(f"Deleting queue '{name}'…"):
                client.wait_deleted(project, name)
    err.print(f"Queue '{name}' deleted." if not no_wait else f"Queue '{name}' is being deleted.")


#: a credentials field's name as the --env exports carry it (upper-cased)
ENV_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")


@app.command()
def credentials(
    name: Name, project: Project = None, json: Json = False,
    env: Annotated[bool, typer.Option("--env", help="Print shell exports (ENCLAVE_QUEUE_*) that the SDK's connect() reads.")] = False,
) -> None:
    """Print what an app needs to use the queue with any NATS client."""
    exclusive(json=json, env=env)
    with api() as client:
        creds = client.credentials(project_of(project), name)
    if env:
        for key, value in creds.items():
            if not (isinstance(key, str) and ENV_KEY.fullmatch(key)):  # a server that is not Enclave: not
                continue                                               # a name a shell may eval
            if isinstance(value, list):  # broker_urls: a cluster's nodes, comma-separated as the SDK reads them
                value = ",".join(str(item) for item in value)
            elif value is None:  # previous_password_valid_until with no grace under way
                continue
            print(f"export {ENV_PREFIX}{safe_text(key.upper(), markup=False)}="
                  f"{shlex.quote(safe_text(value, markup=False))}")
    else:
        show_object(creds, as_json=json)


@app.command("rotate-password")
def rotate_password(
    name: Name, project: Project = None, json: Json = False,
    grace: Annotated[int, typer.Option("--grace", metavar="SECONDS", parser=whole(0, 7 * 86400), help="How long the current password keeps logging in (0–604800; 0 ends its connections at once).")] = 3600,
) -> None:
    """Give the queue a new password; print the new credentials."""
    with api() as client:
        creds = client.rotate_password(project_of(project), name, grace)
    show_object(creds, as_json=json)


@app.command()
def send(
    name: Name,
    body: Annotated[str, typer.Argument(help="Message body ('-' reads standard input; one that begins with '-' goes after '--'); bytes that are not UTF-8 are sent as binary.")],
    project: Project = None, json: Json = False,
    dedupe_key: Annotated[Optional[str], typer.Option("--dedupe-key", callback=utf8, help="1–128 characters; a key sent again within the queue's dedupe window adds nothing.")] = None,
    delay: Annotated[float, typer.Option("--delay", metavar="SECONDS", parser=decimal(rule=DELAY_RULE), help="Seconds before the message can be received (0–604800).")] = 0.0,
) -> None:
    """Send one message by hand."""
    data = body_bytes(body)
    try:
        text, data_base64 = data.decode("utf-8"), None
    except UnicodeDecodeError:  # binary: sent as it is (application/octet-stream)
        text, data_base64 = None, base64.b64encode(data).decode("ascii")
    with api() as client:
        result = client.send(project_of(project), name, text, body_base64=data_base64, dedupe_key=dedupe_key,
                             delay=delay)
    if json:
        print_json(result)
    elif result.get("duplicate"):
        out.print(f"Duplicate of message {safe_text(result['sequence'])} in '{name}' (dedupe key already sent); "
                  "nothing added.")
    elif result.get("delayed_until"):
        out.print(f"Sent message {safe_text(result['sequence'])} to '{name}', delayed until "
                  f"{safe_text(stamp(result['delayed_until']))} ({ago(result['delayed_until'])}).")
    else:
        out.print(f"Sent message {safe_text(result['sequence'])} to '{name}'.")


def body_bytes(body: str) -> bytes:
    """The message's bytes as given: standard input's for '-' (as they are: no newline
    translation), else the argument's (a shell passes bytes that are not UTF-8 through;
    os.fsencode gives them back)."""
    if body != "-":
        return os.fsencode(body)
    if sys.stdin is None:
        raise UsageError("BODY is '-', but standard input is closed.")
    return sys.stdin.buffer.read()


@app.command()
def receive(
    name: Name, project: Project = None,
    max_messages: Annotated[int, typer.Option("--max", parser=whole(rule=RECEIVE_MAX_RULE), help="Most messages to take (1–100).")] = 1,
    wait: Annotated[float, typer.Option("--wait", metavar="SECONDS", parser=decimal(rule=RECEIVE_WAIT_RULE), help="Seconds to wait for a message (0–20).")] = 1.0,
    delete: Annotated[bool, typer.Option("--delete", help="Delete each message once received (take it off the queue for good).")] = False,
    json: Json = False,
) -> None:
    """Receive messages by hand; each stays hidden for the visibility timeout unless deleted."""
    if not 0 <= wait <= MAX_RECEIVE_WAIT:  # the API's own rule, checked here too: the request's timeout is wait + 10 s
        raise SpecError(f"wait must be {RECEIVE_WAIT_RULE} (got {wait!r}).")
    project = project_of(project)
    with api() as client:
        messages = client.receive(project, name, max_messages, wait)
        if delete:  # shown once the broker confirmed each delete: nothing shown as deleted is left
            for done, message in enumerate(messages):
                try:
                    client.delete_message(project, name, message["receipt"])
                except EnclaveError:
                    show_received(messages[:done], deleted=True, as_json=json)
                    raise
    show_received(messages, deleted=delete, as_json=json)


def show_received(messages: list[dict[str, Any]], *, deleted: bool, as_json: bool) -> None:
    if as_json:
        print_json(messages)
        return
    if not messages:
        err.print("No messages.")
        return
    for message in messages:
        body = message["body"] if message["body"] is not None else f"(binary) {message['body_base64']}"
        hidden = "deleted" if deleted else hidden_for(message.get("visible_again_at"))
        out.print(f"[bold]#{safe_text(message['sequence'])}[/bold] receive {safe_text(message['receive_count'])}, "
                  f"sent {ago(message['sent_at'])} ({safe_text(stamp(message['sent_at']))}), {hidden}")
        for key, value in (message.get("headers") or {}).items():
            out.print(f"  header:  {safe_text(key, markup=False)}: {safe_text(value, markup=False)}", markup=False)
        out.print(f"  body:    {safe_text(body, markup=False)}", markup=False)
        if not deleted:
            out.print(f"  receipt: {safe_text(message['receipt'], markup=False)}", markup=False)
    if deleted:
        err.print(f"Deleted {len(messages)} message(s).")


def hidden_for(until: Optional[str]) -> str:
    """'hidden for 10 s' (its lease), or 'visible again' once it has run out."""
    left = ago(until)
    return f"hidden {left.replace('in ', 'for ', 1)}" if left.startswith("in ") else "visible again"


@app.command("delete-message")
def delete_message(
    name: Name,
    receipt: Annotated[str, typer.Argument(metavar="RECEIPT|SEQ", help="The receipt handle 'receive' printed, or the message's sequence (as 'receive' and 'peek' show it: #SEQ).")],
    project: Project = None,
) -> None:
    """Delete a message: a received one by its receipt, or any one by its sequence."""
    project = project_of(project)
    sequence = None
    if receipt.isascii() and receipt.isdigit():  # a sequence: a receipt is far longer than any number
        try:
            sequence = int(receipt)
        except ValueError:  # more digits than int() converts: far out of a sequence's range
            check_path_part("sequence", receipt)  # raises SpecError with the sequence's rule
    with api() as client:
        if sequence is not None:
            client.delete_sequence(project, name, sequence)
            err.print(f"Message {sequence} deleted.")
            return
        client.delete_message(project, name, receipt)
    err.print("Message deleted.")


PEEK_COLUMNS = {"sequence": Col("SEQ", numeric=True), "sent": Col("SENT"), "content_type": Col("TYPE"),
                "body": Col("BODY", free=True)}


@app.command()
def peek(
    name: Name, project: Project = None, json: Json = False,
    limit: Annotated[int, typer.Option("--limit", parser=whole(rule=PEEK_LIMIT_RULE), help="Most messages to show (1–100).")] = 10,
) -> None:
    """Show the oldest messages, waiting or in flight, without receiving them (nothing is leased)."""
    with api() as client:
        messages = client.peek(project_of(project), name, limit)
    if json:
        print_json({"messages": messages})
        return
    rows = [{**m, "sent": ago(m["sent_at"]), "body": (m["body"] if m["body"] is not None else "(binary)")[:60]}
            for m in messages]
    show_list(rows, PEEK_COLUMNS, empty=f"No messages in '{name}'.")


@app.command("len")
def len_(name: Name, project: Project = None, json: Json = False) -> None:
    """Count the messages waiting to be received (delayed ones included, in-flight ones not)."""
    with api() as client:
        stats = client.stats(project_of(project), name)
    if json:
        print_json(stats)
        return
    out.print(f"Waiting in '{name}': {safe_text(stats['waiting'] + stats['delayed'])} "
              f"({safe_text(stats['delayed'])} delayed). In flight: {safe_text(stats['in_flight'])}.")


EXPORT_STATUSES = ("waiting", "in_flight", "delayed", "dead")


@app.command()
def export(
    name: Name, project: Project = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to this file instead of standard output.")] = None,
) -> None:
    """Write every message as JSON Lines (waiting, in flight, delayed, dead), taking nothing off the queue."""
    counts: Counter[str] = Counter()
    with api() as client:
        messages = client.export(project_of(project), name)
        first = next(messages, None)  # a missing queue fails here, before a file is written
        sink = open_output(output) if output else sys.stdout
        try:
            for message in itertools.chain([first] if first is not None else [], messages):
                sink.write(strict_json(message) + "\n")
                counts[message["status"]] += 1
        finally:
            if output:
                sink.close()
        if not output:
            sink.flush()  # all of it out before it is said to be: a closed stdout fails here
    by_status = ", ".join(f"{counts[s]} {s.replace('_', ' ')}" for s in EXPORT_STATUSES)
    err.print(f"Exported {sum(counts.values())} message(s) of '{name}': {by_status}.", markup=False)


def open_output(path: Path):
    try:
        return path.open("w", encoding="utf-8")
    except OSError as exc:
        raise typer.BadParameter(f"cannot write {str(path)!r}: {exc.strerror}.", param_hint="'--output'") from None


@app.command()
def clear(
    name: Name, project: Project = None, json: Json = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Confirm: the messages are removed for good.")] = False,
) -> None:
    """Remove the waiting, delayed and dead messages of a queue; in-flight ones are left to finish."""
    project = checked(project, name)
    if not yes:
        raise UsageError(f"clear removes the waiting, delayed and dead messages of '{name}' for good; "
                         "add --yes to do it.")
    with api() as client:
        counts = client.clear(project, name)
    if json:
        print_json(counts)
    else:
        out.print(f"Cleared '{name}': {safe_text(counts['waiting'])} waiting, {safe_text(counts['delayed'])} delayed, "
                  f"{safe_text(counts['dead'])} dead message(s) removed.")
