"""The sharded planner on recorded config.collections / config.chunks documents (see fixtures/sharding/README.md)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from bson import Int64, MaxKey, MinKey
from bson.json_util import loads

from mongoshift.background.plan.bson_order import same_value, tuple_key
from mongoshift.background.plan.shard_plan import (
    ShardKey,
    ShardLayout,
    ShardPartition,
    chunk_runs,
    layout_from_documents,
    plan_partitions,
    resharded,
    whole_range,
)

FIXTURES = Path(__file__).parent / "fixtures" / "sharding"


def covers_once(parts: list[ShardPartition], key: ShardKey) -> bool:
    """Whether the partitions' ranges tile ``[MinKey, MaxKey)`` with no gap and no overlap."""
    ranges = sorted((r for p in parts for r in p.ranges), key=lambda r: tuple_key(r.min))
    edge = tuple_key(whole_range(key).min)
    for r in ranges:
        if tuple_key(r.min) != edge:
            return False
        edge = tuple_key(r.max)
    return edge == tuple_key(whole_range(key).max)


def fixture(name: str) -> dict[str, Any]:
    return loads((FIXTURES / f"{name}.json").read_text())


def layout(name: str) -> ShardLayout:
    data = fixture(name)
    found = layout_from_documents(data["collection"], data["chunks"], data["collection"]["_id"])
    assert found is not None
    return found


def test_ranged_single_key_partitions_follow_chunk_runs_per_shard():
    lay = layout("ranged_single")
    runs = chunk_runs(lay.chunks)
    # [Min,1000) and [1000,2000) are adjacent on shard0: one run.
    assert [(r.shard, r.chunks) for r in runs] == [("shard0", 2), ("shard1", 1), ("shard0", 1)]
    parts = plan_partitions(lay, target=1, max_partitions=256)
    assert covers_once(parts, lay.key)
    assert sorted(p.shard for p in parts) == ["shard0", "shard0", "shard1"]
    assert all(len(p.ranges) == 1 for p in parts)


def test_ranged_runs_are_split_at_sampled_quantiles_within_one_shard():
    lay = layout("ranged_single")
    samples = [(i,) for i in range(2000, 5000, 10)]  # all in shard1's run
    parts = plan_partitions(lay, target=6, max_partitions=256, samples=samples)
    assert covers_once(parts, lay.key)
    on1 = [p for p in parts if p.shard == "shard1"]
    assert len(on1) == 4  # the heavy run took the extra partitions
    cuts = sorted(r.min[0] for p in on1 for r in p.ranges)
    assert cuts[0] == 2000 and all(2000 <= c < 5000 for c in cuts)


def test_compound_key_bounds_keep_field_order_and_minkey_suffixes():
    lay = layout("ranged_compound")
    assert lay.key.fields == ("tenant", "createdAt")
    runs = chunk_runs(lay.chunks)
    assert [r.shard for r in runs] == ["shard0", "shard1", "shard0", "shard1"]
    assert isinstance(runs[1].range.min[1], MinKey) and isinstance(runs[1].range.max[1], datetime.datetime)
    samples = [("acme", datetime.datetime(2026, 1, d, tzinfo=datetime.UTC)) for d in range(1, 29)]
    parts = plan_partitions(lay, target=5, max_partitions=256, samples=samples)
    assert covers_once(parts, lay.key)
    assert len(parts) == 5


def test_hashed_key_splits_the_hash_space_arithmetically():
    lay = layout("hashed")
    assert lay.key.hashed == "email" and lay.key.hashed_first
    parts = plan_partitions(lay, target=8, max_partitions=256)
    assert covers_once(parts, lay.key)
    assert len(parts) == 8
    bounds = [r.min[0] for p in parts for r in p.ranges if not isinstance(r.min[0], MinKey)]
    assert all(type(b) is Int64 for b in bounds)  # exact 64-bit bounds, never doubles
    assert {p.shard for p in parts} == {"shard0", "shard1"}


def test_a_jumbo_chunk_is_kept_and_marked():
    lay = layout("jumbo")
    parts = plan_partitions(lay, target=1, max_partitions=256)
    assert covers_once(parts, lay.key)
    assert [p.jumbo for p in parts if p.shard == "shard1"] == [True]


def test_uneven_three_shards_capped_per_shard_and_spread_round_robin():
    lay = layout("uneven_three_shards")
    parts = plan_partitions(lay, target=1, max_partitions=256, per_shard=2)
    assert covers_once(parts, lay.key)
    per = {s: sum(1 for p in parts if p.shard == s) for s in ("shard0", "shard1", "shard2")}
    assert per == {"shard0": 2, "shard1": 2, "shard2": 1}
    # shard0 has three runs: grouped into two partitions, one of two ranges
    assert sorted(len(p.ranges) for p in parts if p.shard == "shard0") == [1, 2]
    # the first claims go to different shards
    assert len({p.shard for p in parts[:3]}) == 3


