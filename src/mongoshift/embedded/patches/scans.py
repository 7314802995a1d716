"""Index-backed reads for the memory engine: the ``_id`` order (ae; UUIDs placed since (bh)), ``_id``
range scans with a sort on ``_id`` and a limit (af), and ``{_id: {$in: [...]}}`` by lookup (ag).

mongoeco 4.11's memory engine keeps no ordered index: its index maps are hash buckets, used only for an
equality on a single-field index. A ``find`` with an ``_id`` range, a sort on ``_id`` and a limit (every
keyset batch: ``find({_id: {$gt: x}, <version filter>}).sort({_id: 1}).limit(n)``, with or without the
version index as hint) therefore decodes and matches every document of the collection, then sorts the
matches with a Python comparator: profiled at 20,000 documents, 88 % of a batch read was that sort and
that match, and the cost grew with the collection, not with the batch.

These fixes keep, per collection, the storage keys sorted by their ``_id`` in BSON order (:class:`IdOrder`)
and answer such a ``find`` by walking that order from the bound, matching each document with mongoeco's
own matcher, until the limit is reached. The order is built on the first such read and then follows every
insert and delete of the collection object; an object whose key set changed behind its back (a rollback,
a restored state) is rebuilt on its next read, since the order records the key set it was built for.
"""

from __future__ import annotations

import bisect
import contextvars
import datetime
import functools
import math
import operator
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

from bson import ObjectId as BsonObjectId

#: The attribute of a MemoryCollection that holds its order.
_ATTR = "_mongoshift_id_order"

# mongod's canonical type order (BSONType canonicalization): the first element of every order key.
_MIN_KEY, _NULL, _NUMBER, _STRING, _OBJECT, _ARRAY, _BINARY = -1, 5, 10, 15, 20, 25, 30
_OBJECT_ID, _BOOL, _DATE, _TIMESTAMP, _REGEX, _CODE, _MAX_KEY = 35, 40, 45, 47, 50, 60, 127
#: Brackets whose values this module orders exactly, as mongod and mongoeco's sort both do; a walk
#: that meets an _id of any other bracket hands the read back to the original path.
_EXACT = frozenset({_MIN_KEY, _NULL, _NUMBER, _STRING, _BINARY, _OBJECT_ID, _BOOL, _DATE, _TIMESTAMP, _MAX_KEY})
#: Brackets a range bound may be in for the walk to be taken (the property tests compare both paths
#: with bounds of these and of other brackets).
_BOUNDS = frozenset({_NUMBER, _STRING, _OBJECT_ID, _DATE, _BINARY})


#: An ObjectId's 12 bytes, read through bson's own property: mongoeco's ObjectId (a subclass) wraps it
#: in a method that copies them, at about 1 µs an id, which the order's build paid for every document.
_object_id_bytes: Any = vars(BsonObjectId)["binary"].fget


def _classes() -> dict[str, Any]:
    from bson import Decimal128 as BsonDecimal128, MaxKey, MinKey, ObjectId as BsonObjectId, Timestamp as BsonTimestamp
    from bson.code import Code
    from mongoeco.core.bson_scalars import BsonDecimal128 as WrappedDecimal, BsonDouble, BsonInt32, BsonInt64
    from mongoeco.types import Decimal128, ObjectId, Timestamp

    return {
        "min": MinKey, "max": MaxKey, "code": Code,
        "wrapped": (BsonInt32, BsonInt64, BsonDouble),
        "decimals": (Decimal128, BsonDecimal128, WrappedDecimal),
        "object_ids": (ObjectId, BsonObjectId),
        "timestamps": (Timestamp, BsonTimestamp),
    }


_TYPES: dict[str, Any] = {}


def _types() -> dict[str, Any]:
    if not _TYPES:
        _TYPES.update(_classes())
    return _TYPES


def _decimal(value: Any) -> Decimal:
    inner = getattr(value, "value", None)
    if isinstance(inner, Decimal):
        return inner
    return Decimal(str(value.to_decimal() if hasattr(value, "to_decimal") else value))


