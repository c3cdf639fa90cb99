"""sqs: the SQS endpoint through boto3, against moto's SQS server (the emulator a Python user would
otherwise run, PyPI ``moto[server]``) and against the same work through Enclave's own SDK.

The work, in messages of 256 bytes: SendMessageBatch of 10 until N are sent, then ReceiveMessage
(MaxNumberOfMessages 10, WaitTimeSeconds 1) + DeleteMessageBatch of what came until all N are
deleted. Timed separately (send; receive + delete), msgs/s, three ways on one machine in one run:

- boto3 → Enclave's SQS endpoint (``<API>/sqs``, SigV4 with an Enclave access key);
- boto3 → moto's server (``moto_server`` on a free 127.0.0.1 port, started and stopped here by PID;
  in memory, no fsync);
- the SDK → the same Enclave stack (``send_batch`` of 10, ``receive(batch=10)`` + ``delete_many``).

Enclave runs a default stack (``ENCLAVE_SYNC=always``: an fsync before every PubAck), so the SQS
rows pay for durability the emulator does not give. N is 500: moto's ReceiveMessage checks every
message's retention against queue attributes it computes over every message, so its cost grows
with the square of the queue's depth (2,000 messages took minutes a run). Rounds rotate the
order; the median counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from enclave_queue.client import connect

from . import BODY, Report, enclave_stack, main, median, new_queue, say

NAME = "sqs"
BATCH = 10
CONFIG = Config(connect_timeout=5, read_timeout=30, retries={"total_max_attempts": 1},
                max_pool_connections=4)
TEXT = BODY.decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's server on a free 127.0.0.1 port; its URL. Stopped by PID however the block ends."""
    binary = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or shutil.which("moto_server")
    if binary is None:
        raise RuntimeError("moto_server is not installed (pip install 'moto[server]')")
    port = free_port()
    proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)


def boto(endpoint: str, key: str, secret: str) -> Any:
    return boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                        aws_secret_access_key=secret, config=CONFIG)


def boto_send(sqs: Any, url: str, count: int) -> float:
    started = time.perf_counter()
    for start in range(0, count, BATCH):
        entries = [{"Id": str(i), "MessageBody": TEXT} for i in range(min(BATCH, count - start))]
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {answer['Failed'][:1]}")
    return time.perf_counter() - started


def boto_drain(sqs: Any, url: str, count: int) -> float:
    done = 0
    started = time.perf_counter()
    while done < count:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=BATCH, WaitTimeSeconds=1).get("Messages", [])
        if not messages:
            raise RuntimeError(f"ReceiveMessage: queue empty after {done} of {count}")
        answer = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
        if answer.get("Failed"):
            raise RuntimeError(f"DeleteMessageBatch failed: {answer['Failed'][:1]}")
        done += len(messages)
    return time.perf_counter() - started


async def sdk_round(creds: dict[str, str], count: int) -> tuple[float, float]:
    async with connect(creds) as queue:
        started = time.perf_counter()
        for start in range(0, count, BATCH):
            n = min(BATCH, count - start)
            if await queue.send_batch([BODY] * n) != n:
                raise RuntimeError("send_batch stored fewer than it was given")
        sent = time.perf_counter() - started
        done = 0
        started = time.perf_counter()
        while done < count:
            messages = await queue.receive(batch=BATCH, wait=1)
            if not messages:
                raise RuntimeError(f"receive: queue empty after {done} of {count}")
            await queue.delete_many(messages)
            done += len(messages)
        return sent, time.perf_counter() - started


def run(quick: bool) -> list[Report]:
    report = Report(NAME, quick)
    count, rounds = (200, 1) if quick else (500, 3)
    report.info.update({"messages_per_run": count, "rounds": rounds, "batch": BATCH, "body_bytes": len(BODY)})
    rates: dict[str, list[float]] = {f"{who}_{step}": [] for who in ("enclave", "moto", "sdk") for step in ("send", "drain")}
    say(f"sqs: {count} messages a run, {rounds} round(s): boto3 → Enclave, boto3 → moto, SDK → Enclave")
    with enclave_stack() as stack, moto_server() as moto:
        with stack.admin() as admin:
            key = admin.request("POST", "/v1/access-keys", json={"name": "bench"})
        enclave = boto(stack.api_url + "/sqs", key["access_key_id"], key["secret_access_key"])
        emulator = boto(moto, "testing", "testing")
        enclave_url = enclave.create_queue(QueueName="bench-sqs")["QueueUrl"]
        moto_url = emulator.create_queue(QueueName="bench-sqs")["QueueUrl"]
        creds = new_queue(stack, "bench-sdk")
        for sqs, url in ((enclave, enclave_url), (emulator, moto_url)):  # warm-up
            boto_send(sqs, url, 100)
            boto_drain(sqs, url, 100)
        asyncio.run(sdk_round(creds, 100))
        for index in range(rounds):
            order = ["enclave", "moto", "sdk"]
            order = order[index % 3:] + order[:index % 3]
            for who in order:
                if who == "sdk":
                    sent, drained = asyncio.run(sdk_round(creds, count))
                else:
                    sqs, url = (enclave, enclave_url) if who == "enclave" else (emulator, moto_url)
                    sent, drained = boto_send(sqs, url, count), boto_drain(sqs, url, count)
                rates[f"{who}_send"].append(count / sent)
                rates[f"{who}_drain"].append(count / drained)
    report.info["msgs_per_s"] = {k: [round(v) for v in vs] for k, vs in rates.items()}
    best = {k: median(vs) for k, vs in rates.items()}
    for step, what in (("send", "SendMessageBatch(10)"), ("drain", "ReceiveMessage(10) + DeleteMessageBatch")):
        report.add(f"boto3 {what}: Enclave vs moto_server", best[f"enclave_{step}"], "msgs/s",
                   baseline=best[f"moto_{step}"], baseline_case="the same boto3 calls against moto's server (in memory)")
        report.add(f"boto3 {what}: Enclave SQS vs the SDK", best[f"enclave_{step}"], "msgs/s",
                   baseline=best[f"sdk_{step}"], baseline_case="send_batch(10) / receive(10) + delete_many, same stack")
    return report.done()


if __name__ == "__main__":
    main(run, "bench.sqs")
