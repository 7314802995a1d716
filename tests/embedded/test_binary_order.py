"""Fix (ck) of mongoshift.embedded.patches.comparisons: binaries compare in mongod's order (the length first,
then the subtype, then the bytes) in query ranges, sorts and expressions.

Through the real pymongo driver and unchanged against a real replica set (MONGOSHIFT_TEST_URI). Before the
fix, ``{_id: {$gt: <UUID>}}`` matched an empty subtype-0 binary on a full scan, two subtype-0 binaries
compared as Python's bytes, and a sort put a UUID before an empty binary.
"""

from __future__ import annotations

import uuid

from bson import Binary

LOW_UUID = Binary(uuid.UUID(int=1).bytes, 4)
HIGH_UUID = Binary(uuid.UUID("ffffffff-0000-0000-0000-000000000000").bytes, 4)
#: In mongod's order: by length, then subtype, then bytes.
ORDERED = [
    Binary(b"", 0),
    Binary(b"\x02", 0),
    Binary(b"\x01\x01", 0),  # longer than b"\x02": after it, though its bytes sort first
    Binary(b"zz", 5),
    Binary(b"b" * 16, 3),
    LOW_UUID,
    HIGH_UUID,
    Binary(b"a" * 20, 0),  # longer than a UUID: after both
]


def _positions(docs: list[dict[str, object]]) -> list[int]:
    return [int(str(doc["n"])) for doc in docs]


async def _ranges(collection, field: str, hint: str | None = None) -> None:  # type: ignore[no-untyped-def]
    """Every range operator against every operand, and a sort, answer by ``ORDERED``'s positions."""
    options = {"hint": hint} if hint else {}
    for at, operand in enumerate(ORDERED):
        expected = {
            "$gt": list(range(at + 1, len(ORDERED))), "$gte": list(range(at, len(ORDERED))),
            "$lt": list(range(at)), "$lte": list(range(at + 1)),
        }
        for operator, wanted in expected.items():
            found = sorted(_positions(await collection.find({field: {operator: operand}}, **options).to_list()))
            assert found == wanted, (field, operator, at)
            assert await collection.count_documents({field: {operator: operand}}, **options) == len(wanted), (field, operator, at)
    assert _positions(await collection.find({}).sort(field, 1).to_list()) == list(range(len(ORDERED)))
    assert _positions(await collection.find({}).sort(field, -1).to_list()) == list(reversed(range(len(ORDERED))))


async def test_a_uuid_range_leaves_an_empty_binary_out_on_a_scan_and_by_id(db) -> None:
    """(ck) ``$gt`` a UUID matches neither the empty binary nor a shorter one, through the ``_id`` path
    (with a sort on ``_id`` and a limit, a keyset batch's shape) and on an unindexed field alike."""
    await db.bins.insert_many([{"_id": value, "v": value, "n": n} for n, value in enumerate(ORDERED)])
    for field in ("_id", "v"):
        found = await db.bins.find({field: {"$gt": LOW_UUID}}).to_list()
        assert sorted(_positions(found)) == [6, 7], field
    batch = await db.bins.find({"_id": {"$gt": Binary(b"", 0)}}).sort("_id", 1).limit(3).to_list()
    assert _positions(batch) == [1, 2, 3]
    await _ranges(db.bins, "_id")
    await _ranges(db.bins, "v")


async def test_binaries_compare_in_mongods_order_through_an_index(db) -> None:
    """(ck) The same answers with an index on the field, hinted, and among UUIDs alone as ``_id``s (the
    embedded server's walk of its ``_id`` order)."""
    await db.bins.insert_many([{"_id": n, "v": value, "n": n} for n, value in enumerate(ORDERED)])
    await db.bins.create_index("v")
    await _ranges(db.bins, "v", hint="v_1")
    await db.uuids.insert_many([{"_id": Binary(uuid.UUID(int=i).bytes, 4), "n": i} for i in range(5)])
    walked = await db.uuids.find({"_id": {"$gt": Binary(uuid.UUID(int=1).bytes, 4)}}).sort("_id", 1).limit(2).to_list()
    assert _positions(walked) == [2, 3]


async def test_expressions_and_accumulators_take_mongods_order(db) -> None:
    """(ck) ``$expr`` comparisons and ``$max``/``$min`` use the same order (the total order)."""
    await db.bins.insert_many([{"_id": n, "v": value, "n": n} for n, value in enumerate(ORDERED)])
    found = await db.bins.find({"$expr": {"$gt": ["$v", LOW_UUID]}}).to_list()
    assert sorted(_positions(found)) == [6, 7]
    (extremes,) = await (await db.bins.aggregate([{"$group": {"_id": None, "max": {"$max": "$v"}, "min": {"$min": "$v"}}}])).to_list()
    assert bytes(extremes["max"]) == bytes(ORDERED[-1]) and bytes(extremes["min"]) == b""
