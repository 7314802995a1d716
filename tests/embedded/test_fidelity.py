"""Fixes (z)-(ac) of mongoshift.embedded.patches, found by MongoDB's own specification tests.

Through the real pymongo driver and unchanged against a real replica set
(MONGOSHIFT_TEST_URI): every assertion is what mongod answers, and each test fails on
mongoeco 4.11 without its fix.
"""

from __future__ import annotations

import re

import pytest
from bson import Regex
from pymongo import AsyncMongoClient, UpdateOne, monitoring
from pymongo.errors import OperationFailure, WriteError

from ..conftest import TEST_CLIENT_OPTIONS


async def test_an_english_regional_collation_is_english(db) -> None:
    """(z) en_US compares as en: strength 2 ignores case."""
    await db.t.insert_many([{"_id": 1, "x": "ping"}, {"_id": 2, "x": "pINg"}, {"_id": 3, "x": "pong"}])
    found = [d["_id"] async for d in db.t.find({"x": "PING"}, collation={"locale": "en_US", "strength": 2})]
    assert found == [1, 2]
    await db.t.create_index("x", collation={"locale": "en_GB", "strength": 2})
    (index,) = [i async for i in await db.t.list_indexes() if i["name"] == "x_1"]
    assert index["collation"]["locale"] == "en_GB" and index["collation"]["strength"] == 2


async def test_an_id_with_dollar_prefixed_fields_is_refused(db) -> None:
    """(aa) mongod refuses a $-prefixed field in _id (52), and accepts one elsewhere (5.0+)."""
    with pytest.raises(WriteError) as info:
        await db.t.insert_one({"_id": {"$a": 1}})
    assert info.value.code == 52
    await db.t.insert_one({"_id": {"a.b": 1}, "doc": {"$b": 1}})
    assert await db.t.count_documents({}) == 1


async def test_let_values_are_evaluated_once(db) -> None:
    """(ab) A command's let values are expressions: evaluated, never stored as written."""
    await db.t.insert_many([{"_id": 1, "name": "a"}, {"_id": 2, "name": "b"}])
    await db.t.update_many(
        {"$expr": {"$eq": ["$name", "$$name"]}},
        [{"$set": {"x": "$$x", "y": "$$y"}}],
        let={"name": "a", "x": {"$add": [1, 2]}, "y": {"$literal": "$bar"}},
    )
    assert await db.t.find_one({"_id": 1}) == {"_id": 1, "name": "a", "x": 3, "y": "$bar"}
    rows = await (await db.t.aggregate([{"$project": {"_id": 0, "r": "$$r"}}], let={"r": {"$rand": {}}})).to_list()
    assert all(isinstance(row["r"], float) for row in rows)


async def test_out_replaces_the_target_and_keeps_its_indexes(db) -> None:
    """(ac) $out replaces the target collection in one step, keeping its indexes."""
    await db.src.insert_many([{"_id": i, "x": i} for i in range(5)])
    await db.dst.insert_one({"_id": "old", "x": -1})
    await db.dst.create_index("x", unique=True)
    assert await (await db.src.aggregate([{"$match": {"x": {"$gte": 3}}}, {"$out": "dst"}])).to_list() == []
    assert [d async for d in db.dst.find()] == [{"_id": 3, "x": 3}, {"_id": 4, "x": 4}]
    assert "x_1" in [i["name"] async for i in await db.dst.list_indexes()]
    with pytest.raises(OperationFailure) as info:  # the unique index refuses the results: the target stays
        await db.src.aggregate([{"$set": {"x": 0}}, {"$out": "dst"}])
    assert info.value.code == 11000
    assert [d["_id"] async for d in db.dst.find()] == [3, 4]
    assert sorted(await db.list_collection_names()) == ["dst", "src"]


