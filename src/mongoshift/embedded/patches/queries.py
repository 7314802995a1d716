"""Query and update fixes: collStats sizes of every BSON type (i), `$in` over ObjectIds as a set
lookup (k) and once per update (n), `$set` of a Decimal128 with other digits (m), English's
regional collations (z), evaluated `let` variables (ab) and the answers of `$type` and `$in` kept per
kind or value of a top-level field (ar)."""

from __future__ import annotations

import math
import re
from typing import Any


# (i) collStats/dbStats fail on Decimal128 (and other values mongoeco's $bsonSize
# does not know): core/aggregation/runtime._bson_value_size raises "cannot encode
# value of type ...". Sizes of the types it knows are kept; others are measured
# by encoding them with the bson package, as the wire layer would send them.
def patch_bson_size() -> None:
    import bson
    from mongoeco.core.aggregation import runtime
    from mongoeco.errors import OperationFailure
    from mongoeco.types import Decimal128
    from mongoeco.wire.bson_bridge import encode_wire_value

    original = runtime._bson_value_size

    def bson_value_size(value: Any) -> int:
        if isinstance(value, Decimal128):
            return 16
        try:
            return original(value)
        except OperationFailure as error:
            if "cannot encode value of type" not in str(error):
                raise
            try:
                # document = int32 length + type byte + "" key NUL + value + NUL.
                return len(bson.encode({"": encode_wire_value(value)})) - 7
            except Exception:
                raise error from None

    runtime._bson_value_size = bson_value_size


# (k) `{field: {$in: [...]}}` and `$nin` cost O(documents x values): the compiled matcher of
# core/compiled_query.CompiledQuery compares every candidate with every listed value through
# QueryEngine._in_item_matches_candidate, so re-reading the 500 documents of a batch by `_id` on
# 3,000 documents took ~10 s, and the check of a dead lane's batch of 5,000 mixed-type `_id`s on
# 40,000 documents ran for over 12 minutes. Without a collation, each listed value that has an
# equality key (below) goes into a set, built once per query; a candidate with a key is looked up
# there, then compared only with the values that have none (null, regexes, NaN, wrapped and rare
# types), through the original comparison. A candidate without a key is compared with every value,
# as before. The key of a value is what BSON equality of a query compares: a number's value, whatever
# its type (1, 1.0, Int64(1) and Decimal128("1") are one key; Python's own equality and hash of int,
# float and Decimal are exact and agree with each other), a string, a datetime without a zone, a
# UUID, an ObjectId's bytes, a binary's subtype and bytes, a timestamp; a bool apart from 1 and 0; a
# document's fields in order and an array's items, when each of their values has a key. NaN has no
# key. `test_in_keys_agree_with_the_original_comparison` checks key equality against the original
# comparison over generated values of every kind but binaries and inexact doubles beside decimals,
# where mongoeco's total order is not mongod's: a stored binary of a subtype other than 0 (held as the
# engine's own binary type) never equalled the same binary listed in a query, a subtype-0 binary
# equalled one of any subtype with the same bytes, and the double 0.1 equalled the decimal 0.1. The
# keys follow mongod (`test_in_matches_binaries_as_mongod`, `..._doubles_and_decimals_as_mongod`), and
# so does a query's other equality since (az); documents and arrays compared whole inside the original
# comparison keep mongoeco's (docs/embedded.md lists the difference).
def in_key_function() -> Any:
    """The equality key of a value as a query's `$in` compares it, or None when it has none."""
    import datetime
    import uuid

    from bson import ObjectId as BsonObjectId
    from bson.int64 import Int64
    from mongoeco.core.bson_scalars import BsonInt32, BsonInt64
    from mongoeco.core.codec import _InternalBsonArray, _InternalBsonBinary, _InternalBsonDocument
    from mongoeco.types import Binary, Decimal128, ObjectId, Timestamp

    object_id_bytes = vars(BsonObjectId)["binary"].fget

    def same(value: Any) -> Any:
        return value

    def number(value: Any) -> Any:
        return value if value == value else None  # NaN

    def wrapped(value: Any) -> Any:
        return int(value.value)

    def decimal(value: Any) -> Any:
        digits = value.value
        return None if digits.is_nan() else digits

    def date(value: Any) -> Any:
        return value if value.tzinfo is None else None

    def document(value: dict[str, Any]) -> Any:
        parts = []
        for name, item in value.items():
            item_key = key_of(item)
            if item_key is None:
                return None
            parts.append((name, item_key))
        return (dict, tuple(parts))

    def array(value: list[Any]) -> Any:
        items = tuple(map(key_of, value))
        return None if None in items else (list, items)

    def binary(value: Any) -> Any:
        return (Binary, value.subtype, bytes(value))

    keyers: dict[type, Any] = {
        str: same,
        int: same,
        Int64: int,
        BsonInt64: wrapped,
        BsonInt32: wrapped,
        float: number,
        Decimal128: decimal,
        bool: lambda value: (bool, value),
        datetime.datetime: date,
        uuid.UUID: same,
        ObjectId: lambda value: (ObjectId, object_id_bytes(value)),
        BsonObjectId: lambda value: (ObjectId, object_id_bytes(value)),
        bytes: lambda value: (Binary, 0, value),  # pymongo decodes a binary of subtype 0 as bytes
        Binary: binary,
        _InternalBsonBinary: binary,
        Timestamp: lambda value: (Timestamp, value.time, value.inc),
        dict: document,
        _InternalBsonDocument: document,  # how the engine holds a stored document's subdocuments
        list: array,
        _InternalBsonArray: array,
    }
    find = keyers.get

    def key_of(value: Any) -> Any:
        keyer = find(type(value))
        return None if keyer is None else keyer(value)

    return key_of