def order_key(value: Any, tiebreak: int = 0) -> tuple[Any, ...]:
    """The position of an ``_id`` value in BSON order, as a tuple that sorts like it.

    Values of the brackets in :data:`_EXACT` get their exact place; a value of any other bracket
    gets its bracket's place and ``tiebreak`` inside it (its order there is not modelled, see
    :attr:`IdOrder.inexact`)."""
    kinds = _types()
    if isinstance(value, bool):
        return (_BOOL, value)
    if type(value) is int or type(value) is float:
        number: Any = value
    elif isinstance(value, kinds["wrapped"]):
        number = value.value
    elif isinstance(value, kinds["decimals"]):
        number = _decimal(value)
        if number.is_nan():
            return (_NUMBER, 0, tiebreak)
    elif isinstance(value, int):  # bson.Int64
        number = int(value)
    else:
        number = None
    if number is not None:
        if isinstance(number, float) and math.isnan(number):
            return (_NUMBER, 0, tiebreak)  # NaN sorts before every other number
        return (_NUMBER, 1, number)  # int, float and Decimal compare exactly by value in Python
    if value is None:
        return (_NULL,)
    if isinstance(value, kinds["code"]):  # a str subclass: tested before str
        return (_CODE, tiebreak)
    if isinstance(value, str):
        return (_STRING, value)  # code point order is UTF-8 byte order
    if isinstance(value, kinds["object_ids"]):
        return (_OBJECT_ID, _object_id_bytes(value))
    if isinstance(value, datetime.datetime):
        moment = value.replace(tzinfo=datetime.UTC) if value.tzinfo is None else value.astimezone(datetime.UTC)
        return (_DATE, moment)
    if isinstance(value, kinds["timestamps"]):
        return (_TIMESTAMP, value.time, value.inc)
    if isinstance(value, kinds["min"]):
        return (_MIN_KEY,)
    if isinstance(value, kinds["max"]):
        return (_MAX_KEY,)
    if isinstance(value, dict):
        return (_OBJECT, tiebreak)
    if type(value) is uuid.UUID:
        # (bh) A UUID (subtype 4, 16 bytes, as the wire decodes it) has its place; since (ck) every binary
        # has, in mongod's order (length, subtype, bytes), which mongoeco's matcher and sorts now follow.
        return (_BINARY, 1, 16, 4, value.bytes)
    if isinstance(value, (bytes, bytearray)) or hasattr(value, "subtype"):
        data = bytes(value)
        return (_BINARY, 1, len(data), getattr(value, "subtype", 0), data)
    if hasattr(value, "pattern") and hasattr(value, "flags"):
        return (_REGEX, tiebreak)
    return (_OBJECT if hasattr(value, "collection") else _ARRAY, tiebreak)  # a DBRef is an object


def bound_key(value: Any) -> tuple[Any, ...] | None:
    """The order key of a range bound the walk takes, or None (NaN, or a bracket outside :data:`_BOUNDS`)."""
    key = order_key(value)
    if key[0] not in _BOUNDS or (key[0] == _NUMBER and key[1] == 0):
        return None
    return key


class IdOrder:
    """One collection object's storage keys, sorted by ``_id`` in BSON order.

    ``ordinals`` is the collection's key-set map it was built for (mongoeco replaces that persistent
    map on every insert, delete and re-key, and only then): the order is valid while it is the very
    same object. ``shared``: a copy of the collection holds this order too, so the next change makes
    a private one first. ``inexact``: how many ``_id``s are of a bracket whose inner order is not
    modelled (documents, binaries, regexes, code...)."""

    __slots__ = ("inexact", "keys", "ordinals", "shared", "storage_keys")

    def __init__(self, ordinals: Any, keys: list[tuple[Any, ...]], storage_keys: list[Any], inexact: int) -> None:
        self.ordinals = ordinals
        self.keys = keys
        self.storage_keys = storage_keys
        self.inexact = inexact
        self.shared = False

    def private(self) -> IdOrder:
        """This order, or a copy of it that no other collection object holds."""
        if not self.shared:
            return self
        return IdOrder(self.ordinals, list(self.keys), list(self.storage_keys), self.inexact)

    def add(self, key: tuple[Any, ...], storage_key: Any) -> None:
        at = bisect.bisect_right(self.keys, key)
        self.keys.insert(at, key)
        self.storage_keys.insert(at, storage_key)
        if _inexact(key):
            self.inexact += 1

    def remove(self, key: tuple[Any, ...], storage_key: Any) -> bool:
        at = bisect.bisect_left(self.keys, key)
        while at < len(self.keys) and self.keys[at] == key:
            if self.storage_keys[at] == storage_key:
                del self.keys[at]
                del self.storage_keys[at]
                if _inexact(key):
                    self.inexact -= 1
                return True
            at += 1
        return False

    def span(self, lower: tuple[tuple[Any, ...], bool] | None, upper: tuple[tuple[Any, ...], bool] | None) -> tuple[int, int]:
        """The positions between the bounds (each a key and whether it is inclusive; None: open)."""
        keys = self.keys
        start = 0 if lower is None else (bisect.bisect_left if lower[1] else bisect.bisect_right)(keys, lower[0])
        end = len(keys) if upper is None else (bisect.bisect_right if upper[1] else bisect.bisect_left)(keys, upper[0])
        return start, max(start, end)


def _stored_id(data: Any) -> Any:
    """The ``_id`` of a stored document, decoded alone (the memory engine stores each field encoded)."""
    from mongoeco.core.codec import DocumentCodec

    cached = getattr(data, "decoded_wrapped", None)
    if cached is not None:
        return cached.get("_id")
    payload = getattr(data, "payload", data)
    return DocumentCodec.decode(payload.get("_id"), preserve_bson_wrappers=True)


def _key_of(collection: Any, storage_key: Any, data: Any) -> tuple[Any, ...]:
    """The order key of one stored document: from its storage key when that holds the ``_id`` whole
    (``("objectid", oid)``, ``("str", s)``, ``("int", n)``), otherwise from its decoded ``_id``."""
    kind = storage_key[0] if isinstance(storage_key, tuple) and storage_key else None
    if kind == "objectid":
        return (_OBJECT_ID, _object_id_bytes(storage_key[1]))
    if kind == "str":
        return (_STRING, storage_key[1])
    if kind == "int":
        return (_NUMBER, 1, storage_key[1])
    if kind == "uuid" and type(storage_key[1]) is uuid.UUID:
        return (_BINARY, 1, 16, 4, storage_key[1].bytes)
    return order_key(_stored_id(data), collection._ordinals.get(storage_key, 0))


