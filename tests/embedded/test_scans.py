"""Fixes (ae), (af) and (ag) of mongoshift.embedded.patches.scans: ``_id``-ordered range scans and
``_id`` ``$in`` lookups give exactly what mongoeco's own full scan gives, and read only what they need.

The property tests run every query twice on the same data through pymongo, once with the fix and once
with the original mongoeco function swapped back in (an in-process server, :mod:`.in_process`), and
compare the replies byte for byte, errors included. The other tests count the documents the matcher
sees, which is what the fixes change (no timing).
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo.errors import PyMongoError

from ..conftest import examples
from .in_process import InProcessServer, original, sync_client

# ---------------------------------------------------------------------------------------- values

object_ids = st.builds(ObjectId, st.binary(min_size=12, max_size=12))
strings = st.text(alphabet="abAB0é中😀", max_size=3)
int32s = st.integers(min_value=-(2**31), max_value=2**31 - 1) | st.sampled_from([0, 1, -1, 2, 7])
int64s = st.builds(Int64, st.integers(min_value=-(2**63), max_value=2**63 - 1) | st.sampled_from([0, 1, 7, 2**40]))
floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1.0, 1.5, 7.0])
decimals = st.builds(
    lambda d: Decimal128(str(d)), st.decimals(min_value=-(10**6), max_value=10**6, places=2, allow_nan=False)
) | st.sampled_from([Decimal128("NaN"), Decimal128("Infinity"), Decimal128("-Infinity"), Decimal128("1.00")])
dates = st.builds(
    lambda ms: datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms),
    st.integers(min_value=-(10**12), max_value=4 * 10**12),
)
numbers = int32s | int64s | floats | decimals
#: UUIDs (subtype 4, 16 bytes, which the server decodes as UUIDs), from a small pool so that bounds meet them.
uuids = st.builds(lambda n: Binary(n.to_bytes(16, "big"), 4), st.integers(0, 6) | st.integers(0, 2**128 - 1))
#: Other binaries: subtype 0 (decoded as bytes), a 16-byte subtype 3, a subtype 4 of another length.
other_binaries = st.builds(lambda b: Binary(b, 0), st.binary(max_size=3)) | st.sampled_from([Binary(b"\x00" * 16, 3), Binary(b"\x05", 4)])
#: Every _id type the suite can store on this server (regexes and arrays are not valid _ids).
id_values = (
    object_ids | strings | numbers | dates
    | st.sampled_from([True, False, None, MinKey(), MaxKey()])
    | st.builds(lambda n: {"a": n}, st.integers(0, 3))
    | uuids | other_binaries
)
#: Bounds: mostly of the brackets the walk takes, some of others (the fix must step aside for those).
bound_values = object_ids | strings | numbers | dates | uuids | st.sampled_from([None, True, MinKey(), MaxKey(), {"a": 1}, Binary(b"\x01", 0)])
versions = st.sampled_from([1, 2, 1.0, Int64(1), [1, 2], None, "missing"])


def document(i: int, value: Any, version: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"_id": value, "n": i}
    if version != "missing":
        doc["v"] = version
    return doc


@st.composite
def queries(draw: st.DrawFn, ids: list[Any]) -> dict[str, Any]:
    """A keyset-like read: an _id range (maybe one-sided, maybe none), other conditions, a sort on _id."""
    pool = st.sampled_from(ids) | bound_values if ids else bound_values
    range_: dict[str, Any] = {}
    if draw(st.booleans()):
        range_[draw(st.sampled_from(["$gt", "$gte"]))] = draw(pool)
    if draw(st.booleans()):
        range_[draw(st.sampled_from(["$lt", "$lte"]))] = draw(pool)
    extra = draw(st.sampled_from([
        {}, {"v": 1}, {"v": {"$in": [1, None]}}, {"v": {"$ne": 2}}, {"$or": [{"v": 1}, {"n": {"$lt": 5}}]},
        {"n": {"$nin": [1, 2, 3]}},
        *({"_id": {"$type": kind}} for kind in ("number", "string", "objectId", "date", "object", "binData", "bool", "null", "minKey", "long")),
        {"_id": {"$type": ["string", "number"]}}, {"v": 1, "_id": {"$type": 2}},
    ]))
    if range_ and draw(st.booleans()):
        filter_: dict[str, Any] = {"$and": [extra, {"_id": range_}]} if extra else {"_id": range_}
    elif range_ and "_id" not in extra:
        filter_ = {**extra, "_id": range_}
    else:
        filter_ = {"$and": [extra, {"_id": range_}]} if range_ else extra
    sort = draw(st.sampled_from([1, -1, None]))
    return {
        "filter": filter_,
        "sort": [("_id", sort)] if sort else None,
        "limit": draw(st.integers(min_value=0, max_value=12)) if sort is None else draw(st.integers(min_value=1, max_value=12)),
        "skip": draw(st.sampled_from([0, 0, 1, 3])),
        "hint": draw(st.sampled_from([None, [("v", 1), ("_id", 1)], [("_id", 1)]])),
        "projection": draw(st.sampled_from([None, {"n": 1}, {"v": 0}])),
    }


def answer(collection: Any, query: dict[str, Any]) -> Any:
    """The reply as bytes (types and order included) and the filter's count, or the error's class and code."""
    try:
        cursor = collection.find(query["filter"], query["projection"], sort=query["sort"], limit=query["limit"], skip=query["skip"])
        if query["hint"] is not None:
            cursor = cursor.hint(query["hint"])
        return [encode(doc) for doc in cursor], collection.count_documents(query["filter"])
    except PyMongoError as error:
        return (type(error).__name__, getattr(error, "code", None))


def seed(collection: Any, values: list[Any], versions_: list[Any]) -> list[Any]:
    """Insert one document per value (a value equal to an earlier one is refused, as on mongod)."""
    stored = []
    for i, (value, version) in enumerate(zip(values, versions_, strict=False)):
        try:
            collection.insert_one(document(i, value, version))
        except PyMongoError:
            continue
        stored.append(value)
    return stored


@examples(thorough=120, quick=25)
def test_an_id_ordered_read_answers_what_the_full_scan_answers(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(data=st.data(), values=st.lists(id_values, min_size=0, max_size=16), versions_=st.lists(versions, min_size=16, max_size=16))
    def check(data: st.DataObject, values: list[Any], versions_: list[Any]) -> None:
        from mongoeco.engines.memory import MemoryEngine

        client = sync_client(server)
        try:
            collection = client.scans.mixed
            collection.drop()
            collection.create_index([("v", 1), ("_id", 1)])
            ids = seed(collection, values, versions_)
            for _ in range(4):
                query = data.draw(queries(ids))
                fast = answer(collection, query)
                with original(MemoryEngine, "scan_find_semantics"):
                    slow = answer(collection, query)
                assert fast == slow, query
        finally:
            client.close()

    check()


@examples(thorough=60, quick=20)
def test_an_id_in_list_reads_what_the_full_scan_reads(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(values=st.lists(object_ids | strings | numbers, min_size=1, max_size=20), data=st.data())
    def check(values: list[Any], data: st.DataObject) -> None:
        from mongoeco.engines.memory import MemoryEngine

        client = sync_client(server)
        try:
            collection = client.scans.listed
            collection.drop()
            ids = seed(collection, values, [1] * len(values))
            listed = data.draw(st.lists(st.sampled_from(ids) | object_ids | strings, max_size=8)) if ids else []
            filter_ = data.draw(st.sampled_from([{"_id": {"$in": listed}}, {"$and": [{"v": 1}, {"_id": {"$in": listed}}]}]))
            fast = [encode(doc) for doc in collection.find(filter_)]
            fast_count = collection.count_documents(filter_)
            with original(MemoryEngine, "_candidate_items_for_plan_locked"):
                slow = [encode(doc) for doc in collection.find(filter_)]
                slow_count = collection.count_documents(filter_)
            assert (fast, fast_count) == (slow, slow_count)
        finally:
            client.close()

    check()


# ------------------------------------------------------------------------------ what is read


class MatchCounter:
    """Counts the documents mongoeco's compiled matcher is asked about."""

    def __init__(self) -> None:
        self.seen = 0

    def __enter__(self) -> MatchCounter:
        from mongoeco.core.compiled_query import CompiledQuery

        self._class = CompiledQuery
        self._match = CompiledQuery.match

        def counted(query: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen += 1
            return self._match(query, document, *args, **kwargs)

        CompiledQuery.match = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *_: object) -> None:
        self._class.match = self._match  # type: ignore[method-assign]


