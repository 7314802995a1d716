"""Cheap guarded updates for the memory engine: fixes (ah), (ai), (at), (au), (av) and (bg); and (cn), an overflow.

The background engine writes each batch as one ``update`` command of ``UpdateOne({_id, __v, __rev},
{$set, $unset, $inc})`` statements. mongoeco 4.11 runs each statement through its whole public
update path: it normalizes and compiles the filter and the update, binds an operation context, takes
the collection lock, deep-copies the document four times (the update plan's original and working
copies, the captured before and after images), re-encodes the whole document, re-derives every index
key of the document twice, opens a rollback and publication scope, and copies the change record
four times on its way to the change history, delivered statement by statement. Profiled at 20,000
documents, the update command was 72 % of the server's time in the B3 loop, about 2.6 ms a
statement (docs/performance.md, "The embedded server's own cost").

:func:`patch_guarded_updates` answers the statements whose meaning is plain — the document named by
an ``_id`` the engine's storage key finds (a lookup, (bg): any kind but a pattern or an operator),
equality guards on top-level scalars (or null, or their absence), ``$set``/``$unset``/``$inc`` of
top-level fields — with the engine's own write steps, once
per command where mongoeco takes them once per statement (the lock, the TTL purge, the rollback and
publication scope, the change dispatch), and every other statement with mongoeco's path. A statement
it cannot prove it answers as that path would (an array or a sub-document under a guard, new fields
from two operators, a document the collection's validator refuses (since (bs); before, any collection with a
validator), a write conflict in a transaction (since (be); before, any statement in one), a value the operators
refuse...) goes to that path before anything of it is written. A command of nothing but such ``{q, u}`` entries also skips
mongoeco's per-entry parse of options they do not have (its own loop, (av)).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import decimal
import math
import uuid
from collections.abc import Iterator
from copy import deepcopy
from typing import Any

_OPERATORS = frozenset({"$set", "$unset", "$inc"})
#: (bs) The collection options a batch takes on itself: a validator, judged per statement by mongoeco's own compiled
#: validator; any other option (a collation, a capped size, pre- and post-images...) leaves the collection to mongoeco.
_VALIDATION_OPTIONS = frozenset({"validator", "validationLevel", "validationAction"})
_OPTIONS = ("sort", "collation", "hint", "array_filters")
_MISSING = object()
_NULL = object()  # a guard of ``null``: the field is null or missing
_INT64 = (-(2**63), 2**63)

#: mongoeco names, bound once by :func:`_bind` (this module imports without mongoeco).
_M: dict[str, Any] = {}


def _bind() -> dict[str, Any]:
    if not _M:
        from bson import MaxKey, MinKey, ObjectId as BsonObjectId
        from mongoeco._types._bson_values import Binary, Decimal128, Timestamp
        from mongoeco.core import paths
        from mongoeco.core.bson_scalars import BsonDouble, BsonInt32, BsonInt64, bson_add, is_bson_numeric
        from mongoeco.core.codec import DocumentCodec, _InternalBsonArray, _InternalBsonDocument
        from mongoeco.core.operation_context import ChangePublicationPolicy
        from mongoeco.core.schema_validation import compile_collection_validator
        from mongoeco.engines._memory_collection import MemoryCollection, MemoryIndexMap, _OrderChunk
        from mongoeco.engines.memory import MemoryEngine, _StoredDocument
        from mongoeco.types import ObjectId, UpdateResult

        from ..change_streams import _EVENT_TYPES, PRE_IMAGE_LAYER, ChangeHistory, replaced, take_pre_image

        _M.update(
            BsonInt64=BsonInt64, wrapped=(BsonInt64, BsonInt32, BsonDouble), object_ids=(ObjectId, BsonObjectId), BsonObjectId=BsonObjectId,
            ObjectId=ObjectId, paths=paths, bson_add=bson_add, is_bson_numeric=is_bson_numeric, codec=DocumentCodec,
            policy=ChangePublicationPolicy, MemoryCollection=MemoryCollection, MemoryIndexMap=MemoryIndexMap,
            MemoryEngine=MemoryEngine, StoredDocument=_StoredDocument, UpdateResult=UpdateResult,
            take_pre_image=take_pre_image, ChangeHistory=ChangeHistory, event_types=_EVENT_TYPES,
            InternalArray=_InternalBsonArray, InternalDocument=_InternalBsonDocument, Decimal128=Decimal128,
            keyed=(BsonInt64, Binary, bytes, uuid.UUID, datetime.datetime, Timestamp, bool, MinKey, MaxKey),
            compile_validator=compile_collection_validator, replaced=replaced, pre_image_layer=PRE_IMAGE_LAYER,
            OrderChunk=_OrderChunk,
        )
    return _M


class _Undecided(Exception):
    """The fast path cannot prove its answer: mongoeco's own path answers the statement."""


#: (be) The first-writer-wins check of a transaction's write (patches/transactions.py registers its
#: ``note``, which raises the write conflict and otherwise records the document's base): a batch in a
#: transaction runs it for a statement before any of that statement's writes.
WRITE_CHECKS: list[Any] = []
#: (cc) The same check of every write of a statement at once (patches/transactions.py registers its
#: ``note_all``, given the collection and each (storage key, stored value) the statement replaces).
STATEMENT_CHECKS: list[Any] = []
#: (cc) The mark of the wrapper of MemoryEngine._set_storage_document_locked that notes a transaction's write.
NOTE_LAYER = "transaction-note"


def _unwrapped_set(engine_class: Any) -> Any:
    """(cc) MemoryEngine._set_storage_document_locked under its two wrappers, when those are exactly
    change_streams.py's (the replaced document's pre-image) over transactions.py's (the transaction's
    note: its first-writer-wins check and the document's base), or None (another wrapper, a test's)."""
    outer = engine_class._set_storage_document_locked
    inner: Any = getattr(outer, "__wrapped__", None)
    if getattr(outer, "mongoshift_layer", None) != _M["pre_image_layer"] or getattr(inner, "mongoshift_layer", None) != NOTE_LAYER:
        return None
    return inner.__wrapped__


class _BatchFailed(RuntimeError):
    """A write step of the engine failed inside an open batch: the batch was rolled back whole, and
    the command fails (never seen: every check that can refuse a statement runs before its writes)."""


_NAMES: dict[str, bool] = {}


def _plain_name(name: object) -> bool:
    """A top-level field name without a meaning of its own: not empty, no path, no operator, not
    numeric (the answers for the names seen last are kept: a batch repeats its few names)."""
    if type(name) is not str:
        return False
    known = _NAMES.get(name)
    if known is None:
        if len(_NAMES) > 4096:
            _NAMES.clear()
        known = _NAMES[name] = name != "" and "." not in name and name[0] != "$" and not name.isdigit()
    return known


def _storable(value: Any) -> bool:
    """No field name inside ``value`` that mongod or mongoeco treats specially (``$``-prefixed, dotted, empty)."""
    kind = type(value)
    if kind in _SCALARS:  # most values: no names inside, known without the two isinstance checks below
        return True
    if kind is dict or isinstance(value, dict):
        return all(type(k) is str and k != "" and "." not in k and k[0] != "$" for k in value) and all(_storable(v) for v in value.values())
    if kind is list or isinstance(value, list):
        return all(_storable(v) for v in value)
    return True


class Statement:
    """One ``update`` statement the fast path takes: the ``_id``, the other guards, the operators."""

    __slots__ = ("document_id", "guards", "operators")

    def __init__(self, document_id: Any, guards: list[tuple[str, Any]], operators: list[tuple[str, dict[str, Any]]]) -> None:
        self.document_id = document_id
        self.guards = guards
        self.operators = operators


def guard_of(value: Any, m: dict[str, Any]) -> Any:
    """What a guard of a filter compares with: the scalar itself, ``_MISSING`` for the engine's
    ``{$exists: false}``, ``_NULL`` for ``null`` (the engine's guard of a document read with a null
    version or revision); None for a guard the fast paths leave to mongoeco (arrays, documents, NaN...)."""
    if value is None:
        return _NULL
    kind = type(value)
    if kind is int or kind is str or kind is bool or kind is m["BsonInt64"] or kind in m["object_ids"] or kind is datetime.datetime:
        return value
    if kind is float and not math.isnan(value):
        return value
    if kind is dict and len(value) == 1 and value.get("$exists", True) is False:
        return _MISSING  # the engine's guard of a field the document lacks
    return None


