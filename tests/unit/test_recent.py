"""Recent: a settling request asked again gets the first answer; one that failed is done again."""

from __future__ import annotations

import asyncio

import pytest

from enclave_queue.recent import Recent


async def test_a_key_asked_again_gets_the_first_answer_without_doing_the_work_again():
    recent, calls = Recent(), []

    async def work() -> str:
        calls.append(1)
        return f"answer {len(calls)}"

    assert await recent.once("a", work) == "answer 1"
    assert await recent.once("a", work) == "answer 1"
    assert await recent.once("b", work) == "answer 2"
    assert len(calls) == 2


async def test_a_repeat_while_the_first_is_at_work_waits_for_its_answer():
    recent, started, go = Recent(), asyncio.Event(), asyncio.Event()

    async def slow() -> int:
        started.set()
        await go.wait()
        return 7

    first = asyncio.create_task(recent.once("k", slow))
    await started.wait()
    second = asyncio.create_task(recent.once("k", slow))
    await asyncio.sleep(0)
    assert not second.done()
    go.set()
    assert await asyncio.gather(first, second) == [7, 7]


async def test_a_failure_is_not_kept():
    recent, calls = Recent(), []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("broker away")
        return "done"

    with pytest.raises(RuntimeError):
        await recent.once("k", flaky)
    assert await recent.once("k", flaky) == "done"


async def test_old_answers_make_room():
    recent = Recent(keep=2, keep_seconds=3600)

    async def answer(value: int) -> int:
        return value

    for key in range(3):
        assert await recent.once(key, lambda key=key: answer(key)) == key
    assert await recent.once(0, lambda: answer(99)) == 99  # the oldest was forgotten
    assert await recent.once(2, lambda: answer(99)) == 2