def patch_in_lookup() -> None:
    from mongoeco.core.compiled_query import CompiledQuery
    from mongoeco.core.filtering import QueryEngine
    from mongoeco.core.query_plan import InCondition, NotInCondition

    original = CompiledQuery._node_to_code
    key_of = in_key_function()

    def membership(values: tuple[Any, ...], null_matches_undefined: bool) -> Any:
        keys = set()
        unkeyed = []
        for value in values:
            value_key = key_of(value)
            if value_key is None:
                unkeyed.append(value)
            else:
                keys.add(value_key)

        def member(candidate: Any, dialect: Any) -> bool:
            candidate_key = key_of(candidate)
            if candidate_key is not None and candidate_key in keys:
                return True
            # null matches no value with a key; any other candidate without one is compared with every value
            others = unkeyed if candidate_key is not None or candidate is None else values
            compare = QueryEngine._in_item_matches_candidate  # looked up at each call, so that a count of comparisons sees these too
            return any(
                compare(candidate, item, null_matches_undefined=null_matches_undefined, dialect=dialect, collation=None)
                for item in others
            )

        return member if keys else None

    def node_to_code(self: Any, node: Any, depth: int) -> str:
        kind = type(node)
        if (kind is InCondition or kind is NotInCondition) and self.collation is None:
            member = membership(node.values, node.null_matches_undefined)
            if member is not None:
                field_key = self._field(node.field)
                test = self._store("member", member)
                if kind is InCondition:
                    return f"any({test}(candidate, dialect) for candidate in (_extract(doc, {field_key}) or [None]))"
                found = self._local("nin_values")
                values_key = self._store("values", node.values)
                return (
                    f"(not any({test}(candidate, dialect) for candidate in {found})"
                    f" if ({found} := _extract(doc, {field_key}))"
                    f" else not (any(item is None for item in {values_key}) and {node.null_matches_undefined}))"
                )
        return original(self, node, depth)

    node_to_code.__wrapped__ = original  # type: ignore[attr-defined]
    CompiledQuery._node_to_code = node_to_code

    # The interpreted matcher (an update's or a delete's check of each matched document against its
    # filter, `$all`) keys the values of an `$in` with QueryEngine._hashable_in_lookup_key, which keys
    # only null, booleans, bytes, dates, UUIDs, ObjectIds and timestamps: the others (numbers, strings,
    # documents...) were compared pair by pair, so an update_many or delete_many of 1,000 `_id`s of
    # mixed types on 8,000 documents took 3.3 s. Without a collation it takes the same keys as above.
    original_key = QueryEngine._hashable_in_lookup_key

    def hashable_in_lookup_key(value: Any, *, collation: Any = None) -> Any:
        if collation is not None:
            return original_key(value, collation=collation)
        return key_of(value)

    hashable_in_lookup_key.__wrapped__ = original_key  # type: ignore[attr-defined]
    QueryEngine._hashable_in_lookup_key = staticmethod(hashable_in_lookup_key)