def looked_up(document_id: Any, m: dict[str, Any]) -> bool:
    """Whether an ``_id`` equality is answered by the engine's storage key (``MemoryEngine._storage_key``,
    the value's exact type and value): a stored document under that key is the one the filter names,
    since ``_id`` is unique. The types as the wire decodes them: numbers (not NaN), strings,
    ObjectIds, binaries and UUIDs, dates, timestamps, booleans, MinKey and MaxKey, and documents
    without an operator (``$in``...) or a ``$``-prefixed name. A miss is an answer only for
    :func:`missed_is_answer`'s types."""
    kind = type(document_id)
    if kind is str or kind is int or kind in m["object_ids"] or kind in m["keyed"]:
        return True
    if kind is float:
        return not math.isnan(document_id)
    if kind is m["Decimal128"]:
        return not document_id.to_decimal().is_nan()
    if kind is dict:
        return _storable(document_id)  # no operator, no $-prefixed name at any depth
    return False  # a regex (a pattern match), a list, code, null, a missing _id, anything else


def missed_is_answer(document_id: Any, m: dict[str, Any]) -> bool:
    """Whether no document under ``document_id``'s storage key means no document equals it: a string
    or an ObjectId equals only its own kind. A number may be stored as another type (1, 1.0,
    Int64(1)), a document may hold one, a date may carry another zone: mongoeco's path looks."""
    kind = type(document_id)
    return kind is str or kind in m["object_ids"]


def incremented(current: Any, by: Any, m: dict[str, Any]) -> Any:
    """``$inc`` of a field that holds ``current``, as mongoeco's ``bson_add`` adds; anything its
    operator would refuse or overflow is left to mongoeco's path (:class:`_Undecided`)."""
    kind = type(current)
    if not (kind is int or kind is float or m["is_bson_numeric"](current)):
        raise _Undecided
    try:
        return m["bson_add"](current, by)
    except (OverflowError, ValueError, ArithmeticError) as error:
        raise _Undecided from error


def statement(query: Any, change: Any, multi: bool, replacement: bool, options: dict[str, Any]) -> Statement | None:
    """The statement as the fast path reads it, or None when it is not one it takes."""
    m = _bind()
    if multi or replacement or options.get("upsert") or type(query) is not dict or type(change) is not dict:
        return None
    for name in _OPTIONS:
        if options.get(name) is not None:
            return None
    document_id = query.get("_id", _MISSING)
    if not looked_up(document_id, m):
        return None
    guards = []
    for name, value in query.items():
        if name == "_id":
            continue
        if not _plain_name(name):
            return None
        guard = guard_of(value, m)
        if guard is None:
            return None
        guards.append((name, guard))
    operators = operators_of(change)
    return None if operators is None else Statement(document_id, guards, operators)


def operators_of(change: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """An update document's operators as :func:`updated` applies them (``$set``, ``$unset``, ``$inc`` of
    distinct top-level fields other than ``_id``, storable values, finite increments), or None when it
    is not one the fast paths take: mongoeco's path answers it, with its own errors and rules."""
    m = _bind()
    if type(change) is not dict or not change:
        return None
    operators: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for operator, fields in change.items():
        if operator not in _OPERATORS or type(fields) is not dict or not fields:
            return None
        for name, value in fields.items():
            if not _plain_name(name) or name == "_id" or name in seen:
                return None  # a conflict or a path: mongoeco's own errors and rules
            seen.add(name)
            kind = type(value)
            if operator == "$inc":
                if not (kind is int or kind is m["BsonInt64"] or (kind is float and math.isfinite(value))):
                    return None
            elif operator == "$set" and (kind is dict or kind is list or isinstance(value, (dict, list))) and not _storable(value):
                return None
        operators.append((operator, fields))
    return operators


def _plain_entries(spec: Any) -> bool:
    """(av) Whether every entry of an ``update`` command is ``{q, u}`` with ``multi`` and ``upsert`` false or
    absent, and an operator document as ``u``: the entries the command's plain loop takes."""
    entries = spec.get("updates") if type(spec) is dict else None
    if type(entries) is not list or not entries:
        return False
    for entry in entries:
        if type(entry) is not dict or type(entry.get("q")) is not dict:
            return False
        change = entry.get("u")
        if type(change) is not dict or not change:
            return False
        for key, value in entry.items():
            if key != "q" and key != "u" and not ((key == "multi" or key == "upsert") and value is False):
                return False
        for operator in change:
            if type(operator) is not str or not operator.startswith("$"):
                return False
    return True


def guard_holds(document: dict[str, Any], guards: list[tuple[str, Any]]) -> bool:
    """Whether ``document`` equals every guard (BSON equality of scalars); raises :class:`_Undecided`
    for a stored array or sub-document (element matching) or a value this does not compare."""
    m = _M
    for name, wanted in guards:
        stored = document.get(name, _MISSING)
        if wanted is _NULL:
            if stored is _MISSING or stored is None:
                continue
            kind = type(stored)
            if kind is int or kind is str or kind is float or kind is bool or kind in m["wrapped"] or kind in m["object_ids"]:
                return False
            raise _Undecided  # an array may hold a null, and mongod's undefined equals null: the matcher's business
        if stored is _MISSING or wanted is _MISSING:
            if wanted is not stored:
                return False  # a scalar guard is never null, and null alone matches a missing field
            continue
        kind, want = type(stored), type(wanted)
        if kind is want and (kind is int or kind is str):
            if stored != wanted:
                return False
            continue
        if kind is list or kind is dict or isinstance(stored, (list, dict)):
            raise _Undecided
        if want is bool or kind is bool:
            if kind is not want or stored != wanted:
                return False
            continue
        if want is int or want is float or want is m["BsonInt64"]:
            number = wanted.value if want is m["BsonInt64"] else wanted
            if kind is int or kind is float:
                other = stored
            elif kind in m["wrapped"]:
                other = stored.value
            elif hasattr(stored, "to_decimal") or kind.__name__.endswith("Decimal128"):
                raise _Undecided  # decimals compare by value with numbers: the matcher's business
            else:
                return False
            if other != number:
                return False
            continue
        if want is str:
            if isinstance(stored, str):
                raise _Undecided  # a Code or another str subclass
            return False
        if want in m["object_ids"]:
            if kind not in m["object_ids"] or stored.binary != wanted.binary:
                return False
            continue
        if want is datetime.datetime:
            if kind is not datetime.datetime:
                return False
            left = stored if stored.tzinfo else stored.replace(tzinfo=datetime.UTC)
            right = wanted if wanted.tzinfo else wanted.replace(tzinfo=datetime.UTC)
            if left != right:
                return False
            continue
        raise _Undecided
    return True


def _plain_value(value: Any) -> bool:
    """A value that crosses mongoeco's BSON boundary (DocumentCodec.to_internal, .encode) unchanged:
    for these exact types both functions only check the value and give it back."""
    kind = type(value)
    return kind is str or kind is float or kind is bool or value is None or (kind is int and _INT64[0] <= value < _INT64[1])


_SCALARS = frozenset({str, float, bool, int, type(None)})


def plain_tree(value: Any, *, internal: bool) -> Any:
    """``DocumentCodec.to_internal(value)`` (``internal``) or ``DocumentCodec.encode(value)`` of a list
    or a document holding only plain values (:func:`_plain_value`) and ObjectIds under plain field
    names, at any depth, or of one ObjectId, built directly; ``_MISSING`` for any other value, which
    the codec must answer.

    For such a tree the codec only checks each value (again at every level) and rebuilds the
    containers: to_internal into its immutable internal array and document, encode into a plain
    list and dict. A checkpoint's list of 500 ids took 4 ms through both, 13 % of the demo's server.
    (bb) An ObjectId is given back by to_internal as mongoeco's ObjectId of the same bytes, and
    encoded as the codec's tagged form of its hex: a checkpoint of 500 ObjectIds went through the
    codec's encode-then-decode, about 8 ms of the server's time a batch of the engine on such a
    collection."""
    m = _M
    array, document = (m["InternalArray"], m["InternalDocument"]) if internal else (list, dict)
    return _tree(value, array, document, m["InternalArray"], m["InternalDocument"])


def _tree(value: Any, array: Any, document: Any, internal_array: Any, internal_document: Any) -> Any:
    kind = type(value)
    if kind is list or kind is internal_array:
        kinds = set(map(type, value))
        if kinds <= _SCALARS:  # the common case, checked without a Python step per item
            if int in kinds:
                ints = [v for v in value if type(v) is int]
                if min(ints) < _INT64[0] or max(ints) >= _INT64[1]:
                    return _MISSING
            return array(value)
        items = []
        for item in value:
            item = _tree_item(item, array, document, internal_array, internal_document)
            if item is _MISSING:
                return _MISSING
            items.append(item)
        return array(items)
    if kind is dict or kind is internal_document:
        fields = {}
        for name, item in value.items():
            item = _tree_item(item, array, document, internal_array, internal_document) if _plain_name(name) else _MISSING
            if item is _MISSING:
                return _MISSING
            fields[name] = item
        return document(fields)
    if kind is _M["ObjectId"] or kind is _M["BsonObjectId"]:
        oid = value if kind is _M["ObjectId"] else _M["ObjectId"](value.binary)
        return oid if array is internal_array else _M["codec"]._tagged_value("objectid", str(oid))
    return _MISSING


def _tree_item(item: Any, array: Any, document: Any, internal_array: Any, internal_document: Any) -> Any:
    """One value inside a tree: a plain scalar as it is, an ObjectId or a container built by
    :func:`_tree`, else ``_MISSING``."""
    if type(item) in _SCALARS:
        return item if _plain_value(item) else _MISSING
    return _tree(item, array, document, internal_array, internal_document)


def internal_value(value: Any, codec: Any) -> Any:
    """``codec.to_internal(value)``, the BSON boundary an update's value crosses on mongoeco's path."""
    if _plain_value(value):
        return value
    tree = plain_tree(value, internal=True)
    return codec.to_internal(value) if tree is _MISSING else tree


def updated(document: dict[str, Any], operators: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], set[str]]:
    """The document after the operators, and the names of the fields that changed (empty: a no-op).

    As mongoeco's update plan: an existing field changes in place when its new value is not the same
    BSON value (``paths._same_value_for_update``), a removed one goes, new fields are appended in the
    order of their names; ``$inc`` adds with mongoeco's ``bson_add``. New fields from two operators,
    a non-numeric ``$inc`` target, an overflow: :class:`_Undecided`."""
    m = _M
    same = m["paths"]._same_value_for_update
    result = dict(document)  # top-level copy: nested values are replaced whole, never changed in place
    changed: set[str] = set()
    created: list[tuple[str, Any]] = []
    creators = 0
    for operator, fields in operators:
        before = len(created)
        for name, raw in fields.items():
            current = result.get(name, _MISSING)
            if operator == "$unset":
                if current is not _MISSING:
                    del result[name]
                    changed.add(name)
                continue
            # the BSON boundary the update document crosses on mongoeco's path
            value = internal_value(raw, m["codec"])
            if operator == "$inc" and current is not _MISSING:
                value = incremented(current, value, m)
            if current is _MISSING:
                created.append((name, value))
            elif not same(current, value):
                result[name] = value
                changed.add(name)
        if len(created) > before:
            creators += 1
    if creators > 1:
        raise _Undecided  # mongoeco appends each operator's new fields in turn, mongod all of them by name
    for name, value in sorted(created, key=lambda item: item[0]):
        result[name] = value
        changed.add(name)
    return result, changed