async def test_a_view_is_listed_as_a_read_only_view(db) -> None:
    """(bi) listCollections says type "view" and readOnly for a view, "collection" for a collection."""
    await db.t.insert_one({"_id": 1})
    await db.create_collection("v", viewOn="t", pipeline=[{"$match": {}}])
    listed = {info["name"]: info async for info in await db.list_collections()}
    assert (listed["v"]["type"], listed["v"]["info"]["readOnly"], listed["v"]["options"]["viewOn"]) == ("view", True, "t")
    assert (listed["t"]["type"], listed["t"]["info"]["readOnly"]) == ("collection", False)
    only = [info["name"] async for info in await db.list_collections(filter={"type": "view"})]
    assert only == ["v"]


async def test_a_pipeline_set_of_a_missing_field_leaves_it_out(db) -> None:
    """A pipeline update's ``{$set: {f: "$missing"}}`` adds no field, as mongod's, on every update path
    (docs/embedded.md once listed it as storing null)."""
    await db.t.insert_many([{"_id": i, "v": i} for i in range(5)])
    unset = [{"$set": {"f": "$missing"}}]
    await db.t.update_one({"_id": 0}, unset)
    await db.t.update_many({"_id": {"$in": [1, 2]}}, unset)
    await db.t.find_one_and_update({"_id": 3}, unset)
    await db.t.update_one({"_id": 9}, unset, upsert=True)
    await db.t.update_many({"_id": 4}, [{"$addFields": {"f": "$missing.x", "g": 1}}])
    assert [d async for d in db.t.find().sort("_id")] == [
        {"_id": 0, "v": 0}, {"_id": 1, "v": 1}, {"_id": 2, "v": 2}, {"_id": 3, "v": 3}, {"_id": 4, "v": 4, "g": 1}, {"_id": 9},
    ]


async def test_a_single_field_unique_index_takes_missing_and_null_for_one_key(db) -> None:
    """(bj) mongod indexes a missing field as null: {} and {a: null} clash, on insert and on build; sparse skips {}."""
    from pymongo.errors import DuplicateKeyError

    await db.t.create_index("a", unique=True)
    await db.t.insert_one({"_id": 1, "a": None})
    with pytest.raises(DuplicateKeyError):
        await db.t.insert_one({"_id": 2})
    await db.t.delete_one({"_id": 1})
    await db.t.insert_one({"_id": 2})
    with pytest.raises(DuplicateKeyError):
        await db.t.insert_one({"_id": 3, "a": None})
    with pytest.raises(DuplicateKeyError):
        await db.t.update_one({"_id": 4}, {"$set": {"b": 1}}, upsert=True)
    await db.u.insert_many([{"_id": 1, "a": None}, {"_id": 2}])
    with pytest.raises(OperationFailure) as build:
        await db.u.create_index("a", unique=True)
    assert build.value.code == 11000
    await db.u.create_index("a", unique=True, sparse=True, name="sparse")  # {} is not in a sparse index
    assert await db.t.count_documents({}) == 1 and await db.u.count_documents({}) == 2


async def test_a_database_level_aggregate_starts_from_its_source_stage(client, db) -> None:
    """(ac) {aggregate: 1}: $documents and $listLocalSessions; a stage needing a collection is 73."""
    rows = await (await db.aggregate([{"$documents": [{"a": 1}, {"a": 2}]}, {"$match": {"a": 2}}])).to_list()
    assert rows == [{"a": 2}]
    async with client.start_session() as session:
        await db.t.insert_one({"_id": 1}, session=session)
        sessions = await (await client.admin.aggregate([{"$listLocalSessions": {}}])).to_list()
        assert session.session_id["id"] in [s["_id"]["id"] for s in sessions]
    with pytest.raises(OperationFailure) as info:
        await db.aggregate([{"$match": {}}])
    assert info.value.code == 73


async def test_snapshot_reads_outside_a_transaction_read_at_one_cluster_time(client, db) -> None:
    """(ad) A snapshot session's reads all see the data of its first read; writes are refused in it."""
    await db.t.insert_many([{"_id": 1}, {"_id": 2}])
    async with client.start_session(snapshot=True) as session:
        assert [d["_id"] async for d in db.t.find({}, session=session)] == [1, 2]
        await db.t.insert_one({"_id": 3})  # another session's write, after the snapshot
        assert [d["_id"] async for d in db.t.find({}, session=session)] == [1, 2]
        assert sorted(await db.t.distinct("_id", session=session)) == [1, 2]
        with pytest.raises(OperationFailure) as info:
            await db.t.insert_one({"_id": 4}, session=session)
    assert info.value.code == 72
    assert await db.t.count_documents({}) == 3


