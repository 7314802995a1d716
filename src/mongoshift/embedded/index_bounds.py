"""A ``find``'s ``min``/``max`` index bounds, evaluated in Python: the embedded server's fix (t).

mongod reads a ``find`` with ``min``/``max`` as a scan of the hinted index from the key ``min``
(inclusive) to the key ``max`` (exclusive), in index order. mongoeco 4.11.0 ignores both
options and answers every matching document, which would make a bounded read silently read
everything. This module computes, for one document and one index key pattern, the key mongod
would store (a missing field as null, a ``hashed`` field as :func:`.hashed_key.hashed_key` of
its value) and compares keys in index order (BSON order per field, reversed on a ``-1``
field), so that :mod:`.patches` can keep exactly the documents inside the bounds, in the order
mongod returns them. Pure, no I/O.
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp, encode

from .hashed_key import hashed_key

Pattern = list[tuple[str, Any]]


class UnsupportedKey(ValueError):
    """A document or a bound this evaluation does not handle exactly (an array in an indexed field)."""


def plain(value: Any) -> Any:
    """A value as pymongo would decode it: mongoeco's wire wrappers (``BsonInt64``...) unwrapped."""
    if type(value).__module__.startswith("mongoeco") and hasattr(value, "value"):
        return value.value
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def pairs(spec: Any) -> Pattern:
    """A key pattern or bound as (field, value) pairs: a document, or a list of pairs as the wire gives it."""
    if isinstance(spec, Mapping):
        return [(str(k), plain(v)) for k, v in spec.items()]
    if isinstance(spec, list) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in spec):
        return [(str(k), plain(v)) for k, v in spec]
    raise UnsupportedKey("an index key pattern or bound must be a document")


def _rank(value: Any) -> int:
    """The BSON comparison bracket of a value (mongod's canonical type)."""
    if isinstance(value, MinKey):
        return -1
    if isinstance(value, MaxKey):
        return 127
    if value is None:
        return 5
    if isinstance(value, bool):
        return 40
    if isinstance(value, (int, float, Decimal128)):
        return 10
    if isinstance(value, Code):  # a str subclass: tested first
        return 60
    if isinstance(value, str):
        return 15
    if isinstance(value, Mapping):
        return 20
    if isinstance(value, (list, tuple)):
        return 25
    if isinstance(value, (bytes, Binary)):
        return 30
    if isinstance(value, ObjectId):
        return 35
    if isinstance(value, datetime.datetime):
        return 45
    if isinstance(value, Timestamp):
        return 47
    if isinstance(value, Regex):
        return 50
    raise UnsupportedKey(f"no BSON order known here for a {type(value).__name__}")


def order(value: Any) -> tuple[Any, ...]:
    """A sort key that orders values as the server does (numbers by value, strings by bytes)."""
    rank = _rank(value)
    if rank == 10:
        number = value.to_decimal() if isinstance(value, Decimal128) else Decimal(value)
        if number.is_nan():
            return (rank, 0, Decimal(0))  # NaN sorts before every other number
        return (rank, 1, number)
    if rank == 15:
        return (rank, value.encode("utf-8"))
    if rank == 20:
        return (rank, tuple((k.encode("utf-8"), order(v)) for k, v in value.items()))
    if rank == 25:
        return (rank, tuple(order(v) for v in value))
    if rank == 30:
        data = bytes(value)
        return (rank, len(data), getattr(value, "subtype", 0), data)
    if rank == 35:
        return (rank, value.binary)
    if rank == 40:
        return (rank, value)
    if rank == 45:
        return (rank, value if value.tzinfo else value.replace(tzinfo=datetime.UTC))
    if rank == 47:
        return (rank, value.time, value.inc)
    if rank in (50, 60):
        return (rank, encode({"v": value}))
    return (rank,)


def _at(doc: Mapping[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if isinstance(value, list):
            raise UnsupportedKey(f"an array on the indexed path {path}: a multikey min/max scan is not evaluated here")
        value = value.get(part) if isinstance(value, Mapping) else None
    if isinstance(value, list):
        raise UnsupportedKey(f"an array on the indexed path {path}: a multikey min/max scan is not evaluated here")
    return value


def index_key(doc: Mapping[str, Any], pattern: Pattern) -> tuple[Any, ...]:
    """The key the index ``pattern`` stores for ``doc``: missing is null, a hashed field its hash."""
    return tuple(hashed_key(_at(doc, f)) if d == "hashed" else _at(doc, f) for f, d in pattern)


def compare(a: Sequence[Any], b: Sequence[Any], pattern: Pattern) -> int:
    """-1, 0 or 1: ``a`` before, at or after ``b`` in the index's order."""
    for x, y, (_, direction) in zip(a, b, pattern, strict=False):
        ox, oy = order(x), order(y)
        if ox != oy:
            before = ox < oy
            if direction == -1:
                before = not before
            return -1 if before else 1
    return 0


def sort_key(pattern: Pattern) -> Any:
    """A ``sorted`` key for index keys of ``pattern``."""
    return functools.cmp_to_key(lambda a, b: compare(a, b, pattern))


def bound(spec: Any, pattern: Pattern, name: str) -> tuple[Any, ...]:
    """A ``min``/``max`` document as a key of ``pattern``: the same fields, in the same order."""
    fields = pairs(spec)
    if [f for f, _ in fields] != [f for f, _ in pattern]:
        raise UnsupportedKey(f"the {name} bound's fields must be the hinted index's key pattern, in order")
    return tuple(Int64(v) if d == "hashed" and isinstance(v, int) and not isinstance(v, bool) else v for (_, v), (_, d) in zip(fields, pattern, strict=True))