def test_a_count_of_an_empty_id_bracket_reads_nothing(server: InProcessServer) -> None:
    """(af) The engine's plan counts each _id bracket of the collection; a bracket no _id is in costs
    no match at all, and the one holding them all matches each document once."""
    client = sync_client(server)
    try:
        collection = client.scans.brackets
        collection.drop()
        collection.insert_many([{"_id": i, "v": 1} for i in range(2_000)])
        with MatchCounter() as counter:
            empty = collection.count_documents({"$and": [{"v": 1}, {"_id": {"$type": "string"}}]})
        assert (empty, counter.seen) == (0, 0)
        with MatchCounter() as counter:
            numbers = collection.count_documents({"$and": [{"v": 1}, {"_id": {"$type": "number"}}]})
        assert (numbers, counter.seen) == (2_000, 2_000)
    finally:
        client.close()


def test_a_keyset_batch_reads_only_its_batch(server: InProcessServer) -> None:
    """(af) The engine's batch read (version filter, _id after the cursor, sorted, limited, through
    the version index) matches as many documents as it returns, wherever the cursor is."""
    client = sync_client(server)
    try:
        collection = client.scans.keyset
        collection.drop()
        collection.create_index([("v", 1), ("_id", 1)])
        collection.insert_many([{"_id": ObjectId(f"{i:024x}"), "v": 1} for i in range(3_000)])
        last = ObjectId(f"{1_999:024x}")
        with MatchCounter() as counter:
            docs = list(collection.find({"v": 1, "_id": {"$gt": last}}, sort=[("_id", 1)], limit=100).hint([("v", 1), ("_id", 1)]))
        assert [d["_id"] for d in docs] == [ObjectId(f"{i:024x}") for i in range(2_000, 2_100)]
        assert counter.seen == 100
        with MatchCounter() as counter:
            first = list(collection.find({"v": 1}, sort=[("_id", 1)], limit=50))
        assert len(first) == 50 and counter.seen == 50
    finally:
        client.close()


