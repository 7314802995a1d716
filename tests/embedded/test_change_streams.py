"""Change streams over the wire (embedded/change_streams.py), proved through pymongo.

Every test but the history-window ones runs unchanged against a real replica set
(MONGOSHIFT_TEST_URI): the assertions are what mongod answers. The window tests
start their own embedded server with a 5-event history (a real oplog cannot be
shrunk that far), and the clock test is a unit test of the shim.
"""

from __future__ import annotations

import asyncio
import datetime

import pytest
from bson import Int64, Timestamp
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import AsyncMongoClient, MongoClient, UpdateOne, monitoring
from pymongo.errors import OperationFailure

from ..conftest import REAL_URI, TEST_CLIENT_OPTIONS

embedded_only = pytest.mark.skipif(
    bool(REAL_URI), reason="needs a 5-event change history: the embedded server's --change-history"
)


async def _drain(stream, count: int) -> list[dict]:
    events: list[dict] = []
    while len(events) < count:
        event = await stream.try_next()
        if event is not None:
            events.append(event)
    return events


async def _nothing_more(stream) -> None:
    assert await stream.try_next() is None


async def test_insert_update_replace_delete_arrive_in_order_as_mongod_shapes_them(db) -> None:
    async with await db.c.watch(max_await_time_ms=200) as stream:
        await db.c.insert_one({"_id": 1, "k": 1})
        await db.c.update_one({"_id": 1}, {"$set": {"k": 2}})
        await db.c.replace_one({"_id": 1}, {"k": 3})
        await db.c.delete_one({"_id": 1})
        events = await _drain(stream, 4)
        await _nothing_more(stream)
    assert [e["operationType"] for e in events] == ["insert", "update", "replace", "delete"]
    for event in events:
        assert set(event["_id"]) == {"_data"} and isinstance(event["_id"]["_data"], str)
        assert isinstance(event["clusterTime"], Timestamp)
        assert isinstance(event["wallTime"], datetime.datetime)
        assert event["ns"] == {"db": db.name, "coll": "c"}
        assert event["documentKey"] == {"_id": 1}
    assert events[0]["fullDocument"] == {"_id": 1, "k": 1}
    assert "fullDocument" not in events[1]  # default mode: no document on updates
    assert events[2]["fullDocument"] == {"_id": 1, "k": 3}
    assert "fullDocument" not in events[3]
    times = [(e["clusterTime"].time, e["clusterTime"].inc) for e in events]
    assert times == sorted(times) and len(set(times)) == 4


def test_update_lookup_gives_the_current_document_or_null(sync_client: MongoClient, db_name: str) -> None:
    collection = sync_client[db_name].c
    try:
        with collection.watch(full_document="updateLookup", max_await_time_ms=200) as stream:
            collection.insert_many([{"_id": 1, "k": 1}, {"_id": 2, "k": 1}])
            collection.update_one({"_id": 1}, {"$set": {"k": 2}})
            collection.update_one({"_id": 2}, {"$set": {"k": 2}})
            collection.delete_one({"_id": 2})
            events = [stream.next() for _ in range(5)]
        updates = [e for e in events if e["operationType"] == "update"]
        assert updates[0]["fullDocument"] == {"_id": 1, "k": 2}
        assert updates[1]["fullDocument"] is None  # deleted before the event was read
    finally:
        sync_client.drop_database(db_name)


async def test_match_and_project_stages_apply_to_the_events(db) -> None:
    pipeline = [
        {"$match": {"operationType": "insert", "fullDocument.k": {"$gte": 2}}},
        {"$project": {"operationType": 1, "fullDocument.k": 1}},
    ]
    async with await db.c.watch(pipeline, max_await_time_ms=200) as stream:
        await db.c.insert_many([{"_id": i, "k": i, "secret": "s"} for i in range(4)])
        await db.c.delete_one({"_id": 3})
        events = await _drain(stream, 2)
        await _nothing_more(stream)
    assert [(e["operationType"], e["fullDocument"]) for e in events] == [("insert", {"k": 2}), ("insert", {"k": 3})]
    assert "ns" not in events[0]