def _inexact(key: tuple[Any, ...]) -> bool:
    """Whether a key's place inside its bracket is not modelled (NaN among numbers included)."""
    bracket = key[0]
    return bracket not in _EXACT or (bracket == _NUMBER and key[1] == 0)


def id_order(collection: Any) -> IdOrder:
    """The collection object's valid order: kept, or built now (O(n log n), once per key-set change
    that did not go through the hooks)."""
    order: IdOrder | None = collection.__dict__.get(_ATTR)
    if order is not None and order.ordinals is collection._ordinals:
        return order
    # In insertion order (mongoeco's chunk chain: a walk of tuples, where iterating the persistent
    # map costs about 2 µs a key): ids inserted in ascending order, as ObjectIds usually are, are
    # then already sorted, which the sort finds in one pass.
    entries = [(_key_of(collection, storage_key, data), storage_key) for storage_key, data in collection._iter_items()]
    entries.sort(key=operator.itemgetter(0))
    keys = [key for key, _ in entries]
    inexact = sum(1 for key in keys if _inexact(key))
    order = IdOrder(collection._ordinals, keys, [storage_key for _, storage_key in entries], inexact)
    collection.__dict__[_ATTR] = order
    return order


def has_id_order(collection: Any) -> bool:
    """Whether the collection object holds a valid order already (one is kept up to date from then on)."""
    order: IdOrder | None = collection.__dict__.get(_ATTR)
    return order is not None and order.ordinals is collection._ordinals


def _follow(collection: Any, before: Any, change: Any) -> None:
    """After a write that replaced the key set ``before``: bring a valid order along (``change(order)``)
    or drop it (rebuilt on the next read)."""
    order: IdOrder | None = collection.__dict__.get(_ATTR)
    if order is None or collection._ordinals is before:
        return
    if order.ordinals is not before:
        collection.__dict__.pop(_ATTR, None)
        return
    order = order.private()
    if change(order):
        order.ordinals = collection._ordinals
        collection.__dict__[_ATTR] = order
    else:
        collection.__dict__.pop(_ATTR, None)


def carry_id_order(source: Any, target: Any) -> None:
    """``target`` took ``source``'s roots (fix (o) installs a committed transaction's copy of a
    collection): it shares ``source``'s order when that one is valid, and keeps its own only while
    its key set is still the one that order was made for (else it is rebuilt on the next read)."""
    order: IdOrder | None = source.__dict__.get(_ATTR)
    if order is not None and order.ordinals is source._ordinals:
        order.shared = True
        target.__dict__[_ATTR] = order
        return
    own: IdOrder | None = target.__dict__.get(_ATTR)
    if own is not None and own.ordinals is not target._ordinals:
        target.__dict__.pop(_ATTR, None)


# (ae) The order follows every insert, delete and re-key of a MemoryCollection, and a copy (a
# transaction's snapshot) shares it until either side changes its key set. Only a collection that
# has had an _id-ordered read pays for it.
def patch_id_order() -> None:
    from mongoeco.engines._memory_collection import MemoryCollection

    set_item = MemoryCollection.__setitem__
    del_item = MemoryCollection.__delitem__
    replace_key = MemoryCollection.replace_key
    copy = MemoryCollection.copy
    key_for = _key_of

    def setitem(self: Any, key: Any, value: Any) -> None:
        before = self._ordinals
        set_item(self, key, value)
        if self._ordinals is not before and _ATTR in self.__dict__:
            entry = key_for(self, key, value)
            _follow(self, before, lambda order: order.add(entry, key) or True)

    def delitem(self: Any, key: Any) -> None:
        before = self._ordinals
        if _ATTR in self.__dict__ and key in self._values:
            entry = key_for(self, key, self._values[key])
            del_item(self, key)
            _follow(self, before, lambda order: order.remove(entry, key))
            return
        del_item(self, key)

    def rekey(self: Any, key: Any, replacement: Any) -> None:
        before = self._ordinals
        if _ATTR in self.__dict__ and key in self._values:
            old = key_for(self, key, self._values[key])
            replace_key(self, key, replacement)
            new = key_for(self, replacement, self._values[replacement]) if replacement in self._values else None

            def change(order: IdOrder) -> bool:
                if new is None or not order.remove(old, key):
                    return False
                order.add(new, replacement)
                return True

            _follow(self, before, change)
            return
        replace_key(self, key, replacement)

    def copied(self: Any) -> Any:
        result = copy(self)
        order: IdOrder | None = self.__dict__.get(_ATTR)
        if order is not None and order.ordinals is self._ordinals:
            order.shared = True
            result.__dict__[_ATTR] = order
        return result

    MemoryCollection.__setitem__ = setitem
    MemoryCollection.__delitem__ = delitem
    MemoryCollection.replace_key = rekey
    MemoryCollection.copy = copied
    MemoryCollection.__copy__ = copied