# (az) A query's equality compares a double and a decimal, and two binaries, as mongoeco's total order
# does, not as mongod: `{n: 0.1}` matched a stored Decimal128("0.1") (the double 0.1 is
# 0.1000000000000000055..., which mongod compares exactly), a binary of subtype 0 matched one of any
# subtype with the same bytes, and a stored binary of another subtype (held as the engine's own binary
# type) never equalled the same binary in a query. FilteringMatchingMixin._query_equality_matches, which
# every top-level equality of a query takes (`$eq`, `$ne`, a plain value, an array's elements, what `$in`
# compares without a key), now answers those two cases as mongod: a double equals a decimal when their
# values are exactly equal (NaN keeps the original rule), and binaries when their subtype and bytes are.
# Values inside documents and arrays compared whole keep mongoeco's comparison.
def patch_exact_equality() -> None:
    from decimal import Decimal

    from mongoeco.core._filtering_matching import FilteringMatchingMixin
    from mongoeco.core.codec import _InternalBsonBinary
    from mongoeco.types import Binary, Decimal128

    original = vars(FilteringMatchingMixin)["_query_equality_matches"].__func__
    binaries = frozenset({bytes, Binary, _InternalBsonBinary})

    def query_equality_matches(cls: Any, candidate: Any, expected: Any, /, **options: Any) -> bool:
        kinds = (type(candidate), type(expected))
        if kinds == (float, Decimal128) or kinds == (Decimal128, float):
            double, decimal = (candidate, expected) if kinds[0] is float else (expected, candidate)
            if double == double and not decimal.value.is_nan():
                return bool(Decimal(double) == decimal.value)  # Decimal(a float) is its exact value
        elif kinds[0] in binaries and kinds[1] in binaries:
            return getattr(candidate, "subtype", 0) == getattr(expected, "subtype", 0) and bytes(candidate) == bytes(expected)
        return bool(original(cls, candidate, expected, **options))

    query_equality_matches.__wrapped__ = original  # type: ignore[attr-defined]
    FilteringMatchingMixin._query_equality_matches = classmethod(query_equality_matches)  # type: ignore[assignment]


# (m) `$set` of a Decimal128 equal in value but not in digits is a no-op: setting
# 1.00 over a stored 1.0 (or -0 over 0) keeps 1.0 and reports nModified 0.
# core/paths._same_value_for_update decides whether a $set changes anything and
# compares with mongoeco's Decimal128.__eq__, which is by value (right for
# queries). mongod's no-op check is binary equality, so the new digits are
# stored. Decimals are compared by their digits and exponent here; every other
# value keeps the original check (which the nested comparison calls back into).
def patch_decimal_set() -> None:
    from mongoeco.core import paths, update_array_operators
    from mongoeco.types import Decimal128

    original = paths._same_value_for_update

    def same_value_for_update(left: Any, right: Any) -> bool:
        if type(left) is Decimal128 and type(right) is Decimal128:
            return bool(left.value.as_tuple() == right.value.as_tuple())
        if type(left) is float and type(right) is float:
            # (cu) the original calls two doubles the same only when both are NaN, so a $set of the very
            # double a field holds counted as a change (nModified 1; mongod: 0). Same bytes: equal, with
            # the same sign (-0.0 is not 0.0), or both NaN.
            return (left == right and math.copysign(1.0, left) == math.copysign(1.0, right)) or (left != left and right != right)
        return bool(original(left, right))

    paths._same_value_for_update = same_value_for_update
    update_array_operators._same_value_for_update = same_value_for_update


