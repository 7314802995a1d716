"""Planning one pass of a collection whose shard key is known: the I/O around :mod:`.shard_plan`.

Targeted (shard-key ranges read through the ``{version, ...shard key, _id}`` index) when that
index exists and the key is ranged, or hashed on its first field (other than ``_id``): hash ranges
cut arithmetically and drained through the index's bounds (:mod:`.hash_drain`). Otherwise the
usual ``_id`` ranges, with the key still on each partition so the guarded writes carry it
("untargeted" reads, targeted writes): a key hashed on a later field, or on ``_id`` (whose
version index is ``{version, _id}``, with no hash in it). See docs/background.md, "Sharded clusters".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from ...schema.background import Background
from ..state.model import Scope
from .key_filter import version_index_key
from .planner import PlannedPartition, key_values, plan_pass
from .shard_plan import ShardLayout, plan_partitions

log = logging.getLogger("mongoshift.background")


@dataclass
class ShardedPlan:
    partitions: list[PlannedPartition]
    estimate: int
    method: str
    layout: dict[str, Any]


async def has_index(collection: AsyncCollection[dict[str, Any]], key: list[tuple[str, Any]]) -> bool:
    """Whether an index has exactly these keys, in this order (``1.0`` from some servers reads as ``1``)."""
    async for index in await collection.list_indexes():
        if [(k, v if isinstance(v, str) else int(v)) for k, v in index["key"].items()] == key:
            return True
    return False


async def _sample_keys(collection: AsyncCollection[dict[str, Any]], match: dict[str, Any], fields: tuple[str, ...], size: int) -> list[tuple[Any, ...]]:
    pipeline = [{"$match": match}, {"$sample": {"size": size}}, {"$project": {"_id": 0, **dict.fromkeys(fields, 1)}}]
    return [key_values(doc, fields) async for doc in await collection.aggregate(pipeline)]


async def plan_sharded_pass(
    collection: AsyncCollection[dict[str, Any]], match: dict[str, Any], spec: Background, layout: ShardLayout, *, warned: set[str]
) -> ShardedPlan:
    key = tuple(layout.key.document().items())
    identity = {**layout.identity(), "key": [[f, d] for f, d in key], "source": layout.source}
    index = version_index_key(spec.version_field, key)
    drains = layout.key.hashed_first and layout.key.hashed != "_id"
    readable = layout.key.hashed is None or drains
    if readable and await has_index(collection, index):
        estimate = await collection.count_documents(match)
        if estimate == 0:
            return ShardedPlan([], 0, "shard-key", identity)
        # A hash range is cut arithmetically: no sample needed (nor could one say where a hash falls).
        samples = [] if drains else await _sample_keys(collection, match, layout.key.fields, min(spec.sample_size, estimate))
        wanted = max(1, min(spec.partition_target, estimate // max(1, spec.min_partition_docs)))
        parts = plan_partitions(layout, target=wanted, max_partitions=spec.partitions.max_partitions, samples=samples)
        total = sum(p.weight for p in parts) or 1
        planned = [
            PlannedPartition(
                Scope(None, shard=p.shard or None, key=key, ranges=tuple((r.min, r.max) for r in p.ranges), jumbo=p.jumbo),
                estimate * p.weight // total if sum(q.weight for q in parts) else estimate // len(parts),
            )
            for p in parts
        ]
        return ShardedPlan(planned, estimate, "shard-key", identity)
    if readable and spec.collection not in warned:
        warned.add(spec.collection)
        log.warning(
            "%s is sharded but has no index %s: batches read _id ranges across shards (writes are still targeted)",
            spec.collection, "{" + ", ".join(f"{f}: {d!r}" for f, d in index) + "}",
        )
    planned, estimate = await plan_pass(
        collection, match, target=spec.partition_target, min_partition_docs=spec.min_partition_docs, sample_size=spec.sample_size
    )
    return ShardedPlan([replace(p, scope=replace(p.scope, key=key)) for p in planned], estimate, "id-range", identity)
