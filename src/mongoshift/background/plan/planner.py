"""Cutting a pass into partitions: ``_id`` ranges sampled and cut by the server.

``_id``s of different BSON types never share a partition: a range query on
``_id`` only matches values of the bound's own type, so each type present
gets its own bracket. Every type an ``_id`` can have is a bracket (the server
refuses arrays and regular expressions): a type left out would never be read,
and its documents would stay behind pass after pass. Splittable brackets are
cut at quantiles of a server side ``$sample``; partitions are handed out
largest first.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson import Decimal128, ObjectId
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from ...project.server_errors import connection_lost, error_code
from ..state.model import Checkpoint, Scope
from .bson_order import BRACKETS
from .key_filter import conjoin, ranges_filter, tuple_compare

MIN_OBJECT_ID = ObjectId("0" * 24)
MAX_OBJECT_ID = ObjectId("f" * 24)
SPLITTABLE = frozenset({"number", "string", "binData", "objectId", "date"})
#: The aggregation ``$type`` names of the "number" bracket.
_NUMBER_TYPES = frozenset({"double", "int", "long", "decimal"})

log = logging.getLogger("mongoshift.background")


@dataclass
class PlannedPartition:
    scope: Scope
    estimate: int

    def to_document(self) -> dict[str, Any]:
        return {"scope": self.scope.to_document(), "estimate": self.estimate}


def _and(*parts: dict[str, Any]) -> dict[str, Any]:
    kept = [p for p in parts if p]
    if not kept:
        return {}
    return kept[0] if len(kept) == 1 else {"$and": kept}


def is_nan(value: Any) -> bool:
    """A double or decimal NaN: it sorts before every other number, and no range query matches it."""
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, Decimal128) and value.to_decimal().is_nan()


def key_values(doc: Mapping[str, Any], fields: Sequence[str]) -> tuple[Any, ...]:
    """A document's shard-key values (dotted paths followed; missing is None, as the server sees it)."""
    values: list[Any] = []
    for path in fields:
        value: Any = doc
        for part in path.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        values.append(value)
    return tuple(values)


def batch_sort(scope: Scope) -> list[tuple[str, int]]:
    """The order a partition is read in: its keyset."""
    if scope.targeted:
        return [*((f, 1) for f in scope.key_fields), ("_id", 1)]
    return [("_id", 1)]


def cursor_after(scope: Scope, doc: Mapping[str, Any]) -> Checkpoint:
    """The checkpoint after ``doc``, the last one of a batch read in :func:`batch_sort` order."""
    if scope.targeted:
        return Checkpoint(last_id=doc["_id"], started=True, last_key=key_values(doc, scope.key_fields))
    return Checkpoint(last_id=doc["_id"], started=True)


def _targeted_filter(match: dict[str, Any], scope: Scope, cursor: Checkpoint) -> dict[str, Any]:
    """Exact shard-key ranges (and a first-field predicate mongos targets by), after the keyset cursor."""
    fields = scope.key_fields
    after = None
    if cursor.started and cursor.last_key is not None:
        after = tuple_compare((*fields, "_id"), "gt", (*cursor.last_key, cursor.last_id))
    return conjoin(match or None, ranges_filter(fields, scope.ranges), after)


def batch_filter(match: dict[str, Any], scope: Scope, cursor: Checkpoint) -> dict[str, Any]:
    """The next batch of ``scope`` after ``cursor``, within ``match``.

    A draining scope (hash ranges) has no filter of its own: its bounds are the index's
    (:mod:`.hash_drain`), so as a filter it covers everything."""
    if scope.drains:
        return match
    if scope.targeted:
        return _targeted_filter(match, scope, cursor)
    condition: dict[str, Any] = {}
    if cursor.started and is_nan(cursor.last_id):
        # ``$gt: NaN`` matches no number at all; every number but NaN (at most one _id) is >= -inf.
        condition["$gte"] = float("-inf")
    elif cursor.started:
        condition["$gt"] = cursor.last_id
    elif scope.gte is not None:
        condition["$gte"] = scope.gte
    if scope.lt is not None:
        if scope.bracket == "number" and not condition:
            # The bracket's first partition: its NaN sorts first, and no range matches a NaN
            # (``$lt`` would leave it to the next pass); ``$not: {$gte}`` takes it with the rest.
            condition["$not"] = {"$gte": scope.lt}
        else:
            condition["$lt"] = scope.lt
    if scope.bracket == "objectId":
        # The smallest and largest ObjectIds close the range instead of a $type check: the
        # same documents, and cheaper where the server evaluates $type per document.
        if "$gt" not in condition and "$gte" not in condition:
            condition["$gte"] = MIN_OBJECT_ID
        if "$lt" not in condition:
            condition["$lte"] = MAX_OBJECT_ID
    elif scope.bracket is not None:
        condition["$type"] = scope.bracket
    return _and(match, {"_id": condition} if condition else {})


