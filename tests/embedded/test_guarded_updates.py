"""Fix (ah) of mongoshift.embedded.patches.updates: guarded updates by ``_id`` answer and store exactly
what mongoeco's own update path does, and touch only the document they name.

The property test applies the same bulk write to two identical collections through pymongo, one with
the fix and one with the original mongoeco function swapped back in (an in-process server,
:mod:`.in_process`), and compares the replies (counts, write errors) and the stored documents byte for
byte. The other tests check what a reader sees afterwards (indexes, change streams) and count the
documents the update path decodes (no timing).
"""

from __future__ import annotations

import datetime
from contextlib import nullcontext
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp, encode
from hypothesis import given, settings, strategies as st
from pymongo import InsertOne, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, original_update_path, stale_decodes, sync_client, versioned

FIELDS = ["a", "b", "B", "n", "__v", "__rev", "zz", "é"]
scalars = (
    st.integers(-3, 3) | st.sampled_from([2**31 - 1, -(2**31), 2**40]) | st.builds(Int64, st.integers(-3, 3))
    | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1.0, 0.0, -0.0, 2.5])
    | st.sampled_from([Decimal128("1"), Decimal128("1.0"), Decimal128("NaN")])
    | st.text(alphabet="ab", max_size=2) | st.booleans() | st.none()
    | st.sampled_from([datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), Binary(b"x", 0), Regex("a")])
    | st.sampled_from([ObjectId("0" * 24), ObjectId("f" * 24)])
)
#: Sub-document keys: mostly plain, some the fast path leaves to the original ($-prefixed, dotted, empty).
KEYS = st.sampled_from(["p", "q", "p", "q", "p", "q", "$r", "s.t", ""])
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=2), max_leaves=5)
#: Updated fields: mostly plain, some the fast path leaves to the original (_id, a path, a numeric name).
TARGETS = st.sampled_from([*FIELDS, *FIELDS, "new", "Z", "new", "Z", "_id", "a.b", "10"])
#: Stored _ids, no two equal under BSON comparison.
ID_VALUES = [
    *[ObjectId(f"{i:024x}") for i in range(6)], "k1", "k2", 7, 8.0, Int64(9),
    # the other kinds an application keys its documents by
    2.5, Decimal128("3.5"), Int64(2**40), Binary(b"\x01" * 16, 4), Binary(b"ab", 0), Binary(b"ab", 5),
    datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), Timestamp(5, 1), True, MinKey(), MaxKey(),
    {"p": 1, "q": "x"}, {"p": 1.5}, {"q": [1, {"p": 2}]}, {},
]
ids = st.sampled_from(ID_VALUES)
#: _ids a statement names: the stored ones; values BSON equality finds under another type (ints equal to
#: stored 8.0 and Int64(9), decimals equal to 2.5 and 7, a document holding an equal number, a date in
#: another zone); a document in another field order; and filters that are no equality (a regex, an operator).
named_ids = ids | st.sampled_from([
    8, 9, 10, Decimal128("2.5"), Decimal128("7"), 3.5, {"p": 1.0, "q": "x"}, {"q": "x", "p": 1}, {"p": Decimal128("1.5")},
    datetime.datetime(2024, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1))), Regex("^k"), {"$in": ["k1", 7]},
    {"$gt": "k"}, False, None, float("nan"), Decimal128("NaN"),
])


@st.composite
def stored(draw: st.DrawFn) -> list[dict[str, Any]]:
    docs = []
    for index in draw(st.lists(st.integers(0, len(ID_VALUES) - 1), min_size=1, max_size=6, unique=True)):
        doc: dict[str, Any] = {"_id": ID_VALUES[index]}
        for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
            doc[name] = draw(values | scalars)
        docs.append(doc)
    return docs


