"""The expressions of fix (an)'s ``$set`` stages, compiled once per command (issue 27, item 2).

mongoeco 4.11's evaluator (``runtime.evaluate_expression``) builds a variable environment for every
expression it meets, nested ones included, then finds its operator's family and calls it through a
handful of freshly made lambdas: for the ``pipeline=`` bench's three expressions (``$split`` inside
``$arrayElemAt``, ``$ifNull`` inside ``$add``, ``$literal``) that was about 40 % of a pipeline
update's instructions per document (docs/performance.md).

:func:`compiled` turns an expression built only of a closed subset (constants, field paths, arrays,
``$literal``/``$const``, ``$ifNull``, ``$add``, ``$split``, ``$arrayElemAt``, ``$concat``, ``$cond``,
``$eq``/``$ne``/``$gt``/``$gte``/``$lt``/``$lte``) into a Python callable of the stage's input
document. Each operator does what mongoeco's does, in the same order, with mongoeco's own value
functions (``bson_add``, ``_require_numeric``, ``_compare_values``, the dialect's truthiness); wherever
mongoeco would raise, or takes a branch not copied here (a date in ``$add``), the callable raises and
its caller hands the whole expression to mongoeco's evaluator, which answers, error included. So an
expression either gets mongoeco's value or mongoeco's evaluation: ``tests/embedded/test_expressions.py``
checks the first against the second on drawn expressions and values. Anything outside the subset (a
``$$`` variable, an object expression, any other operator, an operator a registered extension or the
dialect overrides) is not compiled at all.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from copy import deepcopy
from typing import Any

#: A compiled expression: the stage's input document (a plain dict) to the expression's value.
Compiled = Callable[[dict[str, Any]], Any]


class Fallback(Exception):
    """Raised by a compiled expression where mongoeco's evaluator must answer (an error, an uncopied branch)."""


#: The operators compiled here, each with the family mongoeco's evaluator dispatches it to (checked at
#: compile time: an operator an earlier family claims is not compiled).
_FAMILIES = {
    "$add": "NUMERIC_EXPRESSION_OPERATORS",
    "$split": "ARRAY_STRING_EXPRESSION_OPERATORS",
    "$arrayElemAt": "ARRAY_STRING_EXPRESSION_OPERATORS",
    "$concat": "ARRAY_STRING_EXPRESSION_OPERATORS",
    "$ifNull": "CONTROL_OBJECT_EXPRESSION_OPERATORS",
    "$cond": "CONTROL_OBJECT_EXPRESSION_OPERATORS",
    **dict.fromkeys(("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"), "CONTROL_OBJECT_EXPRESSION_OPERATORS"),
}
#: The evaluator's families in the order it tries them.
_ORDER = ("SCALAR_EXPRESSION_OPERATORS", "ARRAY_STRING_EXPRESSION_OPERATORS", "CONTROL_OBJECT_EXPRESSION_OPERATORS", "NUMERIC_EXPRESSION_OPERATORS")
#: Constants whose deep copy is themselves (a ``$literal`` of one is returned as it is).
_ATOMS = (int, float, str, bool, type(None))


