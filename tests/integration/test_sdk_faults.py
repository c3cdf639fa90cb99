"""The SDK across a broker killed with SIGKILL and restarted by its supervisor (within ~0.1 s):

- a restarted broker forgets pull requests, so ``get``/``receive``/``iterate`` send theirs again
  when the connection comes back, and still return by their deadline when nothing comes;
- a put whose PubAck was lost with the connection is sent again with the same ``Nats-Msg-Id``,
  so it returns the one id the message was stored under, or raises ``MaybeStored`` (whose key
  puts it again once); ``put_many`` sends its whole batch again the same way;
- ``send_batch`` (no keys) says how many may have been stored, without waiting out its timeout;
- acks, nacks and extends are sent again after the reconnect; an ack of a delivery the restarted
  broker forgot raises Conflict (and only that message comes back), one whose lease is ending too;
- the broker facts the batch retry relies on: a repeated Nats-Msg-Id refuses a whole atomic batch
  (10201), and a publish with a Nats-Expected-Last-Msg-Id no message has reads a stored id's
  sequence and stores nothing (nats-server 2.15.1).
"""

import asyncio
import itertools
import json
import os
import signal
import time
from collections import Counter

import nats
import pytest
from nats.js import api

from enclave_queue.client import connect
from enclave_queue.errors import Conflict, MaybeStored
from tests.helpers import eventually, make_queue, pulls_waiting

pytestmark = pytest.mark.slow


async def kill_broker(stack) -> None:
    """SIGKILL the stack's broker by its PID and wait until the supervisor has started another."""
    old = stack.broker_pid
    os.kill(old, signal.SIGKILL)
    await eventually(lambda: stack.refresh().get("broker_pid") not in (None, old), timeout=15, interval=0.02)


async def drain(queue) -> list:
    """Every message on the queue, taken and deleted."""
    taken = []
    while batch := await queue.receive(batch=1000, wait=0.5):
        taken += batch
        await queue.delete_many(batch)
    return taken


async def test_a_get_waiting_across_a_broker_kill_takes_a_message_put_after_it_and_keeps_its_deadline(
        enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "long-polls")
    async with connect(creds) as worker, connect(creds) as producer:
        waiting = asyncio.create_task(worker.get(timeout_s=10))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # its long poll is with the broker now
        await kill_broker(stack)
        put_at = time.monotonic()
        sent = await producer.put("after the restart")
        message = await asyncio.wait_for(waiting, 11)
        assert message is not None and (message.id, message.body) == (sent, "after the restart")
        assert time.monotonic() - put_at < 3  # the pull was sent again on reconnect, not after its 5 s piece
        await message.ack()

        iterating = worker.iterate()  # the same for iterate's long polls
        first = asyncio.ensure_future(iterating.__anext__())
        await eventually(lambda: pulls_waiting(creds), timeout=10)
        await kill_broker(stack)
        sent = await producer.put("to the iteration")
        message = await asyncio.wait_for(first, 5)
        assert (message.id, message.body) == (sent, "to the iteration")
        await message.ack()
        await iterating.aclose()

        started = time.monotonic()  # nothing comes: back by the deadline, across a kill too
        waiting = asyncio.create_task(worker.get(timeout_s=3))
        await eventually(lambda: pulls_waiting(creds), timeout=2)
        await kill_broker(stack)
        assert await waiting is None
        assert 3 <= time.monotonic() - started < 3.5
        assert await worker.receive(batch=10, wait=1) == []


