"""Query comparisons by type bracket, as mongod compares them (aq).

mongoeco 4.11's query matcher decides ``$gt``/``$gte``/``$lt``/``$lte`` between values of different
BSON types by the total sort order: ``{a: {$gte: 0}}`` matched strings, booleans, dates and arrays,
``{a: {$lt: 10}}`` matched null, ``{_id: {$gte: 0}}`` string and boolean ``_id``s. mongod compares a
value only with an operand of its own canonical type (its *bracket*: every number type is one, string
and symbol one, null and undefined one), with a few fixed exceptions
(``ComparisonMatchExpression::matchesSingleElement`` in mongod's ``expression_leaf.cpp``):

- an operand of another bracket never matches, except that a null operand matches null and undefined
  for ``$lte``/``$gte`` (never for ``$lt``/``$gt``), a MinKey operand matches every value for
  ``$gt``/``$gte`` (none for ``$lt``/``$lte``) and a MaxKey operand every value for ``$lt``/``$lte``;
- NaN (double or decimal) on either side: ``$lt``/``$gt`` never match, ``$lte``/``$gte`` only when
  both sides are NaN;
- a missing field is a value of the null bracket: it matches ``$gte``/``$lte`` null, ``$gt``/``$gte``
  MinKey and ``$lt``/``$lte`` MaxKey, and nothing else;
- an array field: each element is tried, then the array itself (which only an array operand, or
  MinKey and MaxKey, can match). mongoeco already tries them in that order, but never ordered an
  array or document operand against a stored one (:func:`plain`).

Inside a bracket mongoeco's own comparison decides, under a collation too (only strings compare by
it). What the fix replaces: ``FilteringMatchingMixin._comparison_matches_candidate`` (one value
against the operand, every path of the matcher ends there), ``_match_top_level_comparison`` and
``_evaluate_comparison`` for a missing field, the compiled matcher's code for a dotted path (which
compared every value with the total order itself), and the partial-index test of whether a query
implies an index's filter (``virtual_indexes``: like mongod's ``expression_algo``, a range implies
another only within one bracket, or documents outside the index would be left out of a query that
takes it).

Untouched, since mongod orders them by the total order too: aggregation expressions
(``$expr: {$gt: [...]}``, ``$max``...), sorts, the ``$min``/``$max`` update operators, index bounds.

(ck) Two binaries compare in mongod's order (the length, then the subtype, then the bytes) both here
and in that total order (:func:`patch_binary_order`), where mongoeco compared the subtype first, two
``bytes`` as Python does and a ``bytes`` with a UUID by their printed forms.
"""

from __future__ import annotations

import datetime
import math
import operator
import re
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

# mongod's canonical types (BSONType canonicalization); a bracket is one of these.
MIN_KEY, NULL, NUMBER, STRING, OBJECT, ARRAY, BINARY = -1, 5, 10, 15, 20, 25, 30
OBJECT_ID, BOOL, DATE, TIMESTAMP, REGEX, CODE, CODE_WITH_SCOPE, MAX_KEY = 35, 40, 45, 47, 50, 60, 65, 127

_GREATER = frozenset({"gt", ">", "gte", ">="})
_LESS = frozenset({"lt", "<", "lte", "<="})
_INCLUSIVE = frozenset({"gte", ">=", "lte", "<="})

_BRACKETS: dict[type, int] = {}


