"""BSON comparison order in Python, for values the planner compares without the server.

Chunk bounds and sampled shard-key values must be ordered the way the server orders them
(type bracket first, then value; every numeric type compares by value), so that the pure
planner can tell which run a sample falls in. No I/O here.
"""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

from bson import Binary, Decimal128, MaxKey, MinKey, ObjectId, Regex, Timestamp, encode

#: Type brackets in BSON comparison order; "number" spans int, long, double and decimal.
BRACKETS = (
    "minKey", "null", "number", "symbol", "string", "object", "binData", "undefined", "objectId", "bool", "date",
    "timestamp", "regex", "dbPointer", "javascript", "javascriptWithScope", "maxKey",
)
_RANK = {name: i for i, name in enumerate(BRACKETS)}


def bracket_of(value: Any) -> str:
    """The type bracket of a Python value as pymongo decodes BSON."""
    if isinstance(value, MinKey):
        return "minKey"
    if isinstance(value, MaxKey):
        return "maxKey"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float, Decimal128)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, (bytes, Binary)):
        return "binData"
    if isinstance(value, ObjectId):
        return "objectId"
    if isinstance(value, datetime.datetime):
        return "date"
    if isinstance(value, Timestamp):
        return "timestamp"
    if isinstance(value, Regex):
        return "regex"
    return "object"


def order_key(value: Any) -> tuple[Any, ...]:
    """A sort key that orders values as the server does (binary collation for strings)."""
    bracket = bracket_of(value)
    rank = _RANK[bracket]
    if bracket in ("minKey", "maxKey", "null"):
        return (rank,)
    if bracket == "number":
        number = value.to_decimal() if isinstance(value, Decimal128) else Decimal(value)
        return (rank, number)
    if bracket == "string":
        return (rank, value.encode("utf-8"))
    if bracket == "objectId":
        return (rank, value.binary)
    if bracket == "date":
        aware = value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
        return (rank, aware)
    if bracket == "timestamp":
        return (rank, value.time, value.inc)
    if bracket == "bool":
        return (rank, value)
    if bracket == "binData":
        data = bytes(value)
        return (rank, len(data), getattr(value, "subtype", 0), data)
    return (rank, encode({"v": value}))


def tuple_key(values: tuple[Any, ...] | list[Any]) -> tuple[tuple[Any, ...], ...]:
    """:func:`order_key` of a compound value, field by field."""
    return tuple(order_key(v) for v in values)


def same_value(a: Any, b: Any) -> bool:
    """Equal as a shard key sees it: numbers by value whatever their type, the rest by order key."""
    return order_key(a) == order_key(b)
