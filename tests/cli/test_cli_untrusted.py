"""Untrusted input on both sides of the CLI, with the real ``enclave`` against a real stack:
arguments that try to climb out of their place in a URL are refused (exit 2) before any
request, and text from messages or the server reaches the terminal without escape sequences
or Rich markup taking effect."""

import json
import re
import time

import pytest

from enclave_queue.client import connect
from enclave_queue.errors import EnclaveError
from tests.cli.test_cli import ok, run
from tests.helpers import make_queue

NAME_RULE = "3–40 lowercase letters, digits or hyphens, starting with a letter"
PROJECT_RULE = "1–40 lowercase letters, digits or hyphens, starting with a letter"
RECEIPT_RULE = ("1–4096 characters of URL-safe base64 (A–Z, a–z, 0–9, '-', '_') starting with a letter, "
                "as 'receive' gave it")
SEQUENCE_RULE = "an integer from 1 to 9223372036854775807"

#: what a terminal acts on, apart from the line feeds that end lines: C0, DEL, C1
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")

#: a message body of at most 60 characters (tables show that much): markup, a title change, CR, CSI
NASTY = "[/] [link=https://example.invalid]x[/link] \x1b]0;pwned\x07\r\x9b"
NASTY_SHOWN = r"[/] [link=https://example.invalid]x[/link] \x1b]0;pwned\x07\x0d\x9b"
NOTE = "[bold red]bad[/] [/] [link=https://example.invalid]y[/link] \x1b[2J"
NOTE_SHOWN = r"[bold red]bad[/] [/] [link=https://example.invalid]y[/link] \x1b[2J"


def shown(value):
    """A refused value as the error repeats it: quoted, and cut after 40 characters if over 64."""
    return repr(value) if len(value) <= 64 else f"{value[:40]!r}… ({len(value)} characters)"


