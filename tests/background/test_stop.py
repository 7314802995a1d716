"""A stop request while a lane waits (its pause, a health signal) ends the wait and writes nothing more."""

from __future__ import annotations

import asyncio

import pytest

from mongoshift.api import background as bg
from mongoshift.api import migrations as command
from mongoshift.background.events import Event

from .conftest import background_file, seed

LONG_PAUSE = background_file(batch_size=10, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=60_000")

# Healthy for the first batch, then busy for a minute at every ask.
BUSY_AFTER_FIRST = background_file(batch_size=10, extra="adaptive=False, health=[busy],").replace(
    "background = Background(",
    "_asked = []\n\ndef busy():\n    _asked.append(1)\n    return 0 if len(_asked) == 1 else 60_000\n\nbackground = Background(",
)


@pytest.mark.parametrize("source", [LONG_PAUSE, BUSY_AFTER_FIRST], ids=["pause_ms", "health"])
async def test_stop_during_a_wait_writes_no_further_batch(fast_project, db, source: str) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    first_batch = asyncio.Event()

    def observe(event: Event) -> None:
        if event.kind == "batch":
            first_batch.set()

    runner = await bg.start_background_runner(s, observers=[observe])
    await asyncio.wait_for(first_batch.wait(), 60)
    await asyncio.sleep(0.5)  # the lane now waits before its second batch
    written = await db.people.count_documents({"__v": 2})
    assert written == 10

    loop = asyncio.get_running_loop()
    started = loop.time()
    await runner.stop()
    assert loop.time() - started < 5, "the stop waited out the pause instead of cutting it short"
    assert not runner.running
    assert await db.people.count_documents({"__v": 2}) == written, "a batch was written after the stop"
    assert await db["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0


async def test_a_pause_given_during_a_long_wait_writes_no_further_batch(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    fast_project.add("0001_names.py", LONG_PAUSE.replace("pause_ms=60_000", "pause_ms=3_000"))
    s = fast_project.settings()
    await command.up(s)
    first_batch = asyncio.Event()

    def observe(event: Event) -> None:
        if event.kind == "batch":
            first_batch.set()

    runner = await bg.start_background_runner(s, observers=[observe])
    try:
        await asyncio.wait_for(first_batch.wait(), 60)
        await asyncio.sleep(0.5)  # the lane now waits out its 3 s pause
        assert await db.people.count_documents({"__v": 2}) == 10
        assert (await bg.apply_control(s, "0001_names.py", "pause")).applied == "applied"
        await asyncio.sleep(4.5)  # past the pause: the lane has looked at the control again
        assert await db.people.count_documents({"__v": 2}) == 10, "a batch was written after the pause"
    finally:
        await runner.stop()
    assert (await bg.status(s, "0001_names.py"))[0].status == "paused"
