"""Bad input to the ``enclave`` CLI (issue 12): each case is one ``error: …`` line on stderr and
its exit code, never a traceback; binary bodies are sent as they are; Ctrl-C is exit 130 and a
closed stdout ends quietly."""

import base64
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
from contextlib import contextmanager

import pytest

from enclave_queue.broker.process import free_port
from tests.cli.test_cli import ENCLAVE, ok
from tests.helpers import make_queue

BACKOFF = ("error: Invalid value for '--retry-backoff-seconds': must be whole seconds separated by commas, "
           "such as 5,30,120 (got {}).")
UNEXPECTED = " (unexpected: ENCLAVE_TRACEBACK=1 shows the traceback)"


def run(stack, *args, env=None, input=None, **kwargs):
    """The CLI with ``args`` as bytes or text (bytes: what a shell passes for a non-UTF-8 word);
    stdout and stderr as text."""
    result = subprocess.run([ENCLAVE, *args], env={**stack.env, **(env or {})}, capture_output=True, timeout=60,
                            input=input, **kwargs)
    result.stdout, result.stderr = result.stdout.decode(), result.stderr.decode()
    assert "Traceback" not in result.stderr, result.stderr
    return result


def fails(stack, *args, code, line, **kwargs):
    result = run(stack, *args, **kwargs)
    assert (result.returncode, result.stderr, result.stdout) == (code, line + "\n", ""), args


def interruptible(**kwargs):
    """Popen options for a child that Ctrl-C reaches: a child of a background job inherits
    SIGINT ignored, and Python keeps it ignored."""
    return {"preexec_fn": lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kwargs}


# -- bodies -------------------------------------------------------------------------------------

def test_a_body_that_is_not_utf8_is_sent_as_its_bytes(stack, unique_name):
    make_queue(stack, unique_name)
    binary = bytes(range(256))
    assert run(stack, "queue", "send", unique_name, "-", input=binary).stdout == f"Sent message 1 to '{unique_name}'.\n"
    assert run(stack, "queue", "send", unique_name, "-", input=b"crlf\r\nkept\n").returncode == 0  # no newline translation
    assert run(stack, "queue", "send", unique_name.encode(), b"caf\xe9").returncode == 0  # a Latin-1 word from the shell
    with stack.admin() as admin:
        sent = admin.peek("default", unique_name)
    assert [(m["content_type"], m.get("body_base64"), m["body"]) for m in sent] == [
        ("application/octet-stream", base64.b64encode(binary).decode(), None),
        ("text/plain; charset=utf-8", None, "crlf\r\nkept\n"),
        ("application/octet-stream", base64.b64encode(b"caf\xe9").decode(), None),
    ]


# -- options the API cannot judge ---------------------------------------------------------------

def test_contradicting_options_are_usage_errors_and_change_nothing(stack, unique_name):
    make_queue(stack, f"{unique_name}-dlq")
    make_queue(stack, unique_name, max_receives=3, dead_letter_queue=f"{unique_name}-dlq",
               retry_backoff_seconds=[5, 30])
    for args, line in [
        (("--dead-letter-queue", f"{unique_name}-dlq", "--no-dead-letter-queue"),
         "--dead-letter-queue and --no-dead-letter-queue"),
        (("--no-dead-letter-queue", "--dead-letter-queue", ""), "--dead-letter-queue and --no-dead-letter-queue"),
        (("--retry-backoff-seconds", "5", "--no-retry-backoff"), "--retry-backoff-seconds and --no-retry-backoff"),
    ]:
        fails(stack, "queue", "update", unique_name, *args, code=2,
              line=f"error: {line} cannot be used together; give one of them.")
    fails(stack, "queue", "credentials", unique_name, "--json", "--env", code=2,
          line="error: --json and --env cannot be used together; give one of them.")
    with stack.admin() as admin:
        queue = admin.get_queue("default", unique_name)
    assert (queue["dead_letter_queue"], queue["retry_backoff_seconds"]) == (f"{unique_name}-dlq", [5, 30])


@pytest.mark.parametrize("text", ["5,,30", "5,x", "-1", "5;30", " ", "", "5,", "1.5", "5\n", "٣"])
def test_a_retry_backoff_that_is_no_list_of_whole_seconds_is_a_usage_error(stack, unique_name, text):
    fails(stack, "queue", "create", unique_name, "--retry-backoff-seconds", text, code=2,
          line=BACKOFF.format(repr(text)))


