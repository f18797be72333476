"""`in_background`: the task lives as long as the block."""

from __future__ import annotations

import asyncio

import pytest

from hifi.background import in_background


async def test_the_task_runs_during_the_block_and_is_cancelled_at_its_end() -> None:
    started = asyncio.Event()

    async def forever() -> None:
        started.set()
        await asyncio.Event().wait()

    async with in_background(forever(), name="forever") as task:
        await started.wait()
        assert task.get_name() == "forever"
        assert not task.done()
    assert task.cancelled()


async def test_an_exception_the_task_ended_with_is_raised_at_the_block_end() -> None:
    async def fails() -> None:
        raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        async with in_background(fails(), name="fails") as task:
            await asyncio.wait([task])
