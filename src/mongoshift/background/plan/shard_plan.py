"""Planning a pass over a sharded collection: pure functions of ``config.collections`` / ``config.chunks``.

No I/O here (:mod:`.shards` reads the documents, the coordinator samples key values), so
that every shape a cluster can return is unit-tested on recorded documents.

* A partition is a set of shard-key ranges that live on one shard: runs of adjacent chunks
  of one shard, at most ``per_shard`` partitions per shard (runs beyond that are grouped)
  and ``max_partitions`` in all.
* Ranged keys: while fewer partitions than wanted, the heaviest one (by sampled key values)
  is cut at its sample median, so partitions follow the data and never cross a chunk run.
* Hashed keys (the hashed field first): a range of the 64-bit hash space is cut at its
  arithmetic midpoint, heaviest (widest) first.
* Partitions are ordered round-robin over the shards, so the first lanes go to different shards.
* A reshard (new collection UUID or epoch) is seen by :func:`resharded`: the pass is re-split.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bson import Int64, MaxKey, MinKey

from .bson_order import tuple_key

#: Partitions per shard at most (the reference's cap), before ``max_partitions``.
PER_SHARD = 8
_HASH_MIN = -(2**63)
_HASH_MAX = 2**63 - 1


@dataclass(frozen=True)
class ShardKey:
    """The shard key's fields in order, and which one (if any) is hashed."""

    fields: tuple[str, ...]
    hashed: str | None = None

    @classmethod
    def from_document(cls, key: Mapping[str, Any]) -> ShardKey:
        fields = tuple(key)
        hashed = next((f for f, d in key.items() if d == "hashed"), None)
        return cls(fields, hashed)

    def document(self) -> dict[str, Any]:
        return {f: "hashed" if f == self.hashed else 1 for f in self.fields}

    @property
    def hashed_first(self) -> bool:
        return self.hashed is not None and self.fields[0] == self.hashed


@dataclass(frozen=True)
class KeyRange:
    """``min <= key < max`` in compound order; values in the key's field order."""

    min: tuple[Any, ...]
    max: tuple[Any, ...]

    def to_document(self) -> dict[str, Any]:
        return {"min": list(self.min), "max": list(self.max)}

    @classmethod
    def from_document(cls, doc: Mapping[str, Any]) -> KeyRange:
        return cls(tuple(doc["min"]), tuple(doc["max"]))


@dataclass(frozen=True)
class Chunk:
    range: KeyRange
    shard: str
    jumbo: bool = False


@dataclass(frozen=True)
class ShardLayout:
    """How one collection is sharded, as read (or as configured, with one whole-range chunk)."""

    namespace: str
    key: ShardKey
    chunks: tuple[Chunk, ...]
    uuid: Any = None
    epoch: Any = None
    source: Literal["detected", "configured"] = "detected"

    def identity(self) -> dict[str, Any]:
        """What changes when the collection is resharded (or dropped and sharded again)."""
        return {"uuid": self.uuid, "epoch": self.epoch}


def _bounds(doc: Mapping[str, Any], key: ShardKey) -> tuple[Any, ...]:
    return tuple(doc.get(f, MinKey()) for f in key.fields)


def layout_from_documents(
    collection_doc: Mapping[str, Any] | None, chunk_docs: Sequence[Mapping[str, Any]], namespace: str
) -> ShardLayout | None:
    """The layout from a ``config.collections`` document and its ``config.chunks``; None when not sharded.

    ``unsplittable`` (8.0: a tracked, unsharded collection) and ``dropped`` mean not sharded."""
    if not collection_doc or collection_doc.get("dropped") or collection_doc.get("unsplittable"):
        return None
    key_doc = collection_doc.get("key")
    if not isinstance(key_doc, Mapping) or not key_doc:
        return None
    key = ShardKey.from_document(key_doc)
    chunks = tuple(
        Chunk(KeyRange(_bounds(c["min"], key), _bounds(c["max"], key)), str(c["shard"]), bool(c.get("jumbo")))
        for c in chunk_docs
    )
    return ShardLayout(namespace, key, chunks, collection_doc.get("uuid"), collection_doc.get("lastmodEpoch"))


def whole_range(key: ShardKey) -> KeyRange:
    return KeyRange(tuple(MinKey() for _ in key.fields), tuple(MaxKey() for _ in key.fields))


def configured_layout(namespace: str, key: ShardKey) -> ShardLayout:
    """A key known from the settings only: one range, no shard (the server is not sharded, or unreadable)."""
    return ShardLayout(namespace, key, (Chunk(whole_range(key), ""),), source="configured")


def resharded(planned: Mapping[str, Any] | None, now: Mapping[str, Any] | None) -> bool:
    """Whether the layout a pass was planned on (its :meth:`ShardLayout.identity`) is gone: resharded,
    or dropped and sharded again. Unknown on either side (not sharded, unreadable) is no change."""
    if not planned or now is None:
        return False
    return {"uuid": planned.get("uuid"), "epoch": planned.get("epoch")} != dict(now)


@dataclass
class ShardPartition:
    shard: str
    ranges: list[KeyRange]
    weight: int = 0
    jumbo: bool = False
    chunks: int = 0


