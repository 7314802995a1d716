"""Pure pieces of the background engine: the diff, the guard, the controller, events."""

from __future__ import annotations

import pytest
from bson import Decimal128, Int64, ObjectId
from hypothesis import HealthCheck, given, settings, strategies as st

from mongoshift.background.state.events import Event, Events
from mongoshift.background.write.document import (
    ShapeError,
    guard,
    same,
    stamped_diff,
    version_match,
)

scalars = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**62), 2**62).map(Int64),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("abc", min_size=1, max_size=3), inner, max_size=3), max_leaves=8
)
documents = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), values, max_size=5)


def apply(old: dict, update: dict) -> dict:  # type: ignore[type-arg]
    """What the server does with the update, for the operators the diff uses."""
    new = dict(old)
    for key, value in update.get("$set", {}).items():
        new[key] = value
    for key in update.get("$unset", {}):
        new.pop(key, None)
    for key, value in update.get("$inc", {}).items():
        new[key] = new.get(key, 0) + value
    return new


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None, max_examples=200)
@given(documents, documents, st.sampled_from(["missing", None, 0, 4]))
def test_the_diff_applied_to_the_old_document_gives_the_new_one(before: dict, after: dict, revision: object) -> None:  # type: ignore[type-arg]
    old = {"_id": 1, "__v": 1, **({} if revision == "missing" else {"__rev": revision}), **before}
    update = stamped_diff(old, dict(after), version_field="__v", revision_field="__rev", to_version=2)
    result = apply(old, update)
    expected = {"_id": 1, "__v": 2, "__rev": 5 if revision == 4 else 1, **after}
    assert set(result) == set(expected)
    assert all(same(result[k], expected[k]) for k in expected)
    for key in update.get("$set", {}):
        assert key in ("__v", "__rev") or not same(old.get(key, object()), after[key])  # only what changed is sent


def test_types_are_compared_exactly() -> None:
    assert not same(Int64(1), 1) and not same(1, 1.0) and not same(True, 1)
    assert same({"a": [1, Decimal128("1.0")]}, {"a": [1, Decimal128("1.0")]})
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # key order is part of a BSON document
    assert same(float("nan"), float("nan"))
    # Containers compare by their BSON bytes: nested types count too.
    assert not same([1], [1.0]) and not same([Int64(1)], [1]) and not same({"a": [True]}, {"a": [1]})
    assert same([{"x": "y"}], [{"x": "y"}]) and same({1: "a"}, {1: "a"})  # a non-string key falls back to the walk


def test_doubles_and_decimals_compare_by_their_bson_bytes() -> None:
    assert not same(0.0, -0.0) and not same([0.0], [-0.0]) and not same({"a": {"b": -0.0}}, {"a": {"b": 0.0}})
    assert not same(Decimal128("1.0"), Decimal128("1.00")) and not same([Decimal128("0")], [Decimal128("-0")])
    assert same([1, "x", None, Int64(2), Decimal128("1.0")], [1, "x", None, Int64(2), Decimal128("1.0")])
    update = stamped_diff({"_id": 1, "__v": 1, "a": 0.0, "b": [1]}, {"_id": 1, "a": -0.0, "b": [1]}, version_field="__v", revision_field=None, to_version=2)
    assert update == {"$set": {"a": -0.0, "__v": 2}}


def test_a_bad_field_name_is_refused_every_time() -> None:
    for _ in range(2):  # names found good are remembered; a bad one never is
        with pytest.raises(ShapeError, match=r"contains '\.'"):
            stamped_diff({"_id": 1, "__v": 1}, {"_id": 1, "a.b": 1}, version_field="__v", revision_field="__rev", to_version=2)
    stamped_diff({"_id": 1, "__v": 1}, {"_id": 1, "ok": 1}, version_field="__v", revision_field="__rev", to_version=2)
    with pytest.raises(ShapeError, match=r"contains '\.'"):
        stamped_diff({"_id": 1, "__v": 1}, {"_id": 1, "ok": {"x.y": 1}}, version_field="__v", revision_field="__rev", to_version=2)