def _conjuncts(node: Any, and_type: Any) -> Iterator[Any]:
    if isinstance(node, and_type):
        for clause in node.clauses:
            yield from _conjuncts(clause, and_type)
    else:
        yield node


def id_bounds(plan: Any) -> tuple[tuple[tuple[Any, ...], bool] | None, tuple[tuple[Any, ...], bool] | None] | None:
    """The ``_id`` range, in BSON order, every document matching ``plan`` lies in: (lower, upper),
    each a (key, inclusive) pair or None (open); None when a bound is a NaN or of a bracket outside
    :data:`_BOUNDS`.

    A range bound matches only values of its own bracket, NaN aside (mongod's rule, which fix (aq)
    gives mongoeco's matcher: ``{_id: {$gt: ObjectId}}`` matches no datetime ``_id``), so the range
    ends where the bound's bracket ends, and a number bound's starts after the NaNs (which the walk
    does not order). Which documents inside it match is still the matcher's business."""
    from mongoeco.core.query_plan import (
        AndCondition,
        GreaterThanCondition,
        GreaterThanOrEqualCondition,
        LessThanCondition,
        LessThanOrEqualCondition,
    )

    lower: tuple[tuple[Any, ...], bool] | None = None
    upper: tuple[tuple[Any, ...], bool] | None = None
    for node in _conjuncts(plan, AndCondition):
        if getattr(node, "field", None) != "_id":
            continue
        kind = type(node)
        if kind not in (GreaterThanCondition, GreaterThanOrEqualCondition, LessThanCondition, LessThanOrEqualCondition):
            continue  # any other _id condition is checked by the matcher on every document walked
        key = bound_key(node.value)
        if key is None:
            return None
        # The bound's bracket: from its first ordered key (past the NaNs for numbers) to the next bracket.
        first, after = ((key[0], 1) if key[0] == _NUMBER else (key[0],)), (key[0] + 1,)
        if lower is None or first > lower[0]:
            lower = (first, True)
        if upper is None or after < upper[0]:
            upper = (after, False)
        inclusive = kind in (GreaterThanOrEqualCondition, LessThanOrEqualCondition)
        if kind in (GreaterThanCondition, GreaterThanOrEqualCondition):
            if lower is None or key > lower[0] or (key == lower[0] and not inclusive):
                lower = (key, inclusive)
        elif upper is None or key < upper[0] or (key == upper[0] and not inclusive):
            upper = (key, inclusive)
    return lower, upper


#: The bracket of each ``$type`` alias mongoeco's planner gives (names and codes alike).
_TYPE_BRACKETS: dict[Any, int] = {
    **dict.fromkeys(("double", "int", "long", "decimal", "number", 1, 16, 18, 19), _NUMBER),
    **dict.fromkeys(("string", "symbol", 2, 14), _STRING),
    **dict.fromkeys(("object", 3), _OBJECT),
    **dict.fromkeys(("array", 4), _ARRAY),
    **dict.fromkeys(("binData", 5), _BINARY),
    **dict.fromkeys(("objectId", 7), _OBJECT_ID),
    **dict.fromkeys(("bool", 8), _BOOL),
    **dict.fromkeys(("date", 9), _DATE),
    **dict.fromkeys(("null", 10), _NULL),
    **dict.fromkeys(("regex", 11), _REGEX),
    **dict.fromkeys(("javascript", "javascriptWithScope", 13, 15), _CODE),
    **dict.fromkeys(("timestamp", 17), _TIMESTAMP),
    **dict.fromkeys(("minKey", -1), _MIN_KEY),
    **dict.fromkeys(("maxKey", 127), _MAX_KEY),
}


def id_type_bracket(plan: Any) -> int | None:
    """The one bracket an ``_id`` ``$type`` conjunct of ``plan`` confines the documents to, or None."""
    from mongoeco.core.query_plan import AndCondition, TypeCondition

    for node in _conjuncts(plan, AndCondition):
        if type(node) is TypeCondition and node.field == "_id":
            brackets = {_TYPE_BRACKETS.get(alias) for alias in (*node.aliases, *node.values) if not isinstance(alias, bool)}
            if len(brackets) == 1 and None not in brackets:
                return brackets.pop()
    return None


#: The type sets of mongoeco's ``$type`` conditions that are a whole bracket of (ae)'s order: such a
#: conjunct confines ``_id`` exactly to the bracket's span. "string" is left out (a symbol shares its bracket).
_WHOLE_BRACKETS: dict[frozenset[str], int] = {
    frozenset({"double", "int", "long", "decimal"}): _NUMBER,
    **{frozenset({name}): bracket for name, bracket in (
        ("objectId", _OBJECT_ID), ("date", _DATE), ("bool", _BOOL), ("null", _NULL),
        ("timestamp", _TIMESTAMP), ("minKey", _MIN_KEY), ("maxKey", _MAX_KEY),
    )},
}


