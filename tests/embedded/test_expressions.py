"""Issue 27, item 2: the expressions fix (an) compiles (mongoshift.embedded.patches.expressions) give
the values mongoeco's own evaluator gives.

The documents are stored by the in-process server and read back in the form the fast path hands to a
stage (the engine's stored documents: mongoeco's numeric wrappers, internal arrays and documents);
the expressions go through mongoeco's codec as the update's do. For each drawn expression and
document, a compiled callable that returns must return what ``_evaluate_expression_with_missing``
returns (the same value, type for type at every node: int32, int64, double, Decimal128, NaN, -0.0),
and mongoeco must not raise then. Where the callable raises, the fast path asks mongoeco's evaluator,
so its errors (codes and messages) are mongoeco's by construction; the property test checks that the
callables answer on their own for at least a fifth of its drawn expressions (it is not passing by falling
back), and the table test that each operator answers on its own for over 100 pairs of values and raises
only where mongoeco raises (or takes ``$add``'s date branch, left to mongoeco).
"""

from __future__ import annotations

import datetime
from functools import partial
from typing import Any

from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from hypothesis import given, settings, strategies as st

from mongoshift.embedded.patches.expressions import Compiler, Fallback

from ..conftest import examples
from .in_process import InProcessServer, sync_client

FIELDS = ["a", "b", "n", "s", "l"]
scalars = (
    st.integers(-3, 3) | st.sampled_from([2**31 - 1, -(2**31), 2**40, 2**63 - 1, -(2**63)]) | st.builds(Int64, st.integers(-3, 3))
    | st.sampled_from([1.0, -0.0, 2.5, float("nan"), float("inf"), 1e308])
    | st.sampled_from([Decimal128("1"), Decimal128("1.0"), Decimal128("-0"), Decimal128("NaN"), Decimal128("9.999999999999999999999999999999999E+6144")])
    | st.text(alphabet="ab@", max_size=4) | st.booleans() | st.none()
    | st.sampled_from([datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), ObjectId("0" * 24)])
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2), max_leaves=5
)
paths = st.sampled_from([f"${name}" for name in [*FIELDS, "missing", "b.p", "l.0", "l.p", "a.q.p", "$ROOT", "$CURRENT.a", "$REMOVE"]])
constants = scalars | st.builds(lambda v: {"$literal": v}, values) | st.builds(lambda v: {"$const": v}, values)