@st.composite
def statements(draw: st.DrawFn, docs: list[dict[str, Any]]) -> Any:
    target = draw(st.sampled_from(docs)) if docs and draw(st.integers(0, 4)) else {"_id": draw(named_ids)}
    query: dict[str, Any] = {"_id": target["_id"]}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2, unique=True)):
        if name not in target and draw(st.booleans()):
            query[name] = {"$exists": False}  # the engine's guard of a field the document lacks
        else:
            query[name] = target[name] if name in target and draw(st.booleans()) else draw(scalars)
    change: dict[str, Any] = {}
    names = iter(draw(st.lists(TARGETS, min_size=1, max_size=6, unique=True)))
    for operator in draw(st.lists(st.sampled_from(["$set", "$unset", "$inc"]), min_size=1, max_size=3, unique=True)):
        fields = {}
        for name in [next(names, None) for _ in range(draw(st.integers(1, 2)))]:
            if name is None:
                continue
            if operator == "$set":
                fields[name] = draw(values)
            elif operator == "$unset":
                fields[name] = ""
            else:
                fields[name] = draw(st.integers(-2, 2) | st.sampled_from([1, 1.5, -0.5, Int64(1), 2**31, "x"]))
        if fields:
            change[operator] = fields
    if not change:
        change = {"$set": {"new": 1}}
    if draw(st.integers(0, 19)) == 0:
        return UpdateMany(query, change)
    return UpdateOne(query, change)


def outcome(collection: Any, requests: list[Any], ordered: bool) -> Any:
    try:
        result = collection.bulk_write(requests, ordered=ordered).bulk_api_result
    except BulkWriteError as error:
        result = error.details
    except Exception as error:  # a command-level refusal, the same on both sides
        return type(error).__name__, getattr(error, "code", None)
    errors = [(e["index"], e["code"]) for e in result["writeErrors"]]
    documents = [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]
    return result["nMatched"], result["nModified"], errors, documents


@examples(thorough=150, quick=30)
def test_a_guarded_update_does_what_the_original_update_does(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        requests = data.draw(st.lists(statements(docs), min_size=1, max_size=6))
        ordered = data.draw(st.booleans())
        client = sync_client(server)
        try:
            fast, slow = client.updates.fast, client.updates.slow
            for collection in (fast, slow):
                collection.drop()
                collection.create_index([("__v", 1), ("_id", 1)])
                if docs:
                    collection.insert_many(docs)
            got = outcome(fast, requests, ordered)
            with original_update_path():
                expected = outcome(slow, requests, ordered)
            assert got == expected
            for field in ("__v", "a"):  # the indexes hold the same documents under the same keys
                for value in (1, 2, "a", None):
                    assert [d["_id"] for d in fast.find({field: value})] == [d["_id"] for d in slow.find({field: value})]
            assert stale_decodes(server) == []  # (bl) the decoded form each write kept is its payload's
        finally:
            client.close()

    check()


#: (bg) A stored _id and one a statement names that BSON equality finds although the storage key differs
#: (the fast path's lookup misses and must leave the statement to mongoeco's path), or that is no equality.
EQUAL_UNDER_ANOTHER_TYPE = [
    (8.0, 8), (Int64(9), 9), (9, Int64(9)), (2.5, Decimal128("2.5")), (7, Decimal128("7")), (Decimal128("3.50"), 3.5),
    ({"p": 1, "q": "x"}, {"p": 1.0, "q": "x"}), ({"p": Int64(1)}, {"p": 1}),
    (datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), datetime.datetime(2024, 1, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))),
    ("k1", Regex("^k")), ("k1", {"$in": ["k1"]}), (5, {"$gte": 5}),
]