def _stored(engine: Any, data: Any, document: dict[str, Any], changed: set[str]) -> Any:
    """The stored form of ``document``, which differs from the one in ``data`` in ``changed`` fields only.

    mongoeco's DocumentCodec encodes a document field by field (and checks each value while encoding
    it), so the unchanged fields' encoded values are taken over from ``data`` and only the changed
    ones are encoded; the order is ``document``'s. Another codec, or another kind of stored value: the
    whole document is encoded, as the engine does.

    (bl) The stored value keeps its decoded form, as an insert's does once read: what decoding its
    payload gives (the same values of the same types, in the same order), built from the unchanged
    fields' values in the document's decoded form before the write (which the caller borrowed), the
    changed plain values as they are, and the other changed
    values decoded from their encoding alone (an update's arrays and documents are mongoeco's
    internal classes, not the plain ones a decode gives).
    Without it the next read of the document decoded it whole again: the engine's count at the end of
    a pass decoded every document it had rewritten, and every checkpoint decoded its partition's
    record (its batch of 500 ids) that the previous one had written."""
    m = _M
    codec = m["codec"]
    payload = getattr(data, "payload", None)
    if engine._codec is not codec or type(data) is not m["StoredDocument"] or type(payload) is not dict:
        return engine._encode_storage_document(document)
    before = data.decoded_wrapped  # the caller borrowed the document: its decoded form is kept
    encoded = {}
    decoded: dict[str, Any] | None = {} if type(before) is dict else None
    for name, value in document.items():
        if name not in changed:
            encoded[name] = payload[name]
            if decoded is not None:
                decoded[name] = before[name]
        elif _plain_value(value):
            encoded[name] = value
            if decoded is not None:
                decoded[name] = value
        else:
            tree = plain_tree(value, internal=False)
            encoded[name] = codec.encode(value) if tree is _MISSING else tree
            if decoded is not None:
                decoded[name] = engine._decode_codec_payload({name: encoded[name]}, preserve_bson_wrappers=True)[name]
    stored = m["StoredDocument"](encoded)
    stored.decoded_wrapped = decoded
    return stored


#: The operation context of the last command's statements: the same collection, session and
#: variables (one `update` command) share one, as the change outbox needs only its session and policy.
_CONTEXT: list[Any] = []


def _context(collection: Any, session: Any, variables: Any) -> Any:
    if _CONTEXT and _CONTEXT[0] is collection and _CONTEXT[1] is session and _CONTEXT[2] is variables:
        return _CONTEXT[3]
    policy = _M["policy"]
    context = collection._new_operation_context(
        session=session,
        expressions=variables,
        publication=policy.EMIT if collection._should_publish_change_events(session=session) else policy.RECORD_GAP,
        change_operation_type="update",
    )
    _CONTEXT[:] = [collection, session, variables, context]
    return context


class _Owned(dict[str, Any]):
    """A change record the fast path builds and nobody changes afterwards: the engine's outbox
    deep-copies each record four times (recording, publishing, two CommittedChange copies); a copy
    of this one is itself."""

    def __deepcopy__(self, memo: Any) -> _Owned:
        return self


def _lean(index: Any) -> bool:
    """An index whose entries for a document are its key fields' values only (no TTL schedule, no
    sparse or partial membership, no text weights): maintained here with the engine's own steps."""
    return not (index.sparse or index.partial_filter_expression or index.weights or index.expire_after_seconds is not None)


def _index_touched(index: Any, changed: set[str]) -> bool:
    """Whether an index's entries for a document can change when these top-level fields change."""
    if not _lean(index):
        return True
    for field in index.fields:
        if field.split(".", 1)[0] in changed:
            return True
    return False


def _store_replacements(coll: Any, writes: list[tuple[Any, Any]]) -> None:
    """(cg) ``coll[key] = value`` for each (key, value) of ``writes``, in order, every key one ``coll``
    holds: what mongoeco's MemoryCollection.__setitem__ does for a key it holds (the value into its map
    of values, the pair into its place in its chunk of the natural order: a new chunk of 128 places), but
    each chunk the writes touch rebuilt once, not once a write. Fix (ae)'s wrapper of __setitem__ does
    nothing more for a key held already (its natural order, its _id order and its places do not change)."""
    values, chunks, locations = coll._values, coll._chunks, coll._locations
    rebuilt: dict[int, list[Any]] = {}
    for key, value in writes:
        chunk_id, offset = locations[key]
        items = rebuilt.get(chunk_id)
        if items is None:
            items = rebuilt[chunk_id] = list(chunks[chunk_id].items)
        items[offset] = (key, value)
        values = values.insert(key, value)
    chunk_class = _M["OrderChunk"]
    for chunk_id, items in rebuilt.items():
        chunk = chunks[chunk_id]
        chunks = chunks.insert(chunk_id, chunk_class(chunk.previous, chunk.following, tuple(items), chunk.live_count))
    coll._chunks, coll._values = chunks, values


