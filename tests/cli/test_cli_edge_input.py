"""Input at the edges of what the ``enclave`` CLI can hold, each one ``error: …`` line on stderr
naming the field and its rule, with the documented exit code and no traceback: a stdout that
cannot be written, numbers too large for a float or for int(), text that is not UTF-8 in the
access-key commands, a prompt with no terminal to answer it, an ``ENCLAVE_URL`` that no request
could go to (or that holds a password), and a server that answers NaN to ``--json``.

The checks that come before any request run against an address where nothing listens: had the
command sent anything, it would have been exit 3."""

import json
import os
import subprocess

import pytest

from enclave_queue.broker.process import free_port
from tests.cli.test_cli import ENCLAVE, ok
from tests.cli.test_cli_bad_input import FakeServer, fails, fake_server, run
from tests.helpers import make_queue


def nowhere():
    """An API URL where nothing listens: a request sent there is exit 3, not 2."""
    return {"ENCLAVE_URL": f"http://127.0.0.1:{free_port()}"}


def cut(text):
    """A refused number as the error repeats it: cut after 40 characters if over 64."""
    return text if len(text) <= 64 else f"{text[:40]}… ({len(text)} characters)"


# -- stdout ------------------------------------------------------------------------------------

@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
def test_an_output_that_cannot_be_written_is_one_error_line(stack, unique_name):
    """`> /dev/full`: every write fails with ENOSPC. Exit 1 (an error, as a stdout closed early is),
    and nothing at the interpreter's exit ('Exception ignored' with a traceback, exit 120)."""
    make_queue(stack, unique_name)
    ok(stack, "queue", "send", unique_name, "hello")
    for args in (("--version",), ("--help",), ("queue", "list"), ("queue", "list", "--json"),
                 ("queue", "peek", unique_name), ("queue", "export", unique_name)):
        with open("/dev/full", "wb") as full:
            result = subprocess.run([ENCLAVE, *args], stdout=full, stderr=subprocess.PIPE, env=stack.env, timeout=60)
        assert (result.returncode, result.stderr.decode()) == (
            1, "error: could not write the output: No space left on device.\n"), args


# -- numbers -----------------------------------------------------------------------------------

def test_a_number_too_large_to_hold_is_out_of_range_before_any_request(stack):
    """A decimal that overflows to infinity (JSON cannot carry it) and a whole number of more
    digits than int() converts (4300): the option named, with its rule, exit 2."""
    ones, digits = "1" * 400, "1" * 5000
    cases = [
        (("queue", "send", "emails", "hi", "--delay", ones),
         f"Invalid value for '--delay': out of range: must be a number of seconds from 0 to 604800 (7 days) "
         f"(got {cut(ones)})."),
        (("queue", "receive", "emails", "--wait", f"-{ones}"),
         f"Invalid value for '--wait': out of range: must be a number of seconds from 0 to 20 (got {cut('-' + ones)})."),
        (("queue", "redrive", "emails", "--rate", ones),
         "Invalid value for '--rate': out of range: must be a number of letters per second, more than 0 and at most "
         f"100000 (got {cut(ones)})."),
        (("queue", "status", "emails", "--watch", "--interval", ones),
         f"Invalid value for '--interval': out of range: must be a number of seconds from 0.5 to 60 (got {cut(ones)})."),
        (("queue", "delete-message", "emails", digits),
         f"sequence must be an integer from 1 to 9223372036854775807 (got '{'1' * 40}'… (5000 characters))."),
        (("queue", "create", "emails", "--retry-backoff-seconds", f"5,{digits}"),
         "Invalid value for '--retry-backoff-seconds': out of range: must be a list of 1–20 whole seconds, each from "
         f"1 to 43200 (got '5,{'1' * 38}'… (5002 characters))."),
        (("queue", "create", "emails", "--visibility-timeout-seconds", digits),
         f"Invalid value for '--visibility-timeout-seconds': out of range: must be an integer from 1 to 43200 "
         f"(got {cut(digits)})."),
        (("queue", "update", "emails", "--max-messages", digits),
         f"Invalid value for '--max-messages': out of range: must be an integer from 0 to 10000000 (got {cut(digits)})."),
        (("queue", "peek", "emails", "--limit", digits),
         f"Invalid value for '--limit': out of range: must be an integer from 1 to 100 (got {cut(digits)})."),
        (("queue", "receive", "emails", "--max", digits),
         f"Invalid value for '--max': out of range: must be an integer from 1 to 100 (got {cut(digits)})."),
        (("queue", "dead-letters", "emails", "--after", digits),
         "Invalid value for '--after': out of range: must be a sequence number from 0 to 9223372036854775807 "
         f"(got {cut(digits)})."),
        (("queue", "retry", "emails", digits),
         f"Invalid value for 'seq': out of range: must be an integer from 1 to 9223372036854775807 (got {cut(digits)})."),
        (("queue", "rotate-password", "emails", "--grace", digits),
         f"Invalid value for '--grace': must be between 0 and 604800 (got {cut(digits)})."),
    ]
    for args, line in cases:
        fails(stack, *args, env=nowhere(), code=2, line=f"error: {line}")


# -- text --------------------------------------------------------------------------------------

