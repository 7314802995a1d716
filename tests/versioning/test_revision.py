"""The async revision helpers against the server: guarded writes, conflicts, refusals."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import ReturnDocument, WriteConcern

from mongoshift.versioning import (
    RevisionConflictError,
    UnguardedWriteError,
    bump_revision,
    find_one_and_update_with_revision,
    replace_with_revision,
    retry_on_conflict,
    revision_of,
    update_with_revision,
)

from .conftest import PEOPLE


async def no_sleep(_: float) -> None:
    return None


async def test_update_applies_at_the_expected_revision_and_bumps_it(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "first": "Ada", "last": "L", "status": "active"}))
    result = await update_with_revision(db.people, {"_id": 1}, {"$set": {"status": "away"}}, expected_revision=1, expected_version=3)
    assert result.revision == 2 and result.raw.modified_count == 1
    assert await db.people.find_one({"_id": 1}, {"_id": 0}) == {"first": "Ada", "last": "L", "status": "away", "__v": 3, "__rev": 2}


async def test_a_write_between_read_and_write_is_detected_and_nothing_is_overwritten(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "first": "Ada", "status": "active"}))
    mine = await db.people.find_one({"_id": 1})
    await update_with_revision(db.people, {"_id": 1}, {"$set": {"status": "away"}}, expected_revision=revision_of(mine))  # another writer
    with pytest.raises(RevisionConflictError) as info:
        await update_with_revision(db.people, {"_id": 1}, {"$set": {"first": "Augusta"}}, expected_revision=revision_of(mine))
    error = info.value
    assert (error.reason, error.expected_revision, error.actual_revision) == ("conflict", 1, 2)
    assert error.collection == "people"
    assert await db.people.find_one({"_id": 1}, {"_id": 0}) == {"first": "Ada", "status": "away", "__v": 3, "__rev": 2}


async def test_retry_on_conflict_recovers_from_a_concurrent_write(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "first": "Ada", "visits": 0, "status": "active"}))
    attempts = 0

    async def rename() -> int:
        nonlocal attempts
        attempts += 1
        doc = PEOPLE.upcast(await db.people.find_one({"_id": 1}))
        if attempts == 1:  # another writer gets in right after our read
            await update_with_revision(db.people, {"_id": 1}, {"$inc": {"visits": 1}}, expected_revision=doc["__rev"])
        result = await update_with_revision(db.people, {"_id": 1}, {"$set": {"first": doc["first"].upper()}}, expected_revision=doc["__rev"])
        return result.revision

    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    assert await retry_on_conflict(rename, 3, sleep=sleep, rand=lambda: 0.0) == 3
    assert attempts == 2 and pauses == [0.01]
    stored = await db.people.find_one({"_id": 1})
    assert stored["first"] == "ADA" and stored["visits"] == 1 and stored["__rev"] == 3  # both writes kept


async def test_retry_gives_up_when_the_conflict_persists(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1}))

    async def stale() -> None:
        await bump_revision(db.people, {"_id": 1})
        await update_with_revision(db.people, {"_id": 1}, {"$set": {"a": 1}}, expected_revision=1)

    with pytest.raises(RevisionConflictError) as info:
        await retry_on_conflict(stale, 3, sleep=no_sleep)
    assert info.value.reason == "conflict" and info.value.actual_revision == 4
    assert "a" not in await db.people.find_one({"_id": 1})


async def test_a_vanished_document_is_not_found_and_not_retried(db: Any) -> None:
    calls = 0

    async def write() -> None:
        nonlocal calls
        calls += 1
        await update_with_revision(db.people, {"_id": 404, "email": "ada@example.com"}, {"$set": {"a": 1}}, expected_revision=3)

    with pytest.raises(RevisionConflictError) as info:
        await retry_on_conflict(write, 5, sleep=no_sleep)
    assert calls == 1
    assert (info.value.reason, info.value.actual_revision) == ("not_found", None)
    assert "ada@example.com" not in str(info.value) and "404" not in str(info.value)


async def test_a_filter_condition_that_no_longer_holds_is_unknown(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "status": "active"}))
    with pytest.raises(RevisionConflictError) as info:
        await update_with_revision(db.people, {"_id": 1, "status": "closed"}, {"$set": {"a": 1}}, expected_revision=1)
    assert (info.value.reason, info.value.actual_revision) == ("unknown", 1)


async def test_legacy_documents_without_version_or_revision_match_zero(db: Any) -> None:
    await db.people.insert_many([{"_id": 1, "name": "Ada Lovelace"}, {"_id": 2, "name": "Alan Turing", "__v": None, "__rev": None}])
    for _id in (1, 2):
        result = await update_with_revision(db.people, {"_id": _id}, {"$set": {"seen": True}}, expected_revision=0, expected_version=0)
        assert result.revision == 1
    assert await db.people.count_documents({"seen": True, "__rev": 1}) == 2
    with pytest.raises(RevisionConflictError) as info:
        await update_with_revision(db.people, {"_id": 1}, {"$set": {"seen": False}}, expected_revision=1, expected_version=1)
    assert (info.value.reason, info.value.actual_version) == ("conflict", 0)


async def test_a_background_rewrite_of_the_shape_is_a_conflict_for_the_old_version(db: Any) -> None:
    await db.people.insert_one({"_id": 1, "__v": 1, "__rev": 5, "name": "Ada Lovelace"})
    # what a background migration does: set the new shape, bump the revision
    await db.people.update_one({"_id": 1}, {"$set": {"__v": 2, "first": "Ada"}, "$unset": {"name": ""}, "$inc": {"__rev": 1}})
    with pytest.raises(RevisionConflictError) as info:
        await update_with_revision(db.people, {"_id": 1}, {"$set": {"name": "Ada King"}}, expected_revision=5, expected_version=1)
    assert (info.value.actual_revision, info.value.actual_version, info.value.expected_version) == (6, 2, 1)


async def test_replace_writes_back_an_upcast_document_in_the_current_shape(db: Any) -> None:
    await db.people.insert_one({"_id": 1, "__v": 1, "__rev": 2, "name": "Ada Lovelace"})
    read = await db.people.find_one({"_id": 1})
    doc = PEOPLE.upcast(read)
    doc["last"] = "King"
    result = await replace_with_revision(db.people, {"_id": 1}, doc, expected_revision=read["__rev"], expected_version=PEOPLE.version_of(read))
    assert result.revision == 3
    assert await db.people.find_one({"_id": 1}) == {"_id": 1, "__v": 3, "__rev": 3, "first": "Ada", "last": "King", "status": "active"}
    with pytest.raises(RevisionConflictError) as info:  # the same stale write again
        await replace_with_revision(db.people, {"_id": 1}, {**doc, "__rev": 2}, expected_revision=2)
    assert info.value.reason == "conflict" and info.value.actual_revision == 3


async def test_find_one_and_update_returns_the_new_document(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "n": 1}))
    after = await find_one_and_update_with_revision(db.people, {"_id": 1}, {"$inc": {"n": 1}}, expected_revision=1)
    assert (after["n"], after["__rev"]) == (2, 2)
    before = await find_one_and_update_with_revision(db.people, {"_id": 1}, {"$inc": {"n": 1}}, expected_revision=2, return_document=ReturnDocument.BEFORE)
    assert (before["n"], before["__rev"]) == (2, 2)
    with pytest.raises(RevisionConflictError) as info:
        await find_one_and_update_with_revision(db.people, {"_id": 1}, {"$inc": {"n": 1}}, expected_revision=2)
    assert info.value.actual_revision == 3 and (await db.people.find_one({"_id": 1}))["n"] == 3


async def test_pipeline_update_bumps_the_revision(db: Any) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1, "first": "ada"}))
    await update_with_revision(db.people, {"_id": 1}, [{"$set": {"first": {"$toUpper": "$first"}}}], expected_revision=1)
    stored = await db.people.find_one({"_id": 1})
    assert (stored["first"], stored["__rev"]) == ("ADA", 2)


@pytest.mark.parametrize("stage", ["$replaceWith", "$replaceRoot"])
async def test_a_pipeline_that_replaces_the_document_keeps_its_version_unless_it_sets_one(db: Any, stage: str) -> None:
    def replacing(root: dict[str, Any]) -> list[dict[str, Any]]:
        return [{stage: root if stage == "$replaceWith" else {"newRoot": root}}]

    await db.people.insert_many([PEOPLE.stamp({"_id": 1, "first": "ada"}), PEOPLE.stamp({"_id": 2, "first": "bo"}), {"_id": 3, "first": "cy"}])
    await update_with_revision(db.people, {"_id": 1}, replacing({"name": {"$toUpper": "$first"}}), expected_revision=1)
    await update_with_revision(db.people, {"_id": 2}, replacing({"name": "$first", "__v": 4}), expected_revision=1)
    await update_with_revision(db.people, {"_id": 3}, replacing({"name": "$first"}), expected_revision=0)  # never versioned: none added
    stored = {d["_id"]: d async for d in db.people.find({}, {"_id": 1, "name": 1, "first": 1, "__v": 1, "__rev": 1})}
    assert stored[1] == {"_id": 1, "name": "ADA", "__v": 3, "__rev": 2}
    assert stored[2] == {"_id": 2, "name": "bo", "__v": 4, "__rev": 2}
    assert stored[3] == {"_id": 3, "name": "cy", "__rev": 1}


async def test_an_inclusion_project_keeps_the_version_as_a_new_root_does(db: Any) -> None:
    """An inclusion ``$project`` keeps only what it names: like a new root, it must not drop the shape version."""
    await db.people.insert_many([PEOPLE.stamp({"_id": 1, "first": "ada", "x": 1}), {"_id": 2, "first": "bo", "x": 2},
                                 PEOPLE.stamp({"_id": 3, "first": "cy", "x": 3}), PEOPLE.stamp({"_id": 4, "first": "di", "x": 4})])
    await update_with_revision(db.people, {"_id": 1}, [{"$project": {"first": 1, "upper": {"$toUpper": "$first"}}}], expected_revision=1)
    await update_with_revision(db.people, {"_id": 2}, [{"$project": {"first": True}}], expected_revision=0)  # never versioned: none added
    await update_with_revision(db.people, {"_id": 3}, [{"$project": {"x": 0}}], expected_revision=1)  # an exclusion keeps it anyway
    await update_with_revision(db.people, {"_id": 4}, [{"$project": {"first": 1, "__v": {"$literal": 4}}}], expected_revision=1)
    stored = {d["_id"]: d async for d in db.people.find({})}
    assert stored[1] == {"_id": 1, "first": "ada", "upper": "ADA", "__v": 3, "__rev": 2}
    assert stored[2] == {"_id": 2, "first": "bo", "__rev": 1}
    assert stored[3] == {"_id": 3, "first": "cy", "__v": 3, "__rev": 2}
    assert stored[4] == {"_id": 4, "first": "di", "__v": 4, "__rev": 2}


async def test_bump_revision_guarded_and_unguarded(db: Any) -> None:
    await db.people.insert_many([{"_id": 1, "a": 1}, PEOPLE.stamp({"_id": 2, "a": 2})])
    assert await bump_revision(db.people, {"_id": 1}) == 1  # a missing revision counts as 0
    assert await bump_revision(db.people, {"_id": 2}, expected_revision=1) == 2
    with pytest.raises(RevisionConflictError) as info:
        await bump_revision(db.people, {"_id": 2}, expected_revision=1)
    assert info.value.reason == "conflict"
    with pytest.raises(RevisionConflictError) as missing:
        await bump_revision(db.people, {"_id": 3})
    assert missing.value.reason == "not_found"
    assert [d["a"] for d in await db.people.find({}, {"a": 1}).sort("_id").to_list()] == [1, 2]


@pytest.mark.parametrize("stored", [2.0, "2", -1])
async def test_an_unguarded_bump_of_a_revision_that_is_not_a_count_writes_nothing(db: Any, stored: object) -> None:
    await db.people.insert_one({"_id": 1, "__rev": stored, "a": 1})
    with pytest.raises(RevisionConflictError) as info:
        await bump_revision(db.people, {"_id": 1, "$and": [{"a": 1}]})
    assert info.value.reason == "unknown" and info.value.actual_revision is None
    assert (await db.people.find_one({"_id": 1}))["__rev"] == stored


async def test_custom_field_names(db: Any) -> None:
    await db.things.insert_one({"_id": 1, "schema": 2, "rev": 7})
    fields = {"version_field": "schema", "revision_field": "rev"}
    result = await update_with_revision(db.things, {"_id": 1}, {"$set": {"x": 1}}, expected_revision=7, expected_version=2, **fields)
    assert result.revision == 8
    assert await db.things.find_one({"_id": 1}) == {"_id": 1, "schema": 2, "rev": 8, "x": 1}


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda c: update_with_revision(c, {"_id": 1}, {"$set": {"a": 1}}, expected_revision=1, upsert=True), UnguardedWriteError),
        (lambda c: update_with_revision(c, {"_id": 1}, {"$set": {"__rev": 50}}, expected_revision=1), UnguardedWriteError),
        (lambda c: update_with_revision(c, {"_id": 1}, [{"$set": {"__rev": 50}}], expected_revision=1), UnguardedWriteError),
        (lambda c: replace_with_revision(c, {"_id": 1}, {"__v": 3, "__rev": 50}, expected_revision=1), UnguardedWriteError),
        (lambda c: find_one_and_update_with_revision(c, {"_id": 1}, {"$inc": {"__rev": 1}}, expected_revision=1), UnguardedWriteError),
        (
            lambda c: update_with_revision(c.with_options(write_concern=WriteConcern(w=0)), {"_id": 1}, {"$set": {"a": 1}}, expected_revision=1),
            UnguardedWriteError,
        ),
        (lambda c: bump_revision(c.with_options(write_concern=WriteConcern(w=0)), {"_id": 1}), UnguardedWriteError),
        (lambda c: update_with_revision(c, {"_id": 1, "__rev": 1}, {"$set": {"a": 1}}, expected_revision=1), ValueError),
    ],
)
async def test_refused_writes_never_reach_the_server(db: Any, call: Any, error: type[Exception]) -> None:
    await db.people.insert_one(PEOPLE.stamp({"_id": 1}))
    with pytest.raises(error):
        await call(db.people)
    assert await db.people.find_one({"_id": 1}, {"_id": 0}) == {"__v": 3, "__rev": 1}
    assert await db.people.count_documents({}) == 1
