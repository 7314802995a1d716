"""Fix (co): aggregation arithmetic whose integer result leaves the int64 range gives a double, as on mongod.

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
    from mongoeco.core.bson_scalars import BsonScalarOverflowError, unwrap_bson_numeric

    def arithmetic(left: Any, right: Any) -> Any:
        try:
            return original(left, right)
        except BsonScalarOverflowError:  # an integer result past int64: mongod's double
            return on_floats(float(unwrap_bson_numeric(left)), float(unwrap_bson_numeric(right)))  # type: ignore[arg-type]

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
