"""Query filters for compound shard-key ranges, exact across BSON types: pure, no I/O.

A plain ``{k: {$gte: 5}}`` only matches numbers, while a chunk ``[5, MaxKey)`` also holds
every string, date and so on: each comparison here adds the type brackets that sort after
(or before) the bound. Compound ranges compare lexicographically, as the server orders the
shard key. A missing field sorts as null (``{k: null}`` matches both). Documents are assumed
never to store MinKey or MaxKey themselves, which keeps the ``MinKey``/``MaxKey`` bounds of
the first and last chunks free of conditions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bson import MaxKey, MinKey

from .bson_order import BRACKETS, bracket_of

#: "Always true" is None; "never" is this filter, which no document matches.
NEVER: dict[str, Any] = {"_id": {"$in": []}}
_ALWAYS = None


def _brackets(after: bool, bracket: str) -> list[str]:
    at = BRACKETS.index(bracket)
    chosen = BRACKETS[at + 1 :] if after else BRACKETS[:at]
    return [b for b in chosen if b not in ("minKey", "maxKey")]


def _either(clauses: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    kept = [c for c in clauses if c is not NEVER]
    if any(c is _ALWAYS for c in kept):
        return _ALWAYS
    if not kept:
        return NEVER
    return kept[0] if len(kept) == 1 else {"$or": kept}


def _both(clauses: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    kept = [c for c in clauses if c is not _ALWAYS]
    if any(c is NEVER for c in kept):
        return NEVER
    if not kept:
        return _ALWAYS
    return kept[0] if len(kept) == 1 else {"$and": kept}


def compare(field: str, op: str, value: Any) -> dict[str, Any] | None:
    """``field op value`` in BSON order (``op``: gt, gte, lt, lte); None means always true."""
    upward = op in ("gt", "gte")
    if isinstance(value, MinKey):
        return _ALWAYS if upward else NEVER
    if isinstance(value, MaxKey):
        return NEVER if upward else _ALWAYS
    bracket = bracket_of(value)
    clauses: list[dict[str, Any] | None] = []
    if value is None:
        if op in ("gte", "lte"):
            clauses.append({field: None})
    else:
        clauses.append({field: {f"${op}": value}})
    others = _brackets(upward, bracket)
    if not upward and "null" in others:
        others.remove("null")
        clauses.append({field: None})  # null and missing
    if others:
        clauses.append({field: {"$type": others}})
    return _either(clauses)


def _equal(field: str, value: Any) -> dict[str, Any] | None:
    if isinstance(value, (MinKey, MaxKey)):
        return NEVER
    return {field: value}


def tuple_compare(fields: Sequence[str], op: str, values: Sequence[Any]) -> dict[str, Any] | None:
    """``(fields...) op (values...)`` lexicographically (``op``: gt, gte, lt)."""
    strict = "gt" if op in ("gt", "gte") else "lt"
    clauses: list[dict[str, Any] | None] = []
    for i, field in enumerate(fields):
        prefix = [_equal(f, v) for f, v in zip(fields[:i], values[:i], strict=True)]
        clauses.append(_both([*prefix, compare(field, strict, values[i])]))
    if op == "gte":
        clauses.append(_both([_equal(f, v) for f, v in zip(fields, values, strict=False)]))
    return _either(clauses)


def range_filter(fields: Sequence[str], low: Sequence[Any], high: Sequence[Any]) -> dict[str, Any] | None:
    """``low <= (fields...) < high``, plus a predicate on the first field that lets mongos target one shard."""
    parts = [tuple_compare(fields, "gte", low), tuple_compare(fields, "lt", high)]
    first_low, first_high = low[0], high[0]
    bounded = not isinstance(first_low, (MinKey, MaxKey)) and not isinstance(first_high, (MinKey, MaxKey))
    if bounded and bracket_of(first_low) == bracket_of(first_high):
        parts.insert(0, {fields[0]: {"$gte": first_low, "$lte": first_high}})
    return _both(parts)


def ranges_filter(fields: Sequence[str], ranges: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> dict[str, Any] | None:
    """Any of several ranges (a partition that groups several chunk runs of one shard)."""
    return _either([range_filter(fields, low, high) for low, high in ranges])


def conjoin(*parts: dict[str, Any] | None) -> dict[str, Any]:
    """The parts together as one filter (``{}`` when all are always true)."""
    both = _both(list(parts))
    return {} if both is None else both


def version_index_key(version_field: str, shard_key: Sequence[tuple[str, Any]] = ()) -> list[tuple[str, Any]]:
    """The version index's key: ``{version, _id}``, or ``{version, ...shard key, _id}`` on a sharded collection."""
    return [(version_field, 1), *((f, d) for f, d in shard_key if f != "_id"), ("_id", 1)]
