"""A stop request while a lane waits (its pause, a health signal) ends the wait and writes nothing more."""

from __future__ import annotations

import asyncio

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event

from .conftest import background_file, seed

LONG_PAUSE = background_file(batch_size=10, extra="adaptive=False,").replace("pause_ms=0", "pause_ms=60_000")

# Healthy for the first batch, then busy for a minute at every ask.
BUSY_AFTER_FIRST = background_file(batch_size=10, extra="adaptive=False, health=[busy],").replace(
    "background = Background(",
    "_asked = []\n\ndef busy():\n    _asked.append(1)\n    return 0 if len(_asked) == 1 else 60_000\n\nbackground = Background(",
)


async def _waiting_after_one_batch(fast_project, db, source: str):  # type: ignore[no-untyped-def]
    """An in-app runner whose one lane wrote its first batch of 10 and now waits before the next."""
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
    return s, runner


@pytest.mark.parametrize("source", [LONG_PAUSE, BUSY_AFTER_FIRST], ids=["pause_ms", "health"])
async def test_stop_during_a_wait_writes_no_further_batch(fast_project, db, source: str) -> None:  # type: ignore[no-untyped-def]
    _, runner = await _waiting_after_one_batch(fast_project, db, source)
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
    s, runner = await _waiting_after_one_batch(fast_project, db, LONG_PAUSE.replace("pause_ms=60_000", "pause_ms=3_000"))
    try:
        assert await db.people.count_documents({"__v": 2}) == 10
        assert (await bg.apply_control(s, "0001_names.py", "pause")).applied == "applied"
        await asyncio.sleep(4.5)  # past the pause: the lane has looked at the control again
        assert await db.people.count_documents({"__v": 2}) == 10, "a batch was written after the pause"
    finally:
        await runner.stop()
    assert (await bg.status(s, "0001_names.py"))[0].status == "paused"


async def test_a_runner_says_why_it_waits_while_another_holds_the_coordinator_lock(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """A killed runner's coordinator lock holds the next run up to the lease TTL: it must say so, not sit silent at pass 0."""
    import logging

    from mongoshift.background.state.store import lock_id
    from mongoshift.project.run import CancelSignal

    await seed(db.people, 20)
    fast_project.add("0001_names.py", background_file(batch_size=10))
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as other:  # another runner's identity holds the lock
        assert await other.session.new_lock(lock_id("0001_names.py"), ttl_seconds=60).try_acquire()
        cancel = CancelSignal()
        caplog.set_level(logging.INFO, logger="mongoshift.background")
        run = asyncio.create_task(bg.run(s, ["0001_names.py"], cancel=cancel))
        await asyncio.sleep(1.5)
        cancel.set("test")
        await run
    said = [r.getMessage() for r in caplog.records if "coordinator lock" in r.getMessage()]
    assert len(said) == 1 and "background_lease_ttl_seconds" in said[0]
    assert await db.people.count_documents({"__v": 2}) == 0
