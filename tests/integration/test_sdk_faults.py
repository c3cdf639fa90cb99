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

No test here reads the clock against an upper bound: a verb that does not give up when it should
is caught by pytest-timeout, and where "in time" is the point the test makes it the only possible
outcome (a pull slice, an iteration's wait or a lease longer than the test).
"""

import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import time
from collections import Counter

import nats
import pytest
from nats.js import api

from enclave_queue.client import connect, pulls, receiving
from enclave_queue.errors import Conflict, EnclaveError, MaybeStored
from tests.helpers import account_store, eventually, make_queue, pulls_waiting

pytestmark = pytest.mark.slow

#: seconds: a wait no test here sees the end of (pytest-timeout ends the test first)
LONGER_THAN_THE_TEST = 3600.0
#: seconds: the visibility timeout of a queue whose leases must outlast the test, so that a message
#: comes back only by what the test did (a nack, an ack the broker forgot), never by its lease
LONG_LEASE = 600


async def kill_broker(stack) -> None:
    """SIGKILL the stack's broker by its PID and wait until the supervisor has started another."""
    old = stack.broker_pid
    os.kill(old, signal.SIGKILL)
    await eventually(lambda: stack.refresh().get("broker_pid") not in (None, old), timeout=15, interval=0.02)


def delivered_on_disk(stack, creds) -> int:
    """The consumer sequence of the last delivery the queue's consumer has written to its state
    file: what a broker killed now restarts knowing it handed out (nats-server writes it within
    about 100 ms). The file (nats-server 2.15's ``o.dat``) is a magic byte (22) and a version (2),
    then uvarints: the ack floor (consumer, stream sequence), the last delivered (consumer, stream
    sequence), the pending ones. 0 while it is missing or half rewritten."""
    path = account_store(stack, creds["username"]) / "streams" / creds["stream"] / "obs" / creds["consumer"] / "o.dat"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    if data[:2] != bytes([22, 2]):
        return 0
    values, value, shift = [], 0, 0
    for byte in data[2:]:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value = shift = 0
            if len(values) == 3:
                return values[2]
    return 0


def consumer_sequence(message) -> int:
    """The consumer sequence of a message's delivery, from its reply subject
    (``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>``; the v2
    form has a domain and an account hash after ``ACK``)."""
    tokens = message._reply.split(".")
    if len(tokens) > 9:
        tokens = tokens[:2] + tokens[4:]
    return int(tokens[6])


async def written(stack, creds, messages) -> None:
    """Wait until the broker has written these messages' deliveries to its store: killed from now
    on, it restarts knowing it handed them out."""
    last = max(consumer_sequence(m) for m in messages)
    await eventually(lambda: delivered_on_disk(stack, creds) >= last, timeout=10)


async def drain(queue) -> list:
    """Every message on the queue, taken and deleted."""
    taken = []
    while batch := await queue.receive(batch=1000, wait=0.5):
        taken += batch
        await queue.delete_many(batch)
    return taken


async def test_a_get_waiting_across_a_broker_kill_takes_a_message_put_after_it_and_keeps_its_deadline(
        enclave_stack_factory, monkeypatch):
    """With pull slices and iterate's waits longer than the test, a pull request is sent once and
    then only again on reconnect: a message put after the restart can reach the waiting get (or
    iteration) only by that."""
    monkeypatch.setattr(pulls, "PULL_SLICE", LONGER_THAN_THE_TEST)
    monkeypatch.setattr(receiving, "ITERATE_WAIT", LONGER_THAN_THE_TEST)
    stack = enclave_stack_factory()
    creds = make_queue(stack, "long-polls")
    async with connect(creds) as worker, connect(creds) as producer:
        waiting = asyncio.create_task(worker.get(timeout_s=receiving.MAX_GET_WAIT))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # its long poll is with the broker now
        await kill_broker(stack)
        sent = await producer.put("after the restart")
        message = await waiting  # the pull was sent again on reconnect: the restarted broker knew nothing of it
        assert message is not None and (message.id, message.body) == (sent, "after the restart")
        await message.ack()

        iterating = worker.iterate()  # the same for iterate's long polls
        first = asyncio.ensure_future(iterating.__anext__())
        await eventually(lambda: pulls_waiting(creds), timeout=10)
        await kill_broker(stack)
        sent = await producer.put("to the iteration")
        message = await first
        assert (message.id, message.body) == (sent, "to the iteration")
        await message.ack()
        await iterating.aclose()

        started = time.monotonic()  # nothing comes: it returns empty, across a kill too, and not early
        waiting = asyncio.create_task(worker.get(timeout_s=5))
        await eventually(lambda: pulls_waiting(creds), timeout=10)
        assert not waiting.done()  # the broker dies while the get waits (nothing awaits in between)
        await kill_broker(stack)
        assert await waiting is None
        assert time.monotonic() - started >= 5  # it did not give up before the timeout it was given
        assert await worker.receive(batch=10, wait=1) == []


async def test_a_get_after_a_broker_kill_takes_its_message_on_the_inbox_an_earlier_get_kept(enclave_stack_factory):
    """A get that ended empty leaves its inbox to the next get; nats-py subscribes it again on the
    new connection, so a get after the restart takes its message there, subscribing nothing."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "kept-inbox")
    async with connect(creds) as worker, connect(creds) as producer:
        assert await worker.get(timeout_s=0.1) is None  # expired: nothing of it can be answered any more
        subscriptions = len(worker._nc._subs)
        reconnected = worker._session.reconnect
        await kill_broker(stack)
        await asyncio.wait_for(reconnected, 30)  # the worker is on the new broker before it asks
        after_restart = worker._session.reconnect
        sent = await producer.put("after the restart")
        message = await worker.get(timeout_s=receiving.MAX_GET_WAIT)
        assert message is not None and (message.id, message.receive_count) == (sent, 1)
        await message.ack()
        # (seen once in a fresh-clone run, 3 against 2: the subjects and a second reconnect tell why)
        assert len(worker._nc._subs) == subscriptions, (
            [sub.subject for sub in worker._nc._subs.values()], "reconnected again:", after_restart.done())


async def test_puts_across_a_broker_kill_each_return_their_one_stored_id_or_say_it_may_be_stored(
        enclave_stack_factory):
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-puts")
    async with connect(creds) as queue:
        await queue.put("warm-up")  # settings read, connection up: the puts below publish at once
        outcomes: dict[str, object] = {}  #: body: the id put returned, or its error
        batches: dict[tuple[str, ...], object] = {}  #: bodies: the ids put_many returned, or its error
        stop = asyncio.Event()

        async def putting(worker: int) -> None:  # 32 of these: 32 puts in flight at any moment
            for n in itertools.count():
                if stop.is_set():
                    return
                body = f"put-{worker}-{n}"
                try:
                    outcomes[body] = await queue.put(body)
                except MaybeStored as exc:
                    outcomes[body] = exc

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
            assert time.monotonic() - started >= 1  # it did not give up before the timeout it was given
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)
        again = await queue.put("frozen", dedupe_key=caught.value.dedupe_key)
        assert [(m.id, m.body) for m in await drain(queue)] == [(first, "warm-up"), (again, "frozen")]


async def test_send_batch_across_a_broker_kill_says_how_many_may_have_been_stored_without_waiting_out_its_timeout(
        enclave_stack_factory):
    """send_batch pipelines its messages on a broker that does not sync every write (on one that
    does, it puts them as one atomic batch, sent again whole like put_many: the test above). The
    broker is paused while the batch is written to it, then killed: none of its PubAcks come, and
    send_batch raises MaybeStored because the connection was lost, with a timeout longer than the
    test, so waiting it out would fail the test."""
    stack = enclave_stack_factory(env={"ENCLAVE_SYNC": "interval"})
    creds = make_queue(stack, "restart-batch")
    async with connect(creds) as queue:
        await queue.put("warm-up")  # settings read, connection up: the batch is published at once

        async def pipelined() -> bool:  # the SDK asks the control plane how the broker syncs, at connect
            return not await queue._settings.synced_writes()

        await eventually(pipelined)
        nc = queue._nc
        published = nc.stats["out_msgs"]
        os.kill(stack.broker_pid, signal.SIGSTOP)
        try:
            sending = asyncio.create_task(queue.send_batch([f"m{n}" for n in range(1000)],
                                                           timeout=LONGER_THAN_THE_TEST))
            # all of it written to the paused broker's socket: none of it is sent again after the kill
            await eventually(lambda: nc.stats["out_msgs"] >= published + 1000 and nc.pending_data_size == 0)
            assert not sending.done()
            await kill_broker(stack)  # SIGKILL ends a stopped process too
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stack.broker_pid, signal.SIGCONT)
        with pytest.raises(MaybeStored, match=r"^(\d+) of 1000 messages were stored and (\d+) may have been: the "
                                              r"connection to the broker was lost before it confirmed them\. Sending "
                                              r"those again may store some twice\.$") as caught:
            await sending
        stored, maybe = (int(n) for n in re.match(r"(\d+) of 1000 messages were stored and (\d+)",
                                                  str(caught.value)).groups())
        assert stored + maybe == 1000
        counts = Counter(m.body for m in await drain(queue))
        assert max(counts.values()) == 1  # nothing twice
        assert stored <= sum(counts.values()) - 1 <= 1000  # what it said was stored is (beside the warm-up)


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
    restart is handed out within the wait, and an empty wait still ends, empty."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "by-hand")
    with stack.admin() as admin:
        loop = asyncio.get_running_loop()
        waiting = loop.run_in_executor(None, lambda: admin.receive("default", "by-hand", 1, 10))
        await eventually(lambda: pulls_waiting(creds), timeout=10)  # the control plane's pull is waiting
        await kill_broker(stack)
        async with connect(creds) as producer:
            await producer.put("after the restart")
        (taken,) = await waiting
        assert taken["body"] == "after the restart"
        admin.delete_message("default", "by-hand", taken["receipt"])
        assert admin.receive("default", "by-hand", 1, 3) == []


async def test_acks_across_a_broker_kill_are_sent_again_and_their_messages_do_not_come_back(enclave_stack_factory):
    """Acks sent as the broker dies are sent again once the connection is back, within the ack's
    timeout. A message handed out just before the kill may have been forgotten by the restarted
    broker, which ignores an ack of it without an answer: that ack raises Conflict saying so, and
    only such a message comes back. The leases outlast the test: an ack fails for no other reason
    (an ack the broker never confirms raises BrokerUnavailable, not Conflict)."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-acks", visibility_timeout_seconds=LONG_LEASE)
    async with connect(creds) as queue:
        await queue.send_batch([f"m{n}" for n in range(30)])
        settled = await queue.receive(batch=20, wait=1)
        await written(stack, creds, settled)  # the restarted broker will know it handed these out
        fresh = await queue.receive(batch=10, wait=1)  # handed out just before the kill: may be forgotten
        assert (len(settled), len(fresh)) == (20, 10)
        killing = asyncio.create_task(kill_broker(stack))
        await asyncio.sleep(0)  # the broker is dead from here
        try:
            outcomes = await asyncio.gather(*(m.ack() for m in settled + fresh), return_exceptions=True)
        finally:
            await killing
        assert outcomes[:20] == [None] * 20
        forgotten = set()
        for message, outcome in zip(fresh, outcomes[20:], strict=True):
            if outcome is not None:
                assert isinstance(outcome, Conflict), repr(outcome)
                assert "The broker restarted and forgot it had handed out message" in str(outcome)
                forgotten.add(message.id)

        async def left() -> bool:  # an acked message leaves the stream (WorkQueue retention)
            return {m.id for m in await queue.peek(limit=30)} == forgotten

        await eventually(left)  # only the forgotten ones are left to come back …
        assert {m.id for m in await drain(queue)} == forgotten  # … and they do, without waiting for a lease


