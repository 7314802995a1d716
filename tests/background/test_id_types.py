"""Every BSON type an ``_id`` can have is planned, read batch by batch, and migrated.

The server refuses arrays and regular expressions as ``_id`` (and pymongo cannot
write the deprecated undefined, symbol and DBPointer types), so those are not here.
"""

from __future__ import annotations

import datetime
import math
import uuid
from typing import Any

import pytest
from bson import (
    Binary,
    Code,
    DBRef,
    Decimal128,
    Int64,
    MaxKey,
    MinKey,
    ObjectId,
    Timestamp,
    encode,
)

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.plan.planner import batch_filter
from mongoshift.background.state.model import Checkpoint, Scope

from .conftest import background_file


def _oid(i: int) -> ObjectId:
    return ObjectId(f"{i:024x}")


IDS: dict[str, list[Any]] = {
    "minKey": [MinKey()],
    "maxKey": [MaxKey()],
    "null": [None],
    "int": [*range(-3, 6)],
    "long": [Int64(2**40 + i) for i in range(5)],
    "double": [0.5, 1.5, 2.25, -7.75, float("inf"), float("-inf")],
    "decimal": [Decimal128(f"{i}.125") for i in range(5)],
    "decimal NaN": [Decimal128("NaN"), Decimal128("1"), Decimal128("-Infinity"), Decimal128("Infinity")],
    "double NaN": [float("nan"), -1.5, 2.75, 3.5, 1e300],
    "mixed numbers": [1, Int64(2), 2.5, Decimal128("3.5"), float("nan"), float("-inf"), Int64(-5), Decimal128("1E+400")],
    "string": ["a", "b", "ab", "", "zz", "\u00e9t\u00e9", "10", "9"],
    "binData": [b"\x00", b"\x01\x02", b"", b"\xff" * 40],
    "objectId": [_oid(i) for i in range(1, 7)],
    "bool": [False, True],
    "date": [datetime.datetime(2000 + i, 1, 1) for i in range(5)],
    "timestamp": [Timestamp(1_700_000_000 + i, 1) for i in range(4)],
    "javascript": [Code("f()"), Code("g()"), Code("h()")],
    "javascriptWithScope": [Code("f()", {"a": 1}), Code("f()", {"a": 2})],
    # binaries of every subtype and DBRefs run here too since the embedded server compares binaries in mongod's
    # order and types a DBRef as an object (fixes (ck), (cj) of docs/embedded.md)
    "binData subtypes": [b"\x00", Binary(b"x", 0x80), Binary.from_uuid(uuid.UUID(int=7)), Binary(b"yy", 5), b""],
    "DBRef": [DBRef("other", 1), DBRef("other", 2)],
}


#: What the embedded server compares wrongly, checked on a real server only: embedded documents compare
#: by field name before the types of their values (mongod: types first).
REAL_ONLY: dict[str, list[Any]] = {
    "object": [{"k": 1}, {"k": 2}, {"a": {"b": [1, 2]}}, {}, {"k": 1, "j": 0}],
}


def _mixed(extra: dict[str, list[Any]] | None = None) -> list[Any]:
    """One collection holding every type at once (one NaN only: the _id index holds every NaN as one key),
    each value once (a subtype-0 binary is the bytes it holds)."""
    ids: list[Any] = []
    seen: set[bytes] = set()
    groups = [values for name, values in IDS.items() if name not in ("decimal NaN", "mixed numbers")]
    for values in [*groups, *(extra or {}).values()]:
        for value in values:
            key = encode({"k": value})
            if key not in seen:
                seen.add(key)
                ids.append(value)
    return [*ids, Int64(10**15), Decimal128("42.5")]


CASES = {
    **IDS,
    "all types at once": _mixed(),
    **{name: pytest.param(ids, marks=pytest.mark.real_mongodb) for name, ids in REAL_ONLY.items()},
    "all types at once, real server": pytest.param(_mixed(REAL_ONLY), marks=pytest.mark.real_mongodb),
}