# (n) A multi-document update costs O(matched x listed) on a `$in` filter:
# _collection_modify.update_many finds the matching documents, then updates each
# one with the whole filter as `selector_filter`, parsed again for each document
# and re-checked by the interpreted matcher, whose _evaluate_in calls
# FilteringMatchingMixin._prepare_membership_values: the lookup set of every
# listed value is built again for every document. An update_many of a batch of
# 500 `_id`s spent a third of its time there. Each parse lists the very same value
# objects (those of the command's filter), and what is prepared from them depends
# only on them and on the null and collation rules (callers only read it), so the
# last few preparations are kept, keyed by the identity of the values (the entry
# holds them, so no other object can take their ids): built once per command.
# Lists of fewer than 16 values, with a document or an array among them (mutable),
# or under a collation keep the original path.
_MEMBERSHIP_KEPT = 8


def patch_in_membership_once() -> None:
    from collections import OrderedDict

    from mongoeco.core._filtering_matching import FilteringMatchingMixin

    original = vars(FilteringMatchingMixin)["_prepare_membership_values"].__func__
    kept: OrderedDict[Any, Any] = OrderedDict()

    def prepare_membership_values(
        cls: Any, values: tuple[Any, ...], *, null_matches_undefined: bool, collation: Any = None
    ) -> Any:
        if collation is not None or len(values) < 16:
            return original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
        if any(isinstance(value, (dict, list)) for value in values):
            return original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
        key = (tuple(map(id, values)), bool(null_matches_undefined))
        entry = kept.get(key)
        if entry is None:
            prepared = original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
            # The entry holds the values themselves: while it is kept, no other object can have their ids.
            kept[key] = (tuple(values), prepared)
            if len(kept) > _MEMBERSHIP_KEPT:
                kept.popitem(last=False)
            return prepared
        kept.move_to_end(key)
        return entry[1]

    FilteringMatchingMixin._prepare_membership_values = classmethod(prepare_membership_values)  # type: ignore[assignment]  # mypy sees the bound method


# (z) Only the "simple" and "en" collations exist: core/collation.normalize_collation
# refuses any other locale ("only 'simple' and 'en' collations are supported"), so a
# collation of "en_US" (the usual spelling, and the one the drivers' tests use) fails
# every command that carries it. English's regional variants (en_US, en_GB, ...) have
# ICU's root rules, which are "en"'s: they are normalized as "en" and keep their own
# name (listed back by listIndexes as given). en_US_POSIX (code-point order, other
# rules) and every other language stay refused.
_ENGLISH_REGION = re.compile(r"en_[A-Z]{2}")


def patch_english_locales() -> None:
    import dataclasses

    from mongoeco.core import collation

    from ._support import replace_everywhere

    original = collation.normalize_collation

    def normalize_collation(spec: object | None) -> Any:
        if isinstance(spec, dict) and isinstance(spec.get("locale"), str) and _ENGLISH_REGION.fullmatch(spec["locale"]):
            normalized = original({**spec, "locale": "en"})
            assert normalized is not None  # a document always normalizes to a spec
            return dataclasses.replace(normalized, locale=spec["locale"])
        return original(spec)

    replace_everywhere(collation, "normalize_collation", normalize_collation)


