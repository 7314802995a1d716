"""The blocking revision helpers (pymongo ``Collection``): same rules as the async ones."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import WriteConcern

from mongoshift.versioning import (
    RevisionConflictError,
    UnguardedWriteError,
    bump_revision_sync,
    find_one_and_update_with_revision_sync,
    replace_with_revision_sync,
    retry_on_conflict_sync,
    update_with_revision_sync,
)

from .conftest import PEOPLE


def test_sync_update_detects_a_concurrent_write_and_retry_recovers(sync_db: Any) -> None:
    people = sync_db.people
    people.insert_one(PEOPLE.stamp({"_id": 1, "first": "Ada", "visits": 0, "status": "active"}))
    attempts = 0

    def rename() -> int:
        nonlocal attempts
        attempts += 1
        doc = PEOPLE.upcast(people.find_one({"_id": 1}))
        if attempts == 1:
            update_with_revision_sync(people, {"_id": 1}, {"$inc": {"visits": 1}}, expected_revision=doc["__rev"])
        return update_with_revision_sync(people, {"_id": 1}, {"$set": {"first": "ADA"}}, expected_revision=doc["__rev"]).revision

    pauses: list[float] = []
    assert retry_on_conflict_sync(rename, 3, sleep=pauses.append, rand=lambda: 0.0) == 3
    assert attempts == 2 and pauses == [0.01]
    assert people.find_one({"_id": 1}, {"_id": 0}) == {"first": "ADA", "visits": 1, "status": "active", "__v": 3, "__rev": 3}


def test_sync_conflict_and_not_found(sync_db: Any) -> None:
    people = sync_db.people
    people.insert_one(PEOPLE.stamp({"_id": 1}))
    assert bump_revision_sync(people, {"_id": 1}) == 2
    with pytest.raises(RevisionConflictError) as conflict:
        update_with_revision_sync(people, {"_id": 1}, {"$set": {"a": 1}}, expected_revision=1)
    assert (conflict.value.reason, conflict.value.actual_revision) == ("conflict", 2)
    with pytest.raises(RevisionConflictError) as missing:
        find_one_and_update_with_revision_sync(people, {"_id": 2}, {"$set": {"a": 1}}, expected_revision=1)
    assert missing.value.reason == "not_found"
    assert "a" not in people.find_one({"_id": 1})


def test_sync_replace_and_find_one_and_update(sync_db: Any) -> None:
    people = sync_db.people
    people.insert_one({"_id": 1, "__v": 2, "__rev": 4, "first": "Ada", "last": "L"})
    read = people.find_one({"_id": 1})
    assert replace_with_revision_sync(people, {"_id": 1}, PEOPLE.upcast(read), expected_revision=4).revision == 5
    after = find_one_and_update_with_revision_sync(people, {"_id": 1}, {"$set": {"status": "away"}}, expected_revision=5, expected_version=3)
    assert after == {"_id": 1, "__v": 3, "__rev": 6, "first": "Ada", "last": "L", "status": "away"}


def test_sync_refusals_happen_before_any_write(sync_db: Any) -> None:
    people = sync_db.people
    people.insert_one(PEOPLE.stamp({"_id": 1}))
    unacknowledged = people.with_options(write_concern=WriteConcern(w=0))
    with pytest.raises(UnguardedWriteError, match="w: 0"):
        update_with_revision_sync(unacknowledged, {"_id": 1}, {"$set": {"a": 1}}, expected_revision=1)
    with pytest.raises(UnguardedWriteError, match="upsert"):
        replace_with_revision_sync(people, {"_id": 1}, {"__v": 3}, expected_revision=1, upsert=True)
    with pytest.raises(UnguardedWriteError, match="__rev"):
        update_with_revision_sync(people, {"_id": 1}, {"$max": {"__rev": 10}}, expected_revision=1)
    assert people.find_one({"_id": 1}, {"_id": 0}) == {"__v": 3, "__rev": 1}