def _exact_brackets() -> dict[type, int]:
    """The bracket of each class the matcher meets, by exact class (subclasses: :func:`bracket`)."""
    if not _BRACKETS:
        from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
        from bson.dbref import DBRef
        from mongoeco.core.bson_scalars import BsonDecimal128, BsonDouble, BsonInt32, BsonInt64
        from mongoeco.core.codec import _InternalBsonArray, _InternalBsonDocument
        from mongoeco.types import (
            SON,
            Binary as EcoBinary,
            DBRef as EcoDBRef,
            Decimal128 as EcoDecimal128,
            ObjectId as EcoObjectId,
            Regex as EcoRegex,
            Timestamp as EcoTimestamp,
            UndefinedType,
        )

        _BRACKETS.update({
            bool: BOOL, int: NUMBER, float: NUMBER, Decimal: NUMBER, Int64: NUMBER, Decimal128: NUMBER,
            EcoDecimal128: NUMBER, BsonInt32: NUMBER, BsonInt64: NUMBER, BsonDouble: NUMBER, BsonDecimal128: NUMBER,
            str: STRING, type(None): NULL, UndefinedType: NULL, MinKey: MIN_KEY, MaxKey: MAX_KEY,
            dict: OBJECT, SON: OBJECT, _InternalBsonDocument: OBJECT, DBRef: OBJECT, EcoDBRef: OBJECT,
            list: ARRAY, _InternalBsonArray: ARRAY,
            bytes: BINARY, Binary: BINARY, EcoBinary: BINARY, uuid.UUID: BINARY,
            ObjectId: OBJECT_ID, EcoObjectId: OBJECT_ID, datetime.datetime: DATE,
            Timestamp: TIMESTAMP, EcoTimestamp: TIMESTAMP, Regex: REGEX, EcoRegex: REGEX, re.Pattern: REGEX,
        })
    return _BRACKETS


def bracket(value: Any) -> int | None:
    """mongod's canonical type of a value as mongoeco's matcher holds it; None for a value of no
    class known here (the comparison is then left to mongoeco)."""
    found = _exact_brackets().get(type(value))
    if found is not None:
        return found
    from bson.code import Code

    if isinstance(value, Code):  # a str subclass
        return CODE if value.scope is None else CODE_WITH_SCOPE
    for kind, kind_bracket in _BRACKETS.items():  # subclasses; bool before int (dict order)
        if isinstance(value, kind):
            return kind_bracket
    return None


def is_nan(value: Any) -> bool:
    """Whether a value of the number bracket is a NaN (double, decimal, or mongoeco's wrappers of them)."""
    kind = type(value)
    if kind is float:
        return math.isnan(value)
    if kind is int:
        return False
    inner = getattr(value, "value", value)  # mongoeco's BsonDouble, BsonDecimal128, Decimal128
    inner = getattr(inner, "value", inner)  # BsonDecimal128 holds mongoeco's Decimal128
    if isinstance(inner, float):
        return math.isnan(inner)
    if isinstance(inner, Decimal):
        return inner.is_nan()
    to_decimal = getattr(inner, "to_decimal", None)  # pymongo's Decimal128
    return bool(to_decimal is not None and to_decimal().is_nan())


def decided(candidate: Any, target: Any, operator: str) -> bool | None:
    """mongod's answer for one value against the operand when brackets or NaN decide it; None when
    both are of one bracket (NaN aside) and the comparison inside it decides."""
    target_bracket = bracket(target)
    candidate_bracket = bracket(candidate)
    if target_bracket is None or candidate_bracket is None:
        return None
    if target_bracket == NULL:  # null and undefined are one: equal, whatever the operand's spelling
        return candidate_bracket == NULL and operator in _INCLUSIVE
    if candidate_bracket != target_bracket:
        if target_bracket == MIN_KEY:
            return operator in _GREATER
        if target_bracket == MAX_KEY:
            return operator in _LESS
        return False
    if target_bracket == MIN_KEY or target_bracket == MAX_KEY:
        return operator in _INCLUSIVE
    if target_bracket == NUMBER:
        candidate_nan, target_nan = is_nan(candidate), is_nan(target)
        if candidate_nan or target_nan:
            return candidate_nan and target_nan and operator in _INCLUSIVE
    return None


_CONTAINERS: dict[type, type] = {}


def plain(value: Any) -> Any:
    """An array or document with mongoeco's immutable wire containers (``_InternalBsonArray``,
    ``_InternalBsonDocument``, which a query's operand is decoded into) turned into lists and dicts,
    all the way down: mongoeco's comparison ranks those classes by exact type and finds neither, so
    an array or document operand never compared with a stored one (``{a: {$gte: [0]}}`` did not
    match ``a: [0]``)."""
    if not _CONTAINERS:
        from mongoeco.core.codec import _InternalBsonArray, _InternalBsonDocument

        _CONTAINERS.update({list: list, _InternalBsonArray: list, dict: dict, _InternalBsonDocument: dict})
    kind = _CONTAINERS.get(type(value))
    if kind is list:
        return [plain(item) for item in value]
    if kind is dict:
        return {key: plain(item) for key, item in value.items()}
    return value


