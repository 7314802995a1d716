"""Value conversions on every request and reply: ObjectIds are not deep-copied, and plain wire values
skip mongoeco's type chains (fix (aj))."""

from __future__ import annotations

import datetime
from typing import Any


# (aj) copy.deepcopy of an ObjectId goes through its pickling protocol (__reduce_ex__, then a new
# object): mongoeco deep-copies every change event, each operation's captured documents and the
# filters it keeps, and each copy of an _id costs that. mongoeco's ObjectId (a subclass of pymongo's,
# with empty __slots__) is immutable: its copies are the object itself, as for an int or a str.
# And every storage and index key of a document with an ObjectId _id holds one: each lookup in the
# engine's persistent maps hashes it, and compares it when found, some seventy times per updated
# document. mongoeco's subclass reads its bytes through a property that calls pymongo's (a copy of
# bytes that are already bytes); equality and hashing of two of mongoeco's ObjectIds now read the
# bytes pymongo keeps directly: the same result (pymongo compares and hashes those bytes).
def patch_object_id_copies() -> None:
    from bson import ObjectId as BsonObjectId
    from mongoeco.types import ObjectId

    def same(self: Any, memo: Any = None) -> Any:
        return self

    def equal(self: Any, other: object) -> Any:
        if type(other) is ObjectId:
            return self._ObjectId__id == other._ObjectId__id  # type: ignore[attr-defined]
        return BsonObjectId.__eq__(self, other)

    def unequal(self: Any, other: object) -> Any:
        if type(other) is ObjectId:
            return self._ObjectId__id != other._ObjectId__id  # type: ignore[attr-defined]
        return BsonObjectId.__ne__(self, other)

    def hashed(self: Any) -> int:
        return hash(self._ObjectId__id)

    ObjectId.__deepcopy__ = same
    ObjectId.__copy__ = same
    ObjectId.__eq__ = equal
    ObjectId.__ne__ = unequal
    ObjectId.__hash__ = hashed


# (aj) wire/bson_bridge.decode_wire_value and encode_wire_value (imported by name into wire/protocol
# and api/_async/raw_batch_cursor) turn every value of every request and reply into mongoeco's
# types and back, through a chain of some twenty isinstance checks that a string, a number, a
# datetime (and, on the way out, pymongo's own ObjectId) passes all of to come back unchanged: a
# reply of 500 documents of about 15 fields runs the chain some 12,000 times. A value of exactly
# one of those types, or None, comes back at once; a dict or a list (exactly) is rebuilt with its
# values converted the same way; anything else takes the original chain.
_PLAIN = (str, int, float, bool, type(None), datetime.datetime)


def patch_plain_wire_values() -> None:
    from bson import ObjectId as BsonObjectId
    from mongoeco.api._async import raw_batch_cursor
    from mongoeco.wire import bson_bridge, protocol

    plain_out = (*_PLAIN, BsonObjectId)  # pymongo's ObjectId goes out as it is (mongoeco's subclass does not)

    original_decode = bson_bridge.decode_wire_value
    original_encode = bson_bridge.encode_wire_value

    def decode_wire_value(value: Any) -> Any:
        kind = type(value)
        if kind in _PLAIN:
            return value
        if kind is dict:
            return {key: decode_wire_value(item) for key, item in value.items()}
        if kind is list:
            return [decode_wire_value(item) for item in value]
        return original_decode(value)

    def encode_wire_value(value: Any) -> Any:
        kind = type(value)
        if kind in plain_out:
            return value
        if kind is dict:
            return {key: encode_wire_value(item) for key, item in value.items()}
        if kind is list:
            return [encode_wire_value(item) for item in value]
        return original_encode(value)

    decode_wire_value.__wrapped__ = original_decode  # type: ignore[attr-defined]
    encode_wire_value.__wrapped__ = original_encode  # type: ignore[attr-defined]
    # protocol and raw_batch_cursor imported the functions by name: their names are replaced too.
    for module in (bson_bridge, protocol):
        module.decode_wire_value = decode_wire_value  # type: ignore[attr-defined]
    for module in (bson_bridge, protocol, raw_batch_cursor):
        module.encode_wire_value = encode_wire_value  # type: ignore[attr-defined]
