"""Background migrations through real Celery workers: a coordinator chain, lane tasks, and kill -9."""

from __future__ import annotations

import time

import pytest
from pymongo import MongoClient

from mongoshift import api

from ..background.conftest import background_file, seed
from .conftest import until

pytestmark = pytest.mark.celery

#: Slow enough per batch (20 documents, 10 ms each) that a kill lands in the middle of a slice.
SLOW_FILE = '''
import time
from mongoshift import Background

def migrate(doc, ctx):
    time.sleep(0.01)
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc

background = Background(
    collection="people",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=20,
    pause_ms=0,
    slice_ms=1000,
    max_parallel=2,
    adaptive=False,
    partitions={"min_partition_docs": 50},
)
'''

TOTAL = 600
NAME = "20260101000001_names.py"


@pytest.mark.slow  # a worker process killed, then the lease TTL waited out
async def test_a_worker_killed_mid_slice_is_recovered_by_the_lease_ttl(redis_harness, project, db, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.3)
    await seed(db.people, TOTAL)
    project.add(NAME, SLOW_FILE)
    await api.up(project.settings())  # registers it
    people = sync_client[project.db].people
    partitions = sync_client[project.db]["_mongoshift_background_partitions"]

    start = redis_harness.tasks.start_background(NAME, lanes=2)
    assert start.started
    assert not redis_harness.tasks.start_background(NAME).started  # one chain per migration (its claim, queued)
    victim = redis_harness.worker("-P", "solo")
    until(lambda: people.count_documents({"__v": 2}) >= 100, 60, "the first worker migrated 100 documents", redis_harness)
    victim.kill()
    done_before = people.count_documents({"__v": 2})
    assert done_before < TOTAL
    assert partitions.count_documents({"lease": {"$exists": True}}) >= 1  # the killed lane's lease is still there

    redis_harness.worker("-P", "solo")
    # The chain goes on if its next step was still in the broker; if the killed worker held it, the
    # beat's background tick (sent here as the beat would, once a second) starts a new chain once
    # the old one's hold has lapsed.
    states = sync_client[project.db]["_mongoshift_background"]
    ticks: list[float] = []

    def completed() -> bool:
        status = states.find_one({"_id": NAME})["status"]
        assert status in ("running", "completed"), status
        if status != "completed" and (not ticks or time.monotonic() - ticks[-1] >= 1):
            ticks.append(time.monotonic())
            redis_harness.tasks.background_tick.apply_async()
        return status == "completed"

    until(completed, 120, "the new worker completed the migration", redis_harness)
    assert people.count_documents({"__v": 2, "__rev": 2}) == TOTAL  # revision +1: every document rewritten exactly once
    assert people.count_documents({"__rev": {"$ne": 2}}) == 0
    assert sum(p.get("reclaims", 0) for p in partitions.find()) >= 1  # the dead lease was reaped after its TTL
    assert partitions.count_documents({"lease": {"$exists": True}}) == 0


@pytest.mark.slow  # worker processes killed and restarted, then the tick waited for
async def test_a_chain_lost_with_its_worker_is_started_again_by_the_tick(redis_harness, project, db, sync_client: MongoClient) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.3)
    await seed(db.people, 100)
    project.add(NAME, background_file(batch_size=50))
    settings = project.settings()
    await api.up(settings)
    # a chain whose worker died holding it: its hold lapses after its TTL, and nothing renews it.
    # The TTL covers the worker's start and the first tick on a loaded machine (with 2 s, a
    # worker that took longer to start found the hold already lapsed).
    assert await api.claim_intents(settings, [api.Claim(f"background:{NAME}", "a-dead-chain", 15.0)]) == [True]
    redis_harness.worker("-P", "solo")
    tick = redis_harness.tasks.background_tick
    assert tick.apply_async().get(timeout=30) == []  # held: no second chain
    until(lambda: tick.apply_async().get(timeout=30) == [NAME], 45, "the tick started a new chain", redis_harness)
    states = sync_client[project.db]["_mongoshift_background"]
    until(lambda: states.find_one({"_id": NAME})["status"] == "completed", 60, "the new chain completed it", redis_harness)
    assert sync_client[project.db].people.count_documents({"__v": 2, "__rev": 2}) == 100
    locks = sync_client[project.db]["_mongoshift_locks"]
    until(lambda: locks.count_documents({"_id": f"queue:background:{NAME}"}) == 0, 30, "the chain let go at its end", redis_harness)


FAILING_FILE = '''
from mongoshift import Background

def migrate(doc, ctx):
    raise ValueError("cannot read the address " + repr(doc.get("first")))

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=10, pause_ms=0)
'''


async def test_a_chain_whose_migration_failed_says_why_not_only_failed(project, db) -> None:  # type: ignore[no-untyped-def]
    """The chain's last result read ``{"status": "failed", "reason": "failed"}``: a caller of ``BackgroundStart.wait()``
    learnt nothing it could act on. Its reason is the migration's last error, as ``background status`` says it (redacted)."""
    from mongoshift.celery import BackgroundOptions, background as bg
    from mongoshift.celery.payloads import CoordinatorPayload, LanePayload

    project.write_config(background_poll_seconds=0.2)
    await seed(db.people, 5)
    project.add(NAME, FAILING_FILE)
    settings = project.settings()
    await api.up(settings)
    options = BackgroundOptions(poll_seconds=0.2)
    payload = CoordinatorPayload(name=NAME, chain="c1", lanes=1)
    assert await bg.claim_chain(settings, NAME, api.Claim(bg.chain_key(NAME), "c1", 60))
    result = None
    for _ in range(50):  # each step either hands out a lane (run here, slice by slice) or ends the chain
        tick = await bg.coordinate(settings, payload, options)
        if isinstance(tick.next, bg.BackgroundResult):
            result = tick.next
            break
        for _ in range(tick.lanes):
            outcome = await bg.lane(settings, LanePayload(name=NAME, chain="c1"), options)
            while isinstance(outcome, bg.Again):
                assert isinstance(outcome.payload, LanePayload)
                outcome = await bg.lane(settings, outcome.payload, options)
    assert result is not None and result.status == "failed", result
    assert result.reason and result.reason != "failed", result
    assert "could not be migrated" in result.reason and "F0" not in result.reason, result.reason