def poll(check, timeout=10.0, interval=0.05):
    """``check()`` once it is truthy; fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, f"not within {timeout:g} s"
        time.sleep(interval)
    return value


def assert_plain(result):
    assert result.returncode == 0, result.stderr
    for stream in (result.stdout, result.stderr):
        assert not RAW_CONTROL.search(stream), repr(stream)
        assert "\x1b" not in stream and "\x07" not in stream and "\r" not in stream


# -- item 2: path parts ------------------------------------------------------------------------

def test_path_traversal_and_extra_routes_are_refused_before_any_request(stack, unique_name):
    victim = f"{unique_name}-victim"
    make_queue(stack, victim, project="iso-other")
    make_queue(stack, unique_name, visibility_timeout_seconds=2)
    with stack.admin() as admin:
        admin.send("iso-other", victim, "still here")
        admin.send("default", unique_name, "mine")
        password = admin.credentials("iso-other", victim)["password"]

    up = "/".join([".."] * 5)  # from …/queues/<name>/messages/<receipt> to /v1/projects/
    climb = f"abc/{up}/iso-other/queues/{victim}"
    cases = [
        (("queue", "delete", f"../../iso-other/queues/{victim}", "--yes"),
         f"queue name must be {NAME_RULE} (got '../../iso-other/queues/{victim}')."),
        (("queue", "delete", f"../../iso-other/queues/{victim}"),  # refused before the prompt
         f"queue name must be {NAME_RULE} (got '../../iso-other/queues/{victim}')."),
        (("queue", "delete-message", unique_name, climb), f"receipt must be {RECEIPT_RULE} (got {shown(climb)})."),
        (("queue", "delete-message", unique_name, "%2e%2e"), f"receipt must be {RECEIPT_RULE} (got '%2e%2e')."),
        (("queue", "delete-message", unique_name, ""), f"receipt must be {RECEIPT_RULE} (got '')."),
        (("queue", "get", f"{victim}/credentials", "-p", "iso-other"),
         f"queue name must be {NAME_RULE} (got '{victim}/credentials')."),
        (("queue", "credentials", victim, "-p", "x/../iso-other"),
         f"project must be {PROJECT_RULE} (got 'x/../iso-other')."),
        (("queue", "clear", victim, "-p", "..", "--yes"), f"project must be {PROJECT_RULE} (got '..')."),
        (("queue", "get", ""), f"queue name must be {NAME_RULE} (got '')."),
        (("queue", "delete", ""), f"queue name must be {NAME_RULE} (got '')."),
        (("queue", "get", victim, "-p", ""), f"project must be {PROJECT_RULE} (got '')."),
        (("queue", "receive", "Q?x=1"), f"queue name must be {NAME_RULE} (got 'Q?x=1')."),
        (("queue", "discard", unique_name, "0", "--yes"), f"sequence must be {SEQUENCE_RULE} (got 0)."),
        (("queue", "retry", unique_name, str(2**63)), f"sequence must be {SEQUENCE_RULE} (got {2**63})."),
    ]
    for args, line in cases:
        result = run(stack, *args, input="y\n")
        assert (result.returncode, result.stderr, result.stdout) == (2, f"error: {line}\n", ""), args
        assert password not in result.stdout + result.stderr

    with stack.admin() as admin:
        assert admin.get_queue("iso-other", victim)["name"] == victim
        assert [m["body"] for m in admin.peek("iso-other", victim)] == ["still here"]
        assert [m["body"] for m in admin.peek("default", unique_name)] == ["mine"]


def test_a_redirect_is_an_error_not_a_success():
    """Something else answering at the API's address (a proxy, a misconfigured load balancer) with a
    redirect: the client neither follows it (its token would go along) nor takes it for a success.
    (Enclave itself answers a trailing slash with a 404 problem, not a redirect.)"""
    import http.server
    import threading

    from enclave_queue.admin import AdminClient

    class Redirecting(http.server.BaseHTTPRequestHandler):
        def do_DELETE(self) -> None:  # noqa: N802 - the handler's name for DELETE
            self.send_response(307)
            self.send_header("Location", "http://elsewhere.example/v1/x")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Redirecting)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        with AdminClient(f"http://127.0.0.1:{server.server_port}", "enq_token") as admin, \
                pytest.raises(EnclaveError, match=r"^The Enclave API answered 307 .* not followed"):
            admin.request("DELETE", "/v1/projects/default/queues/emails/messages")
    finally:
        server.shutdown()
        server.server_close()


# -- item 8: text from messages and the server -------------------------------------------------

async def test_bodies_and_error_notes_reach_the_terminal_as_plain_text(stack, unique_name):
    dlq = f"{unique_name}-dlq"
    make_queue(stack, dlq)
    creds = make_queue(stack, unique_name, max_receives=1, visibility_timeout_seconds=1, dead_letter_queue=dlq)
    async with connect(creds) as queue:
        await queue.send("poison")
        (message,) = await queue.receive(wait=3)
        assert await message.reject(error=NOTE) == "moved"
        await queue.send(NASTY)

    peeked = run(stack, "queue", "peek", unique_name)
    assert_plain(peeked)
    assert NASTY_SHOWN in peeked.stdout
    exact = json.loads(ok(stack, "queue", "peek", unique_name, "--json").stdout)
    assert [m["body"] for m in exact["messages"]] == [NASTY]

    received = run(stack, "queue", "receive", unique_name)
    assert_plain(received)
    assert f"  body:    {NASTY_SHOWN}\n" in received.stdout

    # max_receives 1 and a 1 s visibility timeout: the received message is a dead letter soon
    with stack.admin() as admin:
        poll(lambda: len(admin.list_dead_letters("default", dlq)["dead_letters"]) == 2)

    listed = run(stack, "queue", "dead-letters", dlq)
    assert_plain(listed)
    assert NASTY_SHOWN in listed.stdout and NOTE_SHOWN in listed.stdout
    assert unique_name in listed.stdout  # the FROM column
    page = json.loads(ok(stack, "queue", "dead-letters", dlq, "--json").stdout)
    assert {letter["body"]: letter["last_error"] for letter in page["dead_letters"]} == {"poison": NOTE, NASTY: None}

    for args in (("queue", "peek", dlq), ("queue", "receive", dlq, "--max", "10")):
        shown = run(stack, *args)
        assert_plain(shown)
        assert NASTY_SHOWN in shown.stdout, args
    exported = run(stack, "queue", "export", dlq)
    assert_plain(exported)
    assert {json.loads(line)["body"] for line in exported.stdout.splitlines()} == {"poison", NASTY}
