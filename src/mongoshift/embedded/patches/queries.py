"""Query and update fixes: collStats sizes of every BSON type (i), `$in` over ObjectIds as a set
lookup (k) and once per update (n), `$set` of a Decimal128 with other digits (m), English's
regional collations (z), evaluated `let` variables (ab) and the answers of `$type` and `$in` kept per
kind or value of a top-level field (ar)."""

from __future__ import annotations

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


# (k) `{field: {$in: [...]}}` costs O(documents x values): the compiled matcher of
# core/compiled_query.CompiledQuery compares every candidate with every listed
# value through QueryEngine._in_item_matches_candidate, so re-reading the 500
# documents of a batch by `_id` on 3,000 documents takes ~10 s. When every
# listed value is an ObjectId (no collation, null or array semantics apply to
# them), membership is a set lookup: same result, O(documents). Any other list
# keeps the original matcher.
def patch_in_object_ids() -> None:
    from bson import ObjectId
    from mongoeco.core.compiled_query import CompiledQuery
    from mongoeco.core.query_plan import InCondition

    original = CompiledQuery._node_to_code

    def node_to_code(self: Any, node: Any, depth: int) -> str:
        if (
            isinstance(node, InCondition)
            and node.values
            and all(isinstance(value, ObjectId) for value in node.values)
        ):
            field_key = self._field(node.field)
            members = self._store("values", frozenset(node.values))
            kind = self._store("kind", ObjectId)
            return (
                f"any(isinstance(candidate, {kind}) and candidate in {members}"
                f" for candidate in (_extract(doc, {field_key}) or ()))"
            )
        return original(self, node, depth)

    CompiledQuery._node_to_code = node_to_code


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