def test_an_id_in_list_reads_only_the_listed_documents(server: InProcessServer) -> None:
    """(ag) A read, count, update or delete of listed ObjectId, string or int _ids matches only the
    documents stored under them, not the collection."""
    client = sync_client(server)
    try:
        collection = client.scans.lookups
        collection.drop()
        oids = [ObjectId(f"{i:024x}") for i in range(2_000)]
        collection.insert_many([{"_id": i, "v": 1} for i in oids] + [{"_id": f"s{i}", "v": 1} for i in range(500)])
        listed = [oids[7], oids[1_500], "s3", "missing", ObjectId()]
        with MatchCounter() as counter:
            found = [d["_id"] for d in collection.find({"_id": {"$in": listed}})]
            counted = collection.count_documents({"v": 1, "_id": {"$in": listed}})
            updated = collection.update_many({"_id": {"$in": listed}}, {"$set": {"v": 2}}).modified_count
            deleted = collection.delete_many({"_id": {"$in": listed[:1]}}).deleted_count
        assert (found, counted, updated, deleted) == ([oids[7], oids[1_500], "s3"], 3, 3, 1)
        assert counter.seen <= 3 * 4  # each of the three stored documents, once per command (12 at most)
    finally:
        client.close()


def test_the_order_follows_inserts_and_deletes(server: InProcessServer) -> None:
    """(ae) Documents inserted and deleted after the order was built are read in their place."""
    client = sync_client(server)
    try:
        collection = client.scans.follows
        collection.drop()
        collection.insert_many([{"_id": i * 10} for i in range(100)])
        assert [d["_id"] for d in collection.find({"_id": {"$gte": 500}}, sort=[("_id", 1)], limit=3)] == [500, 510, 520]
        collection.insert_many([{"_id": 505}, {"_id": 505.5}, {"_id": Int64(501)}, {"_id": Decimal128("502.25")}])
        collection.delete_one({"_id": 510})
        got = [d["_id"] for d in collection.find({"_id": {"$gt": 500}}, sort=[("_id", 1)], limit=6)]
        assert got == [501, Decimal128("502.25"), 505, 505.5, 520, 530]
        with MatchCounter() as counter:
            list(collection.find({"_id": {"$gt": 500}}, sort=[("_id", 1)], limit=6))
        assert counter.seen == 6
    finally:
        client.close()