async def test_puts_across_a_broker_kill_each_return_their_one_stored_id_or_say_it_may_be_stored(
        enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-puts")
    async with connect(creds) as queue:
        await queue.put("warm-up")  # settings read, connection up: the puts below publish at once
        outcomes: dict[str, object] = {}  #: body: the id put returned, or its error
        batches: dict[tuple[str, ...], object] = {}  #: bodies: the ids put_many returned, or its error
        slowest = 0.0
        stop = asyncio.Event()

        async def putting(worker: int) -> None:  # 32 of these: 32 puts in flight at any moment
            nonlocal slowest
            for n in itertools.count():
                if stop.is_set():
                    return
                body, started = f"put-{worker}-{n}", time.monotonic()
                try:
                    outcomes[body] = await queue.put(body)
                except MaybeStored as exc:
                    outcomes[body] = exc
                slowest = max(slowest, time.monotonic() - started)

        async def putting_many(worker: int) -> None:
            for n in itertools.count():
                if stop.is_set():
                    return
                bodies = tuple(f"batch-{worker}-{n}-{i}" for i in range(5))
                try:
                    batches[bodies] = await queue.put_many(bodies)
                except MaybeStored as exc:
                    batches[bodies] = exc

        workers = [asyncio.create_task(putting(w)) for w in range(32)]
        workers += [asyncio.create_task(putting_many(w)) for w in range(4)]
        await eventually(lambda: len(outcomes) > 200)
        await kill_broker(stack)
        mark = len(outcomes)
        await eventually(lambda: len(outcomes) > mark + 200)
        stop.set()
        await asyncio.gather(*workers)

        maybe = [o for o in [*outcomes.values(), *batches.values()] if isinstance(o, MaybeStored)]
        assert all("may have been stored" in str(exc) for exc in maybe)
        assert slowest < 5.5  # within the put's timeout
        counts: Counter[str] = Counter()
        ids = {}
        for message in await drain(queue):
            counts[message.body] += 1
            ids[message.body] = message.id
        assert max(counts.values()) == 1, [body for body, n in counts.items() if n > 1]  # nothing twice
        for body, outcome in outcomes.items():
            if isinstance(outcome, int):
                assert ids.get(body) == outcome, body  # stored once, under the id put returned
        for bodies, outcome in batches.items():
            if isinstance(outcome, list):
                assert [ids.get(body) for body in bodies] == outcome
            else:  # all of it or none
                assert len({body in counts for body in bodies}) == 1


async def test_a_put_the_broker_never_confirmed_raises_maybe_stored_and_its_key_puts_it_once(enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "frozen")
    async with connect(creds) as queue:
        first = await queue.put("warm-up")
        os.kill(stack.broker_pid, signal.SIGSTOP)  # the broker takes the publish only once it runs again
        try:
            started = time.monotonic()
            with pytest.raises(MaybeStored, match=r"^The message may have been stored: the broker did not confirm it "
                                                  r"within 1 s\. Putting it again with dedupe_key='\w{22}' is safe "
                                                  r"within the queue's dedupe window\.$") as caught:
                await queue.put("frozen", timeout=1)
            assert time.monotonic() - started < 1.5
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)
        again = await queue.put("frozen", dedupe_key=caught.value.dedupe_key)
        assert [(m.id, m.body) for m in await drain(queue)] == [(first, "warm-up"), (again, "frozen")]


async def test_send_batch_across_a_broker_kill_says_how_many_may_have_been_stored_without_waiting_out_its_timeout(
        enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-batch")
    async with connect(creds) as queue:
        await queue.put("warm-up")
        sending = asyncio.create_task(queue.send_batch([f"m{n}" for n in range(1000)], timeout=10))
        await asyncio.sleep(0)
        started = time.monotonic()
        await kill_broker(stack)
        try:
            stored = await sending
        except MaybeStored as exc:
            assert "may have been" in str(exc) and "Sending those again may store some twice." in str(exc)
            assert time.monotonic() - started < 3  # not the 10 s timeout: the PubAcks were lost with the connection
        else:
            assert stored == 1000
        counts = Counter(m.body for m in await drain(queue))
        assert max(counts.values()) == 1


async def test_the_broker_refuses_a_batch_repeating_a_stored_msg_id_and_tells_its_sequence_storing_nothing(
        nats_server):
    nc = await nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        await js.add_stream(api.StreamConfig(name="S", subjects=["q"], allow_atomic=True, duplicate_window=60))

        async def batch(batch_id: str) -> dict:
            inbox = nc.new_inbox()
            for n in (1, 2, 3):
                headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(n)}
                if n == 3:
                    headers.update({"Nats-Batch-Commit": "1", "Nats-Msg-Id": "the-batch"})
                    return json.loads((await nc.request("q", b"x", headers=headers, timeout=2)).data)
                await nc.publish("q", b"x", reply=inbox, headers=headers)
            raise AssertionError

        async def probe(msg_id: str) -> dict:
            headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Msg-Id": "no-message-has-this-id"}
            return json.loads((await nc.request("q", b"", headers=headers, timeout=2)).data)

        assert (await batch("b1"))["seq"] == 3
        assert (await batch("b2"))["error"]["err_code"] == 10201  # the whole batch again: refused
        assert await probe("the-batch") == {"stream": "S", "seq": 3, "duplicate": True}
        assert (await probe("never-stored"))["error"]["err_code"] == 10070
        assert (await js.stream_info("S")).state.messages == 3
    finally:
        await nc.close()