def covering_test(
    engine: Any, context: Any, db_name: str, coll_name: str, semantics: Any, indexes: Any
) -> tuple[Callable[[Any, Any], bool], int | None] | None:
    """(bz) A test of a storage key that answers ``semantics``' filter from an index's keys alone,
    for a walk of (ae)'s order over the filter's ``_id`` span, and the one bracket a ``$type``
    conjunct confines that span to (None: none); None when the filter or the index does not allow it.

    Taken for a filter that is one equality of a top-level field to a plain number (an int, or a
    float that is not NaN) and, besides, only ``_id`` range conditions and whole-bracket ``$type``
    conditions (which the span decides), when the collection has a plain ascending or descending
    index on exactly that field and ``_id`` (the version index): not sparse, not partial, without a
    collation. Fix (ay) makes such an index hold every key its document has (one per element of an
    array, null's for a missing field), each the equality key mongoeco's own unique and equality
    lookups use, so the document under ``storage_key`` matches the equality exactly when the entry
    (the number's key, its ``_id``'s key) lists it: an array holding the number matches, as the
    matcher has it, and no document need be decoded or matched. The caller still trusts the span only
    where every ``_id`` it walks is placed exactly (no NaN, no unplaced binary or other bracket)."""
    from mongoeco.core.query_plan import (
        AndCondition,
        EqualsCondition,
        GreaterThanCondition,
        GreaterThanOrEqualCondition,
        LessThanCondition,
        LessThanOrEqualCondition,
        TypeCondition,
    )
    from mongoeco.engines._memory_collection import MemoryIndexMap

    ranges = (GreaterThanCondition, GreaterThanOrEqualCondition, LessThanCondition, LessThanOrEqualCondition)
    equal = None
    bracket: int | None = None
    for node in _conjuncts(semantics.query_plan, AndCondition):
        kind = type(node)
        if getattr(node, "field", None) == "_id":
            if kind in ranges:
                continue
            if kind is TypeCondition and bracket is None and node.aliases in _WHOLE_BRACKETS:
                bracket = _WHOLE_BRACKETS[node.aliases]
                continue
            return None
        if kind is EqualsCondition and equal is None and not node.null_matches_undefined:
            equal = node
            continue
        return None
    if equal is None or "." in equal.field or equal.field.startswith("$"):
        return None
    value = equal.value
    if not (type(value) is int or (type(value) is float and not math.isnan(value))):
        return None
    wanted = [(equal.field, 1), ("_id", 1)]
    for index in indexes:
        key = [(field, abs(direction)) if type(direction) is int else (field, direction) for field, direction in index.key]
        if key != wanted or index.sparse or index.partial_filter_expression is not None or index.collation is not None:
            continue
        data = engine._index_data_view(context).get(db_name, {}).get(coll_name, {}).get(str(index.name))
        if isinstance(data, MemoryIndexMap):
            break
    else:
        return None
    equality = engine._index_equality_key
    target = equality(value)
    listed = data.ordinal_for
    borrow = engine._borrow_storage_document

    object_id = _types()["object_ids"][0]  # mongoeco's ObjectId

    def test(coll: Any, storage_key: Any) -> bool:
        """Whether the document under ``storage_key`` matches: its entry in the index lists it."""
        if type(storage_key) is tuple and len(storage_key) == 2 and (
            (storage_key[0] == "objectid" and type(storage_key[1]) is object_id) or (storage_key[0] == "str" and type(storage_key[1]) is str)
        ):
            id_key = storage_key  # the storage key holds the _id whole, and is its equality key as (ai) builds it
        elif type(storage_key) is tuple and storage_key and storage_key[0] in ("objectid", "str"):
            id_key = equality(storage_key[1])
        else:
            stored = coll.get(storage_key)
            if stored is None:
                return False
            id_key = equality(borrow(stored).get("_id"))
        return listed((target, id_key), storage_key) is not None

    return test, bracket


def _id_sort(sort: Any) -> int | None:
    """1 or -1 when ``sort`` is exactly one key, ``_id``, ascending or descending."""
    if isinstance(sort, dict):
        sort = list(sort.items())
    if not sort or len(sort) != 1:
        return None
    field, direction = sort[0]
    if field != "_id" or type(direction) is not int or direction not in (1, -1):
        return None
    return direction


class ReadItems(list[tuple[Any, Any]]):
    """(bd) Where the walks below put the (storage key, stored value) pair of each document they match,
    when the running task asks for them: a pipeline update (patches/pipeline_updates.py) need not match
    again, under its batch, a document whose stored value no write has replaced since this read.

    (bt) ``bare``: the reader needs the pairs alone (an update reads each document again by its storage
    key), so a walk that answers the read yields no document, and no public copy is made of any;
    ``walked`` tells the reader that the walk answered (a read the walks do not take yields its
    documents as before, and leaves the list empty)."""

    def __init__(self, *, bare: bool = False) -> None:
        super().__init__()
        self.bare = bare
        self.walked = False


READ_ITEMS: contextvars.ContextVar[ReadItems | None] = contextvars.ContextVar("mongoshift_read_items", default=None)