@dataclass
class _Run:
    shard: str
    range: KeyRange
    jumbo: bool
    chunks: int = 1
    samples: list[tuple[Any, ...]] = field(default_factory=list)


def chunk_runs(chunks: Sequence[Chunk]) -> list[_Run]:
    """Adjacent chunks on one shard, merged, in key order."""
    runs: list[_Run] = []
    for chunk in sorted(chunks, key=lambda c: tuple_key(c.range.min)):
        last = runs[-1] if runs else None
        if last is not None and last.shard == chunk.shard and tuple_key(last.range.max) == tuple_key(chunk.range.min):
            last.range = KeyRange(last.range.min, chunk.range.max)
            last.jumbo = last.jumbo or chunk.jumbo
            last.chunks += 1
        else:
            runs.append(_Run(chunk.shard, chunk.range, chunk.jumbo))
    return runs


def _group(runs: list[_Run], cap: int) -> list[ShardPartition]:
    """At most ``cap`` partitions per shard: a shard's runs, in key order, in ``cap`` contiguous groups."""
    by_shard: dict[str, list[_Run]] = {}
    for run in runs:
        by_shard.setdefault(run.shard, []).append(run)
    out: list[ShardPartition] = []
    for shard, mine in by_shard.items():
        groups = min(cap, len(mine))
        for g in range(groups):
            part = mine[g * len(mine) // groups : (g + 1) * len(mine) // groups]
            out.append(
                ShardPartition(
                    shard,
                    [r.range for r in part],
                    weight=sum(len(r.samples) for r in part),
                    jumbo=any(r.jumbo for r in part),
                    chunks=sum(r.chunks for r in part),
                )
            )
    return out


def _hash_span(r: KeyRange) -> int:
    low = _HASH_MIN if isinstance(r.min[0], MinKey) else int(r.min[0])
    high = _HASH_MAX + 1 if isinstance(r.max[0], MaxKey) else int(r.max[0])
    return max(0, high - low)


def _split(part: ShardPartition, key: ShardKey, samples: Sequence[tuple[Any, ...]]) -> list[ShardPartition] | None:
    """Two halves of a one-range partition, or None when it cannot be cut."""
    if len(part.ranges) != 1:
        return None
    r = part.ranges[0]
    if key.hashed_first:
        span = _hash_span(r)
        if span < 2:
            return None
        low = _HASH_MIN if isinstance(r.min[0], MinKey) else int(r.min[0])
        cut: tuple[Any, ...] = (Int64(low + span // 2), *(MinKey() for _ in key.fields[1:]))
        halves = (part.weight // 2, part.weight - part.weight // 2)
    else:
        inside = [s for s in samples if tuple_key(r.min) <= tuple_key(s) < tuple_key(r.max)]
        cut = inside[len(inside) // 2] if inside else r.min
        if tuple_key(cut) == tuple_key(r.min):
            return None
        below = sum(1 for s in inside if tuple_key(s) < tuple_key(cut))
        halves = (below, len(inside) - below)
    return [
        ShardPartition(part.shard, [KeyRange(r.min, cut)], halves[0], part.jumbo, part.chunks),
        ShardPartition(part.shard, [KeyRange(cut, r.max)], halves[1], part.jumbo, part.chunks),
    ]


def plan_partitions(
    layout: ShardLayout,
    *,
    target: int,
    max_partitions: int,
    per_shard: int = PER_SHARD,
    samples: Sequence[tuple[Any, ...]] = (),
) -> list[ShardPartition]:
    """The partitions of one pass (see the module docstring); their ranges cover the whole key space once."""
    runs = chunk_runs(layout.chunks)
    ordered = sorted(samples, key=tuple_key)
    starts = [tuple_key(r.range.min) for r in runs]
    for s in ordered:
        i = bisect.bisect_right(starts, tuple_key(s)) - 1
        if i >= 0:
            runs[i].samples.append(s)
    shards = {r.shard for r in runs}
    cap = max(1, min(per_shard, max_partitions // max(1, len(shards))))
    parts = _group(runs, cap)
    wanted = max(1, min(target, max_partitions))
    if layout.key.hashed_first:
        for part in parts:
            part.weight = sum(_hash_span(r) for r in part.ranges)
    while len(parts) < wanted:
        count = {s: sum(1 for p in parts if p.shard == s) for s in shards}
        candidates = sorted((p for p in parts if count[p.shard] < cap), key=lambda p: -p.weight)
        for part in candidates:
            halves = _split(part, layout.key, ordered)
            if halves is not None:
                at = parts.index(part)
                parts[at : at + 1] = halves
                break
        else:
            break
    return _round_robin(parts)


def _round_robin(parts: list[ShardPartition]) -> list[ShardPartition]:
    """Heaviest first within a shard, shards taking turns, so that the first claims spread over shards."""
    by_shard: dict[str, list[ShardPartition]] = {}
    for part in sorted(parts, key=lambda p: (-p.weight, tuple_key(p.ranges[0].min))):
        by_shard.setdefault(part.shard, []).append(part)
    queues = sorted(by_shard.values(), key=lambda q: -sum(p.weight for p in q))
    out: list[ShardPartition] = []
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out
