"""Fix (ap) of mongoshift.embedded.patches.counts: a count aggregate (``count_documents``) answers
exactly what mongoeco's aggregation cursor answers, without streaming the matched documents.

The property test runs every count twice on the same data through pymongo, once with the fix and
once with the original mongoeco method swapped back in (an in-process server, :mod:`.in_process`),
outside any transaction, inside one, and in a snapshot session (ad), and compares the replies byte
for byte, errors included. The other tests count the steps the fix removes (no timing).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from mongoshift.background.plan.planner import batch_filter, bracket_counts
from mongoshift.background.state.model import Checkpoint, Scope

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, sync_client
from .test_scans import MatchCounter, id_values, queries, seed, versions

#: $group stages: pymongo's count, the same count under other names, and groups the fix leaves alone.
GROUPS = [
    {"_id": 1, "n": {"$sum": 1}},
    {"_id": None, "total": {"$sum": 1}},
    {"_id": "all", "n": {"$sum": 1}},
    {"_id": 1, "n": {"$sum": 2}},
    {"_id": "$v", "n": {"$sum": 1}},
    {"_id": 1, "n": {"$sum": 1.0}},
    {"_id": 1, "n": {"$sum": True}},
    {"_id": 1, "n": {"$sum": 1}, "m": {"$max": "$n"}},
    {"n": {"$sum": 1}, "_id": 1},
    {"_id": {"$type": "$_id"}, "n": {"$sum": 1}},  # (cl): the planner's count per _id type
    {"_id": {"$type": "$_id"}, "n": {"$sum": 1}},
    {"_id": {"$type": "$v"}, "n": {"$sum": 1}},
    {"_id": {"$type": ["$_id"]}, "n": {"$sum": 1}},
]


@st.composite
def counts(draw: st.DrawFn, ids: list[Any]) -> dict[str, Any]:
    """A count: pymongo's count_documents (skip, limit, hint) or the aggregate itself, with stages
    before the $group that are pushed down (or not: a $sort, a $project, a $limit before a $skip)."""
    found = draw(queries(ids))
    unplaced = draw(st.sampled_from([None, None, "undefined", "dbPointer", 6, ["undefined", "dbPointer"], ["undefined", "string"]]))
    if unplaced is not None:  # the types (ae)'s order places no _id of, which the planning counts too
        found["filter"] = {"$and": [found["filter"], {"_id": {"$type": unplaced}}]}
    stages: list[dict[str, Any]] = [{"$match": found["filter"]}]
    before = draw(st.sampled_from([[], [], [{"$skip": 1}], [{"$limit": 3}], [{"$skip": 2}, {"$limit": 5}], [{"$limit": 0}],
                                   [{"$limit": 4}, {"$skip": 1}], [{"$sort": {"_id": 1}}], [{"$project": {"v": 1}}]]))
    return {
        "filter": found["filter"],
        "skip": draw(st.sampled_from([None, 0, 1, 3])),
        "limit": draw(st.sampled_from([None, 0, 1, 5, 12])),
        "hint": draw(st.sampled_from([None, None, "v_1__id_1", "_id_", "no_such_index"])),
        "pipeline": [*stages, *before, {"$group": draw(st.sampled_from(GROUPS))}],
    }


def answer(collection: Any, count: dict[str, Any], session: Any = None) -> Any:
    """count_documents' count and the aggregate's documents as bytes, or the error's class and code; a group
    by a ``$type`` in no particular order (MongoDB specifies none; (cl)'s follows the walk it takes)."""
    options = {key: count[key] for key in ("skip", "limit", "hint") if count[key] is not None}
    try:
        counted = collection.count_documents(count["filter"], session=session, **options)
    except PyMongoError as error:
        counted = (type(error).__name__, getattr(error, "code", None))
    try:
        documents = [encode(doc) for doc in collection.aggregate(count["pipeline"], session=session)]
        if "$type" in str(count["pipeline"][-1]):
            documents.sort()
    except PyMongoError as error:
        documents = (type(error).__name__, getattr(error, "code", None))
    return counted, documents


def in_transaction(client: Any, collection: Any, count: dict[str, Any], writes: list[Any]) -> Any:
    """The answer inside a fresh transaction that first made ``writes`` (inserts and deletes), aborted after."""
    with client.start_session() as session:
        session.start_transaction()
        try:
            for kind, value in writes:
                if kind == "insert":
                    collection.insert_one({"_id": value, "v": 1, "n": -1}, session=session)
                else:
                    collection.delete_one({"_id": value}, session=session)
            return answer(collection, count, session)
        except PyMongoError as error:
            return (type(error).__name__, getattr(error, "code", None))
        finally:
            if session.in_transaction:
                session.abort_transaction()


@examples(thorough=120, quick=15)
def test_a_count_answers_what_the_aggregation_cursor_answers(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor

    cursor = AsyncAggregationCursor

    @settings(max_examples=max_examples)
    @given(data=st.data(), values=st.lists(id_values, min_size=0, max_size=16), versions_=st.lists(versions, min_size=16, max_size=16))
    def check(data: st.DataObject, values: list[Any], versions_: list[Any]) -> None:
        client = sync_client(server)
        try:
            collection = client.counts.mixed
            collection.drop()
            collection.create_index([("v", 1), ("_id", 1)])
            ids = seed(collection, values, versions_)
            pool = st.sampled_from(ids) | id_values if ids else id_values
            writes = data.draw(st.lists(st.tuples(st.sampled_from(["insert", "delete"]), pool), max_size=3))
            for _ in range(3):
                count = data.draw(counts(ids))
                fast = answer(collection, count), in_transaction(client, collection, count, writes)
                with original(cursor, "_open_incremental_group_stream"):
                    slow = answer(collection, count), in_transaction(client, collection, count, writes)
                assert fast == slow, count
            # A snapshot session (ad) keeps reading the data of its first read, whichever path counts.
            count = data.draw(counts(ids))
            with client.start_session(snapshot=True) as session:
                collection.find_one({}, session=session)
                for kind, value in writes:
                    try:
                        collection.insert_one({"_id": value, "v": 1}) if kind == "insert" else collection.delete_one({"_id": value})
                    except PyMongoError:
                        pass
                fast = answer(collection, count, session)
                with original(cursor, "_open_incremental_group_stream"):
                    slow = answer(collection, count, session)
            assert fast == slow, count
        finally:
            client.close()

    check()


def test_a_snapshot_count_reads_its_snapshot(server: InProcessServer) -> None:
    """(ap) with (ad): a count in a snapshot session counts the data of the session's cluster time,
    not what was written since; in a transaction it counts the transaction's own writes."""
    client = sync_client(server)
    try:
        collection = client.counts.snapshot
        collection.drop()
        collection.insert_many([{"_id": i, "v": 1} for i in range(100)])
        with client.start_session(snapshot=True) as session:
            assert collection.count_documents({"_id": {"$gte": 50}}, session=session) == 50
            collection.insert_many([{"_id": i, "v": 1} for i in range(100, 120)])
            collection.delete_many({"_id": {"$lt": 60}})
            assert collection.count_documents({"_id": {"$gte": 50}}, session=session) == 50
        assert collection.count_documents({"_id": {"$gte": 50}}) == 60
        with client.start_session() as session, session.start_transaction():
            collection.insert_many([{"_id": 500, "v": 1}, {"_id": 501, "v": 1}], session=session)
            collection.delete_one({"_id": 119}, session=session)
            assert collection.count_documents({"_id": {"$gte": 100}}, session=session) == 21
            assert collection.count_documents({"_id": {"$gte": 100}}) == 20
            assert collection.count_documents({"_id": {"$gte": 100}}, limit=5, skip=18, session=session) == 3
            session.abort_transaction()
    finally:
        client.close()


def test_the_planning_counts_take_the_count_path(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ap), (cl) The background engine's planning counts (the _id brackets, a partition's range) are
    counted inside the engine: no find cursor is built for them, no matched document is copied or
    fed to the $group accumulator, and the matcher sees only the documents (af)'s walk reaches
    (without the fix: a cursor per count, a copy and an accumulation per matched document)."""
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor
    from mongoeco.core.aggregation.grouping_stages import _IncrementalGroup

    from mongoshift.embedded.patches import scans

    client = sync_client(server)
    try:
        collection = client.counts.orders
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1} for i in range(3_000)] + [{"_id": f"s{i:03}", "__v": 1} for i in range(200)])
        match = {"__v": {"$lt": 2}}

        async def plan() -> tuple[dict[str, int], int]:
            planner = AsyncMongoClient(server.uri)
            try:
                orders = planner.counts.orders
                brackets = await bracket_counts(orders, match)
                partition = await orders.count_documents(batch_filter(match, Scope("number", 1_000, 1_500), Checkpoint()))
                return brackets, partition
            finally:
                await planner.close()

        calls = count_calls(
            monkeypatch,
            (AsyncAggregationCursor, "_build_pushdown_cursor"),
            (_IncrementalGroup, "consume_document"),
            (scans, "_public_copy"),
        )
        with MatchCounter() as counter:
            brackets, partition = asyncio.run(plan())
        assert (brackets, partition) == ({"number": 3_000, "string": 200}, 500)
        assert calls == {"_build_pushdown_cursor": 0, "consume_document": 0, "_public_copy": 0}
        # Every document once (since (cm) the brackets are one $group by the _id's type, counted per type
        # by (cl): no $group stream either), the partition's range once.
        assert counter.seen == 3_200 + 500
    finally:
        client.close()


def raw_document(id_element: bytes) -> Any:
    """A document ``{_id: <id_element>, v: 1}`` as raw BSON: pymongo cannot send undefined or a DBPointer otherwise."""
    import struct

    from bson.raw_bson import RawBSONDocument

    body = id_element + b"\x10v\x00" + struct.pack("<i", 1) + b"\x00"
    return RawBSONDocument(struct.pack("<i", len(body) + 4) + body)


def test_a_count_of_an_unplaced_type_reads_only_the_unplaced_ids(server: InProcessServer) -> None:
    """(ap) A count of ``_id``s of the undefined or dbPointer type (the planning counts both brackets)
    matches only the ``_id``s (ae)'s order does not place, and answers what mongoeco's path answers,
    with undefined and DBPointer ``_id``s sent as raw BSON among them."""
    import struct

    from bson import Binary, DBRef, ObjectId
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor

    client = sync_client(server)
    try:
        collection = client.counts.unplaced
        collection.drop()
        collection.insert_many([{"_id": i, "v": 1} for i in range(500)] + [{"_id": f"s{i}", "v": 1} for i in range(100)])
        collection.insert_many([{"_id": {"a": 1}, "v": 1}, {"_id": Binary(b"x", 0), "v": 1}])
        collection.insert_one(raw_document(b"\x0c_id\x00" + struct.pack("<i", 2) + b"c\x00" + bytes(12)))  # a DBPointer
        collection.insert_one(raw_document(b"\x06_id\x00"))  # undefined
        # mongoeco stores the DBPointer as a DBRef (an object) and undefined as null
        assert collection.count_documents({"_id": DBRef("c", ObjectId(bytes(12)))}) == 1
        assert collection.count_documents({"_id": None}) == 1
        filters = [{"_id": {"$type": kind}} for kind in ("undefined", "dbPointer", 6, ["undefined", "dbPointer"])]
        filters += [{"$and": [{"v": 1}, {"_id": {"$type": "undefined"}}]}, {"_id": {"$type": ["undefined", "string"]}}]
        for filter_ in filters:
            with MatchCounter() as counter:
                fast = collection.count_documents(filter_)
            with original(AsyncAggregationCursor, "_open_incremental_group_stream"):
                slow = collection.count_documents(filter_)
            assert fast == slow, filter_
            # the object and the DBPointer's DBRef (a binary has its place since (ck)); a list with "string"
            # walks everything
            assert counter.seen == (2 if "string" not in str(filter_) else 604), filter_
    finally:
        client.close()


def test_a_count_per_id_type_reads_the_version_index_keys(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cl) The planner's ``$group`` by the ``_id``'s ``$type`` under a version equality, on a collection
    with the version index that has been walked in _id order, is counted from the index's keys: no
    document is matched or fed to the accumulator, and only the numbers' ``_id``s are decoded for their
    names. Its answer is mongoeco's own. Without the fix every document is matched and accumulated."""
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor
    from mongoeco.core.aggregation.grouping_stages import _IncrementalGroup

    client = sync_client(server)
    try:
        collection = client.counts.types
        collection.drop()
        collection.create_index([("v", 1), ("_id", 1)])
        collection.insert_many([{"_id": ObjectId(f"{i:024x}"), "v": 1 + i % 2} for i in range(2_000)])
        collection.insert_many([{"_id": value, "v": 1} for value in (1, Int64(2), 2.5, Decimal128("4"), "s", None, True)])
        list(collection.find({"v": 1}, sort=[("_id", 1)], limit=1))  # a lane's first read: the _id order is built
        pipeline = [{"$match": {"v": 1}}, {"$group": {"_id": {"$type": "$_id"}, "n": {"$sum": 1}}}]
        calls = count_calls(monkeypatch, (_IncrementalGroup, "consume_document"))
        with MatchCounter() as counter:
            fast = list(collection.aggregate(pipeline))
        assert (counter.seen, calls["consume_document"]) == (0, 0)
        with original(AsyncAggregationCursor, "_open_incremental_group_stream"):
            slow = list(collection.aggregate(pipeline))
        assert sorted(fast, key=str) == sorted(slow, key=str)
        assert {row["_id"]: row["n"] for row in fast} == {
            "objectId": 1_000, "int": 1, "long": 1, "double": 1, "decimal": 1, "string": 1, "null": 1, "bool": 1,
        }
    finally:
        client.close()