@pytest.mark.parametrize(("stored_id", "named_id"), EQUAL_UNDER_ANOTHER_TYPE, ids=repr)
def test_an_id_equal_under_another_type_is_found_as_the_original_path_finds_it(server: InProcessServer, stored_id: Any, named_id: Any) -> None:
    """(bg) The statement finds the document (or, for a regex or an operator, the documents it matches)
    exactly as mongoeco's path does, although the fast path's storage-key lookup misses it."""
    client = sync_client(server)
    try:
        fast, slow = client.updates.fast, client.updates.slow
        for collection in (fast, slow):
            collection.drop()
            collection.insert_many([{"_id": stored_id, "__v": None, "n": 1}, {"_id": "other", "n": 1}])
        requests = [UpdateOne({"_id": named_id, "__v": None}, {"$set": {"__v": 1, "__rev": 1, "m": 2}, "$unset": {"n": ""}})]
        got = outcome(fast, requests, ordered=True)
        with original_update_path():
            expected = outcome(slow, requests, ordered=True)
        assert got == expected
        assert got[:2] == (1, 1)
    finally:
        client.close()


def test_a_regex_an_operator_or_nan_is_never_looked_up_as_an_equality() -> None:
    """(bg) Only an equality is answered by the storage key: a pattern, an operator document, NaN (equal
    to every NaN in mongod, to none by key) go to mongoeco's path, whatever is stored."""
    import re

    from mongoeco._types._bson_values import Decimal128 as EcoDecimal, Regex as EcoRegex

    from mongoshift.embedded import patches
    from mongoshift.embedded.patches.updates import _bind, looked_up

    patches.apply()
    m = _bind()
    for value in (EcoRegex("^k", ""), re.compile("k"), {"$in": [1]}, {"p": {"$gt": 1}}, float("nan"), EcoDecimal("NaN"), [1], None):
        assert not looked_up(value, m), value
    for value in ("k", 7, 2.5, EcoDecimal("2.5"), {"p": [1, {"q": 2}]}, datetime.datetime(2024, 1, 1), True):
        assert looked_up(value, m), value


def test_the_version_index_and_a_unique_index_follow_the_update(server: InProcessServer) -> None:
    """(ah) The update moves the document in the indexes whose fields it changed, and a unique index
    still refuses a duplicate (answered by the original path, with its code)."""
    client = sync_client(server)
    try:
        collection = client.updates.indexes
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.create_index("email", unique=True)
        ids = [ObjectId() for _ in range(3)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "email": f"u{n}"} for n, i in enumerate(ids)])
        result = collection.bulk_write([
            UpdateOne({"_id": ids[0], "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}),
            UpdateOne({"_id": ids[1], "__v": 1, "__rev": 9}, {"$set": {"__v": 2}}),  # the guard misses
            UpdateOne({"_id": ids[2]}, {"$set": {"email": "u9"}}),
        ])
        assert (result.matched_count, result.modified_count) == (2, 2)
        hint = [("__v", 1), ("_id", 1)]
        assert [d["_id"] for d in collection.find({"__v": 2}).hint(hint)] == [ids[0]]
        assert [d["_id"] for d in collection.find({"__v": 1}).hint(hint)] == ids[1:]
        assert collection.find_one({"email": "u9"})["_id"] == ids[2]
        assert collection.find_one({"email": "u2"}) is None
        with pytest.raises(BulkWriteError) as error:
            collection.bulk_write([UpdateOne({"_id": ids[1]}, {"$set": {"email": "u9"}})])
        assert error.value.details["writeErrors"][0]["code"] == 11000
        assert collection.find_one({"_id": ids[1]})["email"] == "u1"
    finally:
        client.close()


def test_a_guarded_update_moves_its_version_index_entry_in_one_map(server: InProcessServer) -> None:
    """(br) A version index's entries are lone buckets (one document each), kept whole in one persistent
    map: inserting the documents and moving their entries with guarded updates never steps the maps of
    ordinals and membership orders (each step of a map copies its path from the root: two of a guarded
    update's four were those maps'), and the index answers reads through it as before."""
    client = sync_client(server)
    try:
        collection = client.updates.lone
        collection.drop()
        hint = [("__v", 1), ("_id", 1)]
        collection.create_index(hint)
        ids = [ObjectId(f"{i:024x}") for i in range(300)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1} for i in ids])
        index_map = server.engine._index_data["updates"]["lone"]["__v_1__id_1"]
        ordinals, roots = index_map._bucket_ordinals, index_map._bucket_order_roots
        assert len(ordinals) == len(roots) == 0 and len(index_map) == 300
        result = collection.bulk_write(
            [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in ids[100:300]], ordered=False,
        )
        assert result.modified_count == 200
        assert index_map._bucket_ordinals is ordinals and index_map._bucket_order_roots is roots
        assert [d["_id"] for d in collection.find({"__v": 1}, sort=[("_id", 1)]).hint(hint)] == ids[:100]
        assert [d["_id"] for d in collection.find({"__v": 2}, sort=[("_id", 1)]).hint(hint)] == ids[100:]
        assert all(len(index_map[key]) == 1 for key in index_map)
    finally:
        client.close()