# (af) A find with an _id range (or none), sorted on _id alone, with a limit: walk the _id order from
# the bound instead of matching and sorting the whole collection (MemoryEngine.scan_find_semantics,
# whose _scan this mirrors step by step: metadata, lock, TTL purge, hint check, the read-view pin,
# projection, copies). The walk stops at the other bound, or after skip + limit matches; every
# document walked is matched by mongoeco's own matcher, so the filter's conditions (the range itself,
# the version, $type, $nin...) are decided as on the original path. A walk that meets an _id whose
# place it does not model (a document, a binary, NaN...) hands the read to the original path, having
# returned nothing. A read with no sort (a find, the $match an aggregate such as count_documents
# starts with) whose filter confines _id to a range or to one $type bracket walks only that part of
# the order, and returns its matches in natural order (their insertion ordinals), as the original's
# full list does: the engine's plan counts each _id bracket, most of them empty. Not taken: a
# collation (the find's or the collection's), a text query, the profile collection, another sort, a
# sort without a limit, a collection object that is not a MemoryCollection.
def patch_id_range_scans() -> None:
    from mongoeco.core.operation_limits import enforce_deadline
    from mongoeco.engines._memory_collection import MemoryCollection
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.engines.semantic_core import stream_finalize_documents

    original = MemoryEngine.scan_find_semantics
    plain = public_plain()

    def applicable(semantics: Any) -> tuple[int, Any, int | None] | None:
        """(1 or -1: a walk in _id order; 0: in natural order, a read with no sort), the bounds,
        the $type bracket; None when the original path answers."""
        if semantics.text_query is not None or semantics.collation is not None:
            return None
        bounds = id_bounds(semantics.query_plan)
        if bounds is None:
            return None
        if not semantics.sort:
            bracket = id_type_bracket(semantics.query_plan)
            if bracket is None and bounds == (None, None):
                return None  # nothing confines the read: the original's full list is what it needs
            return 0, bounds, bracket
        direction = _id_sort(semantics.sort)
        if direction is None or not semantics.limit or semantics.limit < 0:
            return None
        return direction, bounds, None

    def scan_find_semantics(self: Any, db_name: str, coll_name: str, semantics: Any, *, context: Any = None) -> Any:
        shape = applicable(semantics)
        if shape is None or self._is_profile_namespace(coll_name):
            return original(self, db_name, coll_name, semantics, context=context)
        direction, (lower, upper), bracket = shape

        async def _scan() -> Any:
            deadline = semantics.deadline
            enforce_deadline(deadline)
            walk = None
            async with self._get_lock(db_name, coll_name):
                coll = self._storage_view(context).get(db_name, {}).get(coll_name, {})
                options = self._collection_options_view(context).get(db_name, {}).get(coll_name) or {}
                fallback = not isinstance(coll, MemoryCollection) or options.get("collation") is not None
                if not fallback:
                    indexes = begin_scan(self, context, db_name, coll_name, semantics)
                    order = id_order(coll)
                    if direction:
                        walk = None
                        if READ_ITEMS.get() is None:  # (bz) a reader that wants every match's item takes the matcher's walk
                            covered = covering_test(self, context, db_name, coll_name, semantics, indexes)
                            if covered is not None:
                                walk = _covered_walk(self, coll, order, lower, upper, direction, semantics, covered)
                        if walk is None:
                            walk = _walk(self, coll, order, lower, upper, direction, semantics)
                    else:
                        walk = _natural(self, coll, order, lower, upper, bracket, semantics)
                    fallback = walk is None
                if walk is not None:
                    matched, items = walk
                    sink = READ_ITEMS.get()
                    if sink is not None:
                        sink.extend(items)
                    read_view_token = object()
                    if sink is not None and sink.bare and semantics.projection is None and not semantics.skip and not semantics.limit:
                        sink.walked = True  # every match is in the sink, as the reader asked: no document yielded
                        documents: Any = ()
                    else:
                        documents = stream_finalize_documents(matched, semantics, emit_public_documents=False)
                        with self._meta_lock:
                            self._active_read_views[read_view_token] = items
                del coll
            if fallback:
                async for document in original(self, db_name, coll_name, semantics, context=context):
                    yield document
                return
            try:
                for document in documents:
                    enforce_deadline(deadline)
                    yield _public_copy(self, document, plain)
            finally:
                close = getattr(documents, "close", None)
                if close is not None:
                    close()
                with self._meta_lock:
                    self._active_read_views.pop(read_view_token, None)

        return _scan()

    scan_find_semantics.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    MemoryEngine.scan_find_semantics = scan_find_semantics


