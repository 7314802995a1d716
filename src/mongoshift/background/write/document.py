"""One document's guard and diff: how a transformed copy becomes a guarded update.

Only the top-level fields a transform changed are ``$set`` (a changed nested
field rewrites its whole subdocument), the ones it dropped are ``$unset``, the
version is set and the revision incremented. Every other field is left alone
on the server and so keeps its stored BSON type. Equality is BSON-exact:
``Int64(1)``, ``1`` and ``1.0`` are different values here.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bson import Decimal128, Int64, ObjectId, encode
from bson.codec_options import DEFAULT_CODEC_OPTIONS, CodecOptions

#: A field a document does not have (``dict.get``'s default): told apart from a field whose value is None.
MISSING = object()

#: The largest document the server stores; an update bigger than this cannot make one.
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024

#: Types whose ``==`` is already BSON-exact once both sides have the same type.
_PLAIN = frozenset({str, int, bool, bytes, datetime.datetime, ObjectId, Int64})
#: The same, plus the types a container compare may meet often (``==`` exact for them too).
_EXACT = _PLAIN | {type(None), Decimal128}
#: Types whose values cannot change in place: the same object is still the same BSON value.
IMMUTABLE = frozenset({str, int, bool, float, bytes, type(None), datetime.datetime, ObjectId, Int64, Decimal128})
#: A double exactly as BSON stores it: ``0.0`` and ``-0.0`` differ, a NaN equals itself.
_DOUBLE = struct.Struct("<d").pack

#: Top-level field names already found storable; a batch repeats the same few names, so the
#: check runs once per name. Bounded: field names can be data (ids, emails), never logged.
_GOOD_KEYS: set[str] = set()
_GOOD_KEYS_MAX = 4096


class ShapeError(ValueError):
    """A transform result that cannot be written (not a document, a changed _id, a bad key)."""


def version_match(field: str, version: int) -> dict[str, Any]:
    """Documents at ``version``; a missing or null version counts as 0."""
    if version == 0:
        return {field: {"$in": [None, 0]}}
    return {field: version}


def not_a_version(field: str) -> dict[str, Any]:
    """Documents whose version is not a number (``"2"``, ``true``): no valid version, so no migration's
    :func:`version_match` takes them (``2.0`` and ``Int64(2)`` are version 2; a missing or null one is 0)."""
    return {field: {"$exists": True, "$not": {"$type": ["number", "null"]}}}


def version_of(doc: dict[str, Any], field: str) -> int:
    value = doc.get(field)
    return 0 if value is None else int(value)


def guard(
    doc: dict[str, Any], version_field: str, revision_field: str | None, shard_key: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The filter that matches this document only while nobody has written it since it was read.

    ``shard_key`` (the document's shard-key values as read) makes mongos send it to one shard."""
    version = doc.get(version_field, MISSING)
    filter_: dict[str, Any] = {"_id": doc["_id"], version_field: {"$exists": False} if version is MISSING else version}
    if revision_field is not None:
        revision = doc.get(revision_field, MISSING)
        filter_[revision_field] = {"$exists": False} if revision is MISSING else revision
    return keyed(filter_, shard_key)


def keyed(filter_: dict[str, Any], shard_key: Mapping[str, Any] | None) -> dict[str, Any]:
    """``filter_`` plus the document's shard-key values as read (none: unchanged), so that mongos sends
    the write to the one shard that owns the document; every targeted write filter is built here."""
    if shard_key:
        for key_field, value in shard_key.items():
            filter_.setdefault(key_field, value)  # None matches a missing field too, as the shard key sees it
    return filter_


def same(a: Any, b: Any) -> bool:
    """BSON-exact equality: same types all the way down, same key order.

    Containers are compared structurally: their element types first (one C pass each),
    then ``==``, which is exact once every element has the same type of :data:`_EXACT`;
    anything else inside is compared element by element. A double is compared by its
    eight bytes, so ``0.0`` and ``-0.0`` differ."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind in _EXACT:
        return bool(a == b)
    if kind is float:
        return _DOUBLE(a) == _DOUBLE(b)
    if kind is list:
        return len(a) == len(b) and _same_items(a, b)
    if kind is dict:
        return len(a) == len(b) and list(a) == list(b) and _same_items(list(a.values()), list(b.values()))
    if isinstance(a, dict):
        return len(a) == len(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    try:  # any other BSON type (Binary, Regex, Code...): its bytes are what the server keeps
        return encode({"v": a}) == encode({"v": b})
    except Exception:  # not encodable: the update will say so; compare as Python does
        return bool(a == b)


def _same_items(a: list[Any], b: list[Any]) -> bool:
    """Two lists of the same length: the same types in the same places, then the same values."""
    kinds = list(map(type, a))
    if kinds != list(map(type, b)):
        return False
    if _EXACT.issuperset(kinds):
        return a == b
    return all(map(same, a, b))


def _key_problem(key: Any) -> str | None:
    """What is wrong with a field name, without quoting it (a key can be data: an email, a user id)."""
    if not isinstance(key, str):
        return f"is a {type(key).__name__}, not a string"
    if key.startswith("$"):
        return "starts with '$'"
    if "." in key:
        return "contains '.'"
    if "\x00" in key:
        return "contains a NUL character"
    return None


def _check_keys(value: Any, top: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            problem = _key_problem(key)
            if problem:
                raise ShapeError(f"a field name inside field {top!r} {problem}: it cannot be stored")
            if isinstance(item, (dict, list)):
                _check_keys(item, top)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                _check_keys(item, top)


def _unencodable(value: Any, codec: CodecOptions[Any]) -> str:
    """The kind of the first value inside ``value`` that BSON cannot hold (a type name, never the value)."""
    if isinstance(value, dict):
        for item in value.values():
            found = _unencodable(item, codec)
            if found:
                return found
        return ""
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _unencodable(item, codec)
            if found:
                return found
        return ""
    try:
        encode({"v": value}, codec_options=codec)
    except OverflowError:
        return "an integer outside the 64-bit range"
    except Exception:
        return f"a value of type {type(value).__name__}"
    return ""


def bson_problem(document: dict[str, Any], codec: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS) -> str | None:
    """Why ``document`` cannot be sent as BSON, in words without its values; None when it can.

    Checked per document before a batch is written, so one bad result fails its own document
    instead of the whole bulk write (whose error would also quote the value)."""
    try:
        size = len(encode(document, codec_options=codec))
    except Exception:
        for key, value in document.items():
            fields = value.items() if isinstance(value, dict) and key.startswith("$") else [(key, value)]
            for name, item in fields:
                kind = _unencodable(item, codec)
                if kind:
                    return f"field {name!r} cannot be stored as BSON: it holds {kind}"
        return "the result cannot be stored as BSON"
    if size > MAX_DOCUMENT_BYTES:
        return f"the result is larger than the 16 MiB a document may hold ({size} bytes of changes)"
    return None


def stamped_diff(
    old: dict[str, Any],
    new: Any,
    *,
    version_field: str,
    revision_field: str | None,
    to_version: int,
) -> dict[str, Any]:
    """The update that turns ``old`` (the document as read) into ``new`` at ``to_version`` with the revision bumped.

    One document's :func:`differ` (a batch binds its settings once, then calls it per document)."""
    return differ(version_field, revision_field, to_version)(old, new)