def _journaled(journals: list[Any], index_map: Any, name: str, key: Any, storage_key: Any) -> Any:
    """(at) MemoryEngine._record_index_membership_undo_locked for an entry of a MemoryIndexMap, into the
    journals it would write to (the same record: whether the document was in the key's bucket, whether
    the bucket and the map existed, its membership ordinal); the key's bucket, or None."""
    bucket = index_map.get(key)
    token = (name, key, storage_key)
    entry = None
    for journal in journals:
        changes = journal.index_changes
        if token not in changes:
            if entry is None:
                entry = (bucket is not None and storage_key in bucket, bucket is not None, True, index_map.ordinal_for(key, storage_key))
            changes[token] = entry
    return bucket


class Batch:
    """The fast path's statements of one ``update`` command, written under one lock and one rollback
    and publication scope, their changes dispatched once, at :meth:`close`.

    The engine's lock is held from the first fast statement to :meth:`close`; the command's loop
    does not suspend in between (a fast statement never awaits), so no other request runs against
    the engine meanwhile. A statement the fast path does not take closes the batch first, so the
    original path finds the engine as it expects."""

    def __init__(self) -> None:
        self.collection: Any = None
        self.session: Any = None
        self.count = 0
        self.comment: Any = None
        self.in_transaction = False
        self._stack: contextlib.ExitStack | None = None
        self._lock: Any = None
        self._own: Any = None  # the scope's journal, when it is the collection's only one
        self._frame: Any = None  # the publication scope the batch's changes go to, once the engine found it (:meth:`_record`)
        self._set: Any = None  # (cc) the engine's stored-document write under its wrappers (:func:`_unwrapped_set`)
        self._deferred: list[tuple[Any, Any]] | None = None  # (cg) a statement's stored values not stored yet (:meth:`defer`)
        #: (bs) Set by a caller that judges every statement by :attr:`validator`: a collection with a validator is
        #: then taken too. Unset (any other caller), such a collection is mongoeco's.
        self.validating = False
        self.bypass = False  # the command bypasses validation: the batch takes the collection with no validator
        self.validator: Any = None  # the collection's validator, compiled once for the batch

    async def open(self, collection: Any, session: Any, variables: Any, comment: Any, *, transactions: bool = False) -> None:
        """Take the lock and open the scope for ``collection``; :class:`_Undecided` (nothing held)
        when the fast path does not apply to it (another engine, a transaction unless
        ``transactions``, collection options, profiling). In a transaction the scope and the writes
        are the transaction's views, as on mongoeco's path; (ah) leaves transactions to that path,
        whose write-time conflict (fix (o)) failed a statement in the middle of its writes; (be) the
        batch checks that conflict before any write of a statement (:meth:`apply`), which the original
        path then meets, as before, after the statements before it."""
        m = _M
        engine = collection._engine
        in_transaction = session is not None and session.in_transaction
        if type(engine) is not m["MemoryEngine"] or (in_transaction and not transactions) or variables is None:
            raise _Undecided
        db_name, coll_name = collection._db_name, collection._collection_name
        if engine._profile_is_active(db_name):
            raise _Undecided  # system.profile gets the original path's entries
        collection._ensure_session_active(session)
        self.context = _context(collection, session, variables)
        collection._runtime._prepare_engine_change_delivery(self.context)
        lock = engine._get_lock(db_name, coll_name)
        await lock.__aenter__()
        try:
            with engine._meta_lock:
                self.storage = engine._storage_view(session)
                self.indexes_view = engine._indexes_view(session)
                self.index_data = engine._index_data_view(session)
                search_indexes = engine._search_indexes_view(session)
                collections = engine._collections_view(session)
                option_store = engine._collection_options_view(session)
            options = option_store.get(db_name, {}).get(coll_name)
            if options and not (self.validating and options.keys() <= _VALIDATION_OPTIONS):
                raise _Undecided  # a collation, a capped size...: the original path's rules
            # (bs) mongoeco compiles the validator again for every document it writes; the batch, once
            self.validator = m["compile_validator"](options, dialect=self.context.dialect) if options and not self.bypass else None
            engine._purge_expired_documents_locked(  # the command's clock: once for all its statements
                db_name, coll_name, context=session, indexes_view=self.indexes_view, index_data_view=self.index_data,
                storage_view=self.storage, now=variables.now.replace(tzinfo=datetime.UTC),
            )
            stack = contextlib.ExitStack()
            journal = stack.enter_context(engine._document_state_rollback_locked(
                db_name, coll_name, storage=self.storage, indexes=self.indexes_view, index_data=self.index_data,
                search_indexes=search_indexes, collections=collections, options=option_store,
            ))
        except BaseException:
            await lock.__aexit__(None, None, None)
            raise
        engine._invalidate_search_runtime_cache(db_name, coll_name)
        self.engine, self.db_name, self.coll_name = engine, db_name, coll_name
        self.collection, self.session, self.comment = collection, session, comment
        self.in_transaction = in_transaction
        self.indexes = self.indexes_view.get(db_name, {}).get(coll_name, [])
        self.unique = any(index.unique and index.name != "_id_" for index in self.indexes)
        self.index_maps = self.index_data.get(db_name, {}).get(coll_name, {})
        self._plans: dict[frozenset[str], Any] = {}
        self._set = _unwrapped_set(type(engine))
        self._stack, self._lock, self.count = stack, lock, 0
        # (au) The scope's journal when it is the only one of this collection's (no scope around the
        # batch's: no other one can open while the batch holds the lock): a lean index's undo is then
        # its whole state, recorded once (MemoryEngine._record_index_state_undo_locked, which the
        # rollback restores instead of the entries), not one entry per key written.
        matching = [entry for entry in engine._document_undo_stack
                    if entry.db_name == db_name and entry.coll_name == coll_name and entry.index_data is self.index_data]
        self._own = journal if len(matching) == 1 and matching[0] is journal else None

    @property
    def is_open(self) -> bool:
        return self._stack is not None

    async def answer(self, plan: Statement, collection: Any, session: Any, variables: Any, comment: Any) -> Any:
        """The statement's UpdateResult through this batch (opened for ``collection`` by the first), or
        None, with nothing of it written, when the original path must answer it."""
        try:
            if not self.is_open:
                await self.open(collection, session, variables, comment, transactions=bool(WRITE_CHECKS))
            elif self.collection is not collection or self.session is not session:
                raise _Undecided
            return self.apply(plan)
        except _Undecided:
            return None

    def apply(self, plan: Statement) -> Any:
        """The statement's UpdateResult; :class:`_Undecided` before anything is written when the
        original path must answer it."""
        m = _M
        result = m["UpdateResult"]
        engine, db_name, coll_name = self.engine, self.db_name, self.coll_name
        coll = self.storage.get(db_name, {}).get(coll_name)
        storage_key = engine._storage_key(plan.document_id)
        data = None if coll is None else coll.get(storage_key)
        if data is None or coll is None:
            if coll and not missed_is_answer(plan.document_id, m):
                raise _Undecided  # 1.0 or Int64(1) may be stored under another key: the original path looks
            return result(matched_count=0, modified_count=0)
        document = engine._borrow_storage_document(data)
        if not guard_holds(document, plan.guards):
            return result(matched_count=0, modified_count=0)
        new_document, changed = updated(document, plan.operators)
        validator = self.validator
        if validator is not None and validator.validation_action != "warn" and not validator.validate_document(
            new_document, original_document=document, dialect=self.context.dialect
        ).valid:
            raise _Undecided  # (bs) refused (a no-op too, as mongoeco does): the original path says so, with its errInfo
        if not changed:
            return result(matched_count=1, modified_count=0)
        try:
            encoded = _stored(engine, data, new_document, changed)
            if self.unique:  # the _id does not change: only another unique index can refuse the document
                engine._ensure_unique_indexes(
                    db_name, coll_name, new_document, exclude_storage_key=storage_key, indexes_view=self.indexes_view,
                    storage_view=self.storage, index_data_view=self.index_data, check_id_storage=True, scan_payload_id=False,
                )
            if self.in_transaction:
                for check in WRITE_CHECKS:  # (be) a write conflict, before this statement writes anything
                    check(engine, coll, storage_key)
        except Exception as error:  # an unencodable value, a duplicate key, a write conflict: the original path reports it
            raise _Undecided from error
        try:
            self._write(coll, storage_key, document, new_document, encoded, changed, data=data, noted=self.in_transaction)
        except Exception as error:
            self.close(error)
            raise _BatchFailed("an update batch failed in the engine's write steps and was rolled back") from error
        self.count += 1
        return result(matched_count=1, modified_count=1)

    def _write(
        self, coll: Any, storage_key: Any, document: Any, new_document: Any, encoded: Any, changed: set[str],
        *, data: Any = None, noted: bool = False,
    ) -> None:
        """The steps of MemoryEngine.update_with_operation's write, for the indexes the change touches:
        the old document's index entries out, the stored value in, the new entries in (each entry
        journaled for the rollback), and the change record into the outbox.

        (cc) ``data``: the stored value the write replaces, held by the caller (None: not known);
        ``noted``: in a transaction, the transaction's note of this write was taken already (the
        batch's :data:`WRITE_CHECKS` or :data:`STATEMENT_CHECKS`, under the same lock, nothing written
        in between). Both given, the stored value goes in without the two wrappers whose work that is
        (the replaced document looked up for its pre-image, the transaction's note of a document it
        noted already, or of a write outside any transaction, which notes nothing)."""
        m = _M
        engine, db_name, coll_name = self.engine, self.db_name, self.coll_name
        lean, view = self._index_plan(changed)
        others = view[db_name][coll_name]
        keys = engine._index_keys
        own = self._own
        if own is not None:
            states = own.index_states
            for index_map, name, fields in lean:  # _update_indexes_locked(action="delete") for an index with no TTL and no membership rule
                if id(index_map) not in states:
                    engine._record_index_state_undo_locked(
                        (db_name, coll_name), name, index_map, index_data=self.index_data, remove_on_rollback=False,
                    )
                for key in keys(document, fields):
                    index_map.discard(key, storage_key)
        else:
            # the rollback journals _record_index_membership_undo_locked would write to
            journals = [journal for journal in engine._document_undo_stack
                        if journal.db_name == db_name and journal.coll_name == coll_name and journal.index_data is self.index_data]
            for index_map, name, fields in lean:
                for key in keys(document, fields):
                    if _journaled(journals, index_map, name, key, storage_key) is not None:
                        index_map.discard(key, storage_key)
        if others:
            engine._update_indexes_locked(
                db_name, coll_name, storage_key, document, action="delete", index_data_view=self.index_data, indexes_view=view,
            )
        unwrapped = self._set
        if unwrapped is not None and data is not None and (noted or not self.in_transaction):
            deferred = self._deferred
            if deferred is not None:
                deferred.append((storage_key, encoded))  # a key the collection holds: its place does not change
            else:
                unwrapped(engine, coll, storage_key, encoded)
            before = m["replaced"](data)
        else:
            engine._set_storage_document_locked(coll, storage_key, encoded)
            before = m["take_pre_image"]()
        ordinal = coll.ordinal_for(storage_key) if type(coll) is m["MemoryCollection"] else None
        for index_map, name, fields in lean:  # _update_indexes_locked(action="insert"), likewise
            for key in keys(new_document, fields):
                if own is None:
                    _journaled(journals, index_map, name, key, storage_key)
                index_map.add(key, storage_key, ordinal=ordinal)
        if others:
            engine._update_indexes_locked(
                db_name, coll_name, storage_key, new_document, action="insert", index_data_view=self.index_data, indexes_view=view,
            )
        # The history computes the event's updateDescription from the replaced document (noted by
        # fix (q)'s _set_storage_document_locked) and the new one, both kept by reference: nothing
        # changes either afterwards, so nothing is copied.
        self._record(_Owned(
            operation_type="update", db_name=db_name, coll_name=coll_name,
            document_key=_Owned(_id=new_document["_id"]), full_document=new_document,
            update_description=before,
        ))

    def _record(self, change: _Owned) -> None:
        """MemoryEngine._record_committed_change for a change of this batch: the first through the engine's
        steps, which check the publication scope (there is one, it is the batch's session's storage view)
        and append the change (itself: a deep copy of an :class:`_Owned` is itself) to the scope on top;
        each next one is appended to that same scope while it is still on top. The batch holds the
        collection's lock and does not suspend between its writes, so its session, its scope and what the
        engine's checks answer do not change between them: they were made once per write before."""
        engine = self.engine
        frame = self._frame
        with engine._meta_lock:
            stack = engine._publication_stack
            if frame is not None and stack and stack[-1] is frame:
                frame.changes.append(change)
                return
        engine._record_committed_change(self.context, change)
        if self.context.publication is _M["policy"].EMIT and stack:
            self._frame = stack[-1]  # the scope the engine's steps appended this change to

    def defer(self, coll: Any) -> None:
        """(cg) The next writes of stored values the caller holds (:meth:`_write`'s ``data``) into ``coll`` are
        kept until :meth:`store`: a statement that decided all its writes first, each of a different
        document, reads none of them back before it ends (its index steps read the documents it holds,
        the ordinal of a held key does not change). Only for mongoeco's collection, with the engine's write
        (:func:`_unwrapped_set`) and __setitem__ those that :func:`_store_replacements` repeats; a failure
        before :meth:`store` rolls the whole batch back, as after any write."""
        m = _M
        if self._set is not None and type(coll) is m["MemoryCollection"] and m["MemoryCollection"].__setitem__ is m["setitem"] and (
            type(self.engine)._record_storage_undo_locked is m["record_storage_undo"]
        ):
            self._deferred = []

    def store(self, coll: Any) -> None:
        """(cg) Store the values :meth:`defer` kept, each chunk of the natural order rebuilt once."""
        deferred, self._deferred = self._deferred, None
        if deferred:
            _store_replacements(coll, deferred)

    def _index_plan(self, changed: set[str]) -> tuple[list[tuple[Any, str, Any]], dict[str, dict[str, list[Any]]]]:
        """(at) The indexes a change of ``changed`` touches: the lean ones (their map, name and fields), and
        the others as the indexes view _update_indexes_locked takes; the same for every statement of
        the batch that changes the same fields (the batch holds the lock: its indexes do not change)."""
        names = frozenset(changed)
        plan = self._plans.get(names)
        if plan is None:
            touched = [index for index in self.indexes if _index_touched(index, changed)]
            maps = self.index_maps
            lean = [index for index in touched if _lean(index) and type(maps.get(index.name)) is _M["MemoryIndexMap"]]
            others = [index for index in touched if index not in lean]
            plan = self._plans[names] = (
                [(maps[index.name], str(index.name), index.fields) for index in lean], {self.db_name: {self.coll_name: others}},
            )
        return plan

    def close(self, error: BaseException | None = None) -> None:
        """Close the scope (publishing the batch's changes, or rolling them back on ``error``), release
        the lock, dispatch the changes and count the statements, as each statement would have."""
        stack, lock = self._stack, self._lock
        if stack is None:
            return
        self._stack = self._lock = self._frame = self._set = self._deferred = None
        try:
            if error is None:
                stack.close()
            else:
                stack.__exit__(type(error), error, error.__traceback__)
        finally:
            lock._lock.release()  # mongoeco's _AsyncLock wraps an asyncio.Lock: released without awaiting
        if error is None:
            self.collection._runtime._dispatch_engine_changes(self.context)
        if self.count:
            self.engine._record_runtime_opcounter("update", amount=self.count)
            self.collection._record_operation_metadata(operation="update_one", comment=self.comment, session=self.session)
        self.collection = self.session = None