def missing_matches(target: Any, operator: str) -> bool:
    """Whether a missing field matches: it is of the null bracket (mongod's EOO, as undefined)."""
    target_bracket = bracket(target)
    if target_bracket == NULL:
        return operator in _INCLUSIVE
    if target_bracket == MIN_KEY:
        return operator in _GREATER
    if target_bracket == MAX_KEY:
        return operator in _LESS
    return False


def _same_type_classes() -> frozenset[type]:
    """Classes two values of which are always of one bracket with no NaN, null, MinKey or MaxKey rule
    and no container to make plain: for those, the original comparison answers as it is (the
    background engine's ``_id`` ranges of ObjectIds skip :func:`decided`)."""
    from bson import ObjectId
    from mongoeco.types import ObjectId as EcoObjectId, Timestamp as EcoTimestamp

    return frozenset({str, bool, int, datetime.datetime, ObjectId, EcoObjectId, EcoTimestamp})


_BINARIES: set[type] = set()


def binary_classes() -> frozenset[type]:
    """(ck) The classes a binary reaches the matcher and the sorts as: ``bytes`` (subtype 0), a ``uuid.UUID``
    (subtype 4, as the wire decodes it), mongoeco's binaries (the stored form of other subtypes, and the
    query operand's) and bson's."""
    if not _BINARIES:
        from bson import Binary
        from mongoeco.core.codec import _InternalBsonBinary
        from mongoeco.types import Binary as EcoBinary

        _BINARIES.update({bytes, uuid.UUID, Binary, EcoBinary, _InternalBsonBinary})
    return frozenset(_BINARIES)


def binary_key(value: Any) -> tuple[int, int, bytes]:
    """(ck) mongod's order of BinData (``compareElementValues``): the length first, then the subtype, then
    the bytes. mongoeco compared the subtype first and two subtype-0 binaries as Python's bytes (an empty
    one after a longer one), and a ``bytes`` with a UUID or another subtype by their printed forms."""
    if type(value) is uuid.UUID:
        return (16, 4, value.bytes)
    data = bytes(value)
    return (len(data), getattr(value, "subtype", 0), data)


def _compared(left: tuple[int, int, bytes], right: tuple[int, int, bytes]) -> int:
    return -1 if left < right else 1 if left > right else 0


def patch_binary_order() -> None:
    """(ck) Binaries in mongod's order (:func:`binary_key`) in the total order (sorts, ``$expr``, ``$max``,
    ``$min``...) and in the sorts' shortcut for two ``bytes``; the query operators take it in
    :func:`patch_type_brackets`."""
    from mongoeco.compat import base
    from mongoeco.core import sorting

    from ._support import replace_everywhere

    binaries = binary_classes()
    total_order = base._compare_values_default
    native = sorting._compare_native_sort_scalars

    def compare_values_default(left: Any, right: Any, bson_type_order: Any) -> int:
        if type(left) in binaries and type(right) in binaries:
            return _compared(binary_key(left), binary_key(right))
        return int(total_order(left, right, bson_type_order))

    def compare_native_sort_scalars(left: Any, right: Any) -> int | None:
        if type(left) is bytes and type(right) is bytes:
            return _compared(binary_key(left), binary_key(right))
        return native(left, right)

    compare_values_default.__wrapped__ = total_order  # type: ignore[attr-defined]
    compare_native_sort_scalars.__wrapped__ = native  # type: ignore[attr-defined]
    replace_everywhere(base, "_compare_values_default", compare_values_default)
    replace_everywhere(sorting, "_compare_native_sort_scalars", compare_native_sort_scalars)


#: The operator kinds mongoeco's comparison takes, as Python's.
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt, "gt": operator.gt, ">=": operator.ge, "gte": operator.ge,
    "<": operator.lt, "lt": operator.lt, "<=": operator.le, "lte": operator.le,
}


