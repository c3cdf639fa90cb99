"""The SDK used wrongly, as an app developer might: each mistake is a specific exception naming
what was wrong, raised before anything is sent, and nothing is stored half-way."""

import asyncio
import gc
import math
import re

import pytest

from enclave_queue.client import Credentials, connect, connect_sync
from enclave_queue.errors import BrokerUnavailable, EnclaveError, MaybeStored, NotFound, PermissionDenied, SpecError
from tests.cli.test_cli import run
from tests.helpers import app_connection, make_queue, queue_account_connection


async def test_bodies_json_cannot_carry_are_refused_and_nothing_is_stored(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        for body in [{"temperature": math.nan}, math.inf, [-math.inf], {1j: 2}, object(), {"s": {1, 2}}]:
            with pytest.raises(SpecError, match=r"^body must be bytes, text or a JSON value") as caught:
                await queue.put(body)
            assert caught.value.errors[0]["field"] == "body"
        with pytest.raises(SpecError, match=r"^put_many: bodies\[1\] must be bytes, text or a JSON value"):
            await queue.put_many(["fine", {"x": math.nan}])
        for count in (3, 40):  # pipelined and group-committed
            with pytest.raises(SpecError, match=rf"^send_batch: bodies\[{count - 1}\] must be"):
                await queue.send_batch(["fine"] * (count - 1) + [object()])
        assert await queue.len() == 0


async def test_the_shape_of_a_batch_and_its_window_are_checked(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        for verb in (queue.send_batch, queue.put_many):
            for bodies in ("abc", b"abc", {"a": 1}, None, 5):
                with pytest.raises(SpecError, match="bodies must be a list of message bodies"):
                    await verb(bodies)
        for window in (0, -1, 2.5, True, "8"):
            with pytest.raises(SpecError, match=r"^send_batch: window must be a whole number"):
                await queue.send_batch(["a", "b"], window=window)
        for timeout in (0, -1, math.nan, math.inf, "5", True):
            with pytest.raises(SpecError, match=r"^timeout must be a number of seconds above 0"):
                await queue.put("a", timeout=timeout)
            with pytest.raises(SpecError, match=r"^timeout must be"):
                await queue.send_batch(["a"], timeout=timeout)
        assert await queue.len() == 0


async def test_headers_and_errors_are_checked(stack, unique_name):
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=30)
    async with connect(creds) as queue:
        for headers in ([("a", "b")], {"X-A": 5}, {"X-A": None}, {"bad key": "v"}, {"X-A": "v\r\nX-Evil: 1"},
                        {5: "v"}):
            with pytest.raises(SpecError, match=r"^headers must be a dict of header names"):
                await queue.put("a", headers=headers)
        # a dedupe key given as a header follows the dedupe key's rule
        for key in ("k" * 1000, ""):
            with pytest.raises(SpecError, match=r"^dedupe_key must be"):
                await queue.put("a", headers={"Nats-Msg-Id": key})
        assert await queue.len() == 0
        await queue.put("a", headers={"X-Trace": "t-1"})
        message = await queue.get(timeout_s=5)
        for error in (123, b"bytes", ["why"]):
            with pytest.raises(SpecError, match=r"^error must be text"):
                await message.nack(error=error)
            with pytest.raises(SpecError, match=r"^error must be text"):
                await message.reject(error=error)
        await message.nack(error="a reason")  # still leased: the refusals left it alone


async def test_receive_arguments_are_checked(stack, unique_name):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        for wait in (math.nan, -1, math.inf, 1e6, "1", True):
            with pytest.raises(SpecError, match=r"^wait must be a number of seconds from 0 to 60"):
                await queue.receive(wait=wait)
        for batch in (2.5, True, "3", 0, 1001):
            with pytest.raises(SpecError, match=r"^batch must be a whole number from 1 to 1000"):
                await queue.receive(batch=batch)


async def test_credentials_of_the_wrong_type_or_consumer_are_refused(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with pytest.raises(SpecError, match=r"^credentials must be a Credentials"):
        await connect("nats://127.0.0.1:4222")
    async with connect(creds) as queue:
        await queue.put("waiting")
    async with connect({**creds, "consumer": "workers"}) as typo:
        with pytest.raises(NotFound, match="The queue has no consumer 'workers'"):
            await typo.get(timeout_s=1)
        with pytest.raises(NotFound, match="no consumer 'workers'"):
            await typo.receive(wait=0)
    async with connect(creds) as queue:
        assert (await queue.get(timeout_s=5)).body == "waiting"


async def test_close_during_an_iteration_ends_it_as_a_closed_client(stack, unique_name):
    creds = make_queue(stack, unique_name)
    queue = await connect(creds)

    async def iterate():
        async for message in queue.iterate():
            await message.ack()

    task = asyncio.create_task(iterate())
    await asyncio.sleep(0.5)
    await queue.close()
    with pytest.raises(RuntimeError, match="Client is closed"):
        await asyncio.wait_for(task, 10)
    assert not task.cancelled()


def test_a_sync_client_closes_twice_and_says_it_is_closed(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with connect_sync(creds) as queue:
        queue.send("x")
        queue.close()
        queue.close()
        with pytest.raises(RuntimeError, match="Client is closed"):
            queue.send("y")
    # the with's own close came third: nothing raised


def test_env_credentials_keep_every_node(stack, unique_name):
    make_queue(stack, unique_name)
    printed = run(stack, "queue", "credentials", unique_name, "--env")
    assert printed.returncode == 0, printed.stderr
    env = {}
    for line in printed.stdout.splitlines():
        name, _, value = line.removeprefix("export ").partition("=")
        env[name] = value.strip("'")
    assert env["ENCLAVE_QUEUE_BROKER_URLS"].startswith("nats://")  # a list joined, not its repr
    assert "None" not in env.values()
    two = {**env, "ENCLAVE_QUEUE_BROKER_URLS": "nats://127.0.0.1:1,nats://127.0.0.1:2",
           "ENCLAVE_QUEUE_BROKER_URL": "nats://127.0.0.1:1"}
    assert Credentials.from_env(two).servers == ["nats://127.0.0.1:1", "nats://127.0.0.1:2"]
    assert Credentials.from_env(env).servers == [env["ENCLAVE_QUEUE_BROKER_URLS"]]
    # one of the two changed (a container's address for the broker): which one holds is not guessed
    changed = {**env, "ENCLAVE_QUEUE_BROKER_URL": "nats://es-system-broker:4222"}
    with pytest.raises(SpecError, match=r"^broker_url must be one of broker_urls") as caught:
        Credentials.from_env(changed)
    assert caught.value.errors[0]["field"] == "broker_url"
    alone = {k: v for k, v in changed.items() if k != "ENCLAVE_QUEUE_BROKER_URLS"}
    assert Credentials.from_env(alone).servers == ["nats://es-system-broker:4222"]


async def test_a_put_no_stream_takes_says_nothing_was_stored(stack, unique_name):
    """No stream answers (here a subject no stream captures; a cluster without a majority, a
    stream deleted behind the controller's back alike): the put's error says nothing was stored
    and why that may be, not only that the queue may be gone."""
    creds = make_queue(stack, unique_name)
    async with connect({**creds, "subject": creds["subject"] + "-nowhere"}) as queue:
        with pytest.raises(BrokerUnavailable, match=r"No stream answered for subject .*, so nothing was stored"):
            await queue.put("lost?", timeout=1)


@pytest.mark.parametrize("mode", ["break", "after"])
async def test_acks_given_just_before_close_are_not_lost(stack, unique_name, mode):
    """An iteration's ack returns at once and is confirmed in a task: a close right after it
    cancelled that task, so the ack was never sent and the message came back (done twice). The
    same for an iteration left with break: its generator is closed a moment later."""
    creds = make_queue(stack, unique_name, visibility_timeout_seconds=1)
    async with connect(creds) as queue:
        ids = await queue.put_many(["a", "b", "c"])
    async with connect(creds) as queue:
        acked = []
        if mode == "break":
            async for message in queue.iterate():
                await message.ack()
                acked.append(message.id)
                break
        else:
            held = [message async for message in queue.iterate(stop_when_empty=True)]
            for message in held:
                await message.ack()
                acked.append(message.id)
    await asyncio.sleep(1.5)  # past the visibility timeout: what was not acked is back
    async with connect(creds) as queue:
        back = await queue.receive(batch=10, wait=1)
        assert not {m.id for m in back} & set(acked)
        assert sorted(m.id for m in back) == sorted(set(ids) - set(acked))
        assert all(m.attempts == 1 for m in back)  # the prefetched ones were handed back unspent
        await queue.delete_many(back)


async def test_header_values_with_any_text_but_line_breaks_and_edge_spaces_go_through(stack, unique_name):
    creds = make_queue(stack, unique_name)
    values = {"X-Tab": "a\tb", "X-Price": "10\xa0€", "X-Family": "👨\u200d👩\u200d👧", "X-Empty": ""}
    async with connect(creds) as queue:
        await queue.put("h", headers=values)
        message = await queue.get(timeout_s=5)
        assert {k: message.headers.get(k) for k in values} == values
        await message.ack()
        for bad in ("a\rb", "a\nb", "a\x00b", " a", "a ", "a\t"):  # NATS trims values: they would not come back
            with pytest.raises(SpecError, match="^headers must be"):
                await queue.put("h", headers={"X-Bad": bad})
        with pytest.raises(SpecError, match="^body must be .* lone surrogate"):
            await queue.put("a\udc80")


def test_the_sync_client_checks_a_batch_s_shape_as_the_async_one(stack, unique_name):
    creds = make_queue(stack, unique_name)
    with connect_sync(creds) as queue:
        for bodies in ("abc", {"k1": 1}, b"xy", None):
            with pytest.raises(SpecError, match="bodies must be a list of message bodies"):
                queue.send_batch(bodies)
            with pytest.raises(SpecError, match="bodies must be a list of message bodies"):
                queue.put_many(bodies)
        assert queue.put_many(x for x in ("g1", "g2")) and queue.len() == 2


async def test_delete_many_ack_and_export_check_their_arguments(stack, unique_name, tmp_path):
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        await queue.put("x")
        message = await queue.get(timeout_s=5)
        for messages in (None, 5, "x", message, [None]):
            with pytest.raises(SpecError, match="^messages must be a list of received messages"):
                await queue.delete_many(messages)
        for timeout in (0, math.nan, "5"):
            with pytest.raises(SpecError, match="^timeout must be"):
                await queue.delete_many([message], timeout=timeout)
        with pytest.raises(SpecError, match="^confirm must be True, False or None"):
            await message.ack(confirm="no")
        for path in (tmp_path, "", 5):
            with pytest.raises(SpecError, match="^path must be a file's path"):
                await queue.export(path)
        assert list(tmp_path.parent.glob(f"{tmp_path.name}.partial")) == []
        await message.ack()  # still leased: the refusals left it alone
    closed = await connect(creds)
    await closed.close()
    with pytest.raises(RuntimeError, match="Client is closed"):
        await closed.export(tmp_path / "out.jsonl")
    assert list(tmp_path.iterdir()) == []


async def test_a_wait_nobody_awaits_any_more_is_not_logged_at_close(stack, unique_name, caplog):
    """A waiter whose caller stopped waiting (a put between its resends) is failed by close as
    every waiter is; asyncio logged it as 'Future exception was never retrieved'."""
    creds = make_queue(stack, unique_name)
    async with connect(creds) as queue:
        _, abandoned = queue._session.new_waiter()
    assert isinstance(abandoned.exception(), RuntimeError)
    caplog.clear()
    _, abandoned = None, None
    async with connect(creds) as queue:
        queue._session.new_waiter()
    gc.collect()
    await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text


async def test_a_body_that_is_not_what_its_content_type_says_is_a_spec_error_not_a_crash(stack, unique_name):
    # any NATS client can publish one: a worker's loop had met JSONDecodeError or UnicodeDecodeError
    creds = make_queue(stack, unique_name)
    sent = [(b"{not json", "application/json"), (b"\xff\xfe", "text/plain; charset=utf-8")]
    async with app_connection(creds) as nc:
        for data, kind in sent:
            await nc.jetstream().publish(creds["subject"], data, headers={"Content-Type": kind})
    async with connect(creds) as queue:
        for data, kind in sent:
            message = await queue.get(timeout_s=5)
            with pytest.raises(SpecError, match=rf"^The body is not what its Content-Type {re.escape(repr(kind))} says"):
                _ = message.body
            assert message.data == data
            await message.ack()
        assert await queue.len() == 0


async def test_close_ends_every_put_in_flight_and_says_which_may_be_stored(stack, unique_name):
    # queued group-commit puts had hung for ever, and a put on the wire raised "Client is closed."
    # though it was stored (a retry then stored it twice)
    creds = make_queue(stack, unique_name)
    queue = await connect(creds)
    await queue.put("warm")  # settings read: the puts below go straight to the wire or queue up
    puts = [asyncio.ensure_future(queue.put(f"m{i}", dedupe_key=f"k{i}")) for i in range(200)]
    await asyncio.sleep(0.002)
    await queue.close()
    done, pending = await asyncio.wait(puts, timeout=30)
    assert not pending  # every put ended
    outcomes = [p.exception() or p.result() for p in puts]
    assert all(isinstance(o, (int, MaybeStored, RuntimeError)) for o in outcomes), outcomes
    closed = [i for i, o in enumerate(outcomes) if isinstance(o, RuntimeError) and not isinstance(o, EnclaveError)]
    assert all(str(outcomes[i]) == "Client is closed." for i in closed)
    async with connect(creds) as reader:
        stored = set()
        while batch := await reader.receive(batch=100, wait=1):
            stored |= {m.body for m in batch}
            await reader.delete_many(batch)
    assert {f"m{i}" for i, o in enumerate(outcomes) if isinstance(o, int)} <= stored  # confirmed: there
    assert not {f"m{i}" for i in closed} & stored  # "closed": never stored


async def test_a_call_in_flight_at_close_hears_client_is_closed_not_a_cancel(stack, unique_name):
    creds = make_queue(stack, unique_name)
    for _ in range(5):
        queue = await connect(creds)
        receiving = asyncio.ensure_future(queue.receive(batch=10, wait=5))  # its settings read under way
        await asyncio.sleep(0)
        await queue.close()
        with pytest.raises(RuntimeError, match="^Client is closed"):
            await receiving


async def test_text_utf8_cannot_carry_and_bad_numbers_are_spec_errors_naming_the_field(stack, unique_name, tmp_path):
    """A lone surrogate in a header value or an error note was a UnicodeEncodeError from deep inside;
    retry_delay took -1 and True and broke on None; export into a missing directory named its
    ``.partial`` file; connect_timeout=-1 was a BrokerUnavailable of "-3 s"."""
    creds = make_queue(stack, unique_name, retry_backoff_seconds=[5, 30])
    async with connect(creds) as queue:
        with pytest.raises(SpecError, match=r"^headers must be") as caught:
            await queue.put("x", headers={"X": "\ud800"})
        assert caught.value.errors[0]["field"] == "headers"
        await queue.put("m")
        message = await queue.get(timeout_s=5)
        with pytest.raises(SpecError, match=r"^error must be"):
            await message.nack(error="\ud800")
        await message.ack()  # the refused nack left it in hand
        for count in (None, "5", math.nan, -1, 0, True):
            with pytest.raises(SpecError, match=r"^receive_count must be an integer from 1"):
                await queue.retry_delay(count)
        assert await queue.retry_delay(2) == 30
        missing = tmp_path / "no-such-dir" / "out.jsonl"
        with pytest.raises(SpecError, match=r"^path must be a file this process can write") as caught:
            await queue.export(missing)
        assert "out.jsonl'" in caught.value.message and ".partial" not in caught.value.message
        assert await queue.len() == 0
    for timeout in (-1, 0, "5", math.inf, True):
        with pytest.raises(SpecError, match=r"^connect_timeout must be a number of seconds above 0"):
            await connect(creds, connect_timeout=timeout)


async def test_a_wrong_inbox_prefix_is_refused_at_connect_naming_it(stack, unique_name):
    """It was told once, by the first call, and every later call waited out its timeout as a
    BrokerUnavailable, as if the broker were down."""
    creds = make_queue(stack, unique_name)
    with pytest.raises(PermissionDenied, match=r"inbox_prefix must be the one the queue's credentials give"):
        await connect({**creds, "inbox_prefix": "_INBOX"})


async def test_another_clients_message_is_refused_by_delete_many_and_its_own_ack_still_works(stack, unique_name):
    """Acked through another queue's client, the message was marked done before the broker refused
    the ack: its own client's ack then said "already acked", and it came back."""
    creds, other_creds = make_queue(stack, unique_name), make_queue(stack, f"{unique_name}-b")
    async with connect(creds) as queue, connect(other_creds) as other:
        await queue.put("job")
        message = await queue.get(timeout_s=5)
        with pytest.raises(SpecError, match=r"^messages must be messages this client received"):
            await other.delete_many([message])
        await message.ack()
        assert await queue.len() == 0


async def test_a_queue_whose_stream_is_not_there_is_not_found_naming_why(stack, unique_name):
    """A put right after a create without --wait (the stream not made yet) raised a bare
    EnclaveError naming the internal stream."""
    creds = make_queue(stack, unique_name)
    async with queue_account_connection(stack, creds["username"]) as nc:
        await nc.jetstream().delete_stream(creds["stream"])  # as before the controller makes it
        async with connect(creds) as queue:
            with pytest.raises(NotFound, match=r"has no stream on the broker: it is still being created"):
                await queue.put("early")
