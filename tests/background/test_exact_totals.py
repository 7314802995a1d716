"""Totals stay exact when a lane dies between a batch's write and its bookkeeping (issue 24, item 4).

The death is injected, not raced: the lane's process "ends" (an exception no code of the engine
catches, as a kill -9 leaves nothing to catch) at a chosen checkpoint, with its lease held; the
next runner reaps the lease once it expired and goes on from the partition's checkpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes import modes
from mongoshift.background.lanes.lane import Lane

from ..conftest import Project
from .conftest import background_file, seed

NAME = "0001_names.py"
QUIET = "adaptive=False, max_replication_lag_ms=False,"


class Killed(BaseException):
    """The process ended: nothing in the engine catches it, no lease is released."""


@asynccontextmanager
async def first_pass(project: Project) -> AsyncIterator[tuple[Any, Any, Any]]:
    """An engine on the project, the migration's spec, and its state once the coordinator planned its pass."""
    async with bg.open_engine(project.settings()) as engine:
        spec = engine.spec(NAME)
        yield engine, spec, (await engine.coordinator.step(NAME, spec)).state


async def registered(project: Project, db: AsyncDatabase[Any]) -> None:
    """1,000 documents and the migration (batches of 100, no throttling), registered."""
    await seed(db.people, 1000)
    project.add(NAME, background_file(batch_size=100, extra=QUIET))
    await command.up(project.settings())