def _object_id_classes() -> frozenset[type]:
    """(bc) Two ObjectIds of one class compare by their bytes, whatever the collation or dialect:
    Python's order of them (bson's ``ObjectId.__lt__``). mongoeco compares two ints, floats, strings
    or booleans itself without a collation; two ObjectIds went through its collation and policy
    layers, about 3 µs a comparison, and the background engine's lane reads of an ObjectId
    collection compare each walked document's ``_id`` with both bounds of its range."""
    from bson import ObjectId
    from mongoeco.types import ObjectId as EcoObjectId

    return frozenset({ObjectId, EcoObjectId})


def patch_type_brackets() -> None:
    from mongoeco.compat import MONGODB_DIALECT_70 as default_dialect
    from mongoeco.core._filtering_matching import FilteringMatchingMixin
    from mongoeco.core.compiled_query import CompiledQuery

    compare_one: Callable[..., bool] = FilteringMatchingMixin._comparison_matches_candidate.__func__  # type: ignore[attr-defined]
    top_level: Callable[..., bool] = FilteringMatchingMixin._match_top_level_comparison.__func__  # type: ignore[attr-defined]
    originals = {
        "_comparison_matches_candidate": FilteringMatchingMixin.__dict__["_comparison_matches_candidate"],
        "_match_top_level_comparison": FilteringMatchingMixin.__dict__["_match_top_level_comparison"],
        "_evaluate_comparison": FilteringMatchingMixin.__dict__["_evaluate_comparison"],
    }

    same_type = _same_type_classes()
    object_ids = _object_id_classes()
    binaries = binary_classes()
    from bson import ObjectId

    # (bx) bson's own getter of an ObjectId's 12 bytes: mongoeco's ObjectId (a subclass) wraps it in a
    # method that copies them, which bson's comparison operators call for the right-hand side.
    object_id_bytes: Callable[[Any], bytes] = vars(ObjectId)["binary"].fget
    by_bytes = frozenset(kind for kind in object_ids if issubclass(kind, ObjectId))  # both, with bson installed

    # Keywords spelled out (no **options): these run once per document and value matched.
    def comparison_matches_candidate(
        cls: Any, candidate: Any, target: Any, operator: str, *, dialect: Any = default_dialect, collation: Any = None
    ) -> bool:
        kind = type(candidate)
        if kind is type(target) and kind in same_type:  # one bracket, no NaN: the original's comparison
            if kind in object_ids:
                compare = _OPERATORS.get(operator)
                if compare is not None:  # (bc) by their bytes, as mongod
                    return compare(object_id_bytes(candidate), object_id_bytes(target)) if kind in by_bytes else compare(candidate, target)
            return compare_one(cls, candidate, target, operator, dialect=dialect, collation=collation)
        if kind in binaries and type(target) in binaries:
            compare = _OPERATORS.get(operator)
            if compare is not None:  # (ck) mongod's order, not the original's shortcut for two bytes
                return compare(binary_key(candidate), binary_key(target))
        answer = decided(candidate, target, operator)
        if answer is not None:
            return answer
        if isinstance(target, (list, dict)):  # and the candidate of the same bracket
            return compare_one(cls, plain(candidate), plain(target), operator, dialect=dialect, collation=collation)
        return compare_one(cls, candidate, target, operator, dialect=dialect, collation=collation)

    def match_top_level_comparison(
        cls: Any, doc: Any, field: str, target: Any, operator: str, *, dialect: Any = default_dialect, collation: Any = None
    ) -> bool:
        if field not in doc:
            return missing_matches(target, operator)
        value = doc[field]
        kind = type(value)
        if kind is type(target) and kind in by_bytes:  # (bx) what the function above answers for them, without two calls
            compare = _OPERATORS.get(operator)
            if compare is not None:
                return compare(object_id_bytes(value), object_id_bytes(target))
        elif kind in binaries and type(target) in binaries:
            compare = _OPERATORS.get(operator)
            if compare is not None:  # (ck) the original answers two bytes itself, by Python's order
                return compare(binary_key(value), binary_key(target))
        # Its values go through the function above.
        return top_level(cls, doc, field, target, operator, dialect=dialect, collation=collation)

    def evaluate_comparison(
        cls: Any, doc: Any, field: str, target: Any, operator: str, *, dialect: Any = default_dialect, collation: Any = None
    ) -> bool:
        if "." not in field:
            return bool(cls._match_top_level_comparison(doc, field, target, operator, dialect=dialect, collation=collation))
        values = cls._extract_values(doc, field)
        if not values:
            return missing_matches(target, operator)
        compare = cls._comparison_matches_candidate
        return any(compare(value, target, operator, dialect=dialect, collation=collation) for value in values)

    replacements: dict[str, Callable[..., bool]] = {
        "_comparison_matches_candidate": comparison_matches_candidate,
        "_match_top_level_comparison": match_top_level_comparison,
        "_evaluate_comparison": evaluate_comparison,
    }
    for name, function in replacements.items():
        function.__wrapped__ = originals[name]  # type: ignore[attr-defined]  # the classmethod, to put back
        setattr(FilteringMatchingMixin, name, classmethod(function))

    # The compiled matcher: a dotted path's values were compared by `_compare(value, operand) <op> 0`,
    # the total order. They go through the matcher's own function, as the interpreted path does.
    comparison_code = CompiledQuery._comparison_code

    def compiled_comparison_code(self: Any, field: str, value: Any, operator: str) -> str:
        if "." not in field:
            return comparison_code(self, field, value, operator)  # `_top_compare`: the patched classmethod
        function_key = self._store("compare", _dotted_values_match)
        value_key = self._store("value", value)
        return f"{function_key}(_extract(doc, {self._field(field)}), {value_key}, {operator!r}, dialect, collation)"

    compiled_comparison_code.__wrapped__ = comparison_code  # type: ignore[attr-defined]
    CompiledQuery._comparison_code = compiled_comparison_code
    # Matchers compiled before this point bound the original `_match_top_level_comparison`.
    CompiledQuery._compile_expression.cache_clear()

    _patch_partial_index_implication()


