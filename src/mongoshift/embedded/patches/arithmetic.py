"""Fixes (co) and (cz): aggregation arithmetic whose integer result leaves the int64 range gives a double,
and an integer result with a 64-bit operand stays 64-bit, as on mongod.

mongod promotes an expression's integer result that overflows: two longs that ``$add``, ``$subtract`` or
``$multiply`` past the int64 range give a double (MongoDB's ``arith_overflow`` jstest: ``NumberLong(9e18)``
plus itself is ``1.8e19``), and so do ``$sum`` of an array and ``$group``'s ``$sum`` and ``$avg``. mongoeco 4.11's value functions raise
``BsonScalarOverflowError`` there, which no command loop catches: the command answered ``ok: 0`` with no
code, so a pipeline update that increments a revision at the int64 limit (a ``pipeline=`` background
migration over such legacy data) failed whole. The update operators ``$inc`` and ``$mul`` keep refusing
the statement, as mongod does (fix (cn)): only the aggregation module's names are wrapped, and (an)'s
compiled ``$add`` reads its ``bson_add`` from that module, so it promotes the same way.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def _promoting(original: Callable[[Any, Any], Any], on_floats: Callable[[float, float], float]) -> Callable[[Any, Any], Any]:
    from bson.int64 import Int64
    from mongoeco.core.bson_scalars import BsonScalarOverflowError, unwrap_bson_numeric

    def arithmetic(left: Any, right: Any) -> Any:
        try:
            result = original(left, right)
        except BsonScalarOverflowError:  # an integer result past int64: mongod's double
            return on_floats(float(unwrap_bson_numeric(left)), float(unwrap_bson_numeric(right)))  # type: ignore[arg-type]
        if type(result) is int and (type(left) is Int64 or type(right) is Int64):
            return Int64(result)  # (cz): long + int is a long, whatever its value
        return result

    arithmetic.__wrapped__ = original  # type: ignore[attr-defined]
    return arithmetic


def patch_expression_overflow() -> None:
    """(co) ``$add``, ``$subtract``, ``$multiply`` and ``$sum`` expressions, and the ``$sum`` and ``$avg``
    accumulators of ``$group`` (plain and compiled), promote an int64 overflow to a double."""
    from mongoeco.core.aggregation import accumulators, compiled_aggregation, numeric_expressions

    if hasattr(numeric_expressions.bson_add, "__wrapped__"):
        return
    wrapped = (
        (numeric_expressions, "bson_add", operator.add),
        (numeric_expressions, "bson_subtract", operator.sub),
        (numeric_expressions, "bson_multiply", operator.mul),
        (accumulators, "bson_add", operator.add),
        (compiled_aggregation, "bson_add", operator.add),  # read when a $group is compiled, per command
    )
    for module, name, on_floats in wrapped:
        setattr(module, name, _promoting(getattr(module, name), on_floats))


# (cz) An integer result of `$add`, `$subtract` or `$multiply` with a 64-bit operand came back as a 32-bit
# integer whenever it fitted one: `{$add: [NumberLong(7), 1]}` gave `8` as an int, `$group`'s `$sum` of longs an
# int, and `$inc` of 1 on a stored `NumberLong(7)` stored an int. mongod keeps the widest type of the operands (long
# + int = long; an int result past the int32 range is a long as before). mongoeco's `bson_scalars._wrap_numeric_result`,
# which every such sum, difference and product of a 64-bit value goes through (the plain-`int` fast path is taken
# by two Python ints only), picks the result's type by its value alone.
def patch_long_results() -> None:
    """(cz) An integer result with a 64-bit operand stays 64-bit, in expressions, accumulators and ``$inc``/``$mul``."""
    from mongoeco.core import bson_scalars

    original = bson_scalars._wrap_numeric_result
    if hasattr(original, "__wrapped__"):
        return
    int32_min, int32_max = bson_scalars.INT32_MIN, bson_scalars.INT32_MAX
    long_type, int_type = bson_scalars.BsonInt64, bson_scalars.BsonInt32

    def is_long(value: Any) -> bool:
        return type(value) is long_type or (type(value) is int and not int32_min <= value <= int32_max)

    def wrap_numeric_result(left: Any, right: Any, result: Any) -> Any:
        wrapped: Any = original(left, right, result)
        if type(wrapped) in (int_type, int) and (is_long(left) or is_long(right)):
            return long_type(wrapped.value if type(wrapped) is int_type else wrapped)
        return wrapped

    wrap_numeric_result.__wrapped__ = original  # type: ignore[attr-defined]
    bson_scalars._wrap_numeric_result = wrap_numeric_result