def test_the_order_is_kept_not_rebuilt_after_a_write(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ae) Inserts and deletes move the collection's order along: the reads after them build no
    new order (without the fix each read after a write sorts the whole collection again)."""
    from mongoshift.embedded.patches import scans

    client = sync_client(server)
    try:
        collection = client.scans.kept
        collection.drop()
        collection.insert_many([{"_id": i * 10} for i in range(2_000)])
        assert [d["_id"] for d in collection.find({"_id": {"$gt": 15}}, sort=[("_id", 1)], limit=2)] == [20, 30]
        built: list[int] = []
        kept = scans.IdOrder

        class Counted(kept):  # type: ignore[misc, valid-type]
            __slots__ = ()

            def __init__(self, ordinals: Any, keys: list[Any], storage_keys: list[Any], inexact: int) -> None:
                built.append(len(keys))
                super().__init__(ordinals, keys, storage_keys, inexact)

        monkeypatch.setattr(scans, "IdOrder", Counted)
        for i in range(20):
            collection.insert_one({"_id": i * 10 + 5})
            collection.delete_one({"_id": i * 10 + 10})
            assert [d["_id"] for d in collection.find({"_id": {"$gt": i * 10}}, sort=[("_id", 1)], limit=2)] == [i * 10 + 5, i * 10 + 20]
        assert built == []
        order = server.engine._storage_view(None)["scans"]["kept"].__dict__[scans._ATTR]
        assert len(order.keys) == 2_000
    finally:
        client.close()


def test_a_transaction_reads_its_own_inserts_in_order(server: InProcessServer) -> None:
    """(ae) A transaction's snapshot shares the order until either side inserts; each then reads
    its own documents, and the other's stay out."""
    client = sync_client(server)
    try:
        collection = client.scans.txn
        collection.drop()
        collection.insert_many([{"_id": i} for i in range(0, 100, 2)])
        list(collection.find({"_id": {"$gte": 0}}, sort=[("_id", 1)], limit=1))  # the order exists now
        with client.start_session() as session, session.start_transaction():
            collection.insert_one({"_id": 11}, session=session)
            collection.insert_one({"_id": 13})  # outside the transaction
            inside = [d["_id"] for d in collection.find({"_id": {"$gt": 8}}, sort=[("_id", 1)], limit=4, session=session)]
            outside = [d["_id"] for d in collection.find({"_id": {"$gt": 8}}, sort=[("_id", 1)], limit=4)]
            session.abort_transaction()
        assert inside == [10, 11, 12, 14]
        assert outside == [10, 12, 13, 14]
        assert [d["_id"] for d in collection.find({"_id": {"$gt": 8}}, sort=[("_id", 1)], limit=4)] == [10, 12, 13, 14]
    finally:
        client.close()


def test_decimal_and_double_bounds_compare_by_value(server: InProcessServer) -> None:
    """(af) Numbers of every type are one bracket ordered by value, NaN first and outside every range."""
    client = sync_client(server)
    try:
        collection = client.scans.numbers
        collection.drop()
        ids = [float("nan"), float("-inf"), -1, Decimal128("-0.5"), 0.0, Int64(1), 1.5, Decimal128("2.5"), 3, float("inf")]
        collection.insert_many([{"_id": v} for v in ids])
        got = [d["_id"] for d in collection.find({"_id": {"$gte": float("-inf")}}, sort=[("_id", 1)], limit=20)]
        assert [Decimal(str(v.to_decimal() if isinstance(v, Decimal128) else v)) for v in got] == [
            Decimal("-Infinity"), -1, Decimal("-0.5"), 0, 1, Decimal("1.5"), Decimal("2.5"), 3, Decimal("Infinity")]
        assert [d["_id"] for d in collection.find({"_id": {"$lt": Decimal128("1.5")}}, sort=[("_id", -1)], limit=2)] == [1, 0.0]
    finally:
        client.close()


