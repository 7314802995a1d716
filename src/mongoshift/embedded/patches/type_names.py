"""The BSON type names of ``$type`` as mongod gives them, in aggregation expressions and in queries (cj).

mongoeco 4.11's aggregation ``{$type: <expression>}`` (``scalar_expressions._aggregation_type_name``)
tests Python classes in an order that misses pymongo's: an ``Int64`` is an ``int``, so one within the
int32 range was ``"int"``; JavaScript code is a ``str``, so ``"string"`` (with or without a scope);
MinKey, MaxKey and a DBRef fell through to their class names (``"MinKey"``, ``"MaxKey"``, ``"DBRef"``).
mongod names them ``"long"``, ``"javascript"``, ``"javascriptWithScope"``, ``"minKey"``, ``"maxKey"``
and ``"object"`` (a DBRef is a document with ``$ref`` and ``$id``). The query operator
(``FilteringSpecialOperatorsMixin._matches_bson_type``, which every ``$type`` of a filter, by name or
number, ends in) had the same two slips the other way round: ``"string"`` (2) matched JavaScript code,
and ``"object"`` (3) did not match a DBRef. So a ``$group`` by ``{$type: "$_id"}`` named the same
documents as the query's ``$type`` does on mongod neither way.

Both now answer by mongod's names. Every other value keeps mongoeco's answer (``"missing"`` for an
absent field, ``"undefined"``, the numbers of mongoeco's own wrappers, ...).
"""

from __future__ import annotations

from typing import Any

_NAMES: dict[type, str] = {}


def _exact_names() -> dict[type, str]:
    """The aggregation name of each class mongoeco answers wrongly, by exact class."""
    if not _NAMES:
        from bson import Int64, MaxKey, MinKey
        from bson.dbref import DBRef
        from mongoeco.types import DBRef as EcoDBRef

        _NAMES.update({Int64: "long", MinKey: "minKey", MaxKey: "maxKey", DBRef: "object", EcoDBRef: "object"})
    return _NAMES


def type_name(value: Any) -> str | None:
    """mongod's ``$type`` name of a value mongoeco names wrongly; None for every other value."""
    found = _exact_names().get(type(value))
    if found is not None:
        return found
    from bson.code import Code

    if isinstance(value, Code):  # a str subclass
        return "javascript" if value.scope is None else "javascriptWithScope"
    for kind, name in _NAMES.items():  # subclasses
        if isinstance(value, kind):
            return name
    return None


def patch_type_names() -> None:
    from mongoeco.core._filtering_specials import FilteringSpecialOperatorsMixin
    from mongoeco.core.aggregation import scalar_expressions

    from ._support import replace_everywhere

    original_name = scalar_expressions._aggregation_type_name

    def aggregation_type_name(value: Any, *, missing_sentinel: object) -> str:
        if value is not missing_sentinel:
            name = type_name(value)
            if name is not None:
                return name
        return str(original_name(value, missing_sentinel=missing_sentinel))

    aggregation_type_name.__wrapped__ = original_name  # type: ignore[attr-defined]
    replace_everywhere(scalar_expressions, "_aggregation_type_name", aggregation_type_name)

    original_match = vars(FilteringSpecialOperatorsMixin)["_matches_bson_type"].__func__

    def matches_bson_type(cls: Any, candidate: Any, alias: str) -> bool:
        if alias == "string" or alias == "object":
            name = type_name(candidate)
            if name is not None:
                return name == alias
        return bool(original_match(cls, candidate, alias))

    matches_bson_type.__wrapped__ = original_match  # type: ignore[attr-defined]
    FilteringSpecialOperatorsMixin._matches_bson_type = classmethod(matches_bson_type)  # type: ignore[assignment]