async def test_a_bounded_find_sorts_what_its_bounds_keep(db) -> None:
    """(t) min/max with a sort: the documents inside the bounds, sorted, skipped and projected."""
    await db.t.insert_many([{"_id": i, "x": i * 11} for i in range(1, 7)])
    rows = await db.command(
        {"find": "t", "filter": {"_id": {"$gt": 1}}, "sort": {"x": -1}, "projection": {"_id": 0, "x": 1}, "skip": 2,
         "hint": {"_id": 1}, "min": {"_id": 0}, "max": {"_id": 6}}
    )
    assert rows["cursor"]["firstBatch"] == [{"x": 33}, {"x": 22}]


async def test_search_index_commands_answer_as_a_mongod_outside_atlas(db) -> None:
    """(y) createSearchIndexes, updateSearchIndex, dropSearchIndex and $listSearchIndexes: 31082."""
    await db.t.insert_one({"_id": 1})
    for command in (
        {"createSearchIndexes": "t", "indexes": [{"definition": {"mappings": {"dynamic": True}}}]},
        {"updateSearchIndex": "t", "name": "default", "definition": {"mappings": {"dynamic": True}}},
        {"dropSearchIndex": "t", "name": "default"},
        {"aggregate": "t", "pipeline": [{"$listSearchIndexes": {}}], "cursor": {}},
    ):
        with pytest.raises(OperationFailure) as info:
            await db.command(command)
        assert info.value.code == 31082 and "Atlas" in str(info.value)


async def test_change_events_describe_updates_and_carry_images_when_the_collection_keeps_them(db) -> None:
    """(q) updateDescription; fullDocumentBeforeChange / fullDocument whenAvailable per the collection's option."""
    await db.t.insert_one({"_id": 1, "a": 1, "gone": True, "sub": {"k": 1, "l": 2}, "array": ["x", "y", "z"]})
    async with await db.t.watch(full_document="whenAvailable", full_document_before_change="whenAvailable", max_await_time_ms=100) as stream:
        await db.t.update_one({"_id": 1}, [{"$set": {"a": 2, "sub.k": 5, "array": ["x", "y"]}}, {"$unset": "gone"}])
        plain = await stream.next()
        await db.command({"collMod": "t", "changeStreamPreAndPostImages": {"enabled": True}})
        await db.t.update_one({"_id": 1}, {"$set": {"a": 3}})
        imaged = await stream.next()
    assert plain["updateDescription"] == {
        "updatedFields": {"a": 2, "sub.k": 5}, "removedFields": ["gone"], "truncatedArrays": [{"field": "array", "newSize": 2}]
    }
    assert plain["fullDocument"] is None and plain["fullDocumentBeforeChange"] is None  # no images yet
    assert imaged["updateDescription"]["updatedFields"] == {"a": 3}
    assert imaged["fullDocumentBeforeChange"]["a"] == 2 and imaged["fullDocument"]["a"] == 3


async def test_guarded_batch_updates_are_described_in_their_change_events(db) -> None:
    """(ah) with (q): the background engine's guarded UpdateOne batches, answered by the fast path
    (a collection without options), give each event its own updateDescription."""
    await db.t.insert_many([{"_id": i, "__v": 1, "name": f"n{i}", "old": i} for i in (1, 2)])
    async with await db.t.watch(max_await_time_ms=100) as stream:
        await db.t.bulk_write([
            UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2, "name": f"N{i}"}, "$unset": {"old": ""}}) for i in (1, 2)
        ], ordered=False)
        events = [await stream.next() for _ in range(2)]
    for number, event in zip((1, 2), events, strict=True):
        assert event["operationType"] == "update" and event["documentKey"] == {"_id": number}
        assert event["updateDescription"] == {"updatedFields": {"__v": 2, "name": f"N{number}"}, "removedFields": ["old"], "truncatedArrays": []}


