"""Value conversions on every request and reply: ObjectIds are not deep-copied, and plain wire values
skip mongoeco's type chains (fix (aj)); a request's values are converted by pymongo's decoder as it
reads them, and a reply's plain containers go to the encoder as they are (fix (as))."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from itertools import chain, compress, repeat
from operator import is_
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
    from bson import Int64, ObjectId as BsonObjectId
    from bson.raw_bson import RawBSONDocument
    from mongoeco.api._async import raw_batch_cursor
    from mongoeco.types import ObjectId
    from mongoeco.wire import bson_bridge, protocol

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

    # (as) Every caller hands the result straight to BSON.encode, which only reads it: a tree with
    # nothing to convert goes as it is, not rebuilt. (au) mongoeco's ObjectId is a subclass of
    # pymongo's with its type marker, which BSON.encode writes as the same twelve bytes as the
    # conversion would give: it goes as it is too, so a find's reply of documents with ObjectId
    # _ids (most collections) is checked, not rebuilt document by document. A tree is rebuilt only
    # along the containers that hold something to convert.
    # pymongo's ObjectId and Int64 (a cursor's id) come back from the conversion unchanged, and so
    # does a document a reply's batch carries already encoded ((bo): patches/wire.py)
    plain_kinds: frozenset[type] = frozenset((*_PLAIN, BsonObjectId, ObjectId, Int64, RawBSONDocument))
    all_plain_out = plain_kinds.issuperset
    containers = frozenset((dict, list))
    walkable = plain_kinds | containers

    def converts(value: Any) -> bool:
        """Whether the dict or list ``value`` holds, at any depth, a value that must be converted: one
        depth at a time, each in passes of C (a reply's whole batch of documents at once)."""
        dicts, lists = ([value], []) if type(value) is dict else ([], [value])
        while dicts or lists:
            items = list(chain(chain.from_iterable(map(dict.values, dicts)), chain.from_iterable(lists)))
            types = list(map(type, items))
            kinds = set(types)
            if all_plain_out(kinds):
                return False
            if not walkable.issuperset(kinds):
                return True
            dicts = list(compress(items, map(is_, types, repeat(dict))))
            lists = list(compress(items, map(is_, types, repeat(list))))
        return False

    def encode_wire_value(value: Any) -> Any:
        kind = type(value)
        if kind in plain_kinds:
            return value
        if kind is dict:
            if not converts(value):
                return value
            return {key: encode_wire_value(item) for key, item in value.items()}
        if kind is list:
            if not converts(value):
                return value
            return [encode_wire_value(item) for item in value]
        return original_encode(value)

    decode_wire_value.__wrapped__ = original_decode  # type: ignore[attr-defined]
    encode_wire_value.__wrapped__ = original_encode  # type: ignore[attr-defined]
    # protocol and raw_batch_cursor imported the functions by name: their names are replaced too.
    for module in (bson_bridge, protocol):
        module.decode_wire_value = decode_wire_value  # type: ignore[attr-defined]
    for module in (bson_bridge, protocol, raw_batch_cursor):
        module.encode_wire_value = encode_wire_value  # type: ignore[attr-defined]


# (as) A request's body and its document sequences were decoded by pymongo, then walked in Python by
# decode_wire_value, which rebuilt every dict and list to turn a handful of values (ObjectIds, Int64s,
# Binaries...) into mongoeco's types: a lane's batch of 500 guarded updates is some 9,000 values,
# about 3 ms a batch. pymongo's decoder now makes that conversion itself, as it builds the values:
# a type registry hands each value of the types mongoeco converts (and of no other) to mongoeco's
# own conversion, and a document sequence is decoded in one call. A value that reaches the
# conversion has its nested values converted already (a DBRef's id and extras, a Code's scope), and
# mongoeco's conversion gives a converted value back unchanged, so the result is the one of
# convert-after-decode. Only the layout drivers send is taken (a body and document sequences, flags
# without a checksum); anything else, and any message whose decoding fails, goes to mongoeco's
# decode_op_msg, which answers or raises as before.
def patch_wire_decoding() -> None:
    from bson import decode, decode_all
    from bson.binary import Binary
    from bson.code import Code
    from bson.codec_options import CodecOptions, DatetimeConversion, TypeRegistry
    from bson.dbref import DBRef
    from bson.decimal128 import Decimal128
    from bson.int64 import Int64
    from bson.objectid import ObjectId
    from bson.regex import Regex
    from bson.timestamp import Timestamp
    from mongoeco.wire import bson_bridge, protocol, proxy
    from mongoeco.wire._framing import WireProtocolError

    original = protocol.decode_op_msg
    convert = getattr(bson_bridge.decode_wire_value, "__wrapped__", bson_bridge.decode_wire_value)
    converted = (ObjectId, Int64, Decimal128, Binary, Regex, Timestamp, Code, DBRef)
    options: CodecOptions[dict[str, Any]] = CodecOptions(
        type_registry=TypeRegistry([_converter(kind, convert) for kind in converted])
    )
    unchecked = protocol.OP_MSG_CHECKSUM_PRESENT | 0xFFFF & ~3  # a checksum, or flags op_msg_flags refuses

    def decoded(header: Any, payload: bytes, options: CodecOptions[dict[str, Any]] = options) -> Any:
        """The request, or None when mongoeco's decode_op_msg must answer."""
        if header.op_code != protocol.OP_MSG or len(payload) < 5:
            return None
        flag_bits = int.from_bytes(payload[:4], "little")
        if flag_bits & unchecked:
            return None
        body: dict[str, Any] | None = None
        sequences: list[tuple[str, list[dict[str, Any]]]] = []
        position, end = 4, len(payload)
        while position < end:
            kind = payload[position]
            position += 1
            if position + 4 > end:
                return None
            size = int.from_bytes(payload[position : position + 4], "little", signed=True)
            stop = position + size
            if kind == 0 and body is None and size > 0 and stop <= end:
                body = decode(payload[position:stop], options)
            elif kind == 1 and size > 4 and stop <= end:
                name_end = payload.find(0, position + 4, stop)
                if name_end < 0:
                    return None
                if size > MAX_SEQUENCE_DOCUMENT_BYTES:  # only then can one of its documents be too large
                    _refuse_too_large(payload, name_end + 1, stop, WireProtocolError)
                sequences.append((payload[position + 4 : name_end].decode(), decode_all(payload[name_end + 1 : stop], options)))
            else:
                return None
            position = stop
        if body is None:
            return None
        for name, sequence in sequences:
            if name in body:
                return None  # a duplicate name: mongoeco's error
            body[name] = sequence
        return protocol.OpMsgRequest(header=header, flag_bits=flag_bits, body=body)

    def decode_op_msg(header: Any, payload: bytes) -> Any:
        try:
            request = decoded(header, payload)
        except WireProtocolError:
            raise  # a document too large: refused, as mongod refuses it
        except Exception:
            request = None
            if _holds_a_date_out_of_range(header, payload):
                raise WireProtocolError(OUT_OF_RANGE_DATE) from None
        return original(header, payload) if request is None else request

    # (cy) A request holding a date before year 1 or after year 9999 fails pymongo's decoding, and mongoeco's
    # (its datetime cannot hold it, and its engine, its comparisons and its snapshot know no other date);
    # mongod stores it. Whether that is why the decoding failed is asked only then: the request is
    # decoded again with such dates as milliseconds, and it is refused in words that name no value
    # (the decoder's own message names the year and tells the client to change its codec options).
    ranged = options.with_options(datetime_conversion=DatetimeConversion.DATETIME_AUTO)

    def _holds_a_date_out_of_range(header: Any, payload: bytes) -> bool:
        try:
            return decoded(header, payload, ranged) is not None
        except Exception:
            return False

    decode_op_msg.__wrapped__ = original  # type: ignore[attr-defined]
    # proxy imported the function by name.
    for module in (protocol, proxy):
        module.decode_op_msg = decode_op_msg  # type: ignore[attr-defined]


#: The largest document of a request's document sequence (an inserted document, an update or delete
#: statement) that is taken: mongod's 16 MiB. mongod parses one of up to 16 KiB more, then refuses a
#: document over 16 MiB, inserted or made by an update (17419); this server stores what it is given,
#: so the statement is refused whole at the limit instead (an update statement larger than the
#: document it makes is a megabytes-long field name away). A transactional batch's write relies on it:
#: it sends its updates unchecked (mongoshift.background.write.batch.apply_batch, strict mode).
MAX_SEQUENCE_DOCUMENT_BYTES = 16 * 1024 * 1024
#: The refusal of a request holding a date the embedded server cannot store (cy): code 22 InvalidBSON, as
#: the decoder's own failure was, in words that name no value of the request.
OUT_OF_RANGE_DATE = (
    "a date before year 1 or after year 9999 is not supported by the embedded server (mongod supports it); "
    "nothing of this request was run"
)
#: mongod's code for a document over its size limit.
BSON_OBJECT_TOO_LARGE = 10334


def _refuse_too_large(payload: bytes, start: int, stop: int, error: Callable[..., Exception]) -> None:
    """Raise ``error`` (mongoeco's WireProtocolError: an error reply) if a document of the sequence
    ``payload[start:stop]`` is over :data:`MAX_SEQUENCE_DOCUMENT_BYTES`; its size only, never its content."""
    while start + 4 <= stop:
        size = int.from_bytes(payload[start : start + 4], "little", signed=True)
        if size <= 0 or start + size > stop:
            return  # malformed: the decoding says so
        if size > MAX_SEQUENCE_DOCUMENT_BYTES:
            raise error(
                f"a document of {size} bytes is over the {MAX_SEQUENCE_DOCUMENT_BYTES} bytes a BSON document may hold",
                code=BSON_OBJECT_TOO_LARGE, code_name="BSONObjectTooLarge",
            )
        start += size


def _converter(kind: type, convert: Any) -> Any:
    """A pymongo type decoder: the values of one BSON class go through ``convert``."""
    from bson.codec_options import TypeDecoder

    class Converter(TypeDecoder):
        bson_type = kind

        def transform_bson(self, value: Any) -> Any:
            return convert(value)

    return Converter()


# (as) Each document a cursor returns is materialized for the client's codec options
# (core/_public_materialization.materialize_public_document, from AsyncCollection's
# _apply_codec_options_to_document): for the options the wire server's client has, it builds new
# dicts and lists, visiting every value in Python, and gives the plain scalars back as they are. A
# document whose containers hold only those scalars is now copied with one check in C per container:
# the same new containers, the same values.
def patch_plain_materialization() -> None:
    from mongoeco._types.concerns import CodecOptions
    from mongoeco.api._async import collection
    from mongoeco.core import _public_materialization as module, codec

    original = module.materialize_public_document
    scalars = module._PLAIN_SCALARS
    all_scalars = scalars.issuperset

    def copied(value: Any) -> Any:
        """A new tree of ``value``'s containers (dicts and lists only) with its scalars, or None."""
        kind = type(value)
        if kind is dict:
            if all_scalars(map(type, value.values())):
                return dict(value)
            document = {}
            for key, item in value.items():
                if type(item) not in scalars and (item := copied(item)) is None:
                    return None
                document[key] = item
            return document
        if kind is list:
            if all_scalars(map(type, value)):
                return list(value)
            array = []
            for item in value:
                if type(item) not in scalars and (item := copied(item)) is None:
                    return None
                array.append(item)
            return array
        return None

    def materialize_public_document(data: Any, *, codec_options: Any) -> Any:
        if (
            type(data) is dict
            and type(codec_options) is CodecOptions
            and codec_options.document_class is dict
            and not codec_options.type_registry
            and codec.BsonObjectId is not None
        ):
            document = copied(data)
            if document is not None:
                return document
        return original(data, codec_options=codec_options)

    materialize_public_document.__wrapped__ = original  # type: ignore[attr-defined]
    # collection imported the function by name.
    for owner in (module, collection):
        owner.materialize_public_document = materialize_public_document  # type: ignore[attr-defined]