def _walk(
    engine: Any, coll: Any, order: IdOrder, lower: Any, upper: Any, direction: int, semantics: Any
) -> tuple[list[Any], list[tuple[Any, Any]]] | None:
    """The first skip + limit documents matching ``semantics`` between the bounds, in ``direction``,
    with their (storage key, stored value) pairs; None when the walk meets an ``_id`` whose place is
    not modelled before it has them."""
    from mongoeco.engines.semantic_core import iter_filtered_documents

    start, end = order.span(lower, upper)
    positions = range(start, end) if direction == 1 else range(end - 1, start - 1, -1)
    storage_keys, keys = order.storage_keys, order.keys
    borrowed: dict[int, tuple[Any, Any]] = {}
    unordered = False

    def walked() -> Iterator[Any]:
        nonlocal unordered
        for at in positions:
            if _inexact(keys[at]):
                unordered = True
                return
            storage_key = storage_keys[at]
            data = coll.get(storage_key)
            if data is None:
                continue
            document = engine._borrow_storage_document(data)
            borrowed[id(document)] = (storage_key, data)
            yield document

    wanted = semantics.skip + semantics.limit
    matched: list[Any] = []
    items: list[tuple[Any, Any]] = []
    for document in iter_filtered_documents(walked(), semantics):
        matched.append(document)
        items.append(borrowed[id(document)])
        if len(matched) >= wanted:
            break
    return None if unordered else (matched, items)


def covered_span(order: IdOrder, lower: Any, upper: Any, bracket: int | None) -> tuple[int, int] | None:
    """(bz) The positions of the span between the bounds and inside ``bracket``, when every ``_id``
    in it is placed exactly: the span then decides the ``_id`` conditions; None otherwise."""
    start, end = order.span(lower, upper)
    if bracket is not None:
        start = max(start, bisect.bisect_left(order.keys, (bracket,), lo=start, hi=end))
        end = min(end, bisect.bisect_left(order.keys, (bracket + 1,), lo=start, hi=end))
    if order.inexact and any(map(_inexact, order.keys[start:end])):
        return None
    return start, end


def _covered_walk(
    engine: Any, coll: Any, order: IdOrder, lower: Any, upper: Any, direction: int, semantics: Any,
    covered: tuple[Callable[[Any, Any], bool], int | None],
) -> tuple[list[Any], list[tuple[Any, Any]]] | None:
    """(bz) :func:`_walk` answered from the index's keys (:func:`covering_test`): the documents it
    skips are neither decoded nor matched; those it returns are still matched by mongoeco's matcher,
    and a disagreement hands the read to :func:`_walk`. None when it cannot be taken. The skipped
    documents are placeholders in the first list (the finalizing step drops them unseen)."""
    from mongoeco.core.operation_limits import enforce_deadline
    from mongoeco.engines.semantic_core import iter_filtered_documents

    test, bracket = covered
    span = covered_span(order, lower, upper, bracket)
    if span is None:
        return None
    start, end = span
    positions = range(start, end) if direction == 1 else range(end - 1, start - 1, -1)
    storage_keys, deadline = order.storage_keys, semantics.deadline
    skip, wanted = semantics.skip, semantics.skip + semantics.limit
    found = 0
    matched: list[Any] = []
    items: list[tuple[Any, Any]] = []
    for at in positions:
        if deadline is not None:
            enforce_deadline(deadline)
        storage_key = storage_keys[at]
        if not test(coll, storage_key):
            continue
        found += 1
        if found <= skip:
            continue
        data = coll.get(storage_key)
        document = None if data is None else engine._borrow_storage_document(data)
        if document is None or not any(True for _ in iter_filtered_documents((document,), semantics)):
            return None  # the index and the matcher disagree: the matcher's walk answers
        matched.append(document)
        items.append((storage_key, data))
        if found >= wanted:
            break
    return [None] * min(found, skip) + matched, items


def _natural(
    engine: Any, coll: Any, order: IdOrder, lower: Any, upper: Any, bracket: int | None, semantics: Any
) -> tuple[list[Any], list[tuple[Any, Any]]] | None:
    """Every document matching ``semantics`` between the bounds and inside ``bracket`` (None: any),
    in the collection's natural order (its insertion ordinals), as the original's full list gives them."""
    from mongoeco.engines.semantic_core import iter_filtered_documents

    start, end = order.span(lower, upper)
    if bracket is not None:
        start = max(start, bisect.bisect_left(order.keys, (bracket,), lo=start, hi=end))
        end = min(end, bisect.bisect_left(order.keys, (bracket + 1,), lo=start, hi=end))
    storage_keys = order.storage_keys
    borrowed: dict[int, tuple[Any, Any]] = {}

    def walked() -> Iterator[Any]:
        for at in range(start, end):
            storage_key = storage_keys[at]
            data = coll.get(storage_key)
            if data is None:
                continue
            document = engine._borrow_storage_document(data)
            borrowed[id(document)] = (storage_key, data)
            yield document

    found = [(borrowed[id(document)], document) for document in iter_filtered_documents(walked(), semantics)]
    found.sort(key=lambda entry: coll.ordinal_for(entry[0][0]))
    return [document for _, document in found], [item for item, _ in found]


@functools.cache
def public_plain() -> frozenset[type]:
    """The types of the values that a stored document and its public copy share: immutable, and
    given back as they are by DocumentCodec.to_public and the engine's copy."""
    from mongoeco.types import ObjectId

    return frozenset((str, int, float, bool, type(None), datetime.datetime, ObjectId))