def test_max_partitions_caps_the_whole_plan():
    lay = layout("uneven_three_shards")
    parts = plan_partitions(lay, target=50, max_partitions=3, samples=[(i,) for i in range(0, 1700, 7)])
    assert covers_once(parts, lay.key)
    assert len(parts) <= 3


def test_a_shard_without_chunks_gets_no_partition():
    data = fixture("empty_shard")
    lay = layout("empty_shard")
    assert "shard2" in {s["_id"] for s in data["shards"]}
    parts = plan_partitions(lay, target=4, max_partitions=256, samples=[(i,) for i in range(0, 1000, 3)])
    assert covers_once(parts, lay.key)
    assert {p.shard for p in parts} == {"shard0", "shard1"}


def test_minkey_maxkey_bounds_close_the_key_space():
    lay = layout("ranged_single")
    ordered = sorted((r for p in plan_partitions(lay, target=1, max_partitions=9) for r in p.ranges), key=lambda r: tuple_key(r.min))
    assert isinstance(ordered[0].min[0], MinKey) and isinstance(ordered[-1].max[0], MaxKey)


def test_int64_bounds_stay_exact():
    lay = layout("int64_bounds")
    runs = chunk_runs(lay.chunks)
    edge = runs[1].range.min[0]
    assert type(edge) is Int64 and int(edge) == 2**53 + 1  # a double would read 2**53
    assert tuple_key((Int64(2**53 + 1),)) > tuple_key((float(2**53),))
    parts = plan_partitions(lay, target=1, max_partitions=256)
    assert covers_once(parts, lay.key)
    assert same_value(Int64(7), 7.0) and not same_value(Int64(2**53 + 1), float(2**53))


def test_a_reshard_is_seen_and_re_split():
    data = fixture("reshard")
    before = layout_from_documents(data["before"]["collection"], data["before"]["chunks"], "app.users")
    after = layout_from_documents(data["after"]["collection"], data["after"]["chunks"], "app.users")
    assert before is not None and after is not None
    assert not resharded(before.identity(), before.identity())
    assert resharded(before.identity(), after.identity())
    assert not resharded(before.identity(), None)  # unreadable now: no change seen
    assert after.key.fields == ("region", "userId")
    assert covers_once(plan_partitions(after, target=1, max_partitions=256), after.key)


def test_unsplittable_and_dropped_are_not_sharded():
    data = fixture("unsplittable")
    assert layout_from_documents(data["collection"], [], "app.audit") is None
    assert layout_from_documents({**fixture("ranged_single")["collection"], "dropped": True}, [], "app.users") is None
    assert layout_from_documents(None, [], "app.x") is None


@pytest.mark.parametrize("name", ["ranged_single", "ranged_compound", "hashed", "jumbo", "uneven_three_shards", "empty_shard", "int64_bounds"])
@pytest.mark.parametrize("target", [1, 3, 17])
def test_every_plan_covers_the_key_space_once(name: str, target: int):
    lay = layout(name)
    assert covers_once(plan_partitions(lay, target=target, max_partitions=12, per_shard=4), lay.key)


def test_status_sums_partitions_per_shard_and_never_shows_bounds():
    from mongoshift.background.inspect.status import PartitionRow, per_shard
    from mongoshift.background.state.model import Checkpoint, Partition, Scope

    def part(seq: int, shard: str | None, status: str, scanned: int) -> Partition:
        scope = Scope(None, shard=shard, key=(("userId", 1),), ranges=(((MinKey(),), (MaxKey(),)),)) if shard else Scope("number")
        counters = {k: 0 for k in ("scanned", "migrated", "skipped", "conflicts", "failed", "retried", "batches", "txn_retries")}
        counters.update(scanned=scanned, migrated=scanned)
        return Partition(seq, "m", 1, "t", seq, scope, status, 10, Checkpoint(), counters, None, {"slot": 0} if status == "running" else None)  # type: ignore[arg-type]

    rows = [PartitionRow.of(p) for p in (part(0, "shard1", "done", 5), part(1, "shard0", "running", 3), part(2, "shard1", "running", 4))]
    assert [r.shard for r in rows] == ["shard1", "shard0", "shard1"]
    progress = per_shard(rows)
    assert [(p.shard, p.partitions, p.done, p.scanned, p.leased) for p in progress] == [("shard0", 1, 0, 3, 1), ("shard1", 2, 1, 9, 1)]
    assert "ranges" not in rows[0].__dict__ and per_shard([PartitionRow.of(part(3, None, "done", 1))]) == []