@pytest.mark.parametrize(
    ("new", "message"),
    [([1, 2], "not a document"), ({"_id": 2}, "changed _id"), ({"_id": 1, "$bad": 1}, "cannot be stored"), ({"_id": 1, "a": {"x.y": 1}}, "cannot be stored")],
)
def test_results_that_cannot_be_written_are_shape_errors(new: object, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        stamped_diff({"_id": 1, "__v": 1}, new, version_field="__v", revision_field="__rev", to_version=2)


def test_version_zero_unsets_and_guard_matches_exactly() -> None:
    oid = ObjectId()
    update = stamped_diff({"_id": oid, "__v": 1, "__rev": 2, "x": 1}, {"_id": oid, "x": 1}, version_field="__v", revision_field="__rev", to_version=0)
    assert update == {"$unset": {"__v": ""}, "$inc": {"__rev": 1}}
    # (bg) no revision yet, or a null one: revision 1 in the same $set as the other new fields (one
    # operator creates them all; $inc would refuse a null)
    for old in ({"_id": oid, "x": 1}, {"_id": oid, "__rev": None, "x": 1}):
        assert stamped_diff(old, {"_id": oid, "x": 2}, version_field="__v", revision_field="__rev", to_version=1) == {
            "$set": {"x": 2, "__rev": 1, "__v": 1}}
    assert stamped_diff({"_id": oid, "__rev": Int64(0)}, {"_id": oid}, version_field="__v", revision_field="__rev", to_version=1) == {
        "$set": {"__v": 1}, "$inc": {"__rev": 1}}  # a stored number keeps its type
    assert guard({"_id": oid}, "__v", "__rev") == {"_id": oid, "__v": {"$exists": False}, "__rev": {"$exists": False}}
    assert guard({"_id": oid, "__v": None, "__rev": 3}, "__v", None) == {"_id": oid, "__v": None}
    assert version_match("__v", 0) == {"__v": {"$in": [None, 0]}}


def test_events_reach_observers_and_a_failing_observer_is_contained() -> None:
    seen: list[Event] = []

    def broken(event: Event) -> None:
        raise RuntimeError("observer bug")

    events = Events([broken, seen.append])
    events.emit("batch", "m.py", migrated=3)
    assert seen == [Event("batch", "m.py", {"migrated": 3})]


@pytest.mark.parametrize(
    ("data", "level", "says"),
    [
        ({"collection": "people", "found": True, "action": "reopened", "reason": None, "stranded": False}, "WARNING",
         "found old-shape documents written after it completed in 'people': reopened for one more pass, which 'mongoshift background run 0001_x'"),
        ({"collection": "people", "found": True, "action": "reported", "reason": None, "stranded": False}, "WARNING",
         "'background verify --reopen' gives it one more pass"),
        ({"collection": "people", "found": False, "stranded": True, "action": "reported", "source": "stream", "documents": 3}, "WARNING",
         "3 documents of 'people' at a version no migration upgrades (stranded)"),
        ({"collection": "people", "found": True, "action": "failed", "source": "stream", "documents": 2}, "WARNING",
         "2 old-shape documents of 'people' could not be upgraded: reopened, so that a pass records why ('mongoshift background status 0001_x' shows it"),
        ({"collection": "people", "found": True, "action": "upgraded", "source": "stream", "documents": 5}, "INFO",
         "upgraded 5 old-shape documents of 'people'"),
        ({"collection": "people", "found": False, "action": "skipped", "reason": "not_completed", "detail": "running", "stranded": False}, "INFO",
         "skipped for 'people' (not_completed: running)"),
    ],
    ids=["reopened", "reported", "stranded", "failed", "upgraded", "skipped"],
)
def test_a_drift_finding_is_logged_as_a_sentence_that_says_what_to_do(caplog: pytest.LogCaptureFixture, data: dict, level: str, says: str) -> None:  # type: ignore[type-arg]
    """The watcher's and verify's findings: what was found, what was done, what is left to do; not the
    event's fields (``reason=None stranded=False``)."""
    import logging

    caplog.set_level(logging.DEBUG, logger="mongoshift")
    Events([]).emit("drift", "0001_x.py", **data)
    (record,) = [r for r in caplog.records if "drift" in r.getMessage()]
    assert says in record.getMessage() and record.getMessage().startswith("0001_x.py drift: "), record.getMessage()
    assert "None" not in record.getMessage() and "=" not in record.getMessage()
    assert record.levelname == level or (level == "INFO" and record.levelname == "DEBUG")


def test_a_watchers_state_is_logged_with_what_it_means(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from mongoshift.background.state.events import WATCH_STATES

    caplog.set_level(logging.DEBUG, logger="mongoshift")
    for state in WATCH_STATES:
        Events([]).emit("watch", "people", collection="people", state=state)
    said = [r.getMessage() for r in caplog.records]
    assert said[-2] == "people watch: idle, no completed migration of the collection to guard (one that is reopened is guarded again once it completes)"
    assert len(said) == len(WATCH_STATES) and all(line.startswith("people watch: ") and "=" not in line for line in said)


def test_the_engines_notable_events_are_logged_as_sentences(caplog: pytest.LogCaptureFixture) -> None:
    """What a user reads of a run: sentences with counts, never the event's ``key=value`` fields (a
    registration hash, ``blocked_on=[]``) nor an id."""
    import logging

    caplog.set_level(logging.DEBUG, logger="mongoshift")
    totals = {"scanned": 40_002, "migrated": 40_000, "skipped": 2, "conflicts": 3, "failed": 0, "retried": 3, "batches": 26, "txn_retries": 0}
    emitted = [
        ("registered", {"direction": "forward", "registration": "21aa65624b7b1820", "blocked_on": ["0001_a.py"]}),
        ("unblocked", {}),
        ("partitioned", {"partitions": 10, "estimate": 40_002, "generation": 1}),
        ("pass", {"number": 2, "remaining": 17}),
        ("lease_lost", {"partition": 3, "lane": "lane-73ca8eb3"}),
        ("reclaimed", {"leases": 4}),
        ("reclaimed", {"leases": 1}),
        ("reclaimed", {"leases": 2, "holder": "died"}),
        ("completed", {"failed_documents": 0, **totals}),
        ("failed", {"reason": "12 documents failed, over max_document_errors=10"}),
    ]
    for kind, data in emitted:
        Events([]).emit(kind, "0001_x.py", **data)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "0001_x.py registered: the migration is registered, and waits for 0001_a.py",
        "0001_x.py unblocked: every migration it requires has completed: it may run now",
        "0001_x.py partitioned: the pass is cut into 10 partitions over about 40,002 documents",
        "0001_x.py pass: pass 2 starts: about 17 documents still in the old shape",
        "0001_x.py lease_lost: a lane lost its lease on partition 3 (it lapsed, or another runner took it over): the lane stops there, "
        "and the partition goes on from its last checkpoint under its new holder",
        "0001_x.py reclaimed: freed 4 leases that had lapsed (their runner stopped, was killed, or made no progress for the lease's TTL): "
        "their partitions go on from their checkpoints",
        "0001_x.py reclaimed: freed 1 lease that had lapsed (its runner stopped, was killed, or made no progress for the lease's TTL): "
        "its partition goes on from its checkpoint",
        "0001_x.py reclaimed: took over 2 leases of a runner of this host that died (kill -9, the OOM killer): "
        "their partitions go on from their checkpoints",
        "0001_x.py completed: 40,000 migrated, 2 skipped, 0 failed documents of 40,002 scanned, in 26 batches; "
        "3 documents re-read after an application write, 3 left to the next pass",
        "0001_x.py failed: 12 documents failed, over max_document_errors=10",
    ]


def test_a_pass_with_nothing_to_rewrite_says_so_rather_than_cutting_zero_partitions(caplog: pytest.LogCaptureFixture) -> None:
    """``retry --from-start`` of a completed migration (or a reopen whose documents moved on meanwhile) plans a
    pass over nothing: its line says there is nothing left in the old shape, not "cut into 0 partitions over
    about 0 documents"."""
    import logging

    caplog.set_level(logging.DEBUG, logger="mongoshift")
    Events([]).emit("partitioned", "0001_x.py", partitions=0, estimate=0, generation=2)
    Events([]).emit("partitioned", "0001_x.py", partitions=1, estimate=3, generation=3)
    assert [r.getMessage() for r in caplog.records] == [
        "0001_x.py partitioned: nothing to rewrite, no document of the old shape was found, so the pass has no partition",
        "0001_x.py partitioned: the pass is cut into 1 partition over about 3 documents",
    ]


def test_batch_filters_stay_inside_their_type_bracket() -> None:
    from mongoshift.background.plan.planner import (
        MAX_OBJECT_ID,
        MIN_OBJECT_ID,
        batch_filter,
    )
    from mongoshift.background.state.model import Checkpoint, Scope

    match = {"__v": 1}
    oid = ObjectId()
    # ObjectIds: the smallest and largest ObjectId close the range (no $type check per document).
    assert batch_filter(match, Scope("objectId"), Checkpoint()) == {"$and": [match, {"_id": {"$gte": MIN_OBJECT_ID, "$lte": MAX_OBJECT_ID}}]}
    assert batch_filter(match, Scope("objectId", lt=oid), Checkpoint(last_id=MIN_OBJECT_ID, started=True)) == {
        "$and": [match, {"_id": {"$gt": MIN_OBJECT_ID, "$lt": oid}}]
    }
    # Other brackets keep $type, whatever the bounds.
    assert batch_filter(match, Scope("number", gte=5), Checkpoint()) == {"$and": [match, {"_id": {"$gte": 5, "$type": "number"}}]}
    # The first number partition holds the bracket's NaN, which sorts first and which no range matches.
    assert batch_filter(match, Scope("number", lt=5), Checkpoint()) == {"$and": [match, {"_id": {"$not": {"$gte": 5}, "$type": "number"}}]}
    after_one = {"$and": [match, {"_id": {"$gt": 1, "$lt": 5, "$type": "number"}}]}
    assert batch_filter(match, Scope("number", lt=5), Checkpoint(last_id=1, started=True)) == after_one


def test_failed_document_reasons_are_parsed_and_counted_without_the_text_of_the_values() -> None:
    from mongoshift.background.state.failures import (
        count_key,
        counted,
        shown,
        signature,
    )

    transform = {"reason": "transform", "error": "KeyError: 'first'"}
    duplicate = {"reason": "write", "error": "duplicate key on slug (11000)"}
    other = {"reason": "write", "error": "write error 2"}
    assert signature(transform) == ("transform", "KeyError", None)
    assert signature(duplicate) == ("write", None, 11000) and signature(other) == ("write", None, 2)
    named = {"reason": "write", "error": "duplicate key on slug (index slug_1, 11000)"}  # as the shared redaction words it
    assert signature(named) == ("write", None, 11000)
    assert count_key(transform) == "transform:KeyError" and count_key({"reason": "shape", "error": "the transform changed _id"}) == "shape:-"
    assert shown({"reason": "transform", "error": "ValueError: " + "x" * 500})["error"] == "x" * 199 + "…"
    assert counted({}, [transform, duplicate, duplicate]) == [
        {"reason": "write", "error_class": None, "code": 11000, "count": 2},
        {"reason": "transform", "error_class": "KeyError", "code": None, "count": 1},
    ]


def test_identical_failure_messages_are_shown_once_at_their_latest() -> None:
    from datetime import UTC, datetime, timedelta

    from mongoshift.background.state.failures import RECENT_SHOWN, recent

    start = datetime(2026, 12, 4, tzinfo=UTC)
    same = [{"reason": "transform", "error": "ValueError: no space", "at": start + timedelta(seconds=i)} for i in range(30)]
    other = {"reason": "write", "error": "duplicate key on slug (11000)", "at": start + timedelta(seconds=15)}
    shown = recent([*same[:15], other, *same[15:]])
    assert [(e["reason"], e["at"], e["times"]) for e in shown] == [("write", other["at"], 1), ("transform", same[-1]["at"], 30)]
    many = recent([{"reason": "transform", "error": f"ValueError: case {i}", "at": start} for i in range(30)])
    assert len(many) == RECENT_SHOWN and many[-1]["error"] == "case 29"