def range_filter(match: dict[str, Any], scope: Scope, cursor: Checkpoint, last_id: Any) -> dict[str, Any]:
    """The documents of ``scope`` after ``cursor`` up to ``last_id`` (included): a bounded range of the ``_id`` order.

    The end is ``$not: {$gt: last_id}``, not ``$lte``: a NaN ``_id`` sorts before every number and
    is read by the number bracket's first range (:func:`batch_filter`), but ``$lte`` matches no NaN,
    so that range would leave it behind, for the next pass. Within the bracket's ``$type`` the two
    match the same documents otherwise."""
    end = {"$not": {"$gt": last_id}} if scope.bracket == "number" else {"$lte": last_id}
    return {"$and": [batch_filter(match, scope, cursor), {"_id": end}]}


async def plan_pass(
    collection: AsyncCollection[dict[str, Any]],
    match: dict[str, Any],
    *,
    target: int,
    min_partition_docs: int,
    sample_size: int,
) -> tuple[list[PlannedPartition], int]:
    """The partitions of one pass (largest first) and the estimated number of documents."""
    counts = await bracket_counts(collection, match)
    estimate = sum(counts.values())
    if estimate == 0:
        return [], 0
    wanted = max(1, min(target, estimate // max(1, min_partition_docs)))
    planned: list[PlannedPartition] = []
    for bracket, n in counts.items():
        share = max(1, round(wanted * n / estimate)) if bracket in SPLITTABLE else 1
        if share == 1:
            planned.append(PlannedPartition(Scope(bracket), n))
            continue
        try:
            bounds = await _quantiles(collection, _and(match, {"_id": {"$type": bracket}}), share, min(sample_size, n))
        except OperationFailure as exc:
            if connection_lost(exc):
                raise
            # The sample only says where to cut (a time limit or a memory limit on a large
            # collection): one partition still covers the whole bracket, in fewer lanes.
            log.warning(
                "%s: the sample that cuts its %s _ids into ranges failed (code %s): they stay in one partition",
                collection.name, bracket, error_code(exc),
            )
            bounds = []
        edges: list[Any] = [None, *bounds, None]
        pieces = len(edges) - 1
        for i in range(pieces):
            planned.append(PlannedPartition(Scope(bracket, edges[i], edges[i + 1]), n // pieces))
    planned.sort(key=lambda p: p.estimate, reverse=True)
    return planned, estimate


async def bracket_counts(collection: AsyncCollection[dict[str, Any]], match: dict[str, Any]) -> dict[str, int]:
    """The documents of each ``_id`` type bracket present, in BSON order.

    One ``$group`` by the aggregation ``$type`` of ``_id``, whose names are the query ``$type`` names of
    the brackets (the four number types fold into "number"): one command where a ``count`` per bracket
    took 17. A name that is no bracket (no server gives one for an ``_id``) takes the counts instead."""
    pipeline = [{"$match": match}, {"$group": {"_id": {"$type": "$_id"}, "n": {"$sum": 1}}}]
    found: dict[str, int] = {}
    async for row in await collection.aggregate(pipeline):
        bracket = "number" if row["_id"] in _NUMBER_TYPES else row["_id"]
        if bracket not in BRACKETS:
            log.debug("%s: an _id of type %r, no bracket: each bracket counted apart", collection.name, row["_id"])
            return await _counted_one_by_one(collection, match)
        found[bracket] = found.get(bracket, 0) + int(row["n"])
    return {bracket: found[bracket] for bracket in BRACKETS if found.get(bracket)}


async def _counted_one_by_one(collection: AsyncCollection[dict[str, Any]], match: dict[str, Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for bracket in BRACKETS:
        n = await collection.count_documents(_and(match, {"_id": {"$type": bracket}}))
        if n:
            counts[bracket] = n
    return counts


async def _quantiles(collection: AsyncCollection[dict[str, Any]], match: dict[str, Any], pieces: int, size: int) -> list[Any]:
    """``pieces - 1`` cut points from a sorted server-side sample, duplicates dropped."""
    # the projection before the sample: the server samples ids alone (mongod can answer the first two
    # stages from the version index; the embedded server copies no whole document)
    pipeline = [{"$match": match}, {"$project": {"_id": 1}}, {"$sample": {"size": size}}, {"$sort": {"_id": 1}}]
    ids = [doc["_id"] async for doc in await collection.aggregate(pipeline)]
    if len(ids) < 2:
        return []
    bounds: list[Any] = []
    for i in range(1, pieces):
        candidate = ids[i * len(ids) // pieces]
        if is_nan(candidate):
            continue  # no range query matches NaN: it cannot be a bound
        if not bounds or bounds[-1] != candidate:
            bounds.append(candidate)
    return bounds
