"""The reads of a hashed key's partitions (mongoshift.background.plan.hash_drain): pure, no server."""

from __future__ import annotations

from bson import Int64, MaxKey, MinKey

from mongoshift.background.plan.hash_drain import (
    MAX_STUCK,
    drain_after,
    drain_read,
    segment_count,
)
from mongoshift.background.state.model import Checkpoint, Scope

LOW, MID = Int64(-(2**62)), Int64(0)
TWO_RANGES = Scope(None, shard="s0", key=(("tenant", "hashed"),), ranges=(((MinKey(),), (LOW,)), ((MID,), (MaxKey(),))))


def test_a_segment_is_one_range_at_one_version_read_through_the_index_bounds() -> None:
    read = drain_read(TWO_RANGES, Checkpoint(), {"__v": 1}, version_field="__v", source=1)
    assert read is not None
    assert read.hint == [("__v", 1), ("tenant", "hashed"), ("_id", 1)]
    assert read.min == [("__v", 1), ("tenant", MinKey()), ("_id", MinKey())]
    assert read.max == [("__v", 1), ("tenant", LOW), ("_id", MinKey())]
    assert read.filter == {"__v": 1}
    second = drain_read(TWO_RANGES, Checkpoint(started=True, segment=1, stuck=(4, "x")), {"__v": 1}, version_field="__v", source=1)
    assert second is not None and second.min[1] == ("tenant", MID) and second.max[1] == ("tenant", MaxKey())
    assert second.filter == {"$and": [{"__v": 1}, {"_id": {"$nin": [4, "x"]}}]}
    assert drain_read(TWO_RANGES, Checkpoint(started=True, segment=2), {}, version_field="__v", source=1) is None


def test_version_zero_is_read_as_null_then_as_zero() -> None:
    assert segment_count(TWO_RANGES, 0) == 4
    reads = [drain_read(TWO_RANGES, Checkpoint(started=True, segment=s), {}, version_field="v", source=0) for s in range(4)]
    assert [(r.min[0][1], r.min[1][1]) for r in reads if r] == [(None, MinKey()), (0, MinKey()), (None, MID), (0, MID)]
    assert all(r is not None and r.min[0] == r.max[0] for r in reads)  # one version region per segment


def test_a_key_field_after_the_hash_bounds_the_index_too() -> None:
    scope = Scope(None, key=(("tenant", "hashed"), ("_id", 1)), ranges=(((LOW, MinKey()), (MID, 7)),))
    read = drain_read(scope, Checkpoint(), {}, version_field="__v", source=3)
    assert read is not None and read.hint == [("__v", 1), ("tenant", "hashed"), ("_id", 1)]
    assert read.min == [("__v", 3), ("tenant", LOW), ("_id", MinKey())] and read.max == [("__v", 3), ("tenant", MID), ("_id", 7)]


def test_a_full_batch_stays_and_steps_over_what_it_left() -> None:
    after, done = drain_after(TWO_RANGES, Checkpoint(), read=50, limit=50, left=[3], source=1)
    assert (after.segment, after.stuck, done) == (0, (3,), False)
    again, done = drain_after(TWO_RANGES, after, read=50, limit=50, left=[], source=1)
    assert (again.segment, again.stuck, done) == (0, (3,), False)


def test_a_short_batch_ends_its_segment_and_the_last_one_the_partition() -> None:
    after, done = drain_after(TWO_RANGES, Checkpoint(started=True, stuck=(3,)), read=10, limit=50, left=[], source=1)
    assert (after.segment, after.stuck, done) == (1, (), False)
    last, done = drain_after(TWO_RANGES, after, read=0, limit=50, left=[], source=1)
    assert (last.segment, done) == (2, True)


def test_too_many_documents_in_the_way_leave_the_segment_to_the_next_pass() -> None:
    crowded = Checkpoint(started=True, stuck=tuple(range(MAX_STUCK)))
    after, done = drain_after(TWO_RANGES, crowded, read=50, limit=50, left=["one more"], source=1)
    assert (after.segment, after.stuck, done) == (1, (), False)


def test_the_checkpoint_keeps_the_segment_and_the_ids_stepped_over() -> None:
    cursor = Checkpoint(started=True, segment=3, stuck=(1, "b"))
    assert Checkpoint.from_document(cursor.to_document()) == cursor
    assert Checkpoint.from_document(Checkpoint(last_id=5, started=True).to_document()).segment == 0