_PAYLOAD_KEYS = frozenset({"operation_type", "db_name", "coll_name", "document_key", "full_document", "update_description"})


class _HistoryDelivery:
    """(at) The consumer EngineSpiAdapter.dispatch_committed_changes hands the engine for the server's
    change history (its ``lambda change: self._deliver_committed_change(sink, change)``), which also
    delivers a run of changes at once: :meth:`delivered`."""

    __slots__ = ("adapter", "sink")

    def __init__(self, adapter: Any, sink: Any) -> None:
        self.adapter, self.sink = adapter, sink

    def __call__(self, change: Any) -> None:
        self.adapter._deliver_committed_change(self.sink, change)

    def delivered(self, changes: list[Any]) -> Iterator[int]:
        """Deliver ``changes`` in order, as the consumer does each ``change.for_delivery()``, yielding
        each one's sequence once delivered, under one hold of the history's lock (a re-entrant lock,
        which each step takes again). A change record of the fast path (:class:`_Owned`, whose copy is
        itself) goes straight into the history's event steps (ChangeStreamHub.publish's); any other
        change, or a history whose next token is not a number, takes the consumer's own steps."""
        m, sink, deliver = _M, self.sink, self.adapter._deliver_committed_change
        event_types = m["event_types"]
        images: dict[tuple[str, str], bool] = {}  # (ce) each namespace's pre-image option, read once a run
        with sink._condition:
            for change in changes:
                payload = change.payload
                if type(payload) is not _Owned or type(sink._next_token) is not int or payload.keys() != _PAYLOAD_KEYS:
                    deliver(sink, change.for_delivery())
                elif change.sequence >= sink._next_token:  # an older one was delivered already
                    if change.sequence > sink._next_token:
                        sink.align_commit_sequence(change.sequence)
                    kind = payload["operation_type"]
                    if kind in event_types:
                        sink._raise_if_degraded_locked()
                        # (ce) the event's fields straight into the history: not a ChangeEventSnapshot
                        # built for the history's append to read them back from
                        namespace = (db, coll) = payload["db_name"], payload["coll_name"]
                        kept = images.get(namespace)
                        if kept is None:
                            kept = images[namespace] = bool(sink.images_enabled(db, coll))
                        sink.record_locked(
                            sink._next_token, kind, db, coll, payload["document_key"], payload["full_document"],
                            payload["update_description"], kept and kind != "insert",
                        )
                yield change.sequence


