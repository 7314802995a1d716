"""(cv) A view reads its source through its pipeline and refuses writes, as mongod's.

Through the real pymongo driver and unchanged against a real replica set (MONGOSHIFT_TEST_URI): every
assertion is what mongod answers. Without the fix a view is an ordinary collection: the reads see its own
(empty) documents and the writes are stored.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId
from pymongo import DeleteOne, InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from mongoshift.embedded.patches import views

OID = ObjectId("65a000000000000000000001")

#: Legacy documents: mixed _id types, missing, null and odd-typed fields, arrays.
PEOPLE: list[dict[str, Any]] = [
    {"_id": 1, "name": "ada", "age": 36, "tags": ["a", "b"], "active": True},
    {"_id": "two", "name": "bob", "age": Int64(17), "tags": [], "active": True},
    {"_id": OID, "name": "cy", "age": None, "tags": "a", "active": False},
    {"_id": 4.5, "name": "dee", "tags": [["a"], "c"], "active": True},
    {"_id": {"k": 1}, "name": "eve", "age": Decimal128("41.5"), "active": True},
    {"_id": 6, "name": "fay", "age": "52", "address": {"city": ["x", "y"]}, "active": True},
]

#: The view's pipeline: active people only, with a computed field and one field hidden.
ACTIVE = [{"$match": {"active": True}}, {"$set": {"initial": {"$substrCP": ["$name", 0, 1]}}}, {"$unset": "active"}]


@pytest.fixture
async def people(db):  # type: ignore[no-untyped-def]
    await db.people.insert_many(PEOPLE)
    await db.create_collection("active", viewOn="people", pipeline=ACTIVE)
    return db


async def _ids(cursor: Any) -> list[Any]:
    return [doc["_id"] async for doc in cursor]


async def test_a_find_on_a_view_reads_its_source_through_its_pipeline(people) -> None:
    found = [doc async for doc in people.active.find({}).sort("name", 1)]
    assert [doc["name"] for doc in found] == ["ada", "bob", "dee", "eve", "fay"]
    assert found[0] == {"_id": 1, "name": "ada", "age": 36, "tags": ["a", "b"], "initial": "a"}
    # The find's filter, sort, skip, limit and projection come after the view's stages.
    older = people.active.find({"age": {"$gte": 18}}, {"name": 1, "initial": 1}).sort("name", -1)
    assert [doc async for doc in older] == [{"_id": {"k": 1}, "name": "eve", "initial": "e"}, {"_id": 1, "name": "ada", "initial": "a"}]
    assert await _ids(people.active.find().sort("name", -1).skip(1).limit(2)) == [{"k": 1}, 4.5]
    assert await people.active.find_one({"initial": "f"}, {"_id": 0, "address.city": 1}) == {"address": {"city": ["x", "y"]}}
    assert await people.active.find_one({"name": "cy"}) is None  # filtered out by the view
    with pytest.raises(OperationFailure) as info:  # a find option an aggregate has no place for
        await people.active.find(show_record_id=True).to_list()
    assert info.value.code == views.INVALID_PIPELINE_OPERATOR


async def test_a_view_read_takes_more_batches_under_the_views_name(db) -> None:
    await db.n.insert_many([{"_id": i, "even": i % 2 == 0} for i in range(300)])
    await db.create_collection("evens", viewOn="n", pipeline=[{"$match": {"even": True}}])
    assert await _ids(db.evens.find().sort("_id", 1).batch_size(20)) == list(range(0, 300, 2))
    assert await _ids(db.evens.find({"_id": {"$gte": 100}})) == list(range(100, 300, 2))
    cursor = db.evens.find().batch_size(5)
    await cursor.next()
    await cursor.close()  # killCursors names the view
    rows = await (await db.evens.aggregate([{"$match": {"_id": {"$lt": 250}}}], batchSize=7)).to_list()
    assert [row["_id"] for row in rows] == list(range(0, 250, 2))


async def test_aggregate_count_and_distinct_on_a_view_read_its_source(people) -> None:
    rows = await (await people.active.aggregate([{"$group": {"_id": None, "n": {"$sum": 1}}}])).to_list()
    assert rows == [{"_id": None, "n": 5}]
    assert await people.active.count_documents({}) == 5
    assert await people.active.count_documents({"tags": {"$exists": True}}, skip=1) == 2
    assert await people.active.count_documents({}, limit=2) == 2
    assert await people.active.estimated_document_count() == 5
    assert sorted(await people.active.distinct("initial")) == ["a", "b", "d", "e", "f"]
    # An array's elements are distinct values (one level, as distinct gives them); a missing field gives none.
    tags = await people.active.distinct("tags")
    assert sorted(t for t in tags if isinstance(t, str)) == ["a", "b", "c"] and [t for t in tags if not isinstance(t, str)] == [["a"]]
    assert await people.active.distinct("address.city") in (["x", "y"], ["y", "x"])
    assert sorted(await people.active.distinct("name", {"age": {"$type": "number"}})) == ["ada", "bob", "eve"]
    assert await people.active.distinct("absent") == []


async def test_a_view_on_a_view_runs_both_pipelines_innermost_first(people) -> None:
    await people.create_collection("adults", viewOn="active", pipeline=[{"$match": {"age": {"$gte": 18}}}, {"$project": {"initial": 1}}])
    assert sorted([doc["initial"] async for doc in people.adults.find()]) == ["a", "e"]
    assert await people.adults.count_documents({"initial": "e"}) == 1
    assert sorted(await people.adults.distinct("initial")) == ["a", "e"]


async def test_a_view_read_by_lookup_union_with_and_facet_is_resolved(people) -> None:
    await people.orders.insert_many(
        [{"_id": "o1", "who": 1, "total": 5}, {"_id": "o2", "who": OID, "total": 7}, {"_id": "o3", "who": 6, "total": None}, {"_id": "o4"}]
    )
    # By fields, from a view of $match stages; by a pipeline, from the view that sets fields.
    await people.create_collection("open_orders", viewOn="orders", pipeline=[{"$match": {"total": {"$ne": None}}}])
    joined = people.orders.aggregate(
        [
            {"$lookup": {"from": "active", "let": {"w": "$who"}, "pipeline": [{"$match": {"$expr": {"$eq": ["$_id", "$$w"]}}}], "as": "by"}},
            {"$lookup": {"from": "open_orders", "localField": "who", "foreignField": "who", "as": "same"}},
            {"$project": {"by": "$by.initial", "same": "$same._id"}},
            {"$sort": {"_id": 1}},
        ]
    )
    assert [doc async for doc in await joined] == [
        {"_id": "o1", "by": ["a"], "same": ["o1"]},
        {"_id": "o2", "by": [], "same": ["o2"]},  # cy is not active
        {"_id": "o3", "by": ["f"], "same": []},  # its own total is null: not an open order
        {"_id": "o4", "by": [], "same": []},
    ]
    union = people.open_orders.aggregate([{"$unionWith": "active"}, {"$unionWith": {"coll": "active", "pipeline": [{"$count": "n"}]}}])
    assert [doc["initial"] if "initial" in doc else doc.get("n", doc.get("_id")) async for doc in await union] == [
        "o1", "o2", "a", "b", "d", "e", "f", 5,
    ]
    facet = people.orders.aggregate([{"$limit": 1}, {"$facet": {"n": [{"$unionWith": "active"}, {"$count": "n"}]}}])
    assert [doc async for doc in await facet] == [{"n": [{"n": 6}]}]


async def test_every_write_to_a_view_is_refused_and_nothing_is_written(people) -> None:
    refusal = f"Namespace {people.name}.active is a view, not a collection"
    # insert, update and delete: a write error (166) for the statement tried, which stops an ordered command.
    statements = [
        lambda: people.active.insert_one({"_id": 99, "name": "zed", "active": True}),
        lambda: people.active.update_one({"_id": 1}, {"$set": {"age": 0}}),
        lambda: people.active.update_many({}, [{"$set": {"age": 0}}], upsert=True),
        lambda: people.active.replace_one({"_id": 1}, {"name": "x"}),
        lambda: people.active.delete_many({}),
    ]
    for attempt in statements:
        with pytest.raises(WriteError) as written:
            await attempt()
        assert (written.value.code, written.value.details["errmsg"]) == (views.COMMAND_NOT_SUPPORTED_ON_VIEW, refusal)
    for ordered, tried in ((True, [0]), (False, [0, 1, 2])):
        with pytest.raises(BulkWriteError) as bulk:
            await people.active.bulk_write([InsertOne({"_id": 96}), UpdateOne({"_id": 1}, {"$set": {"age": 0}}), DeleteOne({})], ordered=ordered)
        assert [(e["index"], e["code"]) for e in bulk.value.details["writeErrors"]] == [(i, views.COMMAND_NOT_SUPPORTED_ON_VIEW) for i in tried]
        assert bulk.value.details["nInserted"] == 0
    with pytest.raises(BulkWriteError) as bulk:
        await people.active.insert_many([{"_id": 98}, {"_id": 97}], ordered=False)
    assert [e["index"] for e in bulk.value.details["writeErrors"]] == [0, 1]
    # findAndModify and the index commands: the command's error.
    commands = [
        lambda: people.active.find_one_and_update({"_id": 1}, {"$set": {"age": 0}}),
        lambda: people.active.find_one_and_delete({"_id": 1}),
        lambda: people.active.create_index("name"),
        lambda: people.active.drop_index("name_1"),
        lambda: people.active.index_information(),
    ]
    for attempt in commands:
        with pytest.raises(OperationFailure) as info:
            await attempt()
        assert (info.value.code, info.value.details["errmsg"]) == (views.COMMAND_NOT_SUPPORTED_ON_VIEW, refusal)
    # Nothing reached the source either: it holds what it held.
    assert [doc async for doc in people.people.find()] == PEOPLE
    assert await people.active.count_documents({}) == 5


async def test_a_write_to_a_view_in_a_transaction_is_refused(people, client) -> None:  # type: ignore[no-untyped-def]
    async with client.start_session() as session:
        with pytest.raises(OperationFailure) as info:
            async with await session.start_transaction():
                await people.people.insert_one({"_id": 100, "name": "gus", "active": True}, session=session)
                assert await people.active.count_documents({"_id": 100}, session=session) == 1
                await people.active.insert_one({"_id": 101}, session=session)
        assert info.value.code == views.COMMAND_NOT_SUPPORTED_ON_VIEW  # a write error, which aborts the transaction
    assert await people.people.find_one({"_id": 100}) is None  # the transaction was aborted


async def test_dropping_a_view_drops_only_the_view(people) -> None:
    await people.active.drop()
    assert "active" not in await people.list_collection_names()
    assert [doc async for doc in people.people.find()] == PEOPLE


def test_a_cycle_of_views_is_refused_as_too_deep() -> None:
    """mongod refuses to create a cycle; a snapshot could still hold one: it answers 165, never loops."""
    from mongoeco.errors import OperationFailure as EngineFailure

    with pytest.raises(EngineFailure) as info:
        views.resolve({"a": {"viewOn": "b"}, "b": {"viewOn": "a"}}, "a")
    assert info.value.code == views.VIEW_DEPTH_LIMIT_EXCEEDED
    assert views.resolve({"a": {"viewOn": "b", "pipeline": [{"$match": {"x": 1}}]}, "b": {"viewOn": "c", "pipeline": [{"$limit": 1}]}}, "a") == (
        "c",
        [{"$limit": 1}, {"$match": {"x": 1}}],
    )