def test_access_key_text_that_is_not_utf8_is_a_usage_error(stack):
    rule = "must be UTF-8 text (it holds bytes that are not)."
    cases = [
        ((b"access-key", b"revoke", b"p\xff", b"--yes"), f"Invalid value for 'access_key_id': {rule}"),
        ((b"access-key", b"revoke", b"p\xff"), f"Invalid value for 'access_key_id': {rule}"),  # before the prompt
        ((b"access-key", b"create", b"--name", b"p\xff"), f"Invalid value for '--name': {rule}"),
        ((b"access-key", b"create", b"--project", b"p\xff"), f"Invalid value for '--project' / '-p': {rule}"),
    ]
    for args, line in cases:
        fails(stack, *args, env=nowhere(), code=2, line=f"error: {line}", stdin=subprocess.DEVNULL)


# -- prompts -----------------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [None, b"n\n"], ids=["end-of-input", "declined"])
def test_a_prompt_without_a_terminal_ends_its_line_before_the_error(stack, answer):
    """With no terminal, the answer is not echoed: its line feed does not end the prompt's line,
    so the CLI does, and the error is a line of its own (exit 1, documented for a declined
    confirmation). Nothing is sent: the prompt comes before any request."""
    stdin = {"stdin": subprocess.DEVNULL} if answer is None else {"input": answer}
    for args, prompt in [
        (("queue", "delete", "emails"), "Delete queue 'emails' in project 'default' and all its messages? [y/N]:"),
        (("queue", "discard", "emails", "1"), "Discard dead letter 1 of 'emails' for good? [y/N]:"),
        (("access-key", "revoke", "EQAKEXAMPLE"), "Revoke access key 'EQAKEXAMPLE'? [y/N]:"),
    ]:
        result = run(stack, *args, env=nowhere(), **stdin)
        assert (result.returncode, result.stderr) == (1, f"{prompt}\nerror: aborted.\n"), args


# -- where the API is --------------------------------------------------------------------------

def test_an_api_url_no_request_could_go_to_is_exit_2(stack):
    rule = "error: ENCLAVE_URL must be an http:// or https:// URL such as http://127.0.0.1:7780 (got {})."
    for url in ("http://127.0.0.1:-1", "http:// ", "http://127.0.0.1:0", "http://127.0.0.1:65536", "http://a%20b"):
        fails(stack, "queue", "list", env={"ENCLAVE_URL": url}, code=2, line=rule.format(repr(url)))


def test_an_api_url_with_a_password_is_refused_without_repeating_it(stack):
    userinfo = "error: ENCLAVE_URL must not hold a user name or password (got {}); the API's token goes in ENCLAVE_TOKEN."
    not_http = "error: ENCLAVE_URL must be an http:// or https:// URL such as http://127.0.0.1:7780 (got {})."
    cases = [
        ("http://user:s3cr3t@127.0.0.1:1", userinfo.format("'http://***@127.0.0.1:1'")),
        ("http://user:s3cr3t@with@127.0.0.1:1/x@y", userinfo.format("'http://***@127.0.0.1:1/x@y'")),
        ("ftp://user:s3cr3t@127.0.0.1", not_http.format("'ftp://***@127.0.0.1'")),
        ("user:s3cr3t@127.0.0.1", not_http.format("'user:***@127.0.0.1'")),
    ]
    for url, line in cases:
        fails(stack, "queue", "list", env={"ENCLAVE_URL": url}, code=2, line=line)


# -- what the server answers -------------------------------------------------------------------

def test_json_output_is_strict_json_whatever_the_server_answers(stack):
    """Python's json reads NaN and Infinity; no JSON parser has to (``jq`` does not). A server that
    answers them is not the API: exit 1, as for any answer that is not the API's JSON."""
    line = ("error: The server answered a number that JSON cannot carry (NaN or Infinity), not the Enclave API's "
            "JSON; is ENCLAVE_URL the API's own address?")
    with fake_server() as url:
        for body in (b'{"state": NaN, "message": Infinity}', b'[{"name": "emails", "depth": -Infinity}]'):
            FakeServer.answer = (200, "application/json", body)
            for args in (("queue", "get", "emails", "--json"), ("queue", "status", "emails", "--json"),
                         ("queue", "list", "--json"), ("queue", "export", "emails")):
                fails(stack, *args, env={"ENCLAVE_URL": url}, code=1, line=line)
        FakeServer.answer = (200, "application/json", json.dumps({"state": "Ready", "message": 1.5}).encode())
        shown = run(stack, "queue", "get", "emails", "--json", env={"ENCLAVE_URL": url})
    assert (shown.returncode, json.loads(shown.stdout)) == (0, {"state": "Ready", "message": 1.5})


def test_an_admin_token_file_that_is_not_text_is_no_token_not_a_crash(stack, tmp_path):
    """The home's admin-token file holding binary bytes was an "unexpected" UnicodeDecodeError."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "enclave.json").write_text(json.dumps({"pid": os.getpid(), "api_url": stack.api_url}))
    (home / "admin-token").write_bytes(b"\xff\xfe\x00binary")
    result = run(stack, "queue", "list", env={"ENCLAVE_HOME": str(home), "ENCLAVE_URL": "", "ENCLAVE_TOKEN": ""})
    assert result.returncode == 7, result.stderr
    assert result.stderr.strip() == (f"error: the token in {home / 'admin-token'} is not an API token: it holds a "
                                     "character that is not printable ASCII.")
