"""Fixes (s) and (t) of mongoshift.embedded.patches: compound hashed indexes, and a find's min/max bounds.

The find tests run unchanged against a real replica set (MONGOSHIFT_TEST_URI), where they also
check the Python port of the hashed index key against mongod's own: the expected documents are
computed with :func:`hashed_key`.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

import pytest
from bson import Binary, Code, Int64, MaxKey, MinKey, ObjectId, Regex
from pymongo.errors import OperationFailure

from mongoshift.embedded.hashed_key import hashed_key

#: Values and their hashed keys as MongoDB's own unit tests of its hasher pin them.
PINNED: list[tuple[Any, int]] = [
    (42, -944302157085130861),
    (42.123, -944302157085130861),
    (Int64(42), -944302157085130861),
    (0, 4854801880128277513),
    (float("nan"), 4854801880128277513),
    (1, 5902408780260971510),
    (1.987, 5902408780260971510),
    (-1.789, 1140205862565771219),
    (-(2**31), 6165898260261354870),
    (2**31 - 1, 1143184177162245883),
    (sys.float_info.max, 921523596458303250),
    (Int64(2**63 - 1), 921523596458303250),
    (-sys.float_info.max, 4532067210535695462),
    (MinKey(), 7961148599568647290),
    (MaxKey(), 5504842513779440750),
    (None, 2338878944348059895),
    ("abc", 8478485326885698097),
    ("", 2049396243249673340),
    ({"a": "abc", "b": Int64(123)}, 4771603801758380216),
    ({}, 7980500913326740417),
    (["bar", "baz", "qux"], -2938911267422831539),
    ([], 8849948234993459283),
    (Binary(bytes([0, 1, 2, 3, 4, 6]), 0), 7252465090394235301),
    (Binary(bytes(range(16)), 4), 6084661258071355978),
    (ObjectId("010203040506070809101112"), -5588663249627035708),
    (True, 6405873908747105701),
    (False, 6289544573401934092),
    (datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC), -1178696894582842035),
    (Regex(".*", "i"), 7095855029187981886),
    (Code("func f() { return 1; }"), 6861638109178014270),
]


@pytest.mark.parametrize(("value", "expected"), PINNED, ids=[repr(v)[:30] for v, _ in PINNED])
def test_the_hashed_key_is_the_one_mongodb_computes(value: Any, expected: int) -> None:
    assert hashed_key(value) == expected and type(hashed_key(value)) is Int64


INDEX = [("__v", 1), ("tenant", "hashed"), ("_id", 1)]


async def _seed(collection: Any) -> list[dict[str, Any]]:
    tenants: list[Any] = ["acme", "globex", 3, 3.5, Int64(3), None, "x" * 40, ObjectId("010203040506070809101112")]
    docs = []
    for i in range(80):
        doc: dict[str, Any] = {"_id": i, "__v": 1 if i % 4 else 2, "n": i}
        if i % 9:
            doc["tenant"] = tenants[i % len(tenants)]
        docs.append(doc)
    await collection.insert_many(docs)
    await collection.create_index(INDEX)
    return docs


def _bounds(region: Any, low: Any, high: Any) -> dict[str, Any]:
    return {"min": [("__v", region), ("tenant", low), ("_id", MinKey())], "max": [("__v", region), ("tenant", high), ("_id", MinKey())]}


async def test_a_compound_hashed_index_is_created_and_listed(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people)
    keys = [list(index["key"].items()) async for index in await db.people.list_indexes()]
    assert [("__v", 1), ("tenant", "hashed"), ("_id", 1)] in [[(f, d if isinstance(d, str) else int(d)) for f, d in k] for k in keys]
    with pytest.raises(OperationFailure):
        await db.people.create_index([("a", "hashed"), ("b", "hashed")])
    with pytest.raises(OperationFailure):
        await db.people.create_index([("a", 1), ("b", "hashed")], unique=True)


@pytest.mark.parametrize(("low", "high"), [(MinKey(), MaxKey()), (Int64(-(2**62)), Int64(2**62)), (MinKey(), Int64(0)), (Int64(0), MaxKey())])
async def test_a_find_reads_exactly_the_documents_inside_its_hash_bounds_in_index_order(db, low: Any, high: Any) -> None:  # type: ignore[no-untyped-def]
    docs = await _seed(db.people)
    found = await db.people.find({"n": {"$ne": 5}}, {"_id": 1}, hint=INDEX, **_bounds(1, low, high)).to_list(None)

    def inside(doc: dict[str, Any]) -> bool:
        h = hashed_key(doc.get("tenant"))
        return (isinstance(low, MinKey) or h >= low) and (isinstance(high, MaxKey) or h < high)

    expected = sorted(
        (d for d in docs if d["__v"] == 1 and d["n"] != 5 and inside(d)), key=lambda d: (hashed_key(d.get("tenant")), d["_id"])
    )
    assert [d["_id"] for d in found] == [d["_id"] for d in expected]
    assert all(set(d) == {"_id"} for d in found)  # the projection applies
    assert len(expected) > 0 or (not isinstance(low, MinKey) and not isinstance(high, MaxKey))


async def test_a_bounded_find_takes_its_limit_after_the_bounds(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people)
    everything = await db.people.find({}, hint=INDEX, **_bounds(1, MinKey(), MaxKey())).to_list(None)
    first = await db.people.find({}, hint=INDEX, limit=7, **_bounds(1, MinKey(), MaxKey())).to_list(None)
    assert first == everything[:7] and len(everything) == 60
    assert await db.people.find({}, hint=INDEX, **_bounds(3, MinKey(), MaxKey())).to_list(None) == []


async def test_min_and_max_bound_a_plain_index_too(db) -> None:  # type: ignore[no-untyped-def]
    await db.t.insert_many([{"_id": i, "k": i % 10} for i in range(40)])
    await db.t.create_index([("k", 1), ("_id", 1)])
    found = await db.t.find({}, hint=[("k", 1), ("_id", 1)], min=[("k", 3), ("_id", MinKey())], max=[("k", 5), ("_id", 25)]).to_list(None)
    assert [(d["k"], d["_id"]) for d in found] == [(3, 3), (3, 13), (3, 23), (3, 33), (4, 4), (4, 14), (4, 24), (4, 34), (5, 5), (5, 15)]


async def test_a_bounded_find_needs_an_existing_index_and_its_fields(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people)
    with pytest.raises(OperationFailure) as missing:
        await db.people.find({}, hint=[("nope", 1)], min=[("nope", 0)]).to_list(None)
    assert missing.value.code == 2
    with pytest.raises(OperationFailure):
        await db.people.find({}, hint=INDEX, min=[("__v", 1)]).to_list(None)


async def test_a_bounded_find_sends_its_documents_in_batches(db) -> None:  # type: ignore[no-untyped-def]
    """(bo) A min/max find's result is a cursor like any find's: 101 documents first, then getMore."""
    await db.t.insert_many([{"_id": i, "k": i % 10} for i in range(250)])
    await db.t.create_index([("k", 1), ("_id", 1)])
    cursor = db.t.find({}, hint=[("k", 1), ("_id", 1)], min=[("k", 0), ("_id", MinKey())], max=[("k", 9), ("_id", MaxKey())])
    found = await cursor.to_list(None)
    assert [d["_id"] for d in found] == sorted(range(250), key=lambda i: (i % 10, i))
    assert cursor.retrieved == 250 and cursor.cursor_id == 0
    first = db.t.find({}, hint=[("k", 1), ("_id", 1)], min=[("k", 0), ("_id", MinKey())], max=[("k", 9), ("_id", MaxKey())])
    assert (await first.next())["_id"] == 0 and first.retrieved == 101 and first.alive
    await first.close()