stored_values = st.recursive(
    id_values | int64s | st.text(max_size=2) | st.sampled_from([True, None, 2.5]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["a", "b", "_id"]), inner, max_size=3),
    max_leaves=10,
)


@examples(thorough=1000, quick=150)
def test_a_walked_document_is_copied_as_the_original_copies_it(server: InProcessServer, max_examples: int) -> None:
    """(af, as) The scan's public copy of any stored document is mongoeco's (to_public, then a copy of
    the containers), type by type, and shares no dict or list with the stored document."""
    from mongoeco.core.codec import DocumentCodec

    from mongoshift.embedded.patches import scans

    engine = server.engine
    plain = scans.public_plain()

    def containers(value: Any) -> set[int]:
        if isinstance(value, dict):
            return {id(value)}.union(*(containers(item) for item in value.values()))
        if isinstance(value, list):
            return {id(value)}.union(*(containers(item) for item in value))
        return set()

    def typed(value: Any) -> Any:
        if isinstance(value, dict):
            return dict, [(key, typed(item)) for key, item in value.items()]
        if isinstance(value, list):
            return list, [typed(item) for item in value]
        return type(value)

    @settings(max_examples=max_examples)
    @given(document=st.dictionaries(st.sampled_from(["_id", "v", "n", "a"]), stored_values, max_size=5))
    def check(document: dict[str, Any]) -> None:
        stored = engine._borrow_storage_document(DocumentCodec.encode(document))  # as the walk reads it
        copied = scans._public_copy(engine, stored, plain)
        expected = engine._copy_document_containers(DocumentCodec.to_public(stored))
        assert repr(copied) == repr(expected) and typed(copied) == typed(expected)
        assert not containers(copied) & containers(stored)

    check()


@pytest.mark.parametrize("other", [Binary(b"\x05", 4), Binary(b"\x05" * 16, 3), Binary(b"\xff" * 40, 0), Binary(b"", 0)], ids=repr)
def test_a_uuid_range_among_other_binaries_answers_what_the_full_scan_answers(server: InProcessServer, other: Binary) -> None:
    """(bh) UUIDs are walked in order; a binary of another subtype or length, which the order does not
    place among them, sends every read or count over part of the binary bracket to the full scan."""
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.scans.uuids
        collection.drop()
        uuids = [Binary(bytes([i]) * 16, 4) for i in (0, 3, 7, 9)]
        seed(collection, [*uuids, other], [1] * 5)
        queries_ = [
            {"filter": {"_id": {"$gt": uuids[0], "$lt": uuids[3]}}, "sort": [("_id", 1)]},
            {"filter": {"_id": {"$gte": uuids[0]}}, "sort": [("_id", -1)]},
            {"filter": {"_id": {"$lte": uuids[2]}, "v": 1}, "sort": None},
            {"filter": {"_id": {"$gt": uuids[1]}}, "sort": None},
        ]
        for query in queries_:
            query.update(limit=0 if query["sort"] is None else 10, skip=0, hint=None, projection=None)
            fast = answer(collection, query)
            with original(MemoryEngine, "scan_find_semantics"):
                slow = answer(collection, query)
            assert fast == slow, query
            with original(AsyncAggregationCursor, "_open_incremental_group_stream"):  # (ap)'s count, against the aggregation's
                assert collection.count_documents(query["filter"]) == fast[1], query
    finally:
        client.close()


# ---------------------------------------------------------------------- (bz) the covered walk