def test_a_change_stream_sees_each_guarded_update_once(server: InProcessServer) -> None:
    client = sync_client(server)
    try:
        collection = client.updates.events
        collection.drop()
        ids = [ObjectId() for _ in range(4)]
        collection.insert_many([{"_id": i, "__v": 1} for i in ids])
        with collection.watch(full_document="updateLookup") as stream:
            collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}}) for i in ids] + [
                UpdateOne({"_id": ids[0], "__v": 1}, {"$set": {"__v": 3}}),  # the guard misses: no event
                InsertOne({"_id": "last"}),
            ])
            events = []
            while len(events) < 5:
                events.append(stream.next())
        assert [(e["operationType"], e["documentKey"]["_id"]) for e in events] == [*(("update", i) for i in ids), ("insert", "last")]
        assert all(e["fullDocument"]["__v"] == 2 for e in events[:4])
    finally:
        client.close()


def test_a_batch_of_guarded_updates_decodes_only_its_documents(server: InProcessServer) -> None:
    """(ah) 200 statements on 5,000 documents decode at most those 200 documents."""
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.updates.lookups
        collection.drop()
        ids = [ObjectId(f"{i:024x}") for i in range(5_000)]
        for start in range(0, 5_000, 1_000):
            collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "body": "x" * 100} for i in ids[start:start + 1_000]])
        borrowed = MemoryEngine._borrow_storage_document
        seen: set[int] = set()

        def counted(self: Any, payload: Any, **options: Any) -> Any:
            seen.add(id(payload))
            return borrowed(self, payload, **options)

        MemoryEngine._borrow_storage_document = counted  # type: ignore[method-assign]
        try:
            result = collection.bulk_write(
                [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in ids[1_000:1_200]],
                ordered=False,
            )
        finally:
            MemoryEngine._borrow_storage_document = borrowed  # type: ignore[method-assign]
        assert result.modified_count == 200
        assert len(seen) <= 200
    finally:
        client.close()


@pytest.mark.parametrize("write", ["update", "findAndModify", "pipeline"])
def test_a_document_a_fast_path_rewrote_is_read_without_being_decoded_again(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch, write: str
) -> None:
    """(bl) The engine's count at the end of a pass read every document its batches had rewritten, and
    each checkpoint the partition record the one before it had written: each was decoded whole again.
    A document written by a fast path keeps its decoded form, so reading it decodes nothing."""
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.updates.kept
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "tags": ["a", "b"], "body": {"x": i}} for i in range(50)])
        assert collection.count_documents({"__v": 1}) == 50  # every document read once: their decoded forms are kept
        change = {"$set": {"__v": 2, "tags": ["c"], "body": {"y": 1}}, "$inc": {"__rev": 1}}
        if write == "update":
            collection.bulk_write([UpdateOne({"_id": i, "__v": 1, "__rev": 1}, change) for i in range(50)], ordered=False)
        elif write == "findAndModify":
            for i in range(50):
                client.updates.command({"findAndModify": "kept", "query": {"_id": i, "__rev": 1}, "update": change})
        else:
            collection.update_many({"__v": 1}, [{"$set": {"__v": 2, "tags": ["c"], "body": {"y": 1}, "__rev": {"$add": ["$__rev", 1]}}}])
        assert stale_decodes(server) == []
        calls = count_calls(monkeypatch, (MemoryEngine, "_decode_codec_payload"))
        assert collection.count_documents({"__v": 1}) == 0
        assert collection.count_documents({"__v": 2, "tags": "c", "body": {"y": 1}}) == 50
        assert calls["_decode_codec_payload"] == 0
    finally:
        client.close()