#: The batch of the ``update`` command running in this task (each connection's requests run in their own).
_BATCH: contextvars.ContextVar[Batch | None] = contextvars.ContextVar("mongoshift_update_batch", default=None)


# (ai) Every write derives the index keys of the document it removes and of the one it stores
# (MemoryEngine._index_keys), through QueryEngine.extract_values, which resolves each field as a
# dotted path over documents and arrays, and MemoryEngine._index_equality_key
# (core/bson_ordering.bson_equality_key), which runs a chain of type checks and turns a number into
# a normalized Decimal under a local decimal context. For a plain dict and top-level fields whose
# values are neither null nor arrays, extract_values gives [value] or [] (missing): the keys are
# built from those directly. The equality key of a string or one of mongoeco's ObjectIds is the pair
# bson_engine_key gives it. (at) That of an int64 is built as bson_equality_key builds it, without its
# chain of checks and its local context: ("number", the int as a normalized Decimal), at the 34
# digits that context has for any int64 (no rounding: the same digits and exponent). The keys of the
# 4,096 most recent ints were kept instead, but a collection of more int _ids than that (the demo's
# 20,000 orders, whose version index holds each _id) missed the cache on nearly every write: 4 µs a key.
# (ay) The keys of a compound index are the keys of a unique index on its fields
# (MemoryEngine._unique_index_keys: one per element of an array, null's key for a missing field),
# not one key built from each field's first value: the index data then holds every key a document
# has, and a compound unique index is checked by looking the keys up there (patches/indexes.py).
# Nothing else reads a compound index's data (mongoeco's planner uses single-field indexes only).
_INT_CONTEXT = decimal.Context(prec=34)
_ZERO = decimal.Decimal(0)
# (aw) The keys of the small ints, built once: a version field holds them (0.6 µs a key to build, twice a
# guarded update of a version index). Equality keys are immutable tuples, so one is shared by every entry.
_SMALL_INT_KEYS: dict[int, tuple[str, decimal.Decimal]] = {
    value: ("number", _ZERO if value == 0 else decimal.Decimal(value).normalize(_INT_CONTEXT)) for value in range(-16, 1025)
}


def patch_index_keys() -> None:
    m = _bind()
    engine_class, object_id = m["MemoryEngine"], m["ObjectId"]
    original_keys = engine_class._index_keys
    original = engine_class._index_equality_key
    low, high = _INT64
    make, context = decimal.Decimal, _INT_CONTEXT

    def index_equality_key(value: Any) -> Any:
        kind = type(value)
        if kind is object_id:
            return ("objectid", value)  # normalize_object_id gives a mongoeco ObjectId back as it is
        if kind is str:
            return ("str", value)
        if kind is not int or not low <= value < high:
            return original(value)
        small = _SMALL_INT_KEYS.get(value)
        if small is not None:
            return small
        return ("number", _ZERO if value == 0 else make(value).normalize(context))

    none_key = original(None)

    def index_keys(self: Any, document: Any, fields: list[str]) -> Any:
        compound = len(fields) != 1
        if not isinstance(document, dict):  # a stored document is the engine's own dict subclass: it takes the fast path too
            return self._unique_index_keys(document, fields) if compound else original_keys(self, document, fields)
        values = []
        for field in fields:
            value = document.get(field, _MISSING) if "." not in field else None
            if value is None or isinstance(value, (list, dict)):  # a path, null, an array, a document: the original's rules
                return self._unique_index_keys(document, fields) if compound else original_keys(self, document, fields)
            values.append(value)
        if compound:  # (ay) a missing field is null's key, as in a unique index's keys (a list comprehension: no generator)
            return {tuple([none_key if value is _MISSING else index_equality_key(value) for value in values])}
        return {(None,)} if values[0] is _MISSING else {(index_equality_key(values[0]),)}

    index_keys.__wrapped__ = original_keys  # type: ignore[attr-defined]
    index_equality_key.__wrapped__ = original  # type: ignore[attr-defined]
    engine_class._index_keys = index_keys
    engine_class._index_equality_key = staticmethod(index_equality_key)
    _patch_single_member_buckets()


