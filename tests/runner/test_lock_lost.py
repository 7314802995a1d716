"""Losing the migration lock mid-migration: the run is told at once and nothing is recorded applied."""

from __future__ import annotations

import asyncio

import pytest

from mongoshift.api import migrations as command
from mongoshift.errors import LockLostError
from mongoshift.project.lock import LeaseLock
from mongoshift.project.run import RunInfo

from ..conftest import fail_command
from .conftest import LOSES_LOCK

# The body clears the lock document (as 'mongoshift unlock --yes' would), then waits
# for ctx.cancelled, and notes what it saw.
CLEARS_AND_POLLS = """
import asyncio

async def up(ctx):
    await ctx.db["_mongoshift_locks"].delete_many({})
    for _ in range(100):
        if ctx.cancelled.is_set():
            await ctx.db.seen.insert_one({"cancelled": True, "reason": ctx.cancelled.reason})
            return
        await asyncio.sleep(0.1)
    await ctx.db.seen.insert_one({"cancelled": False})
"""

# Another run really takes the lock over (after clearing it) while this body runs.
TAKEN_OVER_AND_POLLS = """
import asyncio
from mongoshift.project.run import RunInfo
from mongoshift.project.lock import LeaseLock

async def up(ctx):
    await ctx.db["_mongoshift_locks"].delete_many({})
    other = LeaseLock(ctx.db["_mongoshift_locks"], RunInfo("other-run", "someone", "elsewhere", "test"), ttl_seconds=60)
    assert await other.try_acquire()
    for _ in range(100):
        if ctx.cancelled.is_set():
            await ctx.db.seen.insert_one({"cancelled": True})
            return
        await asyncio.sleep(0.1)
    await ctx.db.seen.insert_one({"cancelled": False})
"""

# A body that never looks at ctx.cancelled and outlives a heartbeat: it goes on until the heartbeat
# has found the lock gone (the lock_lost_seen fixture), not for 1.2 s, which a loaded machine's
# heartbeat may not have renewed within (then the check before the record caught it instead).
CLEARS_AND_IGNORES = LOSES_LOCK.rstrip("\n") + """
    ctx.db.seen.insert_one({"finished": True})
"""

# Finishes before the heartbeat could notice: only a check before the record catches it.
CLEARS_AND_RETURNS = """
async def up(ctx):
    await ctx.db["_mongoshift_locks"].delete_many({})
"""

CLEARS_IN_A_TRANSACTION = """
use_transaction = True

def up(ctx):
    ctx.db.items.insert_one({"in": "txn"}, session=ctx.session)
    ctx.db["_mongoshift_locks"].delete_many({})
"""

NEXT = "async def up(ctx):\n    await ctx.db.seen.insert_one({'next': True})\n"


async def records(db) -> dict[str, dict]:  # type: ignore[no-untyped-def, type-arg]
    return {d["name"]: d async for d in db["_mongoshift_migrations"].find()}


@pytest.mark.parametrize("body", [CLEARS_AND_POLLS, TAKEN_OVER_AND_POLLS], ids=["cleared", "taken-over"])
async def test_lost_lock_sets_ctx_cancelled_and_fails_the_running_migration(project, db, body: str) -> None:  # type: ignore[no-untyped-def]
    project.write_config(lock_ttl_seconds=2)
    project.add("0001_loses.py", body)
    with pytest.raises(LockLostError) as info:
        await command.up(project.settings())
    assert info.value.exit_code == 10
    seen = await db.seen.find_one({}, {"_id": 0})
    assert seen is not None and seen["cancelled"] is True  # the body saw the signal while it ran
    record = (await records(db))["0001_loses.py"]
    assert record["status"] == "failed" and "lock" in record["error"]
    assert [r["status"] for r in info.value.details["results"]] == ["failed"]


@pytest.mark.parametrize(
    "body",
    [CLEARS_AND_IGNORES, CLEARS_AND_RETURNS, CLEARS_IN_A_TRANSACTION],
    ids=["outlives-heartbeat", "returns-at-once", "in-a-transaction"],
)
async def test_lost_lock_never_records_a_body_that_does_not_poll_as_applied(project, db, body: str, lock_lost_seen) -> None:  # type: ignore[no-untyped-def]
    project.write_config(lock_ttl_seconds=6)  # a TTL a loaded machine renews within: the lock is lost only when cleared
    project.add("0001_loses.py", body)
    project.add("0002_next.py", NEXT)
    with pytest.raises(LockLostError):
        await command.up(project.settings())
    found = await records(db)
    assert found["0001_loses.py"]["status"] == "failed"
    assert "0002_next.py" not in found
    assert await db.seen.count_documents({"next": True}) == 0
    assert await db.items.count_documents({}) == 0  # a transactional body's writes were rolled back
    assert lock_lost_seen.is_set()


async def test_warn_policy_goes_on_and_records_applied(project, db, lock_lost_seen) -> None:  # type: ignore[no-untyped-def]
    project.write_config(lock_ttl_seconds=6, on_lock_lost="warn")
    project.add("0001_loses.py", CLEARS_AND_IGNORES)
    project.add("0002_next.py", NEXT)
    report = await command.up(project.settings())
    assert [r.status for r in report.results] == ["applied", "applied"]
    assert lock_lost_seen.is_set()  # applied although the run knew its lock was gone
    (said,) = [w for w in report.warnings if "lock was lost" in w]  # once, in the report (--json) too
    assert said.endswith("the run went on because on_lock_lost = warn")


async def test_warn_policy_says_a_lock_lost_during_the_last_step(project, db, lock_lost_seen) -> None:  # type: ignore[no-untyped-def]
    """No next step checks the lock: the end of the run still says it was lost."""
    project.write_config(lock_ttl_seconds=6, on_lock_lost="warn")
    project.add("0001_loses.py", CLEARS_AND_IGNORES)
    report = await command.up(project.settings())
    assert [r.status for r in report.results] == ["applied"] and lock_lost_seen.is_set()
    assert [w for w in report.warnings if "lock was lost" in w] != []


async def test_renewal_gives_up_before_the_ttl_runs_out(db, client) -> None:  # type: ignore[no-untyped-def]
    """When renewals keep failing, the lock is declared lost while its document is still live,
    so the run stops before anybody else can take the lock over. A 6 s TTL leaves the check below
    1.5 s to read the lock after the loss (a quarter of the TTL): a loaded machine's loop gets there."""
    lock = LeaseLock(db["locks"], RunInfo("run-1", "tester", "host", "test"), ttl_seconds=6)
    await lock.acquire()
    lock.start_heartbeat()
    try:
        async with fail_command(client, "alwaysOn", failCommands=["update"], errorCode=2, errmsg="injected"):
            await asyncio.wait_for(lock.lost.wait(), timeout=60)
            live = await db["locks"].count_documents({"$expr": {"$gt": ["$expires_at", "$$NOW"]}})
        assert live == 1, "the lock was given up only after its TTL had run out"
        assert lock.lost_reason and "renewed" in lock.lost_reason
    finally:
        await lock.release()
