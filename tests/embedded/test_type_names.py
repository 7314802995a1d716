"""Fix (cj) of mongoshift.embedded.patches.type_names: ``$type`` names every BSON type as mongod does, in
aggregation expressions and in queries (by name and by number).

Through the real pymongo driver and unchanged against a real replica set (MONGOSHIFT_TEST_URI): the
names and numbers are mongod's (its ``$type`` pages), not mongoeco's.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.dbref import DBRef

#: (mongod's name, its number, a value of that type as pymongo sends it)
VALUES: list[tuple[str, int, Any]] = [
    ("double", 1, 1.5),
    ("string", 2, "text"),
    ("object", 3, {"a": 1}),
    ("object", 3, DBRef("other", 7)),  # a DBRef is a document ($ref, $id) to mongod
    ("array", 4, [1]),
    ("binData", 5, Binary(b"x", 0)),
    ("binData", 5, Binary(uuid.UUID(int=5).bytes, 4)),
    ("objectId", 7, ObjectId("0123456789ab0123456789ab")),
    ("bool", 8, True),
    ("date", 9, datetime.datetime(2020, 1, 2)),
    ("null", 10, None),
    ("regex", 11, Regex("^a", "i")),
    ("javascript", 13, Code("f()")),
    ("javascriptWithScope", 15, Code("f()", {"x": 1})),
    ("int", 16, 7),
    ("timestamp", 17, Timestamp(1, 2)),
    ("long", 18, Int64(5)),  # within the int32 range: still a long
    ("long", 18, Int64(2**40)),
    ("decimal", 19, Decimal128("1.5")),
    ("minKey", -1, MinKey()),
    ("maxKey", 127, MaxKey()),
]


async def _seed(collection: Any) -> None:
    await collection.insert_many([{"_id": i, "v": value} for i, (_, _, value) in enumerate(VALUES)] + [{"_id": len(VALUES)}])


async def test_the_aggregation_type_operator_names_types_as_mongod(db) -> None:
    """(cj) ``{$type: "$v"}`` gives mongod's name for every type, ``"missing"`` for an absent field
    (mongoeco: "int" for a small Int64, "string" for code, "MinKey", "MaxKey", "DBRef")."""
    await _seed(db.types)
    rows = await (await db.types.aggregate([{"$project": {"t": {"$type": "$v"}}}, {"$sort": {"_id": 1}}])).to_list()
    assert [row["t"] for row in rows] == [name for name, _, _ in VALUES] + ["missing"]


async def test_a_group_by_type_counts_what_the_query_type_matches(db) -> None:
    """(cj) A ``$group`` by ``{$type: "$v"}`` names the documents the query's ``$type`` of the same name
    and of its number matches, and no others (mongoeco's query ``"string"`` matched code, its
    ``"object"`` no DBRef)."""
    await _seed(db.types)
    groups = await (await db.types.aggregate([{"$group": {"_id": {"$type": "$v"}, "ids": {"$push": "$_id"}}}])).to_list()
    grouped = {group["_id"]: sorted(group["ids"]) for group in groups}
    expected: dict[str, list[int]] = {}
    for i, (name, _, _) in enumerate(VALUES):
        expected.setdefault(name, []).append(i)
    assert grouped == {**expected, "missing": [len(VALUES)]}
    for name, number, _ in VALUES:
        # the array [1] holds an int: the query's $type matches an array by its elements too
        wanted = expected[name] + (expected["array"] if name == "int" else [])
        for spec in (name, number):
            found = sorted([doc["_id"] async for doc in db.types.find({"v": {"$type": spec}}, {"_id": 1})])
            assert found == sorted(wanted), spec