# (ab) A command's `let` variables hold their expressions unevaluated: the wire
# commands bind the `let` document as it came (Collection._normalize_let and
# _database_admin_write_commands only check its names, then
# ExpressionExecutionContext.with_bindings binds the raw values), so
# {y: {$literal: "bar"}} makes $$y the document {$literal: "bar"} (an update
# stored exactly that) and {rand: {$rand: {}}} never yields a number. mongod
# evaluates each value once, as an expression on no document, when the command
# starts. The command's top-level `let` is now evaluated before mongoeco reads the
# request; bound values are never evaluated again (a $lookup's own `let`, inside
# its stage, is per document and untouched).
def patch_let_evaluated() -> None:
    from mongoeco.core.aggregation.runtime import evaluate_expression
    from mongoeco.wire.executor import WireCommandExecutor

    original = WireCommandExecutor._build_request_context

    def build_request_context(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        let = body.get("let")
        if isinstance(let, dict) and let:
            body = {**body, "let": {name: evaluate_expression({}, value) for name, value in let.items()}}
        return original(self, body, **kwargs)

    WireCommandExecutor._build_request_context = build_request_context


# (ar) `{field: {$type: ...}}` cost about 15 µs a document, `{field: {$in: [null, 1]}}` about 12: the
# compiled matcher of core/compiled_query.CompiledQuery has no code of its own for a TypeCondition,
# so each document went through QueryEngine.match_plan's dispatch over every kind of condition, then
# _evaluate_type, which extracts the field's values as a path and tries each alias in turn (`number`
# is four, each resolving the value's numeric alias again); an `$in` compares the value with each
# listed one through the generic equality. The background engine's plan counts and samples each
# `_id` bracket, every batch read of a number bracket carries `_id: {$type: "number"}`, and its count
# of what is left asks `__v: {$in: [null, from_version]}`: about a fifth of the demo's server time.
# For a top-level field whose value alone decides the answer, the answer of the original code (run
# for the first document of each kind) is kept per condition and looked up: for `$type`, the value's
# type (an int by whether it fits 32 bits; no value at all is a kind of its own); for `$in`, the
# value itself when it is a string, a bool, null, a float or an int of 64 bits. Any other value (an
# array, a document, a wrapped number, an int past 64 bits, an ObjectId for `$in`...) and any dotted
# path runs the original code. At most 1,024 answers are kept per condition.
_KEPT_ANSWERS = 1024


def patch_kept_answers() -> None:
    import datetime

    from bson import ObjectId as BsonObjectId
    from mongoeco.core.compiled_query import CompiledQuery
    from mongoeco.core.query_plan import InCondition, TypeCondition
    from mongoeco.types import ObjectId

    original = CompiledQuery._node_to_code
    kinds_by_type = frozenset({float, str, bool, type(None), datetime.datetime, ObjectId, BsonObjectId})
    values_by_value = frozenset({str, bool, type(None)})

    def node_to_code(self: Any, node: Any, depth: int) -> str:
        kind = type(node)
        if (kind is TypeCondition or kind is InCondition) and "." not in node.field:
            code = original(self, node, depth)
            keep = self._store("kept", kept_answers(node.field, by_value=kind is InCondition))
            return f"{keep}(doc, lambda: ({code}))"
        return original(self, node, depth)

    def kept_answers(field: str, *, by_value: bool) -> Any:
        known: dict[Any, bool] = {}
        missing = object()

        def key_of(doc: Any) -> Any:
            """What decides the answer for ``doc``, or None when only the original code can say."""
            if type(doc) is not dict:
                return None
            value = doc.get(field, missing)
            kind = type(value)
            if value is missing:
                return missing
            if kind is int:
                if not -(2**63) <= value < 2**63:
                    return None
                return (int, value) if by_value else -(2**31) <= value < 2**31
            if by_value:
                if kind is float:
                    return (float, value.hex())  # -0.0 and NaN apart from 0.0 and each other
                return (kind, value) if kind in values_by_value else None
            return kind if kind in kinds_by_type else None

        def answer(doc: Any, compute: Any) -> bool:
            key = key_of(doc)
            if key is None:
                return bool(compute())
            found = known.get(key)
            if found is None:
                if len(known) >= _KEPT_ANSWERS:
                    known.clear()
                found = known[key] = bool(compute())
            return found

        return answer

    node_to_code.__wrapped__ = original  # type: ignore[attr-defined]
    CompiledQuery._node_to_code = node_to_code