async def killed_at_checkpoint(project: Project, monkeypatch: pytest.MonkeyPatch, at: int) -> None:
    """One lane's slice, its process killed as its ``at``-th checkpoint (or, if no write had landed by
    then, the first after one) is about to be written.

    Counting calls alone would not do: a range whose transaction met a transient error runs again and
    calls the checkpoint again, and a range the engine hands to the ``_id`` path (too slow for a
    transaction on a loaded machine) checkpoints there before its write; either can spend the
    ``at``-th call before any document is written."""
    async with first_pass(project) as (engine, spec, state):
        store = engine.store
        checkpoint = store.checkpoint
        people = engine.client[project.db].people
        calls = 0

        async def dies(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls >= at and await people.count_documents({"__v": 2}) > 5:  # a write has landed (5 were seeded at 2)
                raise Killed()
            return await checkpoint(*args, **kwargs)

        monkeypatch.setattr(store, "checkpoint", dies)
        with pytest.raises(Killed):
            await Lane(engine.context, "killed").run_slice(state, spec)


@pytest.mark.parametrize("transform", ["migrate", "pipeline"])
@pytest.mark.parametrize("at", [2, 3])
async def test_a_lane_killed_between_a_write_and_its_checkpoint_loses_no_count(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, transform: str, at: int
) -> None:
    await seed(db.people, 1000)
    # Already at the target version: never rewritten, so never counted.
    await db.people.insert_many([{"_id": 5000 + i, "__v": 2, "__rev": 1, "full_name": "x"} for i in range(5)])
    source = background_file(batch_size=100, extra=QUIET)
    if transform == "pipeline":
        source = source.replace("migrate=migrate,", "pipeline=[{'$set': {'full_name': {'$concat': ['$first', ' ', '$last']}}}, {'$unset': ['first', 'last']}],")
    fast_project.add(NAME, source)
    await command.up(fast_project.settings())
    await killed_at_checkpoint(fast_project, monkeypatch, at)
    written = await db.people.count_documents({"__v": 2}) - 5
    assert 0 < written < 1000  # the lane wrote batches, one of them without its bookkeeping
    monkeypatch.undo()
    (report,) = await bg.run(fast_project.settings(), [NAME])
    assert report.status == "completed"
    assert await db.people.count_documents({"__v": 2}) == 1005
    assert report.totals["migrated"] == 1000 and report.totals["scanned"] == 1000
    (status,) = await bg.status(fast_project.settings(), NAME)
    assert status.totals["migrated"] == 1000 and status.remaining == 0


async def test_a_batch_its_lane_died_before_writing_is_scanned_once(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane recorded its third batch as in flight, then died before writing it: the next lane
    reads that batch again, so the settling of the dead lane's batch must not count it as scanned
    too (it did: ``scanned`` ended a batch above the documents, and the progress line ran ahead)."""
    await registered(fast_project, db)
    async with first_pass(fast_project) as (engine, spec, state):
        write = modes.apply_batch
        calls = 0

        async def dies(*args: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 3:
                raise Killed()
            return await write(*args, **kwargs)

        monkeypatch.setattr(modes, "apply_batch", dies)
        with pytest.raises(Killed):
            await Lane(engine.context, "killed").run_slice(state, spec)
    monkeypatch.undo()
    assert await db.people.count_documents({"__v": 2}) == 200  # two batches written, the third only recorded
    (report,) = await bg.run(fast_project.settings(), [NAME])
    assert report.status == "completed"
    totals = report.totals
    assert totals["migrated"] == 1000 and totals["scanned"] == 1000
    assert totals["scanned"] == totals["migrated"] + totals["skipped"] + totals["failed"] + totals["conflicts"]


@pytest.mark.parametrize("first", ["the fenced lane", "the new holder"])
async def test_a_batch_written_by_a_lane_that_lost_its_lease_is_counted_once(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch, first: str
) -> None:
    """The lease of a lane that wrote a batch is taken away before that batch's bookkeeping: either
    the lane counts its batch (it clears the record first) or the partition's new holder does."""
    await registered(fast_project, db)
    async with first_pass(fast_project) as (engine, spec, state):
        store = engine.store
        checkpoint = store.checkpoint
        calls = 0

        async def taken_away(lease: Any, **kwargs: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:  # the first batch is written; its counts ride on this checkpoint
                await store.partitions.update_one({"_id": lease.partition_id}, {"$unset": {"lease": ""}})
                if first == "the new holder":
                    claimed = await store.claim(state, slots=[1], owner="new", ttl_ms=60_000)
                    assert claimed not in (None, False)
                    holder, _ = claimed
                    assert await store.settle_intent(holder, lease.token, {"scanned": 100, "migrated": 100, "batches": 1})
                    await store.release(holder)
            return await checkpoint(lease, **kwargs)

        monkeypatch.setattr(store, "checkpoint", taken_away)
        result = await Lane(engine.context, "stalled").run_slice(state, spec)
        assert result.outcome == "lost"
    monkeypatch.undo()
    assert await db.people.count_documents({"__v": 2}) == 100
    (report,) = await bg.run(fast_project.settings(), [NAME])
    assert report.status == "completed" and report.totals["migrated"] == 1000


async def test_the_batch_in_flight_is_one_binary_value_that_gives_back_its_ids_and_revisions(
    fast_project: Project, db: AsyncDatabase[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The partition keeps a batch in flight as one value (two arrays of the batch's length cost a
    server about three times as much to store, at every checkpoint), and the settling lane reads back
    exactly the ids and revisions the dead lane read."""
    await registered(fast_project, db)
    async with first_pass(fast_project) as (engine, spec, state):

        async def dies(*args: Any, **kwargs: Any) -> Any:
            raise Killed()

        monkeypatch.setattr(modes, "apply_batch", dies)
        with pytest.raises(Killed):
            await Lane(engine.context, "killed").run_slice(state, spec)
        (partition,) = await engine.store.partitions.find({"inflight": {"$exists": True}}).to_list(None)
    inflight = partition["inflight"]
    assert set(inflight) == {"token", "batch"} and isinstance(inflight["batch"], bytes)
    ids, revs = modes.left_batch(inflight, db.people.codec_options)
    first = await db.people.find({}, {"_id": 1, "__rev": 1}).sort("_id", 1).limit(100).to_list(None)
    assert len(ids) == 100 and ids == [doc["_id"] for doc in first] and revs == [doc.get("__rev") for doc in first]


def test_the_ids_and_revisions_in_flight_keep_their_bson_types() -> None:
    import datetime
    import uuid
    from types import SimpleNamespace

    from bson import Decimal128, Int64, ObjectId
    from bson.binary import UuidRepresentation
    from bson.codec_options import CodecOptions

    codec: CodecOptions[Any] = CodecOptions(tz_aware=True, tzinfo=datetime.UTC, uuid_representation=UuidRepresentation.STANDARD)
    ids: list[Any] = [
        1, Int64(2), 2.5, Decimal128("3.10"), "s", uuid.uuid4(), ObjectId(), datetime.datetime(2020, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.UTC),
        {"a": 1, "b": [1, "x"]}, b"\x00\x01", None, True,
    ]
    docs = [{"_id": i, "__rev": rev} for i, rev in zip(ids, [1, None, Int64(7), 2.0, *range(8)], strict=True)]
    job = SimpleNamespace(revision_field="__rev", pipeline=None)
    intent = modes._intent(job, SimpleNamespace(token="t"), docs, codec)  # type: ignore[arg-type]
    back, revs = modes.left_batch(intent, codec)
    assert [(type(i), i) for i in back] == [(type(i), i) for i in ids]
    assert [(type(r), r) for r in revs or []] == [(type(d["__rev"]), d["__rev"]) for d in docs]
    without = modes._intent(SimpleNamespace(revision_field=None, pipeline=None), SimpleNamespace(token="t"), docs, codec)  # type: ignore[arg-type]
    assert modes.left_batch(without, codec) == (ids, None)