#: A batch's diff: ``(old, new)`` to the update, or :class:`ShapeError` (see :func:`stamped_diff`).
Differ = Callable[[dict[str, Any], Any], dict[str, Any]]


def differ(version_field: str, revision_field: str | None, to_version: int) -> Differ:
    """:func:`stamped_diff` for every document of a batch, its settings (and the system fields) bound once.

    Called once per document: an untouched value costs one lookup and an identity check, a
    replaced one a type and ``==`` (or :func:`same`) check, and a field name is checked the first
    time it is set (:data:`_GOOD_KEYS`). Everything per batch (the system fields' set, the target
    version) is made here, not per document."""
    system = frozenset({"_id", version_field, revision_field})
    plain = _PLAIN
    good_keys = _GOOD_KEYS
    missing = MISSING
    immutable = IMMUTABLE

    def diff(old: dict[str, Any], new: Any) -> dict[str, Any]:
        if not isinstance(new, dict):
            raise ShapeError(f"the transform returned {type(new).__name__}, not a document")
        old_id = old["_id"]
        new_id = new.get("_id", old_id)
        if new_id is not old_id and not same(new_id, old_id):
            raise ShapeError("the transform changed _id")
        get = old.get
        set_: dict[str, Any] = {}
        for key, value in new.items():
            before = get(key, missing)
            # The very object ``old`` holds is unchanged (``old`` is the document as read): most
            # fields of a transformed copy are, and cost this one check.
            if value is before or key in system:
                continue
            kind = type(value)
            if kind is type(before):
                if kind in plain:
                    if before == value:
                        continue  # the common case, without a call: an untouched string, number, date or id
                elif same(before, value):
                    continue
            if key not in good_keys:
                _check_top_key(key)
            # A scalar is never a container: no ``isinstance`` (which looks up ``__class__`` of a value that is not one).
            if kind not in immutable and (kind is dict or kind is list or isinstance(value, (dict, list))):
                _check_keys(value, key)
            set_[key] = value
        unset = {key: "" for key in old if key not in new and key not in system}
        if to_version == 0:
            unset[version_field] = ""
        else:
            set_[version_field] = to_version
        increment: str | None = None  # the revision field to ``$inc``
        if revision_field is not None:
            # A document never written under the contract (no revision, or null) gets revision 1 in the
            # same ``$set`` as its other new fields: the guard proves the field absent or null, so this is
            # what ``$inc`` would store, one operator creates every new field (mongod orders them all by
            # name; the embedded server's cheap path takes only one creating operator), and a null, which
            # ``$inc`` refuses, is stamped too.
            if get(revision_field) is None:
                set_[revision_field] = 1
            else:
                increment = revision_field
        update: dict[str, Any] = {}
        if set_:
            update["$set"] = set_
        if unset:
            update["$unset"] = unset
        if increment is not None:
            update["$inc"] = {increment: 1}
        return update

    return diff


def _check_top_key(key: Any) -> None:
    problem = _key_problem(key)
    if problem:
        raise ShapeError(f"a top-level field name {problem}: it cannot be stored")
    if len(_GOOD_KEYS) < _GOOD_KEYS_MAX:
        _GOOD_KEYS.add(key)


def bson_problems(updates: Sequence[dict[str, Any]], codec: CodecOptions[Any] = DEFAULT_CODEC_OPTIONS) -> dict[int, str]:
    """:func:`bson_problem` for each update of a batch, by index; empty when all can be sent.

    One encode of the whole list answers for every update at once when they all encode
    and fit together in 16 MiB (then each one fits); otherwise each is checked on its own."""
    try:
        if len(encode({"u": updates}, codec_options=codec)) <= MAX_DOCUMENT_BYTES:
            return {}
    except Exception:
        pass
    found = {i: bson_problem(update, codec) for i, update in enumerate(updates)}
    return {i: problem for i, problem in found.items() if problem is not None}