async def test_a_receive_by_hand_waiting_across_a_broker_kill_takes_a_message_put_after_it(enclave_stack_factory):
    """The API's receive sends its pulls again too (at most every 2 s): the message put after the
    restart is handed out within the wait, and an empty wait still ends on time."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "by-hand")
    with stack.admin() as admin:
        loop = asyncio.get_running_loop()
        waiting = loop.run_in_executor(None, lambda: admin.receive("default", "by-hand", 1, 10))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # the control plane's pull is waiting
        await kill_broker(stack)
        async with connect(creds) as producer:
            await producer.put("after the restart")
        (taken,) = await asyncio.wait_for(waiting, 12)
        assert taken["body"] == "after the restart"
        admin.delete_message("default", "by-hand", taken["receipt"])
        started = time.monotonic()
        assert admin.receive("default", "by-hand", 1, 3) == []
        assert time.monotonic() - started < 4.5


async def test_acks_across_a_broker_kill_are_sent_again_and_their_messages_do_not_come_back(enclave_stack_factory):
    """Acks sent as the broker dies are sent again once the connection is back, within the ack's
    timeout. A message handed out just before the kill may have been forgotten by the restarted
    broker, which ignores an ack of it without an answer: that ack raises Conflict saying so, and
    only such a message comes back."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-acks", visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.send_batch([f"m{n}" for n in range(30)])
        settled = await queue.receive(batch=20, wait=1)
        await asyncio.sleep(0.3)  # their deliveries are on disk now (nats-server writes them within ~100 ms)
        fresh = await queue.receive(batch=10, wait=1)  # handed out just before the kill: may be forgotten
        assert (len(settled), len(fresh)) == (20, 10)
        killing = asyncio.create_task(kill_broker(stack))
        await asyncio.sleep(0)  # the broker is dead from here
        started = time.monotonic()
        outcomes = await asyncio.gather(*(m.ack() for m in settled + fresh), return_exceptions=True)
        took = time.monotonic() - started
        await killing
        assert outcomes[:20] == [None] * 20
        forgotten = set()
        for message, outcome in zip(fresh, outcomes[20:], strict=True):
            if outcome is not None:
                assert isinstance(outcome, Conflict), repr(outcome)
                assert "The broker restarted and forgot it had handed out message" in str(outcome)
                forgotten.add(message.id)
        assert took < 3, took  # not the ack's 5 s timeout
        await asyncio.sleep(2.5)  # past the 2 s lease of any ack that did not count
        back = await queue.receive(batch=30, wait=0.5)
        assert {m.id for m in back} == forgotten
        await queue.delete_many(back)


async def test_extend_nack_and_delete_many_across_a_broker_kill_are_confirmed(enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-nacks", visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.put("a")

        async def across_a_kill(verb) -> float:
            killing = asyncio.create_task(kill_broker(stack))
            await asyncio.sleep(0)
            started = time.monotonic()
            await verb
            took = time.monotonic() - started
            await killing
            return took

        (first,) = await queue.receive(wait=1)
        await asyncio.sleep(0.3)  # the delivery is on disk
        assert await across_a_kill(first.extend()) < 3
        started = time.monotonic()
        assert await across_a_kill(first.nack(delay_s=0.5, error="across a kill")) < 3
        again = await queue.get(timeout_s=3)
        assert again is not None and (again.id, again.attempts, again.last_error) == (first.id, 2, "across a kill")
        assert 0.5 <= time.monotonic() - started < 2  # after its delay, not its lease
        await queue.send_batch(["b", "c"])
        taken = [again, *await queue.receive(batch=2, wait=1)]
        await asyncio.sleep(0.3)
        assert await across_a_kill(queue.delete_many(taken)) < 3
        await asyncio.sleep(2.5)  # past the lease of any ack that did not count
        assert await queue.receive(batch=10, wait=0.5) == []


async def test_an_ack_not_confirmed_before_its_lease_ran_out_raises_conflict(enclave_stack_factory):
    """A broker that does not answer (paused): the ack is not sent again once its lease is ending,
    since the message may be someone else's then."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "lease-runs-out", visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.put("slow")
        (message,) = await queue.receive(wait=1)
        await asyncio.sleep(1)
        os.kill(stack.broker_pid, signal.SIGSTOP)
        try:
            with pytest.raises(Conflict, match=rf"^The lease on message {message.id} ran out before the broker "
                                               r"confirmed it was acked"):
                await message.ack()
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)