#: Version values the index and the matcher must agree on: numbers of each type, arrays (multikey),
#: nested arrays, null, a missing field, a string and a boolean that look like the number.
covered_versions = st.sampled_from(
    [1, 1, 1, 2, 1.0, -0.0, 0, Int64(1), Decimal128("1.00"), Decimal128("1"), [1, 2], [2, [1]], [[1]], [], None, "missing", "1", True]
)


#: The _id values of the suite, binaries of every subtype and length among them since (ck) placed them all
#: in mongod's order (before it, mongoeco's matcher put an empty subtype 0 binary after a UUID).
covered_ids = (
    object_ids | strings | numbers | dates
    | st.sampled_from([True, False, None, MinKey(), MaxKey()])
    | st.builds(lambda n: {"a": n}, st.integers(0, 3))
    | uuids | other_binaries
)


@st.composite
def covered_queries(draw: st.DrawFn, ids: list[Any]) -> dict[str, Any]:
    """A range's boundary read as the engine sends it (an equality on the version, an _id range, a
    sort on _id, a skip and a limit of one, the _id alone), or one of its neighbours."""
    pool = st.sampled_from(ids) | bound_values if ids else bound_values
    range_: dict[str, Any] = {}
    if draw(st.booleans()):
        range_[draw(st.sampled_from(["$gt", "$gte"]))] = draw(pool)
    if draw(st.booleans()):
        range_[draw(st.sampled_from(["$lt", "$lte"]))] = draw(pool)
    version = draw(st.sampled_from([1, 1, 1, 2, 0, 1.0, 1.5, float("nan"), Int64(1), None, True]))
    parts: list[dict[str, Any]] = [{"v": version}]
    if range_:
        parts.append({"_id": range_})
    if draw(st.booleans()):
        parts.append({"_id": {"$type": draw(st.sampled_from(["objectId", "number", "string", "long", "date", "null", "bool", "minKey"]))}})
    return {
        "filter": parts[0] if len(parts) == 1 else {"$and": parts},
        "sort": [("_id", draw(st.sampled_from([1, -1])))],
        "limit": draw(st.sampled_from([1, 1, 2, 5])),
        "skip": draw(st.integers(min_value=0, max_value=3) | st.integers(min_value=0, max_value=14)),
        "hint": draw(st.sampled_from([[("v", 1), ("_id", 1)], None])),
        "projection": draw(st.sampled_from([{"_id": 1}, None])),
    }


def counted(collection: Any, query: dict[str, Any]) -> Any:
    """The filter's count with the query's skip and a limit (a count of an engine's pass, a probe's), or the error."""
    try:
        return collection.count_documents(query["filter"]), collection.count_documents(query["filter"], skip=query["skip"], limit=query["limit"])
    except PyMongoError as error:
        return (type(error).__name__, getattr(error, "code", None))


@examples(thorough=150, quick=30)
def test_a_covered_boundary_read_answers_what_the_full_scan_answers(server: InProcessServer, max_examples: int) -> None:
    """(bz, ca) A read answered from the version index's keys (the range's boundary: skip n, limit 1)
    gives what mongoeco's full scan gives, byte for byte, and a count so answered (a bracket's count, a
    pass's closing count) what mongoeco's aggregation counts, after inserts, updates of the version (one by one,
    by a pipeline, in a transaction), deletes, with the index built before or after the documents."""

    @settings(max_examples=max_examples)
    @given(
        data=st.data(),
        values=st.lists(covered_ids, min_size=0, max_size=16),
        versions_=st.lists(covered_versions, min_size=16, max_size=16),
        index_first=st.booleans(),
    )
    def check(data: st.DataObject, values: list[Any], versions_: list[Any], index_first: bool) -> None:
        from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor
        from mongoeco.engines.memory import MemoryEngine

        client = sync_client(server)
        try:
            collection = client.scans.covered
            collection.drop()
            if index_first:
                collection.create_index([("v", 1), ("_id", 1)])
            ids = seed(collection, values, versions_)
            if not index_first:
                collection.create_index([("v", 1), ("_id", 1)])
            for _ in range(3):
                if ids:
                    target = data.draw(st.sampled_from(ids))
                    change = data.draw(st.sampled_from(["set", "unset", "pipeline", "delete", "transaction"]))
                    try:
                        if change == "set":
                            collection.update_one({"_id": target}, {"$set": {"v": data.draw(covered_versions.filter(lambda v: v != "missing"))}})
                        elif change == "unset":
                            collection.update_one({"_id": target}, {"$unset": {"v": ""}})
                        elif change == "pipeline":
                            collection.update_many({"v": 1}, [{"$set": {"v": 2}}])
                        elif change == "delete":
                            collection.delete_one({"_id": target})
                        else:
                            with client.start_session() as session, session.start_transaction():
                                collection.update_one({"_id": target}, {"$set": {"v": 1}}, session=session)
                    except PyMongoError:
                        pass
                query = data.draw(covered_queries(ids))
                fast = answer(collection, query), counted(collection, query)
                with original(MemoryEngine, "scan_find_semantics"), original(AsyncAggregationCursor, "_open_incremental_group_stream"):
                    slow = answer(collection, query), counted(collection, query)
                assert fast == slow, query
        finally:
            client.close()

    check()