async def _migrate(fast_project, db, ids: list[Any], *, extra: str = "") -> Any:  # type: ignore[no-untyped-def]
    await db.people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in ids])
    await db.people.create_index([("__v", 1), ("_id", 1)])
    fast_project.add(
        "0001_names.py",
        background_file(batch_size=2, max_parallel=2, extra=f"adaptive=False, partitions={{'min_partition_docs': 2}}, {extra}"),
    )
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"], concurrency=2)
    return result


@pytest.mark.parametrize("ids", list(CASES.values()), ids=list(CASES))
async def test_a_collection_of_each_id_type_migrates_completely(fast_project, db, ids: list[Any]) -> None:  # type: ignore[no-untyped-def]
    result = await _migrate(fast_project, db, ids)
    assert result.status == "completed", result.last_error
    assert result.pass_number == 1  # every document was reached by the first pass's partitions
    assert result.totals["migrated"] == len(ids)
    assert await db.people.count_documents({"__v": 2, "full_name": "a b"}) == len(ids)
    assert await db.people.count_documents({"__v": 1}) == 0


@pytest.mark.parametrize("kind", ["minKey", "maxKey", "double NaN", "all types at once"])
async def test_each_id_type_migrates_in_transactional_batches(fast_project, db, kind: str) -> None:  # type: ignore[no-untyped-def]
    ids = CASES[kind]
    assert isinstance(ids, list)
    result = await _migrate(fast_project, db, ids, extra="transaction=True,")
    assert result.status == "completed", result.last_error
    assert result.totals["migrated"] == len(ids)
    assert await db.people.count_documents({"__v": 2}) == len(ids)


@pytest.mark.parametrize("nan", [float("nan"), Decimal128("NaN"), Decimal128("-NaN")])
def test_the_batch_after_a_nan_id_goes_on_with_every_other_number(nan: Any) -> None:
    """NaN sorts before every number, and ``$gt: NaN`` matches nothing on MongoDB: the next batch
    starts at minus infinity instead (which NaN is not), so the rest of the range is not lost."""
    filter_ = batch_filter({"__v": 1}, Scope("number", None, 10), Checkpoint(last_id=nan, started=True))
    condition = filter_["$and"][1]["_id"]
    assert condition == {"$gte": float("-inf"), "$lt": 10, "$type": "number"}


def test_a_batch_after_an_ordinary_id_still_starts_after_it() -> None:
    filter_ = batch_filter({"__v": 1}, Scope("number"), Checkpoint(last_id=-math.inf, started=True))
    assert filter_["$and"][1]["_id"] == {"$gt": -math.inf, "$type": "number"}


class _SampleRefused:
    """A collection whose ``$sample`` the server stops (a time or memory limit on a large collection)."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection
        self.name = collection.name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def aggregate(self, pipeline: list[dict[str, Any]], **options: Any) -> Any:
        from pymongo.errors import OperationFailure

        if any("$sample" in stage for stage in pipeline):
            raise OperationFailure("operation exceeded time limit", 50)
        return await self._collection.aggregate(pipeline, **options)


async def test_a_sample_the_server_stops_leaves_each_bracket_in_one_partition(db, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """The sample only says where to cut: when the server stops it, a pass is still planned over every
    document (it failed the whole run, exit 1, pass after pass)."""
    from mongoshift.background.plan.planner import plan_pass

    ids = [*range(300), *(f"s{i}" for i in range(200)), *(_oid(i) for i in range(1, 100))]
    await db.people.insert_many([{"_id": i, "__v": 1} for i in ids])
    with caplog.at_level("WARNING", logger="mongoshift.background"):
        planned, estimate = await plan_pass(_SampleRefused(db.people), {"__v": 1}, target=16, min_partition_docs=10, sample_size=1000)  # type: ignore[arg-type]
    assert estimate == len(ids)
    assert sorted(p.scope.bracket for p in planned) == ["number", "objectId", "string"]
    assert all(p.scope.gte is None and p.scope.lt is None for p in planned)
    assert "code 50" in caplog.text and "s1" not in caplog.text
