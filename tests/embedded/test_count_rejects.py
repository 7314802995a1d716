"""Fix (cp) of mongoshift.embedded.patches.counts: a count whose filter asks for a top-level field that
is not of some types (the background engine's count of versions that are not numbers) answers exactly what
mongoeco's own path answers, and its matcher never sees a document whose top-level value decides that.

The property test runs every count twice on the same data through pymongo, once with the fix and once with
mongoeco's own aggregation path swapped back in (an in-process server, :mod:`.in_process`), outside any
transaction, inside one, and in a snapshot session, and compares the answers, errors included. The other
tests count the documents the matcher sees (no timing).
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from bson import Decimal128, Int64, ObjectId
from hypothesis import given, settings, strategies as st
from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from mongoshift.background.inspect.input_probe import not_a_version_count
from mongoshift.background.write.document import not_a_version

from ..conftest import examples
from .in_process import InProcessServer, original, sync_client
from .test_scans import MatchCounter, dates, decimals, floats, int32s, int64s, strings

#: The values a version field can hold, "missing" for none: every shape the brief of the fix names.
scalars = (
    int32s | int64s | floats | decimals | strings | dates
    | st.sampled_from([None, True, False, 0, -0.0, 2**40, 2**63 - 1, -(2**63), Int64(1), Decimal128("NaN"), ObjectId(bytes(12))])
)
shapes = (
    scalars
    | st.sampled_from(["missing", [], [1, "x"], [None], [[1]], [1], [1.5, None], ["x"], [Int64(2)], {"v": 1}, {}, [{"a": 1}]])
    | st.lists(scalars, max_size=3)
    | st.builds(lambda value: {"a": value}, scalars)
)

#: Filters of the fix's shape (and neighbours it must leave to the matcher): the engine's own, $and-ed with a
#: migration's filter, other type sets, a dotted field, $exists alone.
FILTERS: list[dict[str, Any]] = [
    not_a_version("v"),
    {"$and": [{"k": {"$lt": 20}}, not_a_version("v")]},
    {"$and": [{"k": {"$in": [1, 2, 3, 5, 8, 13]}}, {"$or": [{"k": 1}, {"k": {"$gt": 2}}]}, not_a_version("v")]},
    {"v": {"$not": {"$type": "number"}}},
    {"v": {"$not": {"$type": ["double", "int", "long", "decimal"]}}},
    {"v": {"$not": {"$type": [1, 16, 18, 19]}}},
    {"v": {"$not": {"$type": ["int", "long"]}}},
    {"v": {"$not": {"$type": "null"}}},
    {"v": {"$exists": True, "$not": {"$type": "string"}}},
    {"v": {"$exists": False}},
    {"v": {"$exists": True}},
    {"v": {"$exists": False, "$not": {"$type": "number"}}},
    {"v": {"$exists": True, "$not": {"$type": ["number", "null"]}}, "w": {"$exists": True, "$not": {"$type": "number"}}},
    {"v.a": {"$exists": True, "$not": {"$type": ["number", "null"]}}},
    {"$or": [{"v": {"$lt": 1}}, not_a_version("v")]},
]


def document(i: int, version: Any, other: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"_id": i, "k": i}
    if version != "missing":
        doc["v"] = version
    if other != "missing":
        doc["w"] = other
    return doc


def answer(collection: Any, filter_: dict[str, Any], options: dict[str, Any], session: Any = None) -> Any:
    """count_documents' count, or the error's class and code."""
    try:
        return collection.count_documents(filter_, session=session, **options)
    except PyMongoError as error:
        return type(error).__name__, getattr(error, "code", None)


@examples(thorough=150, quick=20)
def test_a_count_of_values_not_of_a_type_answers_what_mongoeco_answers(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor

    @settings(max_examples=max_examples)
    @given(
        data=st.data(),
        values=st.lists(st.tuples(shapes, shapes), min_size=0, max_size=30),
        added=st.lists(st.tuples(shapes, shapes), max_size=3),
    )
    def check(data: st.DataObject, values: list[Any], added: list[Any]) -> None:
        client = sync_client(server)
        try:
            collection = client.rejects.mixed
            collection.drop()
            collection.create_index([("v", 1), ("_id", 1)])
            if values:
                collection.insert_many([document(i, version, other) for i, (version, other) in enumerate(values)])
            for filter_ in FILTERS:
                options = data.draw(st.sampled_from([{}, {"limit": 10_000, "maxTimeMS": 2_000}, {"limit": 2}, {"skip": 1}, {"hint": "v_1__id_1"}]))
                fast = answer(collection, filter_, options), in_transaction(client, collection, filter_, options, added)
                with original(AsyncAggregationCursor, "_open_incremental_group_stream"):
                    slow = answer(collection, filter_, options), in_transaction(client, collection, filter_, options, added)
                assert fast == slow, (filter_, options)
            # A snapshot session keeps reading the data of its first read, whichever path counts.
            filter_ = data.draw(st.sampled_from(FILTERS))
            with client.start_session(snapshot=True) as session:
                collection.find_one({}, session=session)
                collection.insert_many([document(100 + i, version, other) for i, (version, other) in enumerate(added)] or [{"_id": 99}])
                collection.delete_many({"_id": {"$lt": 3}})
                fast = answer(collection, filter_, {}, session)
                with original(AsyncAggregationCursor, "_open_incremental_group_stream"):
                    slow = answer(collection, filter_, {}, session)
            assert fast == slow, filter_
        finally:
            client.close()

    check()


def in_transaction(client: Any, collection: Any, filter_: dict[str, Any], options: dict[str, Any], added: list[Any]) -> Any:
    """The answer inside a fresh transaction that first inserted ``added`` and deleted two documents, aborted after."""
    with client.start_session() as session:
        session.start_transaction()
        try:
            for i, (version, other) in enumerate(added):
                collection.insert_one(document(1_000 + i, version, other), session=session)
            collection.delete_many({"_id": {"$in": [0, 1]}}, session=session)
            return answer(collection, filter_, options, session)
        except PyMongoError as error:
            return type(error).__name__, getattr(error, "code", None)
        finally:
            if session.in_transaction:
                session.abort_transaction()


def test_the_matcher_sees_no_document_whose_version_is_a_number(server: InProcessServer) -> None:
    """(cp) The background engine's count of versions that are not numbers (input_probe's, as the planning
    of a pass sends it, with a migration's filter or without) asks the matcher only about the documents whose
    top-level version is neither a number nor null nor missing; without the fix it sees every document."""
    numbers = [1, 2.5, Int64(3), Decimal128("4"), -0.0, float("nan"), 2**40]
    others: list[Any] = ["2", True, [], [1, "x"], [None], [[1]], {"a": 1}, datetime.datetime(2024, 1, 1), ObjectId(bytes(12))]
    client = sync_client(server)
    try:
        collection = client.rejects.versions
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": numbers[i % len(numbers)], "k": i % 2} for i in range(700)])
        collection.insert_many([{"_id": 1_000 + i, "k": i % 2} for i in range(50)] + [{"_id": 2_000 + i, "__v": None, "k": 0} for i in range(50)])
        collection.insert_many([{"_id": 3_000 + i, "__v": value, "k": 0} for i, value in enumerate(others)])

        async def count(filter_: dict[str, Any]) -> tuple[int, str | None]:
            engine = AsyncMongoClient(server.uri)
            try:
                return await not_a_version_count(engine.rejects.versions, filter_, "__v")
            finally:
                await engine.close()

        with MatchCounter() as counter:
            assert asyncio.run(count({})) == (len(others) - 2, None)  # [1, "x"] and [None] hold a number or a null
        assert counter.seen == len(others)
        with MatchCounter() as counter:
            assert asyncio.run(count({"k": 0})) == (len(others) - 2, None)
        assert counter.seen == len(others)
    finally:
        client.close()