def test_values_json_cannot_carry_are_usage_errors(stack, unique_name):
    cases = [
        (("queue", "send", unique_name, "x", "--delay", "nan"), "error: Invalid value for '--delay': must be a decimal number such as 2.5 (got 'nan')."),
        (("queue", "receive", unique_name, "--wait", "inf"), "error: Invalid value for '--wait': must be a decimal number such as 2.5 (got 'inf')."),
        (("queue", "redrive", unique_name, "--rate", "1e400"), "error: Invalid value for '--rate': must be a decimal number such as 2.5 (got '1e400')."),
        (("queue", "receive", unique_name, "--wait", str(2**64)),  # the request's timeout is wait + 10 s
         "error: wait must be a number of seconds from 0 to 20 (got 1.8446744073709552e+19)."),
        ((b"queue", b"send", unique_name.encode(), b"x", b"--dedupe-key", b"k\xff"),
         "error: Invalid value for '--dedupe-key': must be UTF-8 text (it holds bytes that are not)."),
        ((b"queue", b"create", unique_name.encode(), b"--dead-letter-queue", b"\xff"),
         "error: Invalid value for '--dead-letter-queue': must be UTF-8 text (it holds bytes that are not)."),
        ((b"queue", b"create", b"q\xff"), "error: Invalid value for 'name': must be UTF-8 text (it holds bytes that are not)."),
    ]
    for args, line in cases:
        fails(stack, *args, code=2, line=line)


@pytest.mark.parametrize("text", ["1_0", " 5", "+5", "\u0665", "0x10", "5.0", "1e1"])
def test_a_number_is_written_in_plain_digits(stack, unique_name, text):
    """int() and Pydantic take '1_0' as 10, ' 5' and '+5' as 5, an Arabic-Indic five as 5: the
    command line takes what the API takes, plain digits, and names the option otherwise."""
    fails(stack, "queue", "create", unique_name, "--visibility-timeout-seconds", text, code=2,
          line=f"error: Invalid value for '--visibility-timeout-seconds': must be a whole number such as 30 (got {text!r}).")
    fails(stack, "queue", "receive", unique_name, "--max", text, code=2,
          line=f"error: Invalid value for '--max': must be a whole number such as 30 (got {text!r}).")
    if text != "5.0":  # a decimal may have a point
        fails(stack, "queue", "receive", unique_name, "--wait", text, code=2,
              line=f"error: Invalid value for '--wait': must be a decimal number such as 2.5 (got {text!r}).")