# (ai, continued) An index entry of a compound index that ends with _id (a version index) is a
# bucket of one document. MemoryIndexMap keeps each bucket in three persistent maps: its members
# (_buckets), their membership ordinals (_bucket_ordinals, a map per bucket) and their membership
# order (_bucket_order_roots, a treap per bucket), so moving a document's entry (a guarded update of
# its version) took six insertions and removals, and built an ordinal map and a treap node.
# (aw) A bucket of one document became "lone": its member in _buckets, its ordinal as a plain int in
# _bucket_ordinals, nothing in _bucket_order_roots: two steps to add, two to remove.
# (br) A lone bucket is now one entry of one map: _buckets holds the pair (member, ordinal) under its
# key, and neither other map holds the key: one step to add, one to remove. Each step of a persistent
# map copies the path from the root to the key, a level deeper as the collection grows (32-way: 3
# levels at 20,000 documents, 4 at 100,000), so a guarded update of a version index makes two path
# copies instead of four. Every method that reads the maps answers for a lone bucket as for
# mongoeco's form (a reader of a bucket gets a HashTrieSet of its member; ordinal_for,
# ordered_storage_keys, __delitem__, pop), and a lone bucket that gains a member is first widened to
# mongoeco's form. Copies, deep copies, snapshots and their restores carry the three maps as they
# are. A member is compared with ``==`` as rpds compares keys (no identity shortcut at the top).
def _patch_single_member_buckets() -> None:
    from mongoeco.engines import _memory_collection
    from rpds import HashTrieMap, HashTrieSet

    index_map = _memory_collection.MemoryIndexMap
    node, priority = _memory_collection._MembershipNode, _memory_collection._expiry_priority
    add, discard, ordinal_for, ordered = index_map.add, index_map.discard, index_map.ordinal_for, index_map.ordered_storage_keys
    delitem, pop, getitem, get = index_map.__delitem__, index_map.pop, index_map.__getitem__, index_map.get
    lone = tuple  # a lone bucket's entry in _buckets; mongoeco's buckets are HashTrieSets

    def add_one(self: Any, key: Any, storage_key: Any, *, ordinal: int | None = None) -> None:
        buckets = self._buckets
        bucket = buckets.get(key)
        if bucket is None:  # a new bucket: lone
            effective = self._next_membership_ordinal if ordinal is None else ordinal
            if effective + 1 > self._next_membership_ordinal:
                self._next_membership_ordinal = effective + 1
            self._buckets = buckets.insert(key, (storage_key, effective))
            return None
        if type(bucket) is lone:
            member, first = bucket
            if member == storage_key:
                return None
            # a second member: the bucket takes mongoeco's form first
            self._buckets = buckets.insert(key, HashTrieSet((member,)))
            self._bucket_ordinals = self._bucket_ordinals.insert(key, HashTrieMap({member: first}))
            self._bucket_order_roots = self._bucket_order_roots.insert(key, node(first, member, priority(first)))
        return add(self, key, storage_key, ordinal=ordinal)

    def discard_one(self: Any, key: Any, storage_key: Any) -> None:
        bucket = self._buckets.get(key)
        if type(bucket) is not lone:
            return discard(self, key, storage_key)
        if bucket[0] == storage_key:
            self._buckets = self._buckets.remove(key)
        return None

    def lone_ordinal_for(self: Any, key: Any, storage_key: Any) -> int | None:
        bucket = self._buckets.get(key)
        if type(bucket) is not lone:
            return ordinal_for(self, key, storage_key)
        return bucket[1] if bucket[0] == storage_key else None

    def lone_ordered(self: Any, key: Any, *, limit: int | None = None) -> tuple[Any, ...]:
        bucket = self._buckets.get(key)
        if type(bucket) is not lone:
            return ordered(self, key, limit=limit)
        return () if limit is not None and limit <= 0 else (bucket[0],)

    def lone_getitem(self: Any, key: Any) -> Any:
        bucket = self._buckets[key]
        return HashTrieSet((bucket[0],)) if type(bucket) is lone else bucket

    def lone_get(self: Any, key: Any, default: Any = None) -> Any:
        bucket = self._buckets.get(key, _MISSING)
        if bucket is _MISSING:
            return default
        return HashTrieSet((bucket[0],)) if type(bucket) is lone else bucket

    def lone_delitem(self: Any, key: Any) -> None:
        if type(self._buckets.get(key)) is not lone:
            return delitem(self, key)
        self._buckets = self._buckets.remove(key)
        return None

    def lone_pop(self: Any, key: Any, *default: Any) -> Any:
        bucket = self._buckets.get(key)
        if type(bucket) is not lone or len(default) > 1:
            return pop(self, key, *default)
        self._buckets = self._buckets.remove(key)
        return HashTrieSet((bucket[0],))

    replacements: list[tuple[str, Any, Any]] = [
        ("add", add_one, add), ("discard", discard_one, discard), ("ordinal_for", lone_ordinal_for, ordinal_for),
        ("ordered_storage_keys", lone_ordered, ordered), ("__getitem__", lone_getitem, getitem), ("get", lone_get, get),
        ("__delitem__", lone_delitem, delitem), ("pop", lone_pop, pop),
    ]
    for name, patched, original in replacements:
        patched.__wrapped__ = original
        setattr(index_map, name, patched)


# (ah) Guarded bulk updates: DatabaseAdminWriteCommandService.command_update (the `update`
# command) runs each statement through _collection_modify.execute_server_update, the public update
# path. The command now carries a Batch; a statement that statement() takes is written by it, any
# other goes to the original path (after the batch is closed), and the batch is closed when the
# command ends, however it ends. The command around the statements (parsing, ordered and unordered
# errors, write concern, the reply) is mongoeco's. The change dispatch of a batch delivers its
# changes in one go: MemoryEngine.dispatch_committed_changes moved the consumer's checkpoint and
# pruned the outbox after each change (a new list each time: quadratic in the batch), now once after
# the last one delivered.
def patch_guarded_updates() -> None:
    from mongoeco.api._async import _collection_modify, _database_admin_write_commands
    from mongoeco.api._async._database_admin_write_commands import DatabaseAdminWriteCommandService

    m = _bind()
    # (cg) MemoryCollection.__setitem__ and the engine's storage undo as they are with every fix installed before
    # this one (fix (ae)'s wrapper of the first): Batch.defer takes a collection only while they still are
    m["setitem"] = m["MemoryCollection"].__setitem__
    m["record_storage_undo"] = m["MemoryEngine"]._record_storage_undo_locked
    commands: Any = _database_admin_write_commands  # its helpers are unannotated
    original: Any = _collection_modify.execute_server_update  # untyped in mongoeco
    original_command = DatabaseAdminWriteCommandService.command_update

    async def execute_server_update(collection: Any, query: Any, change: Any, *, multi: bool = False, replacement: bool = False, **options: Any) -> Any:
        batch = _BATCH.get()
        plan = statement(query, change, multi, replacement, options) if batch is not None else None
        if batch is not None and plan is not None:
            answered = await batch.answer(plan, collection, options.get("session"), options.get("let"), options.get("comment"))
            if answered is not None:
                return answered
        if batch is not None:
            batch.close()
        return await original(collection, query, change, multi=multi, replacement=replacement, **options)

    async def command_update(self: Any, spec: Any, *, session: Any = None, execution_context: Any = None) -> Any:
        batch = Batch()
        token = _BATCH.set(batch)
        try:
            if _plain_entries(spec):
                return await plain_command_update(self, spec, batch, session, execution_context)
            return await original_command(self, spec, session=session, execution_context=execution_context)
        finally:
            _BATCH.reset(token)
            batch.close()

    async def plain_command_update(self: Any, spec: Any, batch: Batch, session: Any, execution_context: Any) -> Any:
        """(av) DatabaseAdminWriteCommandService.command_update for a command whose every entry is
        ``{q, u}`` (``multi`` and ``upsert`` false or absent) and whose ``u`` is an operator document:
        the same command checks and per-entry results and errors, without the parse of the options
        such an entry does not have; an entry the batch takes goes to it at once, any other to the
        patched execute_server_update with the arguments mongoeco's loop would give it."""
        admin = self._admin
        commands.validate_write_fields(spec, "update")
        collection_name = admin._require_collection_name(spec.get("update"), "update")
        updates = admin._normalize_update_specs(spec.get("updates"))
        commands._validate_update_command_shapes(updates, admin._mongodb_dialect.key)
        ordered = admin._normalize_ordered_from_command(spec.get("ordered"))
        bypass = commands.command_boolean(spec.get("bypassDocumentValidation", False), "bypassDocumentValidation", numeric=True)
        batch.validating, batch.bypass = True, bool(bypass)  # (bs) every statement judged by the collection's validator
        collection = admin._database.get_collection(collection_name)
        command_let = spec.get("let")
        commands.validate_command_let(command_let)
        acknowledged = commands.write_command_acknowledged(spec, dialect=admin._mongodb_dialect.key)
        variables = (execution_context or admin._database._new_execution_context()).with_bindings(command_let or {})
        comment = spec.get("comment")
        matched = modified = 0
        write_errors: list[Any] = []
        failure = None
        for index, entry in enumerate(updates):
            query, change = entry["q"], entry["u"]
            try:
                plan = statement(query, change, False, False, {})
                result = None if plan is None else await batch.answer(plan, collection, session, variables, comment)
                if result is None:
                    batch.close()
                    result = await original(
                        collection, query, change, multi=False, replacement=False, upsert=False, sort=None, collation=None, hint=None,
                        comment=comment, let=variables, bypass_document_validation=bypass, session=session, array_filters=None,
                    )
                matched += result.matched_count
                modified += result.modified_count
            except (commands.WriteError, commands.OperationFailure, TypeError, ValueError) as exc:
                failure = commands.record_write_failure(write_errors, exc, index=index, first_failure=failure)
                if ordered:
                    break
        if failure is not None:
            raise failure
        return commands._write_command_result(
            commands.WriteCommandResult(count=matched, modified_count=modified, upserted=None, write_errors=write_errors or None),
            acknowledged=acknowledged,
        )

    def dispatch_committed_changes(self: Any, consumer_id: str, consumer: Any) -> None:
        with self._change_dispatch.hold(consumer_id):
            with self._meta_lock:
                if consumer_id not in self._change_checkpoints:
                    raise RuntimeError("change consumer must be registered before writes")
                checkpoint = self._change_checkpoints[consumer_id]
                if checkpoint < self._change_pruned_through:
                    from mongoeco.errors import OperationFailure

                    raise OperationFailure("change consumer checkpoint is behind retained history")
                changes = [change for change in self._committed_changes if change.sequence > checkpoint]
            delivered = checkpoint
            try:
                if type(consumer) is _HistoryDelivery:
                    for sequence in consumer.delivered(changes):
                        delivered = sequence
                else:
                    for change in changes:
                        consumer(change.for_delivery())
                        delivered = change.sequence
            finally:
                if delivered != checkpoint:
                    with self._meta_lock:
                        self._change_checkpoints[consumer_id] = max(self._change_checkpoints[consumer_id], delivered)
                        self._prune_committed_changes_locked()

    from mongoeco._change_streams.hub import ChangeStreamHub
    from mongoeco.engines.adapter import EngineSpiAdapter

    deliver = EngineSpiAdapter._deliver_committed_change

    def deliver_committed_change(sink: Any, change: Any) -> None:
        # The original reads the sink's next token from its `state`, a document of some twenty
        # fields built for each change; a hub's token is that field's source, read under the same lock.
        if not isinstance(sink, ChangeStreamHub):
            return deliver(sink, change)
        with sink._condition:
            next_token = sink._next_token
        if isinstance(next_token, int) and change.sequence < next_token:
            return None
        sink.align_commit_sequence(change.sequence)
        if change.is_gap:
            sink.mark_gap()
        elif change.payload is not None:
            sink.publish(**change.payload)
        return None

    from mongoeco.engines.results import CommittedChange

    memory_engine = m["MemoryEngine"]
    original_prepare = memory_engine.__dict__["_prepare_committed_changes_locked"]
    new, assign = object.__new__, object.__setattr__

    def prepare_committed_changes(self: Any, payloads: Any) -> Any:
        """(cd) MemoryEngine._prepare_committed_changes_locked, each change record of the fast paths
        (:class:`_Owned`) made a CommittedChange as it is: the original deep-copies each payload, then
        CommittedChange's own check deep-copies it again (each copy of an _Owned is itself) and checks
        a sequence number that is a positive int by construction here."""
        if not payloads:
            return original_prepare(self, payloads)
        start = self._commit_sequence
        sequence = start + len(payloads)
        built = []
        for ordinal, payload in enumerate(payloads, start=start + 1):
            if type(payload) is _Owned:
                change = new(CommittedChange)
                assign(change, "sequence", ordinal)
                assign(change, "payload", payload)
            else:
                change = CommittedChange(sequence=ordinal, payload=deepcopy(payload))
            built.append(change)
        changes = self._committed_changes + built
        floor = max(
            self._change_pruned_through, min(self._change_checkpoints.values(), default=sequence), 0,
            sequence - self._change_log_max_entries,
        )
        return sequence, [change for change in changes if change.sequence > floor], floor

    prepare_committed_changes.__wrapped__ = original_prepare  # type: ignore[attr-defined]
    memory_engine._prepare_committed_changes_locked = prepare_committed_changes
    adapter_dispatch = EngineSpiAdapter.dispatch_committed_changes
    history_class, engine_class = m["ChangeHistory"], m["MemoryEngine"]

    def dispatch_to_sink(self: Any, sink: object | None) -> None:
        if type(sink) is not history_class or type(self.engine) is not engine_class or self.capabilities.change_delivery not in {
            "commit-sequence", "transactional-outbox",
        }:
            return adapter_dispatch(self, sink)
        self.engine.dispatch_committed_changes(self._change_consumer_id(sink), _HistoryDelivery(self, sink))
        return None

    dispatch_to_sink.__wrapped__ = adapter_dispatch  # type: ignore[attr-defined]
    EngineSpiAdapter.dispatch_committed_changes = dispatch_to_sink
    deliver_committed_change.__wrapped__ = deliver  # type: ignore[attr-defined]
    EngineSpiAdapter._deliver_committed_change = staticmethod(deliver_committed_change)
    execute_server_update.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    command_update.__wrapped__ = original_command  # type: ignore[attr-defined]
    dispatch_committed_changes.__wrapped__ = engine_class.dispatch_committed_changes  # type: ignore[attr-defined]
    _collection_modify.execute_server_update = execute_server_update
    DatabaseAdminWriteCommandService.command_update = command_update
    engine_class.dispatch_committed_changes = dispatch_committed_changes