def _dotted_values_match(values: list[Any], target: Any, operator: str, dialect: Any, collation: Any) -> bool:
    """A dotted path's comparison in the compiled matcher: any of the path's values, or the missing rule."""
    from mongoeco.core.filtering import QueryEngine

    if not values:
        return missing_matches(target, operator)
    compare = QueryEngine._comparison_matches_candidate
    return any(compare(value, target, operator, dialect=dialect, collation=collation) for value in values)


def _patch_partial_index_implication() -> None:
    """``virtual_indexes``: a query implies a partial index's range only inside one bracket, NaN aside.

    With the matcher's brackets, a document ``{a: "x"}`` is outside a partial index on ``{a: {$gt: 0}}``;
    were ``{a: "x"}`` still taken to imply that filter (``"x" > 0`` in the total order), the query would
    read its candidates from the index and miss the document. mongod's ``expression_algo`` refuses
    such an implication the same way (different canonical types, or a NaN)."""
    from mongoeco.engines import virtual_indexes

    compare_bounds = virtual_indexes._compare_bounds
    satisfies_bounds = virtual_indexes._value_satisfies_bounds

    def comparable(left: Any, right: Any) -> bool:
        kind = bracket(left)
        return kind is not None and kind == bracket(right) and not (kind == NUMBER and (is_nan(left) or is_nan(right)))

    def _compare_bounds(left: object, right: object, left_inclusive: bool, right_inclusive: bool, **options: Any) -> bool:
        return comparable(left, right) and compare_bounds(left, right, left_inclusive, right_inclusive, **options)

    def _value_satisfies_bounds(value: object, *, minimum: object | None = None, maximum: object | None = None, **options: Any) -> bool:
        if minimum is not None and not comparable(value, minimum):
            return False
        if maximum is not None and not comparable(value, maximum):
            return False
        return satisfies_bounds(value, minimum=minimum, maximum=maximum, **options)

    _compare_bounds.__wrapped__ = compare_bounds  # type: ignore[attr-defined]
    _value_satisfies_bounds.__wrapped__ = satisfies_bounds  # type: ignore[attr-defined]
    virtual_indexes._compare_bounds = _compare_bounds
    virtual_indexes._value_satisfies_bounds = _value_satisfies_bounds