class Compiler:
    """Compiles expressions for one command: its dialect and evaluation environment."""

    def __init__(self, dialect: Any, environment: Any) -> None:
        from mongoeco.core.aggregation import control_object_expressions, extensions, numeric_expressions, runtime
        from mongoeco.core.bson_scalars import is_bson_numeric

        self.dialect = dialect
        self.collation = getattr(environment, "collation", None)
        self.runtime = runtime
        self.extension = extensions.get_registered_aggregation_expression_operator
        self.undefined = control_object_expressions.UndefinedType
        self.missing, self.remove = runtime._MISSING, runtime._REMOVE
        self.resolve = runtime._resolve_aggregation_field_path
        self.compare = runtime._compare_values
        self.truthy = dialect.policy.expression_truthy
        self.require_numeric = numeric_expressions._require_numeric  # the names $add calls
        self.bson_add = numeric_expressions.bson_add
        # plain ints and floats are numbers to mongoeco: _require_numeric passes them as they are
        self.plain_numbers = bool(is_bson_numeric(1)) and bool(is_bson_numeric(1.0))

    def top(self, expression: Any) -> Compiled | None:
        """The callable giving what ``_evaluate_expression_with_missing`` gives (a missing field path:
        mongoeco's missing marker), or None when the expression is not of the subset."""
        if isinstance(expression, str) and expression.startswith("$") and not expression.startswith("$$"):
            path = expression[1:]
            if path and "." not in path:
                missing = self.missing
                return lambda document: document.get(path, missing)
            resolve = self.resolve
            return lambda document: resolve(document, path)
        return self.value(expression)

    def value(self, expression: Any) -> Compiled | None:
        """The callable giving what ``evaluate_expression`` gives (a missing field path: None)."""
        if isinstance(expression, str):
            if expression.startswith("$$"):
                return None
            if expression.startswith("$"):
                path = expression[1:]
                if path and "." not in path:
                    return lambda document: document.get(path)
                resolve, missing = self.resolve, self.missing

                def field(document: dict[str, Any]) -> Any:
                    found = resolve(document, path)
                    return None if found is missing else found

                return field
            return lambda document: expression
        if isinstance(expression, list):
            items = [self.value(item) for item in expression]
            if any(item is None for item in items):
                return None
            return _array(items)  # type: ignore[arg-type]
        if not isinstance(expression, dict):
            return lambda document: expression
        if len(expression) != 1:
            return None  # an object expression, or mongoeco's 40181
        ((operator, spec),) = expression.items()
        if not isinstance(operator, str) or not operator.startswith("$") or self.extension(operator) is not None:
            return None
        if operator in ("$literal", "$const"):
            if type(spec) in _ATOMS:
                return lambda document: spec
            return lambda document: deepcopy(spec)
        family = _FAMILIES.get(operator)
        if family is None or not self.dialect.supports_aggregation_expression_operator(operator):
            return None
        for earlier in _ORDER:
            if operator in getattr(self.runtime, earlier):
                if earlier != family:
                    return None
                break
        else:
            return None
        return self._operator(operator, spec)

    def _arguments(self, spec: Any, least: int, most: int | None) -> list[Compiled] | None:
        """The compiled arguments of a list spec mongoeco's ``_require_expression_args`` accepts."""
        if not isinstance(spec, list) or len(spec) < least or (most is not None and len(spec) > most):
            return None
        arguments = [self.value(item) for item in spec]
        return None if any(argument is None for argument in arguments) else arguments  # type: ignore[return-value]

    def _operator(self, operator: str, spec: Any) -> Compiled | None:
        if operator == "$cond":
            if isinstance(spec, dict) and set(spec) == {"if", "then", "else"}:
                spec = [spec["if"], spec["then"], spec["else"]]
            elif not isinstance(spec, list):
                return None
            arguments = self._arguments(spec, 3, 3)
            return None if arguments is None else _cond(arguments, self.truthy)
        if operator in ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"):
            arguments = self._arguments(spec, 2, 2)
            if arguments is None or self.collation is not None:
                return None
            return _comparison(arguments, operator, self.compare, self.dialect)
        least, most = {"$add": (2, None), "$split": (2, 2), "$arrayElemAt": (2, 2), "$concat": (1, None), "$ifNull": (2, None)}[operator]
        arguments = self._arguments(spec, least, most)
        if arguments is None:
            return None
        if operator == "$add":
            return _add(arguments, self.require_numeric, self.bson_add, self.plain_numbers)
        if operator == "$split":
            return _split(*arguments)
        if operator == "$arrayElemAt":
            return _element_at(*arguments)
        if operator == "$concat":
            return _concat(arguments)
        return _if_null(arguments, self.missing, self.remove, self.undefined)


def _array(items: list[Compiled]) -> Compiled:
    return lambda document: [item(document) for item in items]


def _if_null(arguments: list[Compiled], missing: object, remove: object, undefined: type) -> Compiled:
    """``control_object_expressions``' ``$ifNull``: the first argument that is a value, else null."""

    def if_null(document: dict[str, Any]) -> Any:
        for argument in arguments:
            value = argument(document)
            if value is not None and value is not missing and value is not remove and not isinstance(value, undefined):
                return value
        return None

    return if_null


def _add(arguments: list[Compiled], require_numeric: Any, bson_add: Any, plain_numbers: bool) -> Compiled:
    """``numeric_expressions``' ``$add`` without dates (mongoeco's evaluator takes those)."""

    def add(document: dict[str, Any]) -> Any:
        values = [argument(document) for argument in arguments]
        for value in values:
            if value is None:
                return None
        for value in values:
            kind = type(value)
            if not (plain_numbers and (kind is int or kind is float)):
                if isinstance(value, datetime.datetime):
                    raise Fallback
                require_numeric("$add", value)
        result = values[0]
        for value in values[1:]:
            result = bson_add(result, value)
        return result

    return add


def _split(source: Compiled, delimiter: Compiled) -> Compiled:
    def split(document: dict[str, Any]) -> Any:
        text, separator = source(document), delimiter(document)
        if text is None or separator is None:
            return None
        if not isinstance(text, str) or not isinstance(separator, str) or separator == "":
            raise Fallback
        return text.split(separator)

    return split


def _element_at(array: Compiled, position: Compiled) -> Compiled:
    def element_at(document: dict[str, Any]) -> Any:
        values, index = array(document), position(document)
        if values is None or index is None:
            return None
        if not isinstance(values, list) or not isinstance(index, int) or isinstance(index, bool):
            raise Fallback
        if index < 0:
            index += len(values)
        if index < 0 or index >= len(values):
            return None
        return values[index]

    return element_at


def _concat(arguments: list[Compiled]) -> Compiled:
    def concat(document: dict[str, Any]) -> Any:
        parts: list[str] = []
        for argument in arguments:
            value = argument(document)
            if value is None:
                return None
            if not isinstance(value, str):
                raise Fallback
            parts.append(value)
        return "".join(parts)

    return concat


def _cond(arguments: list[Compiled], truthy: Callable[[Any], bool]) -> Compiled:
    condition, when_true, when_false = arguments
    return lambda document: when_true(document) if truthy(condition(document)) else when_false(document)


def _comparison(arguments: list[Compiled], operator: str, compare: Any, dialect: Any) -> Compiled:
    left, right = arguments
    return lambda document: compare(left(document), right(document), operator, dialect=dialect, collation=None)
