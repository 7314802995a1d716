"""Fix (cn) of mongoshift.embedded.patches.updates: an ``$inc`` or ``$mul`` whose integer result leaves the
int64 range is refused as that statement's BadValue (2), as mongod's ``ArithmeticNode`` refuses it: a write
error at its index, nothing of it stored, the statements around it answered as if it were not there.

Through the real pymongo driver and unchanged against a real replica set (MONGOSHIFT_TEST_URI). Without the
fix the whole command answered ``ok: 0`` with no code, after the statements before it had been written.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient, UpdateMany, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

LIMIT = Int64(2**63 - 1)
WORDS = "Failed to apply $inc operations to current value ((NumberLong)9223372036854775807)"


def legacy(sync_client: MongoClient[dict[str, Any]], db_name: str) -> Any:
    """Three versioned documents, the second at the int64 limit of its revision (legacy data)."""
    people = sync_client[db_name].people
    people.insert_many([{"_id": 1, "__v": 0, "__rev": 1}, {"_id": 2, "__v": 0, "__rev": LIMIT}, {"_id": 3, "__v": 0, "__rev": 5}])
    return people


def guarded(doc_id: int, revision: Any) -> UpdateOne:
    """The background engine's guarded update of one document: its version and revision as read."""
    return UpdateOne({"_id": doc_id, "__v": 0, "__rev": revision}, {"$inc": {"__rev": 1}, "$set": {"__v": 1}})


def stored(people: Any) -> list[dict[str, Any]]:
    return list(people.find({}, sort=[("_id", 1)]))


@pytest.mark.parametrize("ordered", [False, True])
def test_an_overflowing_statement_fails_alone_at_its_index(sync_client: MongoClient[dict[str, Any]], db_name: str, ordered: bool) -> None:
    """Unordered: the statements before and after it are written. Ordered: the one before it is, and the
    command stops there, reporting it as the write error at its index."""
    people = legacy(sync_client, db_name)
    with pytest.raises(BulkWriteError) as refused:
        people.bulk_write([guarded(1, 1), guarded(2, LIMIT), guarded(3, 5)], ordered=ordered)
    details = refused.value.details
    (error,) = details["writeErrors"]
    assert (error["index"], error["code"]) == (1, 2)
    assert WORDS in error["errmsg"] and "_id: 2" in error["errmsg"]
    assert not details["writeConcernErrors"]
    after = [{"_id": 1, "__v": 1, "__rev": 2}, {"_id": 2, "__v": 0, "__rev": LIMIT}, {"_id": 3, "__v": 1, "__rev": 6}]
    if ordered:
        after[2] = {"_id": 3, "__v": 0, "__rev": 5}
    assert (details["nMatched"], details["nModified"]) == ((1, 1) if ordered else (2, 2))
    assert stored(people) == after
    assert type(stored(people)[1]["__rev"]) is Int64  # the refused statement stored nothing, not even its $set


def test_a_single_update_and_a_find_and_modify_fail_with_the_code(sync_client: MongoClient[dict[str, Any]], db_name: str) -> None:
    people = legacy(sync_client, db_name)
    with pytest.raises(WriteError) as refused:
        people.update_one({"_id": 2}, {"$inc": {"__rev": 1}, "$set": {"__v": 1}})
    assert refused.value.code == 2 and WORDS in str(refused.value)
    with pytest.raises(OperationFailure) as failed:
        people.find_one_and_update({"_id": 2}, {"$inc": {"__rev": 1}, "$set": {"__v": 1}})
    assert failed.value.code == 2 and WORDS in str(failed.value)
    assert people.find_one({"_id": 2}) == {"_id": 2, "__v": 0, "__rev": LIMIT}


def test_an_update_many_and_an_upsert_refuse_the_overflow(sync_client: MongoClient[dict[str, Any]], db_name: str) -> None:
    people = legacy(sync_client, db_name)
    with pytest.raises(BulkWriteError) as refused:
        people.bulk_write([UpdateMany({"_id": 2}, {"$inc": {"__rev": 1}}), UpdateOne({"_id": 2}, {"$inc": {"__rev": 1}}, upsert=True)], ordered=False)
    assert [(e["index"], e["code"]) for e in refused.value.details["writeErrors"]] == [(0, 2), (1, 2)]
    assert people.find_one({"_id": 2}) == {"_id": 2, "__v": 0, "__rev": LIMIT}


def test_a_negative_overflow_and_a_mul_are_refused_alike(sync_client: MongoClient[dict[str, Any]], db_name: str) -> None:
    people = sync_client[db_name].people
    people.insert_many([{"_id": 1, "n": Int64(-(2**63))}, {"_id": 2, "n": Int64(2**62)}])
    with pytest.raises(BulkWriteError) as refused:
        people.bulk_write([UpdateOne({"_id": 1}, {"$inc": {"n": -1}}), UpdateOne({"_id": 2}, {"$mul": {"n": 2}})], ordered=False)
    first, second = refused.value.details["writeErrors"]
    assert (first["index"], first["code"], second["index"], second["code"]) == (0, 2, 1, 2)
    assert "Failed to apply $inc operations to current value ((NumberLong)-9223372036854775808)" in first["errmsg"]
    assert "Failed to apply $mul operations to current value ((NumberLong)4611686018427387904)" in second["errmsg"]
    assert stored(people) == [{"_id": 1, "n": -(2**63)}, {"_id": 2, "n": 2**62}]
    # within the range, both are written
    assert people.bulk_write([UpdateOne({"_id": 1}, {"$inc": {"n": 1}}), UpdateOne({"_id": 2}, {"$mul": {"n": -2}})]).modified_count == 2
    assert stored(people) == [{"_id": 1, "n": -(2**63) + 1}, {"_id": 2, "n": -(2**63)}]
