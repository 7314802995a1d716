"""The pure half: guarded filters and updates, refusals, miss classification, retry policy."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from mongoshift.versioning import (
    Backoff,
    InvalidRevisionError,
    RevisionConflictError,
    ShapeVersionError,
    UnguardedWriteError,
    VersioningError,
    retry_on_conflict,
    retry_on_conflict_sync,
    revision_of,
)
from mongoshift.versioning.guard import guard_bump, guard_replacement, guard_update

FIELDS = {"version_field": "__v", "revision_field": "__rev"}


def test_update_is_guarded_by_revision_and_bumps_it_with_inc() -> None:
    plan = guard_update({"_id": 1}, {"$set": {"a": 1}, "$inc": {"n": 2}}, expected_revision=4, **FIELDS)
    assert plan.filter == {"_id": 1, "__rev": 4}
    assert plan.document == {"$set": {"a": 1}, "$inc": {"n": 2, "__rev": 1}}
    assert plan.revision == 5 and plan.lookup == {"_id": 1}


def test_revision_and_version_zero_match_missing_or_null() -> None:
    plan = guard_update({"_id": 1}, {"$set": {"a": 1}}, expected_revision=0, expected_version=0, **FIELDS)
    assert plan.filter == {"_id": 1, "__rev": {"$in": [None, 0]}, "__v": {"$in": [None, 0]}}
    assert plan.document == {"$set": {"a": 1, "__rev": 1}}  # $inc would fail on a stored null
    assert guard_update({"_id": 1}, {}, expected_revision=2, expected_version=3, **FIELDS).filter == {"_id": 1, "__rev": 2, "__v": 3}


def test_the_callers_update_and_filter_are_not_modified() -> None:
    filter_, update = {"_id": 1}, {"$inc": {"n": 1}}
    guard_update(filter_, update, expected_revision=1, **FIELDS)
    assert filter_ == {"_id": 1} and update == {"$inc": {"n": 1}}


def test_pipeline_update_ends_by_setting_the_pinned_revision() -> None:
    pipeline = [{"$set": {"a": "$b"}}, {"$replaceWith": {"$mergeObjects": ["$$ROOT", {"c": 1}]}}]
    plan = guard_update({"k": "x"}, pipeline, expected_revision=7, **FIELDS)
    stored = {"$cond": [{"$eq": [{"$type": "$__v"}, "missing"]}, {}, {"__v": "$__v"}]}
    kept = {"$replaceWith": {"$mergeObjects": [stored, pipeline[1]["$replaceWith"]]}}  # a new root keeps the stored version
    assert plan.document == [pipeline[0], kept, {"$set": {"__rev": {"$literal": 8}}}]
    assert plan.lookup == {"k": "x"}  # no _id: the miss is explained by the filter itself


@pytest.mark.parametrize(
    "update",
    [
        {"$set": {"__rev": 9}},
        {"$inc": {"__rev": 1}},
        {"$unset": {"__rev": ""}},
        {"$set": {"__rev.x": 1}},
        {"$set": {"__rev.$": 1}},
        {"$currentDate": {"__rev": True}},
        {"$rename": {"other": "__rev"}},
        {"$rename": {"__rev": "other"}},
        [{"$set": {"__rev": 1}}],
        [{"$addFields": {"__rev.a": 1}}],
        [{"$unset": "__rev"}],
        [{"$unset": ["a", "__rev"]}],
        [{"$project": {"__rev": 0}}],
    ],
)
def test_an_update_that_writes_the_revision_itself_is_refused(update: Any) -> None:
    with pytest.raises(UnguardedWriteError, match="__rev"):
        guard_update({"_id": 1}, update, expected_revision=1, **FIELDS)


def test_fields_that_only_start_like_the_revision_are_fine() -> None:
    plan = guard_update({"_id": 1}, {"$set": {"__revision": 1, "a.__rev": 2}}, expected_revision=1, **FIELDS)
    assert plan.document["$set"] == {"__revision": 1, "a.__rev": 2}


@pytest.mark.parametrize(
    ("filter_", "update", "kwargs", "error", "message"),
    [
        ({"_id": 1}, {"$set": {"a": 1}}, {"upsert": True}, UnguardedWriteError, "upsert"),
        ({"_id": 1, "__rev": 3}, {"$set": {"a": 1}}, {}, UnguardedWriteError, "filter may not name __rev"),
        ({"$or": [{"__rev.x": 3}]}, {"$set": {"a": 1}}, {}, UnguardedWriteError, "filter may not name __rev"),
        ({"_id": 1, "__v": 2}, {"$set": {"a": 1}}, {"expected_version": 2}, UnguardedWriteError, "together with expected_version"),
        ({"_id": 1}, {"a": 1}, {}, ValueError, "replace_with_revision"),
        ({"_id": 1}, {"$set": 1}, {}, ValueError, "field paths"),
        ({"_id": 1}, "x", {}, ValueError, "pipeline"),
        ({"_id": 1}, [{"$set": {}, "$unset": "a"}], {}, ValueError, "one stage name"),
        ({"_id": 1}, {"$set": {"a": 1}}, {"expected_revision": -1}, ValueError, "expected_revision"),
        ({"_id": 1}, {"$set": {"a": 1}}, {"expected_revision": True}, ValueError, "expected_revision"),
        ({"_id": 1}, {"$set": {"a": 1}}, {"expected_version": 1.0}, ValueError, "expected_version"),
    ],
)
def test_bad_writes_are_refused_before_any_io(filter_: Any, update: Any, kwargs: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        guard_update(filter_, update, **{"expected_revision": 1, **kwargs}, **FIELDS)


def test_a_filter_may_name_the_version_when_no_version_is_expected() -> None:
    assert guard_update({"__v": 2}, {}, expected_revision=1, **FIELDS).filter == {"__v": 2, "__rev": 1}


def test_replacement_stores_revision_plus_one_and_keeps_the_version() -> None:
    read = {"_id": 1, "__v": 2, "__rev": 5, "a": 1}
    plan = guard_replacement({"_id": 1}, {**read, "a": 2}, expected_revision=5, **FIELDS)
    assert plan.document == {"_id": 1, "__v": 2, "__rev": 6, "a": 2}
    assert plan.filter == {"_id": 1, "__rev": 5}
    fresh = guard_replacement({"_id": 1}, {"a": 3}, expected_revision=5, expected_version=2, **FIELDS)
    assert fresh.document == {"a": 3, "__v": 2, "__rev": 6}
    legacy = guard_replacement({"_id": 1}, {"a": 3}, expected_revision=0, expected_version=0, **FIELDS)
    assert legacy.document == {"a": 3, "__rev": 1}  # version 0 stays missing


def test_replacement_refusals() -> None:
    with pytest.raises(UnguardedWriteError, match="__rev"):
        guard_replacement({"_id": 1}, {"__v": 1, "__rev": 9}, expected_revision=5, **FIELDS)
    with pytest.raises(ValueError, match="drop the shape version"):
        guard_replacement({"_id": 1}, {"a": 1}, expected_revision=5, **FIELDS)
    with pytest.raises(ValueError, match="update_with_revision"):
        guard_replacement({"_id": 1}, {"$set": {"a": 1}}, expected_revision=5, **FIELDS)
    with pytest.raises(UnguardedWriteError, match="upsert"):
        guard_replacement({"_id": 1}, {"__v": 1}, expected_revision=5, upsert=True, **FIELDS)
    with pytest.raises(ShapeVersionError, match="__v"):
        guard_replacement({"_id": 1}, {"__v": "1"}, expected_revision=5, **FIELDS)


@pytest.mark.parametrize(("stored", "said"), [("s3cret-2", "a value of type str"), (2.0, "a value of type float"), (True, "a value of type bool"),
    (-4, "a negative integer"), (["s3cret-2"], "a value of type list")])
def test_a_corrupt_revision_or_version_read_from_the_server_is_a_typed_error_naming_its_type_never_its_value(stored: Any, said: str) -> None:
    """``revision_of`` raised a bare ValueError ("__rev is not an integer >= 0 in this document"): code catching
    ``VersioningError`` around the documented read-decide-write cycle missed it, and it did not say what was
    stored. A read document written back with a corrupt ``__v`` gave a bare ValueError too."""
    with pytest.raises(InvalidRevisionError) as caught:
        revision_of({"_id": "s3cret-id", "__rev": stored})
    assert isinstance(caught.value, VersioningError) and isinstance(caught.value, ValueError)
    assert str(caught.value) == f"__rev holds {said}, not an integer >= 0"
    with pytest.raises(ShapeVersionError) as shaped:
        guard_replacement({"_id": 1}, {"_id": "s3cret-id", "__v": stored, "name": "s3cret"}, expected_revision=0, **FIELDS)
    assert shaped.value.reason == "invalid" and str(shaped.value) == f"the replacement's __v holds {said}, not an integer >= 0"
    assert revision_of({"__rev": None}) == revision_of({}) == 0


def test_unguarded_bump_counts_a_missing_revision_as_zero() -> None:
    plan = guard_bump({"_id": 1}, **FIELDS)
    countable = {"$or": [{"__rev": None}, {"__rev": {"$type": ["int", "long"], "$gte": 0}}]}  # never a 2.0 or "2"
    assert plan.filter == {"_id": 1, "$and": [countable]} and plan.revision is None
    assert plan.document == [{"$set": {"__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}}}]
    assert guard_bump({"_id": 1}, expected_revision=3, **FIELDS).document == {"$inc": {"__rev": 1}}


# -- classifying a miss ------------------------------------------------------


def test_a_miss_is_classified_from_what_the_read_found() -> None:
    plan = guard_update({"_id": 1, "secret": "hunter2"}, {"$set": {"a": 1}}, expected_revision=3, expected_version=2, **FIELDS)
    assert plan.lookup == {"_id": 1}
    cases = {
        None: ("not_found", None),
        (4, 2): ("conflict", 4),
        (3, 3): ("conflict", 3),  # rewritten to another shape
        (3, 2): ("unknown", 3),  # unchanged: another condition of the filter no longer holds
        ("3", 2): ("unknown", None),
    }
    for found, (reason, actual) in cases.items():
        doc = None if found is None else {"__rev": found[0], "__v": found[1]}
        error = plan.miss(doc, "people")
        assert (error.reason, error.actual_revision, error.expected_revision) == (reason, actual, 3)
        assert "hunter2" not in str(error) and "secret" not in str(error) and "people" in str(error)


def test_a_missing_revision_on_the_server_reads_as_zero() -> None:
    plan = guard_update({"_id": 1}, {"$set": {"a": 1}}, expected_revision=2, **FIELDS)
    error = plan.miss({"_id": 1}, None)
    assert error.reason == "conflict" and error.actual_revision == 0
    assert str(error) == "revision conflict: expected revision 2, found revision 0"


# -- retry -----------------------------------------------------------------


def _conflict(reason: str = "conflict") -> RevisionConflictError:
    return RevisionConflictError(reason, expected_revision=1, actual_revision=2)  # type: ignore[arg-type]


async def test_retry_on_conflict_retries_conflicts_with_the_injected_pause() -> None:
    calls: list[int] = []
    pauses: list[float] = []

    async def attempt() -> str:
        calls.append(len(calls))
        if len(calls) < 3:
            raise _conflict()
        return "done"

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    assert await retry_on_conflict(attempt, 3, sleep=sleep, rand=lambda: 0.5) == "done"
    assert len(calls) == 3
    assert pauses == [pytest.approx(0.015), pytest.approx(0.025)]


async def test_retry_on_conflict_gives_up_after_the_attempts_and_never_retries_other_reasons() -> None:
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)

    async def always() -> None:
        raise _conflict()

    with pytest.raises(RevisionConflictError):
        await retry_on_conflict(always, 4, sleep=sleep, rand=lambda: 0.0)
    assert len(pauses) == 3

    for error in (_conflict("not_found"), _conflict("unknown"), KeyError("x")):
        count = 0

        async def failing(error: Exception = error) -> None:
            nonlocal count
            count += 1
            raise error

        with pytest.raises(type(error)):
            await retry_on_conflict(failing, 5, sleep=sleep)
        assert count == 1
    with pytest.raises(ValueError):
        await retry_on_conflict(always, 0)


def test_retry_on_conflict_sync() -> None:
    outcomes: list[Any] = [_conflict(), _conflict(), 42]
    pauses: list[float] = []

    def attempt() -> int:
        out = outcomes.pop(0)
        if isinstance(out, Exception):
            raise out
        return out

    assert retry_on_conflict_sync(attempt, 3, sleep=pauses.append, rand=lambda: 1.0) == 42
    assert pauses == [pytest.approx(0.02), pytest.approx(0.04)]
    with pytest.raises(RevisionConflictError):
        retry_on_conflict_sync(lambda: (_ for _ in ()).throw(_conflict()), 2, sleep=pauses.append)


@given(retry=st.integers(1, 60), r=st.floats(0, 1), first=st.floats(0.001, 0.5), cap=st.floats(0.001, 5))
def test_backoff_stays_within_its_bounds(retry: int, r: float, first: float, cap: float) -> None:
    delay = Backoff(first, cap).delay(retry, lambda: r)
    assert first <= delay <= max(first, cap) + 1e-12


def test_messages_name_numbers_only() -> None:
    assert str(RevisionConflictError("not_found", expected_revision=None)) == "revision guard: no document matches the filter"
    reshaped = RevisionConflictError("conflict", expected_revision=None, actual_revision=4, expected_version=1, actual_version=2, collection="people")
    assert str(reshaped) == "revision conflict in people: found revision 4 at version 2 (expected version 1)"
    corrupt = RevisionConflictError("unknown", expected_revision=3, actual_revision=None)
    assert str(corrupt) == "revision guard matched nothing for an unknown reason: expected revision 3, found no readable revision"
