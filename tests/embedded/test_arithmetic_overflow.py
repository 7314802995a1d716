"""Fix (co) of mongoshift.embedded.patches.arithmetic: aggregation arithmetic past the int64 range gives a double,
as mongod's (its ``arith_overflow`` jstest), where the embedded server answered ``ok: 0`` with no code; the update
operators ``$inc`` and ``$mul`` still refuse such a statement (fix (cn))."""

from __future__ import annotations

from typing import Any

import pytest
from bson.int64 import Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure, WriteError

LIMIT = 2**63 - 1


def results(db: Any, operator: str) -> list[Any]:
    stage = {"$project": {"res": {operator: ["$lhs", "$rhs"]}}}
    return [doc["res"] for doc in db.arith.aggregate([stage, {"$sort": {"_id": 1}}])]


@pytest.fixture
def sync_db(sync_client: MongoClient[dict[str, Any]], db_name: str) -> Any:
    return sync_client[db_name]


@pytest.mark.parametrize(
    ("operator", "lhs", "rhs", "expected"),
    [
        ("$add", Int64(9 * 10**18), Int64(9 * 10**18), 1.8e19),
        ("$subtract", Int64(-9 * 10**18), Int64(9 * 10**18), -1.8e19),
        ("$multiply", Int64(5 * 10**18), Int64(10), 5e19),
    ],
)
def test_an_expression_past_the_int64_range_is_a_double(sync_db: Any, operator: str, lhs: Any, rhs: Any, expected: float) -> None:
    sync_db.arith.insert_many([{"_id": 0, "lhs": 2_000_000_000, "rhs": 2_000_000_000}, {"_id": 1, "lhs": lhs, "rhs": rhs}])
    got = results(sync_db, operator)
    assert got[1] == expected and isinstance(got[1], float), got
    assert isinstance(got[0], int) and not isinstance(got[0], float)  # within the range: an integer as before


def test_a_pipeline_update_past_the_int64_range_stores_a_double_and_inc_still_refuses(sync_db: Any) -> None:
    sync_db.arith.insert_many([{"_id": 1, "n": Int64(LIMIT)}, {"_id": 2, "n": Int64(LIMIT)}])
    result = sync_db.arith.update_one({"_id": 1}, [{"$set": {"n": {"$add": ["$n", 1]}}}])
    assert result.modified_count == 1
    stored = sync_db.arith.find_one({"_id": 1})["n"]
    assert isinstance(stored, float) and stored == float(LIMIT) + 1
    with pytest.raises((WriteError, OperationFailure)) as refused:  # the update operator: that statement's BadValue
        sync_db.arith.update_one({"_id": 2}, {"$inc": {"n": 1}})
    assert refused.value.code == 2
    assert sync_db.arith.find_one({"_id": 2})["n"] == LIMIT


def test_a_groups_sum_and_average_past_the_int64_range_are_doubles(sync_db: Any) -> None:
    sync_db.arith.insert_many([{"_id": 1, "n": Int64(9 * 10**18)}, {"_id": 2, "n": Int64(9 * 10**18)}, {"_id": 3, "n": 1}])
    (group,) = sync_db.arith.aggregate([{"$group": {"_id": None, "s": {"$sum": "$n"}, "a": {"$avg": "$n"}}}])
    assert isinstance(group["s"], float) and group["s"] == 1.8e19 + 1
    assert isinstance(group["a"], float) and group["a"] == pytest.approx(6e18)
    (small,) = sync_db.arith.aggregate([{"$match": {"_id": 3}}, {"$group": {"_id": None, "s": {"$sum": "$n"}}}])
    assert small["s"] == 1 and isinstance(small["s"], int)  # within the range: an integer as before


def test_an_integer_result_with_a_long_operand_stays_a_long(sync_db: Any) -> None:
    """(cz) long + int is a long whatever its value, in expressions, $group's $sum, pipeline updates, $inc and $mul;
    int + int stays an int until it leaves the int32 range."""
    t = sync_db.longs
    t.insert_many([{"_id": 1, "r": Int64(7), "i": 5}, {"_id": 2, "r": Int64(2**40), "i": 2**31 - 1}])
    rows = list(t.aggregate([
        {"$sort": {"_id": 1}},
        {"$project": {"a": {"$add": ["$r", 1]}, "s": {"$subtract": ["$r", "$r"]}, "m": {"$multiply": ["$r", 1]}, "ii": {"$add": ["$i", 1]}}},
    ]))
    assert [[type(row[k]) for k in ("a", "s", "m", "ii")] for row in rows] == [[Int64, Int64, Int64, int], [Int64, Int64, Int64, Int64]]
    assert rows[0]["a"] == 8 and rows[1]["ii"] == 2**31
    (sums,) = t.aggregate([{"$group": {"_id": None, "r": {"$sum": "$r"}, "one": {"$sum": 1}, "small": {"$sum": {"$literal": 2}}}}])
    assert type(sums["r"]) is Int64 and sums["r"] == 2**40 + 7 and type(sums["one"]) is int and type(sums["small"]) is int
    t.update_one({"_id": 1}, {"$inc": {"r": 1, "i": 1}})
    t.update_one({"_id": 2}, [{"$set": {"r": {"$add": ["$r", 1]}, "z": {"$multiply": ["$i", 0]}}}])
    one, two = t.find().sort("_id", 1)
    assert (type(one["r"]), one["r"], type(one["i"])) == (Int64, 8, int)
    t.update_one({"_id": 1}, {"$mul": {"r": 2}})
    assert type(t.find_one({"_id": 1})["r"]) is Int64
    assert (type(two["r"]), two["r"], type(two["z"])) == (Int64, 2**40 + 1, int)