def test_files_and_directories_that_cannot_be_used_are_usage_errors(stack, unique_name, tmp_path):
    make_queue(stack, unique_name)
    afile = tmp_path / "afile"
    afile.write_text("x")
    fails(stack, "queue", "export", unique_name, "--output", str(tmp_path), code=2,
          line=f"error: Invalid value for '--output': cannot write '{tmp_path}': Is a directory.")
    fails(stack, "queue", "export", unique_name, "--output", str(afile / "x.jsonl"), code=2,
          line=f"error: Invalid value for '--output': cannot write '{afile}/x.jsonl': Not a directory.")
    # enclave up refuses before it starts anything
    fails(stack, "up", "--data-dir", str(afile), code=2, line=f"error: --data-dir '{afile}' is not a directory.")
    fails(stack, "up", "--data-dir", str(afile / "sub"), code=2,
          line=f"error: --data-dir '{afile}/sub' cannot be created: Not a directory.")
    fails(stack, "up", "--data-dir", "", code=2, line="error: --data-dir must be a directory's path (got '').")
    fails(stack, "up", "--data-dir", str(tmp_path / "home"), env={"ENCLAVE_LOG_LEVEL": "loud"}, code=2,
          line="error: ENCLAVE_LOG_LEVEL must be one of debug, info, warning, error, critical (got 'loud').")
    route_rule = ("must be a comma-separated list of host:port (or nats-route://host:port) of the other nodes' "
                  "cluster ports, each host a DNS name, an IPv4 address or a bracketed IPv6 address")
    fails(stack, "up", "--data-dir", str(tmp_path / "home"), "--cluster-port", "6222", "--routes", 'node b}:6222',
          code=2, line=f"error: --routes {route_rule} (got 'node b}}:6222').")
    fails(stack, "up", "--data-dir", str(tmp_path / "home"), env={"ENCLAVE_ROUTES": 'a"b:6222'}, code=2,
          line=f"error: ENCLAVE_ROUTES {route_rule} (got 'a\"b:6222').")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_settings_enclave_up_cannot_use_are_refused_before_anything_starts(stack, tmp_path):
    """Each is exit 2 naming the setting, and nothing is made: not the data dir, no broker (they
    used to surface from the broker, the HTTP server or the console, or as int('1_0') == 10)."""
    home = tmp_path / "home"
    port_rule = "error: ENCLAVE_API_PORT must be an integer from 0 to 65535 (got {})."
    host_rule = "error: ENCLAVE_API_HOST must be an IPv4 address or a host name such as 127.0.0.1 (got {})."
    size_rule = ("error: ENCLAVE_MAX_FILE_STORE must be a size in bytes, optionally with a unit (K, M, G, T: powers "
                 "of 1024), such as 20G, at most 1024T (got {}).")
    levels = "error: ENCLAVE_LOG_LEVEL must be one of debug, info, warning, error, critical (got {})."
    cases = [
        ({"ENCLAVE_API_PORT": "1_0"}, port_rule.format("'1_0'")),
        ({"ENCLAVE_API_PORT": " 5"}, port_rule.format("' 5'")),
        ({"ENCLAVE_API_PORT": "\u0663"}, port_rule.format("'\u0663'")),
        ({"ENCLAVE_SWEEP_SECONDS": "1_0"}, "error: ENCLAVE_SWEEP_SECONDS must be a number from 0.2 to 86400.0 (got '1_0')."),
        ({"ENCLAVE_SWEEP_SECONDS": "nan"}, "error: ENCLAVE_SWEEP_SECONDS must be a number from 0.2 to 86400.0 (got 'nan')."),
        ({"ENCLAVE_LOG_LEVEL": "warn"}, levels.format("'warn'")),
        ({"ENCLAVE_LOG_LEVEL": "notset"}, levels.format("'notset'")),
        ({"ENCLAVE_MAX_FILE_STORE": "\u00b2G"}, size_rule.format("'\u00b2G'")),
        ({"ENCLAVE_MAX_FILE_STORE": "99999999999999999999T"}, size_rule.format("'99999999999999999999T'")),
        ({"ENCLAVE_TRUSTED_PROXIES": "garbage"},
         "error: ENCLAVE_TRUSTED_PROXIES must be a comma-separated list of IP addresses or networks (got 'garbage')."),
        ({"ENCLAVE_MASTER_KEY": "short"},
         "error: ENCLAVE_MASTER_KEY must be 32 bytes, base64-encoded (such as the output of "
         "'head -c 32 /dev/urandom | base64')."),
        ({"ENCLAVE_API_PORT": "7781", "ENCLAVE_BROKER_PORT": "7781"},
         "error: ENCLAVE_API_PORT and ENCLAVE_BROKER_PORT must differ (both 7781)."),
        ({"ENCLAVE_CLUSTER_PORT": "6222"},
         "error: ENCLAVE_CLUSTER_PORT (--cluster-port) needs ENCLAVE_ROUTES (--routes): the other nodes' cluster "
         "ports; a cluster node cannot start alone."),
        ({"ENCLAVE_API_HOST": "999.1.1.1"}, host_rule.format("'999.1.1.1'")),
        ({"ENCLAVE_API_HOST": " 127.0.0.1"}, host_rule.format("' 127.0.0.1'")),
        ({"ENCLAVE_API_HOST": "::1"}, host_rule.format("'::1'")),
    ]
    for env, line in cases:
        fails(stack, "up", "--data-dir", str(home), env=env, code=2, line=line)
    assert not home.exists()


# -- where the API is ---------------------------------------------------------------------------

def test_an_api_url_or_token_that_cannot_be_used_is_refused_before_any_request(stack):
    rule = "error: ENCLAVE_URL must be an http:// or https:// URL such as http://127.0.0.1:7780 (got {})."
    for url in ("notaurl", "ftp://example.invalid", "http://[::1", "http://a\x01b"):
        fails(stack, "queue", "list", env={"ENCLAVE_URL": url}, code=2, line=rule.format(repr(url)))
    for token in ("enq_secret\nX-Other: 1", "enq_sécret"):
        result = run(stack, "queue", "list", env={"ENCLAVE_TOKEN": token})
        assert (result.returncode, result.stderr) == (
            7, "error: ENCLAVE_TOKEN is not an API token: it holds a character that is not printable ASCII.\n")


class FakeServer(http.server.BaseHTTPRequestHandler):
    """Answers every request with ``answer``: (status, content type, body)."""

    answer = (200, "text/html", b"")

    def reply(self):
        status, content_type, body = self.answer
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = reply

    def log_message(self, *args):
        pass


