"""What the ``enclave`` CLI shows a queue's user, run as a user runs it against a real stack: the
counts of ``queue list`` (dead letters per source queue), ``status --watch``, ``receive --delete``,
delete by sequence, times (relative, and RFC 3339 with ``Z``), an 80-column terminal, ``--version``,
usage hints and shell completion."""

import fcntl
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
from importlib.metadata import version
from pathlib import Path

from enclave_queue.client import connect
from enclave_queue.errors import NotFound
from tests.helpers import make_queue

ENCLAVE = str(Path(sys.executable).parent / "enclave")
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"  #: the one way the CLI writes a time
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run(stack, *args, env=None):
    result = subprocess.run([ENCLAVE, *args], env={**stack.env, **(env or {})}, capture_output=True, text=True,
                            timeout=60)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def ok(stack, *args, **kwargs):
    result = run(stack, *args, **kwargs)
    assert result.returncode == 0, result.stderr
    return result


def on_terminal(stack, *args, columns=80):
    """The command's stdout as a terminal of ``columns`` columns shows it (a pseudo-terminal)."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in stack.env.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([ENCLAVE, *args], stdout=follower, stderr=subprocess.PIPE, env=env)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    proc.stderr.close()
    return ESCAPES.sub("", shown.decode()).replace("\r\n", "\n")


async def test_list_counts_each_queue_and_its_own_dead_letters_on_a_shared_dead_letter_queue(stack, unique_name):
    dlq, a, b = f"{unique_name}-dlq", f"{unique_name}-a", f"{unique_name}-b"
    make_queue(stack, dlq)
    creds_a = make_queue(stack, a, dead_letter_queue=dlq, max_receives=5, visibility_timeout_seconds=60)
    creds_b = make_queue(stack, b, dead_letter_queue=dlq)
    async with connect(creds_a) as queue:
        await queue.put_many(["bad 1", "bad 2", "waits"])
        for _ in range(2):
            message = await queue.get(timeout_s=2)
            assert await message.reject(error="cannot parse") == "moved"
        await queue.put("in flight")
    async with connect(creds_b) as queue:
        await queue.put("b waits")
        message = await queue.get(timeout_s=2)
        assert await message.reject(error="b fails") == "moved"
    async with connect(creds_a) as queue:
        assert (await queue.get(timeout_s=2)).body == "waits"  # taken and held: in flight

    rows = {line.split()[0]: line.split() for line in ok(stack, "queue", "list").stdout.splitlines()[1:]}
    header = ok(stack, "queue", "list").stdout.splitlines()[0].split()
    assert header == ["NAME", "STATE", "WAITING", "IN", "FLIGHT", "DELAYED", "DEAD", "OLDEST", "DLQ"]
    # name, state, waiting, in flight, delayed, dead (its own letters only), oldest, DLQ
    assert rows[a][:6] == [a, "Ready", "1", "1", "0", "2"] and rows[a][-1] == dlq
    assert rows[b][:6] == [b, "Ready", "0", "0", "0", "1"] and rows[b][-1] == dlq
    assert rows[dlq][:6] == [dlq, "Ready", "3", "0", "0", "–"]  # a dead-letter queue's letters wait on it
    with stack.admin() as admin:
        assert admin.stats("default", a)["dead"] == 2
        counts = admin.dead_letter_counts("default", dlq)
    assert counts == {"total": 3, "by_source": {a: 2, b: 1}, "sources": sorted([a, b])}
    assert json.loads(ok(stack, "queue", "list", "--json").stdout)[0]["name"] == a  # --json: the settings


def test_receive_delete_takes_messages_off_for_good_and_delete_message_takes_a_sequence(stack, unique_name):
    make_queue(stack, unique_name, visibility_timeout_seconds=30)
    for body in ("one", "two", "three"):
        ok(stack, "queue", "send", unique_name, body)
    taken = ok(stack, "queue", "receive", unique_name, "--max", "2", "--delete")
    assert re.fullmatch(rf"#1 receive 1, sent \d+ s ago \({STAMP}\), deleted\n  body:    one\n"
                        rf"#2 receive 1, sent \d+ s ago \({STAMP}\), deleted\n  body:    two\n", taken.stdout), taken.stdout
    assert taken.stderr == "Deleted 2 message(s).\n"
    with stack.admin() as admin:
        stats = admin.stats("default", unique_name)
        assert (stats["waiting"], stats["in_flight"], stats["removed"]) == (1, 0, 2)

    leased = ok(stack, "queue", "receive", unique_name)  # not deleted: its receipt, and how long it is hidden
    assert re.match(rf"#3 receive 1, sent \d+ s ago \({STAMP}\), hidden for (29|30) s\n", leased.stdout), leased.stdout
    assert "  receipt: " in leased.stdout
    deleted = ok(stack, "queue", "delete-message", unique_name, "3")  # in flight: deleted all the same
    assert deleted.stderr == "Message 3 deleted.\n"
    gone = run(stack, "queue", "delete-message", unique_name, "3")
    assert (gone.returncode, gone.stderr) == (
        4, f"error: Message 3 is not on queue '{unique_name}' in project 'default' (deleted already, or never "
           "stored there).\n")
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["removed"] == 3

    delayed = ok(stack, "queue", "send", unique_name, "later", "--delay", "3600")
    assert re.fullmatch(rf"Sent message 4 to '{unique_name}', delayed until {STAMP} \(in (59 min|1 h)\)\.\n",
                        delayed.stdout), delayed.stdout
    ok(stack, "queue", "delete-message", unique_name, "4")  # a delayed one too, before it is due
    with stack.admin() as admin:
        assert admin.stats("default", unique_name)["delayed"] == 0


async def test_times_are_relative_or_rfc3339_with_z_and_tables_fit_80_columns(stack):
    project, name, dlq = "cli-columns", "mails", "mails-dlq"  # names as short as people give them
    make_queue(stack, dlq, project)
    creds = make_queue(stack, name, project, dead_letter_queue=dlq, max_receives=2)
    try:
        async with connect(creds) as queue:
            await queue.put("x" * 300)
            message = await queue.get(timeout_s=2)
            await message.reject(error="a long last error " * 10)
            await queue.put("waiting")

        status = ok(stack, "queue", "status", name, "-p", project).stdout
        assert re.search(r"^Ready\s+True\s+Reconciled\s.*\s\d+ s ago\s*$", status, re.M), status
        letters = ok(stack, "queue", "dead-letters", dlq, "-p", project).stdout  # piped: nothing cut but the body
        assert re.search(rf"^\s*1\s+{name}\s+1\s+(a long last error ){{10}}\s+\d+ s ago\s+x{{60}}\s*$", letters,
                         re.M), letters

        for args, whole in ((("queue", "list"), [dlq, name, "Ready"]),
                            (("queue", "dead-letters", dlq), [name, "ago"]),
                            (("queue", "peek", name), ["waiting", "ago"]), (("queue", "status", name), ["ago"])):
            shown = on_terminal(stack, *args, "-p", project)
            lines = shown.splitlines()
            assert len(lines) > 1 and all(len(line.rstrip()) <= 80 for line in lines), shown
            for word in whole:  # names and times are never cut (bodies and errors are, with an ellipsis)
                assert re.search(rf"(^|\s){re.escape(word)}(\s|$)", shown), (word, shown)
        assert "…" in on_terminal(stack, "queue", "dead-letters", dlq, "-p", project)

        # names too long to fit beside each other are folded onto another line, never cut
        long_name = "a-queue-name-of-forty-characters-at-most"
        make_queue(stack, long_name, project, dead_letter_queue=dlq)
        shown = on_terminal(stack, "queue", "list", "-p", project)
        assert all(len(line.rstrip()) <= 80 for line in shown.splitlines()), shown
        assert long_name in "".join(line.split()[0] for line in shown.splitlines() if line[:1] not in " N")
    finally:
        with stack.admin() as admin:
            for queue_name in ("a-queue-name-of-forty-characters-at-most", name, dlq):
                try:
                    admin.delete_queue(project, queue_name)
                    admin.wait_deleted(project, queue_name, timeout=20)
                except NotFound:
                    pass


def test_status_watch_shows_the_counts_live_and_ctrl_c_stops_it_cleanly(stack, unique_name):
    make_queue(stack, unique_name)
    ok(stack, "queue", "send", unique_name, "hello")
    proc = subprocess.Popen([ENCLAVE, "queue", "status", unique_name, "--watch", "--interval", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=stack.env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = b""
    while first.count(b"Ctrl-C stops.") < 2:  # two views: the second has rates
        chunk = proc.stdout.read1(4096)
        assert chunk, proc.stderr.read()
        first += chunk
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    assert (proc.returncode, err) == (0, b"")
    views = (first + rest).decode().split("\n\n")
    head, counts, values, *_ = views[1].splitlines()
    assert head.split()[:2] == [unique_name, "Ready"]
    assert counts.split() == ["WAITING", "IN", "FLIGHT", "DELAYED", "DEAD", "OLDEST", "SENT/S", "RECEIVED/S",
                              "DELETED/S"]
    assert values.split()[:4] == ["1", "0", "0", "–"] and values.split()[-3:] == ["0.0", "0.0", "0.0"]


def test_version_usage_hints_flags_and_shell_completion(stack):
    assert ok(stack, "--version").stdout == f"enclave {version('enclave-queue')}\n"
    missing = run(stack, "queue", "create")
    assert (missing.returncode, missing.stdout, missing.stderr) == (2, "", (
        "error: Missing argument 'name'.\n"
        "Usage: enclave queue create [OPTIONS] {name}\n"
        "Try 'enclave queue create --help' for help.\n"))
    unknown = run(stack, "queue", "recieve", "emails")
    error, *hint = unknown.stderr.splitlines()
    assert unknown.returncode == 2 and error.startswith("error: No such command 'recieve'. Did you mean 'receive'")
    assert hint == ["Usage: enclave queue [OPTIONS] COMMAND [ARGS]...", "Try 'enclave queue --help' for help."]
    bad_value = run(stack, "queue", "peek", "emails", "--limit", "x")  # a bad value names its option: no usage
    assert bad_value.returncode == 2 and len(bad_value.stderr.splitlines()) == 1
    for command in (("queue", "create"), ("queue", "receive"), ("queue", "status"), ("queue", "delete")):
        assert "<bool>" not in ok(stack, *command, "--help").stdout, command
    assert "complete -o default -F _enclave_completion enclave" in run(stack, env={"_ENCLAVE_COMPLETE": "source_bash"}).stdout
    completed = run(stack, env={"_ENCLAVE_COMPLETE": "complete_bash", "COMP_WORDS": "enclave queue rec",
                                "COMP_CWORD": "2"})
    assert completed.stdout.split() == ["receive"]