def test_a_batch_of_guarded_updates_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ah) 200 guarded statements of one command take the collection lock and dispatch their changes
    once, and re-encode no whole document; mongoeco's path takes each of these per statement."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.updates.steps
        ids = versioned(collection, 1_000, {"qty": 2})
        calls = count_calls(
            monkeypatch, (MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"),
            (CollectionRuntimeCoordinator, "_dispatch_engine_changes"),
        )
        result = collection.bulk_write(
            [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2, "total": 4}, "$unset": {"qty": ""}, "$inc": {"__rev": 1}})
             for i in ids[100:300]],
            ordered=False,
        )
        monkeypatch.undo()
        assert result.modified_count == 200
        assert calls == {"_get_lock": 1, "_encode_storage_document": 0, "_dispatch_engine_changes": 1}
        assert collection.count_documents({"__v": 2, "total": 4, "__rev": 2, "qty": {"$exists": False}}) == 200
    finally:
        client.close()


def test_a_guarded_statement_looks_its_document_up_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cc) Each of 200 guarded statements of one command, outside a transaction, looks its stored
    document up once (its guard's read): the write takes the pre-image from there, not from a second
    lookup (400 lookups before). Its change events still carry the update's description."""
    from mongoeco.engines._memory_collection import MemoryCollection

    client = sync_client(server)
    try:
        collection = client.updates.lookups
        ids = versioned(collection, 300, {"qty": 2})
        with collection.watch(max_await_time_ms=50) as stream:
            calls = count_calls(monkeypatch, (MemoryCollection, "get"))
            result = collection.bulk_write(
                [UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}, "$unset": {"qty": ""}, "$inc": {"__rev": 1}}) for i in ids[50:250]],
                ordered=False,
            )
            monkeypatch.undo()
            events = [stream.next() for _ in range(200)]
        assert result.modified_count == 200
        assert calls["get"] <= 200 + 10
        assert [e["documentKey"]["_id"] for e in events] == ids[50:250]
        assert all(e["updateDescription"] == {"updatedFields": {"__v": 2, "__rev": 2}, "removedFields": ["qty"], "truncatedArrays": []}
                   for e in events)
    finally:
        client.close()


