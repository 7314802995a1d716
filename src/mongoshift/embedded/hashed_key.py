"""MongoDB's hashed index key, computed in Python: the value a ``hashed`` index (and shard key) stores.

mongod hashes one BSON element deterministically (its ``BSONElementHasher::hash64`` with the
default seed 0): an MD5 digest of the seed (int32), then the element's canonical type (int32,
the type *bracket*, so ``1``, ``1.0`` and ``Int64(1)`` share one) and its value. A number is
first squashed to a 64-bit integer (truncated toward zero, saturated at the int64 limits, NaN
as 0, as ``safeNumberLong`` does); any other value is hashed as its BSON value bytes; an
object or array is hashed element by element (type, field name, value) down to its
terminating byte. The key is the digest's first 8 bytes as a little-endian int64.

The embedded server (:mod:`.patches`, fix (t)) needs it to read a compound index with a hashed
field by ``min``/``max``, as mongod does. ``tests/embedded/test_hashed_key.py`` checks it against
the values MongoDB's own unit tests of the hasher pin. Pure, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import struct
from decimal import ROUND_DOWN
from typing import Any

from bson import Int64, encode
from bson.decimal128 import Decimal128

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

#: BSON element type -> its canonical type (the comparison bracket), as mongod numbers them.
_CANONICAL = {
    0x00: 0,  # end of object (terminator)
    0x06: 0,  # undefined
    0x0A: 5,  # null
    0x01: 10, 0x10: 10, 0x12: 10, 0x13: 10,  # double, int32, int64, decimal
    0x02: 15, 0x0E: 15,  # string, symbol
    0x03: 20,  # object
    0x04: 25,  # array
    0x05: 30,  # binary
    0x07: 35,  # ObjectId
    0x08: 40,  # bool
    0x09: 45,  # date
    0x11: 47,  # timestamp
    0x0B: 50,  # regex
    0x0C: 55,  # DBPointer
    0x0D: 60,  # JavaScript code
    0x0F: 65,  # code with scope
    0xFF: -1,  # MinKey
    0x7F: 127,  # MaxKey
}
_FIXED = {0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16, 0xFF: 0, 0x7F: 0}


def _cstring_end(data: bytes, at: int) -> int:
    return data.index(b"\x00", at) + 1


def _value_size(kind: int, data: bytes, at: int) -> int:
    if kind in _FIXED:
        return _FIXED[kind]
    if kind in (0x02, 0x0D, 0x0E):  # int32 length, then the bytes and their NUL
        return 4 + int.from_bytes(data[at : at + 4], "little", signed=True)
    if kind in (0x03, 0x04, 0x0F):  # an embedded document: its int32 total size
        return int.from_bytes(data[at : at + 4], "little", signed=True)
    if kind == 0x05:
        return 5 + int.from_bytes(data[at : at + 4], "little", signed=True)
    if kind == 0x0B:
        return _cstring_end(data, _cstring_end(data, at)) - at
    if kind == 0x0C:
        return 4 + int.from_bytes(data[at : at + 4], "little", signed=True) + 12
    raise ValueError(f"unknown BSON element type {kind:#x}")


def _squashed(kind: int, value: bytes) -> int:
    """A number as the 64-bit integer mongod hashes (``safeNumberLong``)."""
    if kind == 0x10:
        return int.from_bytes(value, "little", signed=True)
    if kind == 0x12:
        return int.from_bytes(value, "little", signed=True)
    if kind == 0x01:
        number = struct.unpack("<d", value)[0]
        if math.isnan(number):
            return 0
        if number >= 2.0**63:
            return _INT64_MAX
        if number < -(2.0**63):
            return _INT64_MIN
        return int(number)
    decimal = Decimal128.from_bid(value).to_decimal()
    if decimal.is_nan():
        return 0
    if decimal.is_infinite():
        return _INT64_MAX if decimal > 0 else _INT64_MIN
    whole = int(decimal.to_integral_value(rounding=ROUND_DOWN))
    return max(_INT64_MIN, min(_INT64_MAX, whole))


def _element(digest: Any, data: bytes, at: int, *, named: bool) -> int:
    """Hash the element at ``at`` (with its field name when ``named``); the offset after it."""
    kind = data[at]
    digest.update(struct.pack("<i", _CANONICAL[kind]))
    if kind == 0x00:  # the terminator: a type and no name
        return at + 1
    name_end = _cstring_end(data, at + 1)
    if named:
        digest.update(data[at + 1 : name_end])  # the name and its NUL
    size = _value_size(kind, data, name_end)
    value = data[name_end : name_end + size]
    if kind in (0x03, 0x04):
        _document(digest, value)
    elif kind == 0x0F:  # deprecated, never a shard key, and no pinned value to check a port against
        raise ValueError("the embedded server does not compute the hashed key of JavaScript code with scope")
    elif _CANONICAL[kind] == 10:
        digest.update(struct.pack("<q", _squashed(kind, value)))
    else:
        digest.update(value)
    return name_end + size


def _document(digest: Any, data: bytes) -> None:
    """Every element of an embedded document, its terminator included."""
    at = 4
    while True:
        end = _element(digest, data, at, named=True)
        if data[at] == 0x00:
            return
        at = end


def hashed_key(value: Any, seed: int = 0) -> Int64:
    """The hashed index key of ``value`` (any value pymongo encodes; a missing field is hashed as None)."""
    digest = hashlib.md5(struct.pack("<i", seed), usedforsecurity=False)
    data = encode({"": value})
    _element(digest, data, 4, named=False)
    return Int64(struct.unpack("<q", digest.digest()[:8])[0])