async def test_extend_nack_and_delete_many_across_a_broker_kill_are_confirmed(enclave_stack_factory):
    """Each verb returns (the broker confirmed it; one it never confirmed raises BrokerUnavailable).
    The lease outlasts the test, so the nacked message can come back only by its nack."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "restart-nacks", visibility_timeout_seconds=LONG_LEASE)
    async with connect(creds) as queue:
        await queue.put("a")

        async def across_a_kill(verb) -> None:
            killing = asyncio.create_task(kill_broker(stack))
            await asyncio.sleep(0)  # the broker is dead from here
            try:
                await verb
            finally:
                await killing

        (first,) = await queue.receive(wait=1)
        await written(stack, creds, [first])  # the restarted broker will know it handed it out
        await across_a_kill(first.extend())
        started = time.monotonic()
        await across_a_kill(first.nack(delay_s=0.5, error="across a kill"))
        again = await queue.get(timeout_s=30)  # well within the lease: only the nack brings it back
        assert again is not None and (again.id, again.attempts, again.last_error) == (first.id, 2, "across a kill")
        assert time.monotonic() - started >= 0.5  # not before its delay
        await queue.send_batch(["b", "c"])
        taken = [again, *await queue.receive(batch=2, wait=1)]
        await written(stack, creds, taken)
        await across_a_kill(queue.delete_many(taken))

        async def empty() -> bool:  # a deleted message leaves the stream (WorkQueue retention)
            return await queue.peek() == []  # peek shows those in flight too

        await eventually(empty)  # nothing is left to come back


async def test_an_ack_not_confirmed_before_its_lease_ran_out_raises_conflict(enclave_stack_factory):
    """A broker that does not answer (paused): the ack is not sent again once its lease is ending,
    since the message may be someone else's then."""
    stack = enclave_stack_factory()
    creds = make_queue(stack, "lease-runs-out", visibility_timeout_seconds=2)
    async with connect(creds) as queue:
        await queue.put("slow")
        (message,) = await queue.receive(wait=1)
        # the ack goes unanswered; by the time it would be sent again (RESEND_AFTER, 2 s) less than
        # LEASE_MARGIN of its 2 s lease is left, so it is not
        os.kill(stack.broker_pid, signal.SIGSTOP)
        try:
            with pytest.raises(Conflict, match=rf"^The lease on message {message.id} ran out before the broker "
                                               r"confirmed it was acked"):
                await message.ack()
        finally:
            os.kill(stack.broker_pid, signal.SIGCONT)


@pytest.mark.parametrize("verb", ["get", "receive", "len", "ack"])
async def test_a_connection_nats_py_closed_under_the_client_is_an_enclave_error(stack, unique_name, verb):
    """nats-py closes the connection itself when the broker cuts the user off (the queue deleted),
    sometimes before its callback has said why: the next call raised nats-py's own
    ConnectionClosedError, past every ``except EnclaveError``."""
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("x")
        message = await queue.get(timeout_s=5)
        await queue._session.nc.close()  # as nats-py does on its own
        calls = {"get": lambda: queue.get(timeout_s=1), "receive": lambda: queue.receive(wait=1),
                 "len": queue.len, "ack": message.ack}
        with pytest.raises(EnclaveError):
            await calls[verb]()