async def test_resume_after_and_start_after_a_token_give_exactly_the_following_events(db) -> None:
    async with await db.c.watch(max_await_time_ms=200) as stream:
        await db.c.insert_many([{"_id": i} for i in range(10)])
        events = await _drain(stream, 10)
    token = events[3]["_id"]
    for option in ("resume_after", "start_after"):
        async with await db.c.watch(max_await_time_ms=200, **{option: token}) as resumed:
            again = await _drain(resumed, 6)
            await _nothing_more(resumed)
        assert [e["documentKey"]["_id"] for e in again] == [4, 5, 6, 7, 8, 9]
        assert [e["_id"] for e in again] == [e["_id"] for e in events[4:]]


async def test_start_at_operation_time_includes_events_at_that_time(db) -> None:
    async with await db.c.watch(max_await_time_ms=200) as stream:
        await db.c.insert_many([{"_id": i} for i in range(5)])
        events = await _drain(stream, 5)
    # Each insert has its own cluster time here; mongod may give a batch one time, so
    # start at the first event that has a time of its own.
    starts = [e for e in events if sum(x["clusterTime"] == e["clusterTime"] for x in events) == 1]
    start = starts[len(starts) // 2]
    expected = [e["documentKey"]["_id"] for e in events if e["clusterTime"] >= start["clusterTime"]]
    async with await db.c.watch(start_at_operation_time=start["clusterTime"], max_await_time_ms=200) as resumed:
        again = await _drain(resumed, len(expected))
        await _nothing_more(resumed)
    assert [e["documentKey"]["_id"] for e in again] == expected


async def test_conflicting_resume_options_fail_with_mongod_codes(db) -> None:
    async with await db.c.watch(max_await_time_ms=200) as stream:
        await db.c.insert_one({"_id": 1})
        token = (await _drain(stream, 1))[0]["_id"]
    stage = {"resumeAfter": token, "startAfter": token}
    with pytest.raises(OperationFailure) as both:
        await db.command({"aggregate": "c", "pipeline": [{"$changeStream": stage}], "cursor": {}})
    assert both.value.code == 50865
    stage = {"resumeAfter": token, "startAtOperationTime": Timestamp(1, 1)}
    with pytest.raises(OperationFailure) as mixed:
        await db.command({"aggregate": "c", "pipeline": [{"$changeStream": stage}], "cursor": {}})
    assert mixed.value.code == 40674


async def test_aborted_transaction_emits_nothing_and_a_committed_one_emits_at_commit(client, db) -> None:
    await db.create_collection("c")
    async with await db.c.watch(max_await_time_ms=200) as stream:
        async with client.start_session() as session:
            await session.start_transaction()
            await db.c.insert_one({"_id": "aborted"}, session=session)
            await session.abort_transaction()
            await session.start_transaction()
            await db.c.insert_one({"_id": "t1"}, session=session)
            await db.c.update_one({"_id": "t1"}, {"$set": {"k": 1}}, session=session)
            await _nothing_more(stream)  # not before the commit
            await session.commit_transaction()
        await db.c.insert_one({"_id": "after"})
        events = await _drain(stream, 3)
        await _nothing_more(stream)
    assert [(e["operationType"], e["documentKey"]["_id"]) for e in events] == [
        ("insert", "t1"), ("update", "t1"), ("insert", "after")
    ]


async def test_get_more_waits_for_an_event_and_returns_when_it_arrives(mongo_uri: str, db) -> None:
    """One try_next is one getMore: it returns the event only if the server waited for it."""
    get_more_sent = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Listener(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "getMore":
                loop.call_soon_threadsafe(get_more_sent.set)

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    watcher: AsyncMongoClient = AsyncMongoClient(mongo_uri, event_listeners=[Listener()], **TEST_CLIENT_OPTIONS)
    try:
        async with await watcher[db.name].c.watch(max_await_time_ms=30_000) as stream:
            waiting = asyncio.create_task(stream.try_next())
            await get_more_sent.wait()
            await db.c.insert_one({"_id": "late"})
            event = await waiting
    finally:
        await watcher.close()
    assert event is not None and event["documentKey"] == {"_id": "late"}


async def test_a_killed_cursor_is_resumed_by_the_driver_without_gap_or_repeat(db) -> None:
    async with await db.c.watch(max_await_time_ms=200) as stream:
        await db.c.insert_one({"_id": 1})
        first = await _drain(stream, 1)
        # As after a failover: the server forgets the cursor, the driver resumes from its token.
        await db.command("killCursors", "c", cursors=[Int64(stream._cursor._id)])
        await db.c.insert_many([{"_id": 2}, {"_id": 3}])
        rest = await _drain(stream, 2)
        await _nothing_more(stream)
    assert [e["documentKey"]["_id"] for e in first + rest] == [1, 2, 3]


async def test_no_event_is_lost_under_a_concurrent_writer(db) -> None:
    ids = [f"d{i}" for i in range(500)]  # string _ids: an int _id insert scans the collection here

    async def write() -> None:  # 1,000 writes in 40 commands, while the stream reads
        for start in range(0, 500, 25):
            chunk = ids[start : start + 25]
            await db.c.insert_many([{"_id": i, "k": 0} for i in chunk])
            await db.c.bulk_write([UpdateOne({"_id": i}, {"$set": {"k": 1}}) for i in chunk], ordered=False)

    async with await db.c.watch(max_await_time_ms=500, batch_size=50) as stream:
        writer = asyncio.create_task(write())
        events = await _drain(stream, 1_000)
        await writer
        await _nothing_more(stream)
    seen = [(e["operationType"], e["documentKey"]["_id"]) for e in events]
    assert sorted(seen) == sorted([("insert", i) for i in ids] + [("update", i) for i in ids])
    tokens = [e["_id"]["_data"] for e in events]
    assert len(set(tokens)) == 1_000


async def test_raw_replies_have_mongod_shapes_and_types(db) -> None:
    """What any driver reads (the Node, Go and Java drivers read cursor ids only as int64)."""
    raw = db.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
    opened = await raw.command({"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}})
    cursor = opened["cursor"]
    assert isinstance(cursor["id"], Int64) and cursor["id"] != 0
    assert cursor["ns"] == f"{db.name}.c"
    assert list(cursor["firstBatch"]) == []
    assert isinstance(cursor["postBatchResumeToken"]["_data"], str)
    await db.c.insert_one({"_id": 1})
    more = await raw.command({"getMore": cursor["id"], "collection": "c", "maxTimeMS": 5_000})
    batch = more["cursor"]
    assert batch["id"] == cursor["id"] and isinstance(batch["id"], Int64)
    assert [e["operationType"] for e in batch["nextBatch"]] == ["insert"]
    assert batch["postBatchResumeToken"]["_data"] == batch["nextBatch"][0]["_id"]["_data"]
    killed = await db.command("killCursors", "c", cursors=[cursor["id"]])
    assert killed["cursorsKilled"] == [cursor["id"]]


# The history window (embedded server only) --------------------------------------------


@pytest.fixture(scope="module")
def small_history_uri() -> object:
    from mongoshift.embedded.process import embedded_server

    with embedded_server(change_history=5) as uri:
        yield uri


@embedded_only
async def test_a_resume_point_off_the_history_is_change_stream_history_lost_286(small_history_uri: str) -> None:
    client: AsyncMongoClient = AsyncMongoClient(small_history_uri, **TEST_CLIENT_OPTIONS)
    try:
        collection = client.w.c
        async with await collection.watch(max_await_time_ms=200) as stream:
            await collection.insert_many([{"_id": i} for i in range(3)])
            events = await _drain(stream, 3)
        await collection.insert_many([{"_id": i} for i in range(3, 8)])  # the first three fall off
        for option in ({"resume_after": events[0]["_id"]}, {"start_at_operation_time": events[1]["clusterTime"]}):
            with pytest.raises(OperationFailure) as lost:
                async with await collection.watch(**option) as resumed:
                    await resumed.try_next()
            assert lost.value.code == 286
            assert lost.value.details["codeName"] == "ChangeStreamHistoryLost"
        # The newest point still held resumes: events 3..7 are the five kept.
        async with await collection.watch(resume_after=events[2]["_id"], max_await_time_ms=200) as resumed:
            assert [e["documentKey"]["_id"] for e in await _drain(resumed, 5)] == [3, 4, 5, 6, 7]
        # An open stream that falls behind the window fails the same way on getMore.
        async with await collection.watch(max_await_time_ms=200) as behind:
            await collection.insert_many([{"_id": i} for i in range(8, 20)])
            with pytest.raises(OperationFailure) as fell:
                await behind.try_next()
            assert fell.value.code == 286
    finally:
        await client.close()


@embedded_only
async def test_a_token_this_server_never_issued_is_change_stream_fatal_error_280(small_history_uri: str) -> None:
    from mongoeco.types import Timestamp as EcoTimestamp

    from mongoshift.embedded.change_streams import StreamPoint

    client: AsyncMongoClient = AsyncMongoClient(small_history_uri, **TEST_CLIENT_OPTIONS)
    try:
        async with await client.w.other.watch(max_await_time_ms=200) as stream:
            await client.w.other.insert_one({})
            token = (await _drain(stream, 1))[0]["_id"]
        issued = StreamPoint.from_token(token)
        future = StreamPoint(issued.position + 1_000, issued.cluster_time).token()
        other_time = StreamPoint(issued.position, EcoTimestamp(issued.cluster_time.time + 1, 1)).token()
        for bad in (future, other_time):
            with pytest.raises(OperationFailure) as fatal:
                async with await client.w.other.watch(resume_after=bad) as resumed:
                    await resumed.try_next()
            assert (fatal.value.code, fatal.value.details["codeName"]) == (280, "ChangeStreamFatalError")
    finally:
        await client.close()


def test_cluster_times_only_move_forward_even_when_the_clock_goes_back() -> None:
    pytest.importorskip("mongoeco")
    from mongoshift.embedded.change_streams import ClusterClock

    readings = iter([100.0, 100.5, 101.2, 99.0, 101.9, 102.0])
    clock = ClusterClock(lambda: next(readings))
    stamps = [clock.tick()[0] for _ in range(5)]
    assert [(s.time, s.inc) for s in stamps] == [(100, 1), (101, 1), (101, 2), (101, 3), (102, 1)]


async def test_database_and_cluster_streams_see_every_collection(client, db) -> None:
    other = client[f"{db.name}_2"]
    # The cluster stream sees every database: on a real server that other tests (another pytest-xdist
    # worker) write to at the same time, only these two databases' events are this test's.
    these = [{"$match": {"ns.db": {"$in": [db.name, other.name]}}}]
    try:
        async with await db.watch(max_await_time_ms=200) as database_stream, \
                await client.watch(these, max_await_time_ms=200) as cluster_stream:
            await db.a.insert_one({"_id": 1})
            await db.b.insert_one({"_id": 2})
            await other.c.insert_one({"_id": 3})
            in_database = await _drain(database_stream, 2)
            await _nothing_more(database_stream)
            everywhere = [e for e in await _drain(cluster_stream, 3)]
    finally:
        await client.drop_database(other.name)
    assert [e["ns"] for e in in_database] == [{"db": db.name, "coll": "a"}, {"db": db.name, "coll": "b"}]
    assert [e["ns"] for e in everywhere] == [
        {"db": db.name, "coll": "a"}, {"db": db.name, "coll": "b"}, {"db": other.name, "coll": "c"}
    ]