@contextmanager
def fake_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_server_that_is_not_the_api_is_said_in_one_line(stack):
    with fake_server() as url:
        cases = [
            ((200, "text/html; charset=utf-8", b"<html><body>Welcome</body></html>"), ("queue", "list"), 1,
             f"The server at {url} answered 200 OK with text/html, not the Enclave API's JSON; "
             "is ENCLAVE_URL the API's own address?"),
            ((500, "text/plain", b"Internal Server Error\nmore"), ("queue", "get", "emails"), 1,
             f"The server at {url} answered 500 Internal Server Error with text/plain ('Internal Server Error'), "
             "not the Enclave API's JSON; its log may say why."),
            ((502, "text/html", b"<html>Bad Gateway</html>"), ("queue", "list"), 3,
             f"Cannot reach the Enclave API at {url}: the server there answered 502 Bad Gateway with text/html."),
            ((200, "text/html", b"<html></html>"), ("queue", "export", "emails"), 1,
             f"The server at {url} answered 200 OK with text/html, not the Enclave API's JSON; "
             "is ENCLAVE_URL the API's own address?"),
            ((200, "application/json", b"<html>"), ("queue", "list"), 1,
             f"The server at {url} answered JSON that does not parse (Expecting value: line 1 column 1 (char 0)); "
             "is ENCLAVE_URL the API's own address?"),
            # JSON of another shape: nothing expected it, so it is the catch-all's line
            ((200, "application/json", b"{}"), ("queue", "status", "emails"), 1, f"KeyError: 'state'{UNEXPECTED}"),
        ]
        for answer, args, code, line in cases:
            FakeServer.answer = answer
            fails(stack, *args, env={"ENCLAVE_URL": url}, code=code, line=f"error: {line}")

        shown = subprocess.run([ENCLAVE, "queue", "status", "emails"], capture_output=True, text=True, timeout=60,
                               env={**stack.env, "ENCLAVE_URL": url, "ENCLAVE_TRACEBACK": "1"})
        assert shown.returncode == 1 and "Traceback" in shown.stderr
        assert shown.stderr.endswith("\nerror: KeyError: 'state'\n")


def test_env_credentials_from_a_server_that_is_not_enclave_cannot_run_a_command(stack, tmp_path):
    """`eval "$(enclave queue credentials NAME --env)"` is what the docs suggest: a key the shell
    would read as a command is not printed (values were quoted, keys were not)."""
    pwned = tmp_path / "pwned"
    hostile = {"username": "u", "x=1;touch " + str(pwned) + ";y": "v", "$(touch " + str(pwned) + ")": "v",
               "broker_urls": ["nats://127.0.0.1:1", "nats://127.0.0.1:2"], "password_valid_until": None}
    with fake_server() as url:
        FakeServer.answer = (200, "application/json", json.dumps(hostile).encode())
        printed = run(stack, "queue", "credentials", "emails", "--env", env={"ENCLAVE_URL": url})
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines() == ["export ENCLAVE_QUEUE_USERNAME=u",
                                           "export ENCLAVE_QUEUE_BROKER_URLS=nats://127.0.0.1:1,nats://127.0.0.1:2"]
    subprocess.run(["bash", "-c", f'eval "{printed.stdout}"'], check=True, timeout=10)
    assert not pwned.exists()


# -- the process --------------------------------------------------------------------------------

def test_ctrl_c_is_exit_130_without_a_traceback(stack):
    with socket.socket() as listener:  # an API that takes the request and never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(30)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        proc = subprocess.Popen([ENCLAVE, "queue", "receive", "emails", "--wait", "5"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env={**stack.env, "ENCLAVE_URL": url}, **interruptible())
        connection, _ = listener.accept()
        with connection:
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
    assert (proc.returncode, out, err) == (130, b"", b"")

    # at a confirmation prompt: the prompt's line is ended
    proc = subprocess.Popen([ENCLAVE, "queue", "delete", "emails"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=stack.env, **interruptible())
    asked = b""
    while not asked.endswith(b"[y/N]:") and len(asked) < 1000:
        asked += os.read(proc.stderr.fileno(), 100) or b"(end)"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert (proc.returncode, asked + err) == (130, b"Delete queue 'emails' in project 'default' and all its messages? "
                                                   b"[y/N]:\n")


def test_a_closed_stdout_ends_quietly(stack, unique_name):
    make_queue(stack, unique_name)
    ok(stack, "queue", "send", unique_name, "hello")
    for args in (("queue", "list"), ("queue", "list", "--json"), ("queue", "export", unique_name)):
        proc = subprocess.Popen([ENCLAVE, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=stack.env)
        proc.stdout.close()  # `| head -0`: closed before the command writes
        err = proc.stderr.read()
        proc.stderr.close()
        assert (proc.wait(timeout=30), err) == (1, b""), args


def test_no_command_prints_the_help_and_flags_show_no_type(stack):
    result = run(stack)
    assert result.returncode == 2 and "Usage: enclave" in result.stdout and result.stderr == ""
    help_text = ok(stack, "queue", "update", "--help").stdout
    assert "<bool>" not in help_text and "--no-dead-letter-queue" in help_text


def test_an_unreachable_api_is_exit_3(stack):
    url = f"http://127.0.0.1:{free_port()}"
    fails(stack, "queue", "list", env={"ENCLAVE_URL": url}, code=3,
          line=f"error: Cannot reach the Enclave API at {url} (ConnectError); is 'enclave up' running?")
