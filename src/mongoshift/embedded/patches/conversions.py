"""Fix (cs): ``$convert`` to ``"decimal"``, and to a type given by its number, as on mongod 7.0.

mongoeco 4.11 accepts ``to: "decimal"`` only under its MongoDB 8.0 dialect (the flag
``uses_extended_conversions``, which also brings 8.0's ``base``, ``format`` and ``byteOrder``): under the 7.0
dialect the server speaks, every ``{$convert: {input: ..., to: "decimal"}}`` failed as "target type is not
supported", so a migration that turns a stored amount (``"12.50"``, a double) into a Decimal128 got its
``onError`` value for every document, or a failed command, where mongod 7.0 converts it (``$convert`` has
taken ``"decimal"`` since 4.0, as ``$toDecimal`` does here). mongod also takes the target as a BSON type
number (1 double, 2 string, 7 objectId, 8 bool, 9 date, 16 int, 18 long, 19 decimal), which mongoeco refused
("to must resolve to a string"). The fix names a numeric target by its type, then converts to a decimal with
the code ``$toDecimal`` runs (``onNull`` and ``onError`` as for any other target); the other targets take
mongoeco's own path. A conversion that fails without ``onError`` is 241 ConversionFailure, as mongod's (and
``$toDecimal``'s here), where mongoeco's ``$convert`` failed with no code.
"""

from __future__ import annotations

from typing import Any

from ._support import failure

#: mongod's BSON type numbers that ``$convert`` takes as ``to`` in 7.0.
_TYPE_NUMBERS = {1: "double", 2: "string", 7: "objectId", 8: "bool", 9: "date", 16: "int", 18: "long", 19: "decimal"}


def _type_name(target: object) -> object:
    """A numeric ``to`` as its type's name; anything else as it is (mongoeco judges it)."""
    from mongoeco.core.bson_scalars import unwrap_bson_numeric

    number = unwrap_bson_numeric(target)
    if isinstance(number, bool) or not isinstance(number, int | float) or number != int(number):
        return target
    return _TYPE_NUMBERS.get(int(number), target)


def patch_convert_targets() -> None:
    """(cs) ``$convert`` takes ``to: "decimal"`` and numeric targets under the 7.0 dialect."""
    from mongoeco.core.aggregation import runtime, scalar_expressions
    from mongoeco.errors import OperationFailure

    original = runtime.evaluate_scalar_expression
    if hasattr(original, "__wrapped__"):
        return

    def evaluate_scalar_expression(operator: str, document: Any, spec: object, variables: Any, **kwargs: Any) -> Any:
        dialect = kwargs.get("dialect", scalar_expressions.MONGODB_DIALECT_70)
        if (
            operator != "$convert"
            or not isinstance(spec, dict)
            or "input" not in spec
            or "to" not in spec
            or dialect.behavior_flag("uses_extended_conversions", default=False)
        ):
            return original(operator, document, spec, variables, **kwargs)
        evaluate = kwargs["evaluate_expression"]
        target = _type_name(evaluate(document, spec["to"], variables))
        try:
            if target != "decimal":
                return original(operator, document, {**spec, "to": {"$literal": target}}, variables, **kwargs)
            value = kwargs["evaluate_expression_with_missing"](document, spec["input"], variables)
            if value is kwargs["missing_sentinel"] or value is None:
                return evaluate(document, spec["onNull"], variables) if "onNull" in spec else None
            try:
                converted = scalar_expressions._convert_aggregation_scalar(
                    "$convert", value, "decimal", stringify_value=kwargs["stringify_value"]
                )
                return scalar_expressions._typed_conversion_result(converted, "decimal", variables)
            except Exception:
                if "onError" in spec:
                    return evaluate(document, spec["onError"], variables)
                raise
        except OperationFailure as error:
            if getattr(error, "code", None) is not None:
                raise
            raise failure(str(error), 241, "ConversionFailure") from error  # as $toDecimal's

    evaluate_scalar_expression.__wrapped__ = original  # type: ignore[attr-defined]
    runtime.evaluate_scalar_expression = evaluate_scalar_expression