def test_the_engines_updates_of_a_never_versioned_collection_take_the_engine_steps_once(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(bg) The background engine's guarded writes of documents that have no revision, a missing or null
    version, and _ids of every kind an application uses take the batch: one collection lock for the
    command and no whole-document encode. Before, their second creating operator (``$inc`` of the
    missing revision), a null guard or an _id other than an ObjectId, string or int sent each one
    through mongoeco's path, four times slower on such a collection."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.background.write.document import guard, stamped_diff

    client = sync_client(server)
    try:
        collection = client.updates.legacy
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        kinds = [ObjectId("0" * 24), "k", 7, Int64(2**40), 2.5, Decimal128("3.5"), Binary(b"\x01" * 16, 4), Binary(b"ab", 0),
                 datetime.datetime(2024, 1, 1), Timestamp(5, 1), {"tenant": 1, "n": 2}, MinKey(), MaxKey(), True]
        versions: list[Any] = [None, 0, "missing"]
        docs = []
        for n, kind in enumerate(kinds):
            doc: dict[str, Any] = {"_id": kind, "name": f"First{n} Last{n}"}
            if versions[n % 3] != "missing":
                doc["__v"] = versions[n % 3]
            docs.append(doc)
        collection.insert_many(docs)
        requests = []
        for doc in collection.find():
            new = dict(doc)
            new["first"], _, new["last"] = new.pop("name").partition(" ")
            requests.append(UpdateOne(guard(doc, "__v", "__rev"), stamped_diff(doc, new, version_field="__v", revision_field="__rev", to_version=1)))
        calls = count_calls(monkeypatch, (MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"),
                            (CollectionRuntimeCoordinator, "_dispatch_engine_changes"))
        result = collection.bulk_write(requests, ordered=False)
        monkeypatch.undo()
        assert result.modified_count == len(kinds)
        assert calls == {"_get_lock": 1, "_encode_storage_document": 0, "_dispatch_engine_changes": 1}
        stored = list(collection.find({"__v": 1, "__rev": 1, "name": {"$exists": False}}))
        assert len(stored) == len(kinds)
        # the new fields in name order, as mongod adds them (a version that was there keeps its place)
        assert all([name for name in doc if name != "__v"] == ["_id", "__rev", "first", "last"] for doc in stored)
    finally:
        client.close()


@settings(max_examples=200)
@given(
    members=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4)), max_size=12),
    calls=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.sampled_from(["v", "w"])), min_size=1, max_size=8),
    journals=st.lists(st.tuples(st.sampled_from(["c", "other"]), st.booleans()), max_size=3),
)
def test_the_index_journal_records_what_the_engine_records(
    members: list[tuple[int, int]], calls: list[tuple[int, int, str]], journals: list[tuple[str, bool]],
) -> None:
    """(ah) A batch journals each index entry it moves as MemoryEngine._record_index_membership_undo_locked
    does: into the same journals (its namespace's, with its index data), once per entry, the same record."""
    from types import SimpleNamespace

    from mongoeco.engines._memory_collection import MemoryIndexMap
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.embedded import patches
    from mongoshift.embedded.patches.updates import _journaled

    patches.apply()
    index_map: Any = MemoryIndexMap()
    for key, member in members:
        index_map.add((key,) if key < 2 else (key, member), member)
    index_data: Any = {"d": {"c": {"v": index_map, "w": index_map}}}

    def stack() -> list[Any]:
        return [SimpleNamespace(db_name="d", coll_name=coll, index_data=index_data if own else {}, index_changes={})
                for coll, own in journals]

    fast, slow = stack(), stack()
    engine: Any = MemoryEngine.__new__(MemoryEngine)
    engine._document_undo_stack = slow
    mine = [j for j in fast if j.db_name == "d" and j.coll_name == "c" and j.index_data is index_data]
    for key, member, name in calls:
        index_key = (key,) if key < 2 else (key, member)
        assert _journaled(mine, index_map, name, index_key, member) == index_map.get(index_key)
        MemoryEngine._record_index_membership_undo_locked(engine, "d", "c", name, index_key, member, index_data=index_data)
        if member % 2:  # the entries move between the calls, as in a batch
            index_map.discard(index_key, member)
        else:
            index_map.add(index_key, member)
    assert [list(j.index_changes.items()) for j in fast] == [list(j.index_changes.items()) for j in slow]