def _public_copy(engine: Any, value: Any, plain: frozenset[type]) -> Any:
    """``engine._copy_document_containers(DocumentCodec.to_public(value))`` in one pass: new dicts and
    lists all the way down, with the values of ``plain`` types as they are (both functions give
    those back unchanged) and any other value through the two functions. A dict or a list of plain
    values only (most stored documents: checked in one pass of C) is copied at once."""
    kind = type(value)
    if kind is dict:
        if plain.issuperset(map(type, value.values())):
            return dict(value)
        return {key: _public_copy(engine, item, plain) for key, item in value.items()}
    if kind is list:
        if plain.issuperset(map(type, value)):
            return list(value)
        return [_public_copy(engine, item, plain) for item in value]
    if kind in plain:
        return value
    from mongoeco.core.codec import DocumentCodec

    return engine._copy_document_containers(DocumentCodec.to_public(value))


# (ag) `{_id: {$in: [...]}}` (alone or in an $and) reads every document: MemoryEngine.
# _candidate_items_for_plan_locked uses an index only for an equality on a single-field index, and
# otherwise hands every stored document to the caller's matcher. When every listed value is an
# ObjectId or a string, whose storage key is its BSON equality (fix (p)), or an int32 stored under
# its own key (an _id equal to it under another type cannot exist beside it), the candidates are the
# stored documents under those keys, in natural order, as the full list would give them; every caller
# (find, count, update, delete) still matches each candidate against the whole filter.
# An `{_id: <Int64>}` lookup (an update_many or delete_many updates each matched document by its own
# `_id`, given back as pymongo's Int64) missed the document: a stored Int64 is keyed by mongoeco's own
# wrapper (what a request decodes to), the lookup by a plain int, so every Int64 document of such a
# write read the whole collection (1,000 `_id`s of mixed types on 8,000 documents: 2.3 s). The key of
# the wrapper is tried first, with the original's check of the document found.
def patch_id_in_lookup() -> None:
    from bson.int64 import Int64
    from mongoeco.core.bson_scalars import BsonInt64
    from mongoeco.core.codec import DocumentCodec
    from mongoeco.core.query_plan import AndCondition, InCondition
    from mongoeco.engines import memory
    from mongoeco.engines._memory_collection import MemoryCollection
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.types import is_object_id_like

    original = MemoryEngine._candidate_items_for_plan_locked

    def id_list(plan: Any) -> tuple[Any, ...] | None:
        for node in _conjuncts(plan, AndCondition):
            if (
                type(node) is InCondition and node.field == "_id" and not node.null_matches_undefined
                and all(type(value) is str or type(value) is int or is_object_id_like(value) for value in node.values)
            ):
                return node.values
        return None

    def stored_int64(self: Any, coll: Any, value: Any, dialect: Any) -> list[tuple[Any, Any]] | None:
        """The document whose ``_id`` is the Int64 ``value``, found under the key it is stored by."""
        key = self._storage_key(BsonInt64(int(value)))
        data = coll.get(key)
        if data is None or not memory.document_matches_root_id_lookup(
            DocumentCodec.to_public(self._borrow_storage_document(data)), value, dialect=dialect
        ):
            return None
        return [(key, data)]

    def candidate_items(self: Any, coll: Any, query_plan: Any, **options: Any) -> list[tuple[Any, Any]]:
        lookup = self._direct_id_lookup_from_plan(query_plan)
        if type(lookup) is Int64 and options.get("collation") is None and isinstance(coll, MemoryCollection):
            found = stored_int64(self, coll, lookup, options["dialect"])
            if found is not None:
                return found
        if options.get("collation") is None and isinstance(coll, MemoryCollection) and lookup is None:
            values = id_list(query_plan)
            if values is not None:
                keys = {self._storage_key(value) for value in values}
                # An int32 not stored under its own key may be stored as 1.0 or Int64(1): the full list then.
                if all(key in coll for key in keys if key[0] == "int"):
                    return [(key, coll[key]) for key in coll.ordered_keys(keys)]
        return list(original(self, coll, query_plan, **options))

    candidate_items.__wrapped__ = original  # type: ignore[attr-defined]
    MemoryEngine._candidate_items_for_plan_locked = candidate_items


def begin_scan(engine: Any, context: Any, db_name: str, coll_name: str, semantics: Any) -> Any:
    """The steps mongoeco's ``scan_find_semantics`` takes before it reads (under the collection's
    lock): the operation's metadata, the TTL purge, the hint's check. Every read that stands in for
    that scan ((af)'s walk, (ap)'s count) takes them, in this order. Returns the collection's indexes."""
    engine._record_operation_metadata(
        context, operation="scan_collection", comment=semantics.comment,
        max_time_ms=semantics.max_time_ms, hint=semantics.hint,
    )
    indexes = engine._indexes_view(context).get(db_name, {}).get(coll_name, [])
    engine._purge_expired_documents_locked(
        db_name, coll_name, context=context,
        indexes_view=engine._indexes_view(context), index_data_view=engine._index_data_view(context),
        storage_view=engine._storage_view(context),
        now=semantics.variables.now.replace(tzinfo=datetime.UTC),
    )
    engine._resolve_hint_index(
        db_name, coll_name, semantics.hint, indexes=indexes, plan=semantics.query_plan,
        dialect=semantics.dialect, collation=semantics.collation,
    )
    return indexes