class _Overflowed(OverflowError):
    """(cn) An ``$inc`` or ``$mul`` of integers whose result leaves the int64 range: the value it was applied to."""

    def __init__(self, current: Any) -> None:
        super().__init__("integer exceeds BSON int64 range")
        self.current = current


def _numeric_text(value: Any) -> str:
    """A number as mongod's ``SafeNum::debugString`` writes it: ``(NumberLong)9223372036854775807``. An int
    is a NumberInt within the int32 range, as the codec stores it; an Int64 (wrapped or not) a NumberLong."""
    wide = type(value) is _bind()["BsonInt64"] or (isinstance(value, int) and type(value) is not int)
    value = getattr(value, "value", value)
    if type(value) is bool or not isinstance(value, int):
        return f"(NumberDouble){value}" if isinstance(value, float) else f"({type(value).__name__}){value}"
    return f"({'NumberLong' if wide or not -(2**31) <= value < 2**31 else 'NumberInt'}){int(value)}"


def _id_text(document: Any) -> str:
    """The ``_id`` element as mongod's ``BSONElement::toString`` writes it into an update's error, or ``no id``."""
    from mongoeco.core import duplicate_keys

    diagnostic: Any = duplicate_keys._diagnostic_value  # unannotated: the rendering of mongod's duplicate-key messages
    if not isinstance(document, dict) or "_id" not in document:
        return "no id"
    value = document["_id"]
    if type(value) in _bind()["wrapped"]:
        value = value.value
    return f"_id: {diagnostic(value)}"


# (cn) An $inc or $mul whose integer result leaves the int64 range. mongoeco's update operators
# (update_scalar_operators.apply_inc / apply_mul) add and multiply with bson_scalars' bson_add and
# bson_multiply, which raise BsonScalarOverflowError, an OverflowError: no command loop catches one, so
# the whole command answered `ok: 0` with no code ("integer exceeds BSON int64 range"), after the
# statements before it had been written, and an unordered command never ran the ones after it. mongod
# (ArithmeticNode::updateExistingElement) refuses that statement alone: BadValue (2), "Failed to apply
# $inc operations to current value ((NumberLong)9223372036854775807) for document {_id: 2}", a write
# error at its index. The overflow is now that OperationFailure, raised while the update is computed on
# its working copy, before anything of the statement is written: every path that applies operators
# (the update command's loops, findAndModify, an upsert's, a transaction's) reports it as mongod does.
# The fast paths ((ah), (ao)) already leave an overflowing statement to mongoeco's path (`incremented`).
def patch_arithmetic_overflow() -> None:
    from mongoeco.core import update_scalar_operators as scalar

    from ._support import BAD_VALUE, failure, replace_everywhere

    add, multiply = scalar.bson_add, scalar.bson_multiply
    apply_inc, apply_mul = scalar.apply_inc, scalar.apply_mul

    def checked_add(left: Any, right: Any) -> Any:
        try:
            return add(left, right)
        except OverflowError as error:
            raise _Overflowed(left) from error

    def checked_multiply(left: Any, right: Any) -> Any:
        try:
            return multiply(left, right)
        except OverflowError as error:
            raise _Overflowed(left) from error

    def refusing(apply: Any, operator: str) -> Any:
        def applied(doc: dict[str, Any], instructions: Any, *, context: Any, helpers: Any) -> Any:
            try:
                return apply(doc, instructions, context=context, helpers=helpers)
            except _Overflowed as error:
                raise failure(
                    f"Failed to apply {operator} operations to current value ({_numeric_text(error.current)}) for document {{{_id_text(doc)}}}",
                    BAD_VALUE, "BadValue",
                ) from None

        applied.__wrapped__ = apply  # type: ignore[attr-defined]
        return applied

    checked_add.__wrapped__ = add  # type: ignore[attr-defined]
    checked_multiply.__wrapped__ = multiply  # type: ignore[attr-defined]
    scalar.bson_add, scalar.bson_multiply = checked_add, checked_multiply  # the names apply_inc and apply_mul call
    replace_everywhere(scalar, "apply_inc", refusing(apply_inc, "$inc"))
    replace_everywhere(scalar, "apply_mul", refusing(apply_mul, "$mul"))