def test_a_batch_that_fails_in_its_write_steps_is_rolled_back_whole(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ah) A write step that fails part way through a statement (never seen: a fault injected here)
    rolls the whole batch back: the stored documents and every index entry are as before the command."""
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.updates.rollback
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "qty": i} for i in range(50)])

        def state() -> Any:
            maps = server.engine._index_data["updates"]["rollback"]
            return [encode(d) for d in collection.find({}, sort=[("_id", 1)])], {name: maps[name]._snapshot_state() for name in maps}

        before = state()
        written = MemoryEngine._set_storage_document_locked
        calls = []

        def failing(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(1)
            if len(calls) == 7:
                raise RuntimeError("injected")
            return written(self, *args, **kwargs)

        monkeypatch.setattr(MemoryEngine, "_set_storage_document_locked", failing)
        with pytest.raises(Exception, match="rolled back"):
            collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in range(10, 20)])
        monkeypatch.undo()
        assert len(calls) == 7
        assert state() == before
    finally:
        client.close()


def outcome_with_events(collection: Any, requests: list[Any], ordered: bool) -> Any:
    """:func:`outcome`, and the change events the bulk write published, as a change stream reads them."""
    with collection.watch(full_document="updateLookup", max_await_time_ms=50) as stream:
        result = outcome(collection, requests, ordered)
        collection.insert_one({"_id": "end"})  # the events before this one are the bulk write's
        events = []
        while (event := stream.next())["operationType"] != "insert" or event["documentKey"]["_id"] != "end":
            events.append(encode({name: event.get(name) for name in ("operationType", "documentKey", "updateDescription", "fullDocument")}))
    return result, events


@examples(thorough=150, quick=20)
def test_a_batchs_change_events_are_the_original_paths(server: InProcessServer, max_examples: int) -> None:
    """(ah) The events of a batch, delivered to the change history in one go, are the events mongoeco's
    own update path publishes, and those the adapter's own delivery of the same batch publishes."""
    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        from mongoeco.engines.adapter import EngineSpiAdapter

        requests = data.draw(st.lists(statements(docs), min_size=1, max_size=6))
        ordered = data.draw(st.booleans())
        client = sync_client(server)
        try:
            got = []
            for name, swapped in (("fast", None), ("adapter", (EngineSpiAdapter, "dispatch_committed_changes")),
                                  ("slow", None)):
                collection = client.updates[name]
                collection.drop()
                collection.create_index([("__v", 1), ("_id", 1)])
                if docs:
                    collection.insert_many(docs)
                with original(*swapped) if swapped else original_update_path() if name == "slow" else nullcontext():
                    got.append(outcome_with_events(collection, requests, ordered))
            assert got[0] == got[1] == got[2]
        finally:
            client.close()

    check()


def test_a_batch_takes_no_per_statement_journal_key_or_delivery_steps(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(at) 200 guarded statements on int _ids ((ai) once kept the keys of the last 4,096 ints: not theirs) derive no
    int key through bson_equality_key, journal their index entries without the engine's method, and
    reach the change history without the adapter's per-change delivery; before, each took them per
    statement (201, 400 and 200 calls here)."""
    from mongoeco.engines import memory
    from mongoeco.engines.adapter import EngineSpiAdapter
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.updates.int_ids
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        for start in range(0, 6_000, 1_000):
            collection.insert_many([{"_id": i, "__v": 1, "__rev": 1} for i in range(start, start + 1_000)])
        with collection.watch() as stream:
            calls = count_calls(
                monkeypatch, (memory, "bson_equality_key"), (MemoryEngine, "_record_index_membership_undo_locked"),
                (EngineSpiAdapter, "_deliver_committed_change"),
            )
            # a static method: wrapped again as one, or the adapter would pass itself to it
            monkeypatch.setattr(EngineSpiAdapter, "_deliver_committed_change", staticmethod(EngineSpiAdapter._deliver_committed_change))
            result = collection.bulk_write(
                [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in range(100, 300)],
                ordered=False,
            )
            monkeypatch.undo()
            assert [stream.next()["documentKey"]["_id"] for _ in range(200)] == list(range(100, 300))
        assert result.modified_count == 200
        assert calls == {"bson_equality_key": 0, "_record_index_membership_undo_locked": 0, "_deliver_committed_change": 0}
    finally:
        client.close()


def test_an_update_command_of_plain_entries_goes_to_the_batch_without_the_per_statement_path(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(av) A command whose entries are all ``{q, u}`` is answered by its own loop, not mongoeco's (which
    calls the per-statement function of its module for each entry); the entry the batch does not take
    (the ``$inc`` of a string) goes to mongoeco's own statement path, whose error the reply names by
    the entry's index, as mongoeco's loop does."""
    from mongoeco.api._async import _collection_modify

    client = sync_client(server)
    try:
        collection = client.updates.plain
        collection.drop()
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "s": "x"} for i in range(50)])
        calls = count_calls(monkeypatch, (_collection_modify, "execute_server_update"))
        requests = [UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in range(40)]
        requests.insert(7, UpdateOne({"_id": 45}, {"$inc": {"s": 1}}))
        with pytest.raises(BulkWriteError) as failed:
            collection.bulk_write(requests, ordered=False)
        monkeypatch.undo()
        assert calls == {"execute_server_update": 0}
        details = failed.value.details
        assert (details["nMatched"], details["nModified"]) == (40, 40)
        assert [(e["index"], e["code"]) for e in details["writeErrors"]] == [(7, 14)]
        assert collection.count_documents({"__v": 2, "__rev": 2}) == 40
    finally:
        client.close()