async def test_pipeline_updates_are_described_in_their_change_events(db) -> None:
    """(an) with (q): a pipeline update_many, answered by the fast path, gives each event its own
    updateDescription and, with updateLookup, the document as written."""
    await db.t.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": f"n{i}", "old": i} for i in (1, 2, 3)])
    pipeline = [{"$set": {"full": {"$concat": ["$name", "!"]}, "__v": 2, "__rev": {"$add": ["$__rev", 1]}}}, {"$unset": "old"}]
    async with await db.t.watch(full_document="updateLookup", max_await_time_ms=100) as stream:
        result = await db.t.update_many({"__v": 1, "_id": {"$lte": 2}}, pipeline)
        events = [await stream.next() for _ in range(2)]
    assert (result.matched_count, result.modified_count) == (2, 2)
    for number, event in zip((1, 2), events, strict=True):
        assert event["operationType"] == "update" and event["documentKey"] == {"_id": number}
        assert event["updateDescription"] == {"updatedFields": {"__v": 2, "__rev": 2, "full": f"n{number}!"}, "removedFields": ["old"], "truncatedArrays": []}
        assert event["fullDocument"] == {"_id": number, "__v": 2, "__rev": 2, "name": f"n{number}", "full": f"n{number}!"}


async def test_find_and_modify_updates_are_described_in_their_change_events(db) -> None:
    """(ao) with (q): a lease-style findAndModify, answered by the fast path, gives its event its
    updateDescription and, with updateLookup, the document as written; with the collection's
    pre- and post-images (an option: mongoeco's path answers) both images too."""
    await db.t.insert_many([{"_id": i, "owner": "", "claims": 0, "old": i} for i in (1, 2)])
    async with await db.t.watch(full_document="updateLookup", full_document_before_change="whenAvailable", max_await_time_ms=100) as stream:
        before = await db.t.find_one_and_update({"_id": 1, "owner": ""}, {"$set": {"owner": "a"}, "$inc": {"claims": 1}, "$unset": {"old": ""}})
        plain = await stream.next()
        await db.command({"collMod": "t", "changeStreamPreAndPostImages": {"enabled": True}})
        await db.t.find_one_and_update({"_id": 2, "owner": ""}, {"$set": {"owner": "b"}})
        imaged = await stream.next()
    assert before == {"_id": 1, "owner": "", "claims": 0, "old": 1}
    assert plain["operationType"] == "update" and plain["documentKey"] == {"_id": 1}
    assert plain["updateDescription"] == {"updatedFields": {"owner": "a", "claims": 1}, "removedFields": ["old"], "truncatedArrays": []}
    assert plain["fullDocument"] == {"_id": 1, "owner": "a", "claims": 1} and plain.get("fullDocumentBeforeChange") is None
    assert imaged["updateDescription"]["updatedFields"] == {"owner": "b"}
    assert imaged["fullDocumentBeforeChange"]["owner"] == "" and imaged["fullDocument"]["owner"] == "b"


async def test_a_change_stream_pipeline_must_keep_the_event_id(db) -> None:
    """(q) mongod fails the stream (280) when its pipeline changes the resume token; 40324 for an unknown stage."""
    async with await db.t.watch([{"$project": {"_id": 0}}], max_await_time_ms=100) as stream:
        await db.t.insert_one({"_id": 1})
        with pytest.raises(OperationFailure) as info:
            await stream.next()
    assert info.value.code == 280
    with pytest.raises(OperationFailure) as unknown:
        await db.t.watch([{"$nope": {}}])
    assert unknown.value.code == 40324


async def test_a_schema_valued_additional_properties_validates_every_other_field(db) -> None:
    """(bn) mongod takes a schema as ``additionalProperties`` (a model's ``dict[str, int]``): the
    embedded server refused the whole validator ("must be a bool")."""
    counts = {"bsonType": "object", "properties": {"total": {"bsonType": "string"}}, "additionalProperties": {"bsonType": ["int", "long"]}}
    await db.create_collection("tally", validator={"$jsonSchema": {"bsonType": "object", "properties": {"counts": counts}}})
    await db.tally.insert_one({"counts": {"a": 1, "b": 2, "total": "three"}})
    for bad in ({"a": "one"}, {"a": 1, "b": 2.5}, {"total": 3}):
        with pytest.raises(WriteError) as refused:
            await db.tally.insert_one({"counts": bad})
        assert refused.value.code == 121
    with pytest.raises(OperationFailure):
        await db.create_collection("bad_schema", validator={"$jsonSchema": {"additionalProperties": {"bsonType": 5}}})