def _operators(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The compiled operators, with their usual arities and some others (not compiled: mongoeco answers),
    and a few operators outside the subset, so that compiled and uncompiled parts nest. Their arguments
    are mostly of the kinds the operator takes (strings for ``$split``, arrays for ``$arrayElemAt``...),
    so that most expressions have a value rather than mongoeco's error."""
    strings = st.sampled_from(["$s", "$s", "$a", "$missing"]) | st.text(alphabet="ab@", max_size=4) | st.none() | inner
    numbers = st.sampled_from(["$n", "$n", "$a", "$missing"]) | scalars | inner
    arrays = (
        st.sampled_from(["$l", "$l", "$s", "$missing"]) | st.builds(lambda a: {"$split": [a, "@"]}, strings)
        | st.builds(lambda v: {"$literal": v}, st.lists(values, max_size=3)) | inner
    )
    anything = inner | strings | numbers
    indexes = st.sampled_from([0, 1, -1, 2, -2, 3, -3, 5, -5, 1.0, Int64(1), Int64(-1), True, None, "$n", "$missing"]) | inner
    return (
        st.builds(lambda a: {"$add": a}, st.lists(numbers, min_size=2, max_size=3) | st.lists(numbers, max_size=1) | inner)
        | st.builds(lambda a: {"$ifNull": a}, st.lists(anything, min_size=2, max_size=3) | st.lists(anything, max_size=1))
        | st.builds(lambda a, b: {"$split": [a, b]}, strings, st.sampled_from(["@", "@", "", "b", "ab", None, 1, "$missing"]) | strings)
        | st.builds(lambda a, b: {"$arrayElemAt": [a, b]}, arrays, indexes)
        | st.builds(lambda a: {"$arrayElemAt": a}, st.lists(arrays, max_size=3))
        | st.builds(lambda a: {"$concat": a}, st.lists(strings, min_size=0, max_size=3))
        | st.builds(lambda a, b, c: {"$cond": [a, b, c]}, anything, anything, anything)
        | st.builds(lambda a, b, c: {"$cond": {"if": a, "then": b, "else": c}}, anything, anything, anything)
        | st.builds(lambda a: {"$cond": a}, st.lists(anything, max_size=4))
        | st.builds(
            lambda o, a: {o: a}, st.sampled_from(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte"]),
            st.lists(anything, min_size=2, max_size=2) | st.lists(anything, max_size=3),
        )
        | st.builds(lambda a: {"$toUpper": a}, strings)
        | st.builds(lambda a: {"$type": a}, anything)
        | st.dictionaries(st.sampled_from(["p", "q"]), inner, min_size=1, max_size=2)
        | st.lists(inner, max_size=3)
    )


#: Each drawn expression is an operator's (of any family), its arguments nested expressions of any kind.
expressions = _operators(st.recursive(paths | constants, _operators, max_leaves=4))


def same(a: Any, b: Any) -> bool:
    """The same value with the same types at every node: mongoeco's numeric wrappers by their values,
    a double by its repr (NaN equals NaN, -0.0 is not 0.0), fields in the same order."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return repr(a) == repr(b)
    if type(a).__module__.startswith("mongoeco") and hasattr(a, "value"):
        return same(a.value, b.value)
    return bool(a == b) or repr(a) == repr(b)


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        return ("value", call())
    except Exception as error:  # mongoeco's answer, error included
        return ("error", type(error), getattr(error, "code", None), str(error))


@examples(thorough=5000, quick=500)
def test_a_compiled_expression_gives_what_mongoecos_evaluator_gives(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.api import AsyncMongoClient
    from mongoeco.core.aggregation import runtime
    from mongoeco.core.aggregation.evaluation_environment import aggregation_environment
    from mongoeco.core.codec import DocumentCodec
    from mongoeco.core.expression_context import ensure_expression_context
    from mongoeco.engines.memory import MemoryEngine

    dialect = AsyncMongoClient(MemoryEngine()).db.coll._mongodb_dialect  # a collection's, as the update's semantics give it
    environment = aggregation_environment(ensure_expression_context(None))
    environment.preserve_numeric_conversion_types = True  # as pipeline_updates.decide builds it
    environment = aggregation_environment(environment)
    compiler = Compiler(dialect, environment)
    evaluator = runtime._evaluate_expression_with_missing
    client = sync_client(server)
    collection = client.expressions.docs
    engine = server.engine
    answered = {"compiled": 0, "fell back": 0, "not compiled": 0}

    @settings(max_examples=max_examples, deadline=None)
    @given(
        document=st.fixed_dictionaries(
            {"s": st.text(alphabet="ab@", max_size=6) | values, "n": scalars, "l": st.lists(values, max_size=4)},
            optional={"a": values, "b": values},
        ),
        expression=expressions,
    )
    def check(document: dict[str, Any], expression: Any) -> None:
        collection.delete_many({})
        collection.insert_one({"_id": 1, **document})
        ((data),) = list(engine._storage["expressions"]["docs"].values())
        stored = engine._borrow_storage_document(data)  # what decide() hands to the stages
        ((_, (internal,)),) = DocumentCodec.to_internal({"e": [expression]}).items()  # the update's codec
        expected = _outcome(lambda: evaluator(stored, internal, environment, dialect=dialect))
        function = compiler.top(internal)
        if function is None:
            answered["not compiled"] += 1
            return
        got = _outcome(lambda: function(stored))
        if got[0] == "error":
            answered["fell back"] += 1  # the fast path asks the evaluator: its answer is `expected`
            return
        answered["compiled"] += 1
        assert expected[0] == "value", (document, expression, got, expected)
        assert same(got[1], expected[1]), (document, expression, got, expected)

    try:
        check()
    finally:
        client.close()
    assert answered["compiled"] > max_examples // 5, answered  # not passing by falling back


def test_the_engines_expressions_are_all_compiled() -> None:
    """The ``pipeline=`` bench's stages and the engine's version and revision stamp: every expression has a callable."""
    from mongoeco.api import AsyncMongoClient
    from mongoeco.core.aggregation.evaluation_environment import aggregation_environment
    from mongoeco.engines.memory import MemoryEngine

    dialect = AsyncMongoClient(MemoryEngine()).db.coll._mongodb_dialect
    compiler = Compiler(dialect, aggregation_environment(None))
    for expression in ("$name", "$a.b", {"$arrayElemAt": [{"$split": ["$email", "@"]}, 1]}, {"$literal": 2}, {"$literal": {"x": [1]}},
                       {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}, {"$concat": ["$a", "-", "$b"]}, {"$cond": [{"$eq": ["$a", 1]}, "x", "y"]}):
        assert compiler.top(expression) is not None, expression
    for expression in ("$$ROOT", {"a": "$b"}, {"$toUpper": "$a"}, {"$add": 1}, {"$cond": [1, 2]}, {"$ifNull": ["$a", "$$REMOVE"]}, {}):
        assert compiler.top(expression) is None, expression


#: Values of every BSON kind the operators meet, numeric edges included.
POOL: list[Any] = [
    0, 1, -1, 2, -2, 5, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63), Int64(1), Int64(-1), Int64(2**63 - 1), Int64(-(2**63)),
    1.0, -0.0, 2.5, float("nan"), float("inf"), float("-inf"), 1e308,
    Decimal128("1"), Decimal128("-0"), Decimal128("2.50"), Decimal128("NaN"), Decimal128("Infinity"), Decimal128("9.999999999999999999999999999999999E+6144"),
    "", "a", "a@b", "@", "b@@c", "@@", None, True, False, datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), ObjectId("0" * 24),
    [], [1, "x"], [[1], None], {}, {"p": 1}, Regex("a"), Binary(b"x", 0), Timestamp(1, 2), MinKey(), MaxKey(),
]
BINARY = ["$add", "$split", "$arrayElemAt", "$concat", "$ifNull", "$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$cond"]


def test_each_operator_on_every_pair_of_values_gives_what_mongoecos_evaluator_gives(server: InProcessServer) -> None:
    """Every compiled operator on every pair of the pool's values (and a missing field), read from a
    stored document or given as a literal: when the callable answers, mongoeco's evaluator gives the
    same value; where it raises, mongoeco raised too or took a branch the callable leaves to it."""
    from mongoeco.api import AsyncMongoClient
    from mongoeco.core.aggregation import runtime
    from mongoeco.core.aggregation.evaluation_environment import aggregation_environment
    from mongoeco.core.codec import DocumentCodec
    from mongoeco.core.expression_context import ensure_expression_context
    from mongoeco.engines.memory import MemoryEngine

    dialect = AsyncMongoClient(MemoryEngine()).db.coll._mongodb_dialect
    environment = aggregation_environment(ensure_expression_context(None))
    compiler = Compiler(dialect, environment)
    client = sync_client(server)
    try:
        collection = client.expressions.pool
        collection.drop()
        collection.insert_one({"_id": 1, **{f"v{i}": value for i, value in enumerate(POOL)}})
        ((data),) = list(server.engine._storage["expressions"]["pool"].values())
        stored = server.engine._borrow_storage_document(data)
    finally:
        client.close()
    evaluator = runtime._evaluate_expression_with_missing
    fields = [f"$v{i}" for i in range(len(POOL))] + ["$missing"]
    seconds = [*fields, *({"$literal": value} for value in POOL)]
    answered: dict[str, int] = dict.fromkeys(BINARY, 0)
    for operator in BINARY:
        for first in fields:
            for second in seconds:
                expression = {operator: [first, second, "$v1"] if operator == "$cond" else [first, second]}
                ((_, (internal,)),) = DocumentCodec.to_internal({"e": [expression]}).items()
                function = compiler.top(internal)
                assert function is not None, expression
                expected = _outcome(partial(evaluator, stored, internal, environment, dialect=dialect))
                got = _outcome(partial(function, stored))
                if got[0] == "error":  # mongoeco raised too, or (a date in $add) took a branch left to it
                    assert expected[0] == "error" or (operator == "$add" and got[1] is Fallback), (expression, got, expected)
                    continue
                answered[operator] += 1
                assert expected[0] == "value" and same(got[1], expected[1]), (expression, got, expected)
    assert all(count > 100 for count in answered.values()), answered
