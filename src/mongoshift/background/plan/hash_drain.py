"""Reading a partition of a hashed shard key: hash ranges drained through the index's bounds. Pure, no I/O.

A hashed key's chunks are ranges of the 64-bit hash of its first field, and no query filter can
compare a field's hash. What can is an index scan: the version index of a sharded collection
is ``{version, ...shard key, _id}`` with the key's field still ``hashed``, and a ``find`` hinted to
it with ``min``/``max`` reads exactly the documents at one version whose hash falls in one range
(``min`` inclusive, ``max`` exclusive, like a chunk). That is one *segment*: a partition has one
per key range (several when it groups chunk runs) and per stored form of the source version
(version 0 is missing, null or 0: two index regions).

There is no keyset cursor: the scan is in hash order, and the hash of the last document read
is the server's to compute. So a segment *drains*: every batch starts again at its beginning,
documents it rewrote left the segment (their version changed), and the few that stay (a
conflict still in the way, a document that failed) are stepped over by ``_id``. Past
:data:`MAX_STUCK` of them the segment is left, and the pass's closing count hands what stayed
to the next pass. A batch shorter than its limit means the segment is empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bson import MinKey

from ..state.model import Checkpoint, Scope
from .key_filter import conjoin, version_index_key

#: Ids a draining segment steps over before it leaves the rest to the next pass.
MAX_STUCK = 100


def regions(source: int) -> list[Any]:
    """The version values the index holds for ``source``: version 0 is also missing or null (indexed as null)."""
    return [None, 0] if source == 0 else [source]


def segment_count(scope: Scope, source: int) -> int:
    return len(scope.ranges) * len(regions(source))


@dataclass(frozen=True)
class DrainRead:
    """One batch's ``find``: the filter, the hinted index and its exact bounds."""

    filter: dict[str, Any]
    hint: list[tuple[str, Any]]
    min: list[tuple[str, Any]]
    max: list[tuple[str, Any]]


def drain_index(version_field: str, scope: Scope) -> list[tuple[str, Any]]:
    """The index a draining scope is read through (the sharded version index, hashed field and all)."""
    return version_index_key(version_field, scope.key)


def _bound(index: Sequence[tuple[str, Any]], version_field: str, region: Any, values: dict[str, Any]) -> list[tuple[str, Any]]:
    """An index key: the version region, the range's key values, and ``_id`` at MinKey unless it is a key field."""
    return [(f, region if f == version_field else values.get(f, MinKey())) for f, _ in index]


def drain_read(scope: Scope, cursor: Checkpoint, match: dict[str, Any], *, version_field: str, source: int) -> DrainRead | None:
    """The next batch's read of ``scope`` from ``cursor``; None when every segment is done."""
    places = regions(source)
    if cursor.segment >= segment_count(scope, source):
        return None
    low, high = scope.ranges[cursor.segment // len(places)]
    region = places[cursor.segment % len(places)]
    fields = scope.key_fields
    index = drain_index(version_field, scope)
    stuck = {"_id": {"$nin": list(cursor.stuck)}} if cursor.stuck else None
    return DrainRead(
        filter=conjoin(match or None, stuck),
        hint=index,
        min=_bound(index, version_field, region, dict(zip(fields, low, strict=False))),
        max=_bound(index, version_field, region, dict(zip(fields, high, strict=False))),
    )


def drain_after(scope: Scope, cursor: Checkpoint, *, read: int, limit: int, left: Sequence[Any], source: int) -> tuple[Checkpoint, bool]:
    """Where a drain stands after a batch that read ``read`` documents (of ``limit``) and left ``left`` in
    the source shape; and whether the partition is done."""
    stuck = (*cursor.stuck, *left)
    if read >= limit and len(stuck) <= MAX_STUCK:
        return Checkpoint(started=True, segment=cursor.segment, stuck=stuck), False
    following = cursor.segment + 1  # empty, or too many documents in the way: the next pass takes them
    done = following >= segment_count(scope, source)
    return Checkpoint(started=True, segment=following), done