def test_a_boundary_read_matches_only_what_it_returns(server: InProcessServer) -> None:
    """(bz) The range's boundary read (the version, _id after the cursor, sorted, skip 499, limit 1,
    the _id alone) decides the 499 documents it skips from the version index's keys: the matcher sees
    only the one it returns. Without the index, every document walked is matched, as before."""
    client = sync_client(server)
    try:
        collection = client.scans.boundary
        collection.drop()
        collection.create_index([("v", 1), ("_id", 1)])
        collection.insert_many([{"_id": ObjectId(f"{i:024x}"), "v": 1 if i % 4 else 2} for i in range(3_000)])
        last = ObjectId(f"{999:024x}")
        query = {"$and": [{"v": 1}, {"_id": {"$gt": last, "$lte": ObjectId("f" * 24)}}]}
        with MatchCounter() as counter:
            found = list(collection.find(query, {"_id": 1}, sort=[("_id", 1)], skip=499, limit=1).hint([("v", 1), ("_id", 1)]))
        expected = [i for i in range(1_000, 3_000) if i % 4][499]
        assert found == [{"_id": ObjectId(f"{expected:024x}")}]
        assert counter.seen == 1
        collection.drop_index([("v", 1), ("_id", 1)])
        with MatchCounter() as counter:
            again = list(collection.find(query, {"_id": 1}, sort=[("_id", 1)], skip=499, limit=1))
        assert again == found and counter.seen == expected - 999
    finally:
        client.close()


def test_a_pass_counts_from_the_version_index_keys(server: InProcessServer) -> None:
    """(ca) The planner's count of a bracket and the pass's closing count, on a collection with the
    version index that has been walked in _id order, are counted from the index's keys: the matcher sees
    no document. Without the index, each is matched."""
    client = sync_client(server)
    try:
        collection = client.scans.pass_counts
        collection.drop()
        collection.create_index([("v", 1), ("_id", 1)])
        collection.insert_many([{"_id": ObjectId(f"{i:024x}"), "v": [1, 3] if i % 7 == 0 else 1 + i % 2} for i in range(3_000)])
        collection.insert_many([{"_id": i, "v": 1} for i in range(100)])
        list(collection.find({"v": 1}, sort=[("_id", 1)], limit=1))  # a lane's first read: the _id order is built
        expected = (sum(1 for i in range(3_000) if i % 7 == 0 or i % 2 == 0), 100, sum(1 for i in range(3_000) if i % 7 == 0 or i % 2 == 0) + 100)
        filters = ({"$and": [{"v": 1}, {"_id": {"$type": "objectId"}}]}, {"$and": [{"v": 1}, {"_id": {"$type": "number"}}]}, {"v": 1})
        with MatchCounter() as counter:
            counts = tuple(collection.count_documents(f) for f in filters)
        assert (counts, counter.seen) == (expected, 0)
        collection.drop_index([("v", 1), ("_id", 1)])
        with MatchCounter() as counter:
            again = tuple(collection.count_documents(f) for f in filters)
        assert (again, counter.seen) == (expected, 3_000 + 100 + 3_100)
    finally:
        client.close()