def _in_transaction(client: Any, collection: Any, requests: list[Any], *, rival: Any | None, commit: bool) -> Any:
    """``requests`` in one transaction (``rival``: an ``_id`` another open transaction writes first);
    what the client saw, and the documents afterwards."""
    from pymongo.errors import OperationFailure

    other = client.start_session() if rival is not None else None
    try:
        if other is not None:
            other.start_transaction()
            collection.update_one({"_id": rival}, {"$set": {"rival": 1}}, session=other)
        with client.start_session() as session:
            session.start_transaction()
            try:
                result = collection.bulk_write(requests, ordered=True, session=session)
                seen: Any = ("ok", result.matched_count, result.modified_count)
            except BulkWriteError as error:
                seen = ("bulk", [(e["index"], e["code"]) for e in error.details["writeErrors"]], error.details["nModified"])
            except OperationFailure as error:
                labels = sorted(label for label in ("TransientTransactionError", "UnknownTransactionCommitResult") if error.has_error_label(label))
                seen = ("failed", error.code, labels)
            if session.in_transaction:
                if commit and seen[0] == "ok":
                    session.commit_transaction()
                else:
                    session.abort_transaction()
    finally:
        if other is not None:
            other.abort_transaction()
            other.end_session()
    return seen, [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]


@pytest.mark.parametrize(("rival", "commit"), [(None, True), (None, False), (7, True), (0, True), (19, True)])
def test_a_batch_in_a_transaction_answers_as_the_original_path(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch, rival: int | None, commit: bool
) -> None:
    """(be) A guarded update command inside a transaction goes to the batch: committed, aborted, or
    meeting a write conflict (another open transaction wrote one of its documents first) at its
    first, a middle or its last statement, the client sees what mongoeco's own path answers and the
    documents end the same. Each statement's conflict is checked before it writes anything."""
    from mongoeco.engines.memory import MemoryEngine

    requests = [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2, "n": i}, "$inc": {"__rev": 1}}) for i in range(20)]
    client = sync_client(server)
    try:
        outcomes = []
        for name, path in (("fast", nullcontext()), ("slow", original_update_path())):
            collection = client.updates[f"txn_{name}"]
            collection.drop()
            collection.create_index([("__v", 1), ("_id", 1)])
            collection.insert_many([{"_id": i, "__v": 1, "__rev": 1} for i in range(20)])
            with path:
                calls = count_calls(monkeypatch, (MemoryEngine, "update_with_operation"))
                outcomes.append(_in_transaction(client, collection, requests, rival=rival, commit=commit))
                monkeypatch.undo()
            if name == "fast" and rival is None:
                assert calls == {"update_with_operation": 0}  # every statement through the batch
        assert outcomes[0] == outcomes[1]
        seen, documents = outcomes[0]
        if rival is None:
            assert seen == ("ok", 20, 20)
            assert len(documents) == 20
        else:
            assert seen[0] != "ok"  # the conflict, whatever the path reports it as
    finally:
        client.close()
