"""``enclave queue dead-letters | retry | discard | redrive``: dead letters by hand. Bodies, error
notes and names come from messages: they are printed through ``output.safe_text``."""

from __future__ import annotations

import time
from typing import Annotated, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from enclave_queue.admin import check_path_part
from enclave_queue.errors import BrokerUnavailable
from enclave_queue.spec import AFTER_RULE, LIST_LIMIT_RULE, REDRIVE_MAX_RULE, REDRIVE_RATE_RULE, SEQUENCE_RULE

from .client import api
from .options import Json, Name, Project, decimal, utf8, whole
from .output import Col, ago, err, out, print_json, safe_text, show_list
from .queue import app, checked, project_of

Seq = Annotated[int, typer.Argument(parser=whole(rule=SEQUENCE_RULE), help="The dead letter's sequence (from 'dead-letters').")]

LETTER_COLUMNS = {
    "sequence": Col("SEQ", numeric=True),
    "source_queue": Col("FROM"),
    "receive_count": Col("RECEIVES", numeric=True),
    "last_error": Col("LAST ERROR", free=True),
    "dead_since": Col("DEAD SINCE"),
    "body": Col("BODY", free=True),
}
POLL_SECONDS = 0.2
FOLLOW_PATIENCE = 30.0  #: seconds the progress is asked again while the API cannot be reached


@app.command("dead-letters")
def dead_letters(
    name: Name, project: Project = None, json: Json = False,
    limit: Annotated[int, typer.Option("--limit", parser=whole(rule=LIST_LIMIT_RULE), help="Letters per page (1–500).")] = 50,
    after: Annotated[int, typer.Option("--after", parser=whole(rule=AFTER_RULE), help="Start after this sequence (paging).")] = 0,
) -> None:
    """List a dead-letter queue's letters: source, receive count, last error (nothing is leased)."""
    with api() as client:
        page = client.list_dead_letters(project_of(project), name, limit, after)
    if json:
        print_json(page)
        return
    rows = [{**letter, "dead_since": ago(letter["dead_lettered_at"]), "body": (letter["body"] or "(binary)")[:60]}
            for letter in page["dead_letters"]]
    show_list(rows, LETTER_COLUMNS, empty=f"No dead letters in '{name}'.")  # show_list makes every cell safe
    if page["next_after"] is not None:
        err.print(f"More: --after {safe_text(page['next_after'])}")


@app.command()
def retry(name: Name, seq: Seq, project: Project = None, json: Json = False) -> None:
    """Send one dead letter back to its source queue (its receive count starts over)."""
    with api() as client:
        result = client.retry_dead_letter(project_of(project), name, seq)
    if json:
        print_json(result)
    else:
        out.print(f"Dead letter {seq} is back on '{safe_text(result['queue'])}' as message "
                  f"{safe_text(result['sequence'])}.")


@app.command()
def discard(
    name: Name, seq: Seq, project: Project = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete one dead letter for good."""
    project = checked(project, name)
    check_path_part("sequence", seq)
    if not yes:
        typer.confirm(f"Discard dead letter {seq} of '{name}' for good?", abort=True, err=True)
    with api() as client:
        client.discard_dead_letter(project, name, seq)
    err.print(f"Dead letter {seq} discarded.")


@app.command()
def redrive(
    name: Annotated[str, typer.Argument(help="The dead-letter queue.")],
    project: Project = None,
    to: Annotated[Optional[str], typer.Option("--to", metavar="QUEUE", callback=utf8, help="Move every letter to this queue instead of its source.")] = None,
    max_messages: Annotated[Optional[int], typer.Option("--max", parser=whole(rule=REDRIVE_MAX_RULE), help="Move at most this many.")] = None,
    rate: Annotated[Optional[float], typer.Option("--rate", parser=decimal(rule=REDRIVE_RATE_RULE), help="At most this many messages per second.")] = None,
    filter_error: Annotated[Optional[str], typer.Option("--filter-error", metavar="TEXT", callback=utf8, help="Only letters whose last error contains TEXT.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Count what would move; move nothing.")] = False,
    json: Json = False,
) -> None:
    """Move dead letters back to their source queues (or --to one), with progress. Safe to
    interrupt and run again: nothing is duplicated or lost."""
    project = project_of(project)
    with api() as client:
        task = client.start_redrive(project, name, to=to, max=max_messages, rate=rate, filter_error=filter_error,
                                    dry_run=dry_run)
        try:
            task = _follow(client, project, name, task, show=not json)
        except KeyboardInterrupt:
            task = client.cancel_redrive(project, name, task["id"])
            err.print(f"Redrive interrupted after moving {safe_text(task['moved'])}; run it again to move the rest.")
            raise typer.Exit(130) from None
    if json:
        print_json(task)
        return
    where = f"'{safe_text(to)}'" if to else "their source queues"
    verb = "Would move" if dry_run else "Moved"
    err.print(f"{verb} {safe_text(task['moved'])} dead letter(s) from '{name}' to {where}"
              + (f"; {safe_text(task['failed'])} failed" if task["failed"] else "") + ".")
    for line in task["errors"]:
        err.print(f"  {safe_text(line, markup=False)}", markup=False)
    if task["state"] != "done":
        raise typer.Exit(1)


def _follow(client, project: str, name: str, task: dict, *, show: bool) -> dict:
    """Poll the task until it ends, drawing a progress bar on stderr."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err, transient=True, disable=not (show and err.is_terminal)) as progress:
        bar = progress.add_task(f"Redriving '{name}'", total=task["total"] or None)
        while task["state"] == "running":
            time.sleep(POLL_SECONDS)
            task = _status(client, project, name, task["id"])
            progress.update(bar, completed=task["moved"] + task["failed"], total=task["total"] or None)
    return task


def _status(client, project: str, name: str, task_id: str) -> dict:
    """The task as the API says now; asked again for FOLLOW_PATIENCE seconds while the API cannot
    be reached (the control process paused or restarting: the task runs on meanwhile, and was
    reported failed when the first poll missed)."""
    until = time.monotonic() + FOLLOW_PATIENCE
    while True:
        try:
            return client.redrive_status(project, name, task_id)
        except BrokerUnavailable as exc:
            if time.monotonic() >= until:
                raise BrokerUnavailable(f"{exc.message} The redrive (task {task_id}) may still be running: "
                                        f"GET /v1/projects/{project}/queues/{name}/redrives/{task_id} says how "
                                        "it went.") from None
            time.sleep(1.0)