class _Batches(monitoring.CommandListener):
    """The number of documents in each reply of a cursor command, in order."""

    def __init__(self) -> None:
        self.replies: list[tuple[str, int]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        cursor = event.reply.get("cursor")
        if isinstance(cursor, dict):
            batch = cursor.get("firstBatch", cursor.get("nextBatch"))
            self.replies.append((event.command_name, len(batch)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_cursor_without_a_batch_size_sends_101_documents_first(mongo_uri, db_name) -> None:
    """(bo) A find or an aggregate that names no batchSize gets 101 documents, then the rest by
    getMore; a named batchSize is kept, and a single batch (a negative limit) closes the cursor."""
    batches = _Batches()
    client: AsyncMongoClient = AsyncMongoClient(mongo_uri, event_listeners=[batches], **TEST_CLIENT_OPTIONS)
    try:
        collection = client[db_name].t
        await collection.insert_many([{"_id": i} for i in range(250)])
        assert len(await collection.find().to_list()) == 250
        assert batches.replies == [("find", 101), ("getMore", 149)]
        batches.replies.clear()
        assert len(await (await collection.aggregate([{"$match": {}}])).to_list()) == 250
        assert batches.replies == [("aggregate", 101), ("getMore", 149)]
        batches.replies.clear()
        assert len(await collection.find(batch_size=200).to_list()) == 250
        assert batches.replies == [("find", 200), ("getMore", 50)]
        batches.replies.clear()
        assert len(await collection.find(limit=150, batch_size=150).to_list()) == 150  # one reply: what the engine sends
        assert batches.replies == [("find", 150)]
        batches.replies.clear()
        assert len(await collection.find(limit=-50).to_list()) == 50
        assert batches.replies == [("find", 50)]
    finally:
        await client.drop_database(db_name)
        await client.close()


async def test_no_reply_carries_more_than_16_mib_of_documents(mongo_uri, db_name) -> None:
    """(bo) 40 documents of 1.5 MiB (60 MB, past the driver's 48 MB message limit, which refused the
    one reply the server sent before): every reply holds at most 16 MiB of them, and all arrive."""
    batches = _Batches()
    client: AsyncMongoClient = AsyncMongoClient(mongo_uri, event_listeners=[batches], **TEST_CLIENT_OPTIONS)
    try:
        collection = client[db_name].t
        pad = "x" * (1536 * 1024)
        for i in range(40):
            await collection.insert_one({"_id": i, "pad": pad})
        found = [doc["_id"] async for doc in collection.find({}, batch_size=1000)]
        assert found == list(range(40))
        assert [n for _, n in batches.replies] == [10, 10, 10, 10]  # 10 x 1.5 MiB fit in 16 MiB, 11 do not
        batches.replies.clear()
        assert len(await (await collection.aggregate([{"$project": {"pad": 1}}])).to_list()) == 40
        assert all(0 < n <= 10 for _, n in batches.replies) and sum(n for _, n in batches.replies) == 40
    finally:
        await client.drop_database(db_name)
        await client.close()



def test_a_tls_handshake_is_closed_at_once_as_a_mongod_without_tls_closes_it(mongo_uri: str) -> None:
    """(ci) A ClientHello's first 16 bytes read as a message header of some 33 MB: the server waited for that body
    and the client for its answer, until the client's timeout. mongod without TLS closes the connection at once."""
    import socket
    import ssl

    from pymongo.uri_parser import parse_uri

    host, port = parse_uri(mongo_uri)["nodelist"][0]
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # the timeout only guards against the hang (the defect: TimeoutError); the server's close ends the handshake
    with socket.create_connection((host, port), timeout=60) as raw, pytest.raises((ssl.SSLError, ConnectionResetError)):
        context.wrap_socket(raw, server_hostname=host)


async def test_list_indexes_gives_each_index_as_mongod_does(db) -> None:
    """(cr) {v: 2, key, name} and only the options the index was given: no ``ns``, no ``unique: false``."""
    await db.t.create_index("a")
    await db.t.create_index("b", unique=True, sparse=True)
    listed = {index["name"]: dict(index) async for index in await db.t.list_indexes()}
    assert listed == {
        "_id_": {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        "a_1": {"v": 2, "key": {"a": 1}, "name": "a_1"},
        "b_1": {"v": 2, "key": {"b": 1}, "name": "b_1", "unique": True, "sparse": True},
    }
    assert "unique" not in (await db.t.index_information())["a_1"]


async def test_convert_to_decimal_as_mongod(db) -> None:
    """(cs) $convert takes to: "decimal" (and a type by its number) under 7.0, in aggregate and pipeline updates."""
    from bson import Decimal128, Int64

    await db.t.insert_many([
        {"_id": 1, "amount": "12.50"}, {"_id": 2, "amount": 3}, {"_id": 3, "amount": Int64(4)},
        {"_id": 4, "amount": "abc"}, {"_id": 5},
    ])
    convert = {"$convert": {"input": "$amount", "to": "decimal", "onError": "bad", "onNull": "none"}}
    rows = await (await db.t.aggregate([{"$sort": {"_id": 1}}, {"$project": {"_id": 0, "d": convert}}])).to_list()
    assert [row["d"] for row in rows] == [Decimal128("12.50"), Decimal128("3"), Decimal128("4"), "bad", "none"]
    by_number = {"$convert": {"input": "$amount", "to": 19, "onError": "bad"}}
    rows = await (await db.t.aggregate([{"$match": {"_id": 1}}, {"$project": {"_id": 0, "d": by_number, "s": {"$convert": {"input": 7, "to": 2}}}}])).to_list()
    assert rows == [{"d": Decimal128("12.50"), "s": "7"}]
    await db.t.update_many({"_id": {"$lte": 2}}, [{"$set": {"amount": {"$convert": {"input": "$amount", "to": "decimal"}}}}])
    assert [d["amount"] async for d in db.t.find({"_id": {"$lte": 2}}).sort("_id", 1)] == [Decimal128("12.50"), Decimal128("3")]
    with pytest.raises(OperationFailure) as failed:
        await db.t.aggregate([{"$match": {"_id": 4}}, {"$project": {"d": {"$convert": {"input": "$amount", "to": "decimal"}}}}])
    assert failed.value.code == 241


async def test_a_pipeline_update_that_changes_only_a_type_is_written(db) -> None:
    """(ct) A pipeline $set of an equal value of another BSON type (int 3 to NumberLong 3) is a change, as on mongod."""
    from bson import Decimal128, Int64

    await db.t.insert_many([{"_id": i, "n": 3, "f": 2.5, "sub": {"n": 3}} for i in range(1, 5)])
    many = await db.t.update_many({"_id": {"$in": [1, 2]}}, [{"$set": {"n": {"$toLong": "$n"}}}])
    assert many.modified_count == 2
    assert (await db.t.update_one({"_id": 1}, [{"$set": {"f": {"$toDecimal": "$f"}}}])).modified_count == 1
    dotted = await db.t.update_one({"_id": 3}, [{"$set": {"sub.n": {"$toDouble": "$sub.n"}}}])
    assert dotted.modified_count == 1
    same = await db.t.update_one({"_id": 4}, [{"$set": {"n": {"$toInt": "$n"}, "sub.n": {"$toInt": "$sub.n"}}}])
    assert same.modified_count == 0
    stored = {d["_id"]: d async for d in db.t.find()}
    assert type(stored[1]["n"]) is Int64 and stored[1]["f"] == Decimal128("2.5")
    assert type(stored[3]["sub"]["n"]) is float and type(stored[4]["n"]) is int


async def test_push_and_add_to_set_leave_out_a_missing_value(db) -> None:
    """(cw) mongod's $push and $addToSet skip a document whose field is missing; a stored null is pushed."""
    await db.t.insert_many(
        [
            {"_id": 1, "k": "a"},
            {"_id": "2", "k": "a", "note": "x"},
            {"_id": 3.0, "k": "a", "note": None},
            {"_id": 4, "k": "b", "sub": {"y": 1}},
            {"_id": 5, "k": "b", "sub": [{"y": 2}, {}]},
            {"_id": 6, "k": "b", "sub": "flat"},
        ]
    )
    rows = db.t.aggregate(
        [
            {"$sort": {"k": 1, "_id": 1}},
            {"$group": {"_id": "$k", "p": {"$push": "$note"}, "s": {"$addToSet": "$note"}, "y": {"$push": "$sub.y"}, "n": {"$sum": 1}}},
            {"$set": {"s": {"$sortArray": {"input": "$s", "sortBy": 1}}}},
            {"$sort": {"_id": 1}},
        ]
    )
    assert [doc async for doc in await rows] == [
        {"_id": "a", "p": [None, "x"], "s": [None, "x"], "y": [], "n": 3},
        {"_id": "b", "p": [], "s": [], "y": [1, [2]], "n": 3},
    ]


async def test_a_query_regex_matches_a_stored_regex_and_eq_of_one_is_an_equality(db) -> None:
    """(cx) A regex condition matches strings by its pattern and a stored regex equal to it; $eq of a regex is equality."""
    await db.t.insert_many([
        {"_id": 1, "v": Regex("^a", "i")},
        {"_id": 2, "v": "Abc"},
        {"_id": 3, "v": Regex("^a")},
        {"_id": 4, "v": ["x", Regex("^a", "i")]},
        {"_id": 5, "v": re.compile("^a", re.IGNORECASE)},
        {"_id": 6, "v": "b"},
    ])
    answers = {
        "implicit": {"v": Regex("^a", "i")},
        "regex": {"v": {"$regex": "^a", "$options": "i"}},
        "in": {"v": {"$in": [Regex("^a", "i"), "b"]}},
        "eq": {"v": {"$eq": Regex("^a", "i")}},
        "eq and exists": {"v": {"$eq": Regex("^a", "i"), "$exists": True}},
        "ne": {"v": {"$ne": Regex("^a", "i")}},
        "nin": {"v": {"$nin": [Regex("^a", "i")]}},
    }
    found = {name: sorted([d["_id"] async for d in db.t.find(query)]) for name, query in answers.items()}
    assert found == {
        "implicit": [1, 2, 4, 5],
        "regex": [1, 2, 4, 5],
        "in": [1, 2, 4, 5, 6],
        "eq": [1, 4, 5],
        "eq and exists": [1, 4, 5],
        "ne": [2, 3, 6],
        "nin": [3, 6],
    }
    # The matcher of updates and deletes answers alike.
    assert (await db.t.update_many({"v": {"$nin": [Regex("^a", "i")]}}, {"$set": {"n": 1}})).matched_count == 2
    assert (await db.t.delete_many({"v": Regex("^a", "i")})).deleted_count == 4
    assert sorted([d["_id"] async for d in db.t.find()]) == [3, 6]


async def test_an_existing_index_under_another_name_is_refused_85(db) -> None:
    """(da) The keys and options of an existing index under another name: 85 IndexOptionsConflict, nothing created."""
    await db.t.create_index("at", expireAfterSeconds=3600)
    await db.t.create_index([("a", 1), ("b", -1)], unique=True, name="ab")
    for keys, options in (("at", {"expireAfterSeconds": 3600, "name": "other_at"}), ([("a", 1), ("b", -1)], {"unique": True})):
        with pytest.raises(OperationFailure) as refused:
            await db.t.create_index(keys, **options)
        assert refused.value.code == 85
    assert "already exists with a different name" in str(refused.value) and "ab" in str(refused.value)
    assert await db.t.create_index("at", expireAfterSeconds=3600) == "at_1"  # the same index by its own name: a no-op
    assert sorted([index["name"] async for index in await db.t.list_indexes()]) == ["_id_", "ab", "at_1"]
