"""``enclave queue redrive`` follows its task through a pause of the control process: the task
runs on, and the CLI, which said the server was down and the redrive failed, waits and reports
how it went."""

import os
import signal
import subprocess
import time

from enclave_queue.client import connect_sync
from tests.cli.test_cli import ENCLAVE
from tests.helpers import make_queue


def test_a_redrive_followed_through_a_paused_control_process_reports_its_outcome(enclave_stack_factory):
    stack = enclave_stack_factory()
    letters = make_queue(stack, "letters")
    make_queue(stack, "dest")
    with connect_sync(letters) as queue:
        assert queue.send_batch([{"n": n} for n in range(60)]) == 60
    cli = subprocess.Popen([ENCLAVE, "queue", "redrive", "letters", "--to", "dest", "--rate", "20"],
                           env=stack.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        # paused past uvicorn's keep-alive timeout: woken, it drops the poll's connection unanswered
        os.kill(stack.pid, signal.SIGSTOP)
        time.sleep(7.0)
        os.kill(stack.pid, signal.SIGCONT)
        out, errors = cli.communicate(timeout=60)
    finally:
        os.kill(stack.pid, signal.SIGCONT)
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert cli.returncode == 0, errors
    assert "Moved 60 dead letter(s) from 'letters' to 'dest'." in errors
    with stack.admin() as admin:
        assert admin.stats("default", "dest")["waiting"] == 60
