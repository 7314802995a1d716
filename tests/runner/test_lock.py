"""The migration lock against the server: atomic, fenced, reclaimed after its TTL."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from mongoshift.errors import LockHeldError
from mongoshift.project.lock import LeaseLock, process_identity
from mongoshift.project.run import RunInfo

from ..conftest import until


def run(i: int) -> RunInfo:
    return RunInfo(run_id=f"run-{i}", executed_by="tester", host="host", environment="test")


async def test_concurrent_claims_give_exactly_one_holder(db) -> None:  # type: ignore[no-untyped-def]
    locks = [LeaseLock(db["locks"], run(i), ttl_seconds=30) for i in range(20)]
    won = await asyncio.gather(*(lock.try_acquire() for lock in locks))
    assert sum(won) == 1
    holder = await locks[0].holder()
    assert holder is not None and holder.owner == f"run-{won.index(True)}"


async def test_held_lock_refuses_and_names_the_holder(db) -> None:  # type: ignore[no-untyped-def]
    a = LeaseLock(db["locks"], run(1), ttl_seconds=30)
    await a.acquire()
    with pytest.raises(LockHeldError, match="tester on host") as info:
        await LeaseLock(db["locks"], run(2), ttl_seconds=30).acquire()
    assert info.value.details["holder"]["gone"] is False  # the fields `lock --json` shows
    assert info.value.details["holder"]["owner"] == "run-1" and "; wait with --wait (Lock(wait=...) in the Python API)," in info.value.message
    with pytest.raises(LockHeldError) as waited:  # --wait given: the advice is not to give it
        await LeaseLock(db["locks"], run(2), ttl_seconds=30).acquire(wait_seconds=0)
    assert "(still, after waiting 0 s); wait longer with --wait (Lock(wait=...) in the Python API)," in waited.value.message
    await a.release()
    await LeaseLock(db["locks"], run(3), ttl_seconds=30).acquire()


async def test_expired_lock_is_taken_over_and_the_old_holder_is_fenced(db) -> None:  # type: ignore[no-untyped-def]
    # A TTL far longer than the round trip between a's acquire and b's refused try (a 1 s one raced it
    # on a loaded machine); then b tries until the server's clock has passed a's expiry.
    a = LeaseLock(db["locks"], run(1), ttl_seconds=3)
    await a.acquire()  # no heartbeat: as if the process was killed
    b = LeaseLock(db["locks"], run(2), ttl_seconds=30)
    assert not await b.try_acquire()
    await until("b takes the expired lock", b.try_acquire)
    assert not await a.renew()
    await a.release()  # must not delete b's lock
    holder = await b.holder()
    assert holder is not None and holder.owner == "run-2"


async def test_heartbeat_keeps_the_lock_and_detects_loss(db) -> None:  # type: ignore[no-untyped-def]
    # A TTL a loaded machine renews within (a 1 s TTL gave up on a slow round trip, as it should), and
    # states waited on, not times: the lock's expiry moved past the one the acquire wrote, twice.
    a = LeaseLock(db["locks"], run(1), ttl_seconds=6)
    await a.acquire()
    first = (await db["locks"].find_one({"_id": a.lock_id}))["expires_at"]
    a.start_heartbeat()

    async def renewed(times: int) -> None:
        seen, last = 0, first
        while seen < times:
            assert not a.lost.is_set(), a.lost_reason
            expires = (await db["locks"].find_one({"_id": a.lock_id}))["expires_at"]
            seen, last = (seen + 1, expires) if expires > last else (seen, last)
            await asyncio.sleep(0.05)

    await asyncio.wait_for(renewed(2), 60)
    assert not await LeaseLock(db["locks"], run(2), ttl_seconds=30).try_acquire()
    assert await LeaseLock(db["locks"], run(3), ttl_seconds=1).force_release()
    await asyncio.wait_for(a.lost.wait(), timeout=60)
    assert a.lost_reason and "cleared" in a.lost_reason
    await a.release()


async def test_wait_takes_the_lock_once_it_is_released(db, caplog) -> None:  # type: ignore[no-untyped-def]
    """It also says once, naming the holder, that it waits: a --wait of minutes was silent until the end."""
    caplog.set_level(logging.INFO, logger="mongoshift.lock")
    a = LeaseLock(db["locks"], run(1), ttl_seconds=30)
    await a.acquire()
    waiting = asyncio.Event()

    async def release_once_b_waits() -> None:  # not after a fixed time: b was refused and waits, then a lets go
        await waiting.wait()
        await a.release()

    task = asyncio.create_task(release_once_b_waits())
    b = LeaseLock(db["locks"], run(2), ttl_seconds=30)
    await b.acquire(wait_seconds=60, poll_seconds=0.1, on_wait=waiting.set)
    await task
    assert waiting.is_set()
    holder = await b.holder()
    assert holder is not None and holder.owner == "run-2"
    said = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert len(said) == 1 and "run run-1" in said[0] and said[0].endswith(": waiting up to 60 s for it"), said


def _exited_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def here(i: int) -> RunInfo:
    return RunInfo(run_id=f"run-{i}", executed_by="tester", host=socket.gethostname(), environment="test")


async def _left_behind(db, holder: RunInfo, **fields: object) -> None:  # type: ignore[no-untyped-def]
    """A live-looking lock (ten minutes left) of a holder that never released it, as ``kill -9`` leaves one."""
    now = datetime.now(UTC)
    await db["locks"].insert_one(
        {"_id": "migration_lock", "owner": holder.run_id, "nonce": "n", "host": holder.host, "executed_by": "ci",
         "ttl_ms": 600_000, "locked_at": now, "expires_at": now + timedelta(minutes=10), **fields}
    )


async def test_a_dead_holder_of_this_host_is_taken_over_before_its_ttl(db) -> None:  # type: ignore[no-untyped-def]
    await _left_behind(db, here(1), pid=_exited_pid(), process=process_identity())
    taker = LeaseLock(db["locks"], here(2), ttl_seconds=30)
    assert await taker.try_acquire()
    holder = await taker.holder()
    assert holder is not None and holder.owner == "run-2" and holder.pid == os.getpid()
    assert holder.process == process_identity()  # what the next taker compares
    await taker.release()
    assert await db["locks"].count_documents({}) == 0


@pytest.mark.skipif(not process_identity().get("started"), reason="needs /proc (Linux) for a process's start time")
async def test_a_reused_pid_is_a_dead_holder_but_the_same_process_is_not(db) -> None:  # type: ignore[no-untyped-def]
    mine = process_identity()
    await _left_behind(db, here(1), pid=os.getpid(), process=mine)  # this very process: alive
    assert not await LeaseLock(db["locks"], here(2), ttl_seconds=30).try_acquire()
    await db["locks"].update_one({"_id": "migration_lock"}, {"$set": {"process.started": mine["started"] - 1}})
    assert await LeaseLock(db["locks"], here(3), ttl_seconds=30).try_acquire()  # the pid now names a later process


@pytest.mark.parametrize(
    ("holder", "process"),
    [(run(1), {}), (here(1), {"pid_ns": "pid:[1]"}), (here(1), {"boot_id": "another-boot"})],
    ids=["another-host", "another-container", "before-a-reboot"],
)
async def test_a_holder_that_cannot_be_judged_keeps_its_lock_until_the_ttl(db, holder: RunInfo, process: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    await _left_behind(db, holder, pid=_exited_pid(), process={**process_identity(), **process})
    with pytest.raises(LockHeldError):
        await LeaseLock(db["locks"], here(2), ttl_seconds=30).acquire()
    remaining = await LeaseLock(db["locks"], here(3), ttl_seconds=30).holder()
    assert remaining is not None and remaining.owner == "run-1"
