"""Fix (ar) of mongoeco.embedded.patches: the answers of ``$type`` and ``$in`` on a top-level field kept
per kind of value (``$type``) or per value (``$in``).

One compiled matcher with the fix is compared with one without it (mongoeco's code generation, kept
as ``__wrapped__``) over many documents in turn, on values of every type, under every alias and
lists of values of every type: an answer kept for one document is never given for another whose
answer differs."""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from hypothesis import given, settings, strategies as st

from ..conftest import examples
from .in_process import InProcessServer, sync_client

ALIASES = [
    "double", "string", "object", "array", "binData", "objectId", "bool", "date", "null", "regex",
    "javascript", "javascriptWithScope", "int", "timestamp", "long", "decimal", "minKey", "maxKey", "number",
    1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 13, 15, 16, 17, 18, 19, -1, 127,
]
leaves = (
    st.integers(-(2**64), 2**64) | st.sampled_from([0, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63)])
    | st.floats(allow_nan=True) | st.builds(Int64, st.integers(-(2**63), 2**63 - 1))
    # bounded: Decimal128 holds 34 digits, and a wider decimal fails in the strategy, not in the matcher
    | st.builds(lambda d: Decimal128(str(d)), st.decimals(min_value=-(10**30), max_value=10**30, places=2))
    | st.sampled_from([Decimal128("NaN"), Decimal128("-0"), Decimal128("1E+6000"), Decimal128("Infinity")])
    | st.text(max_size=3) | st.booleans() | st.none() | st.builds(ObjectId, st.binary(min_size=12, max_size=12))
    | st.sampled_from([
        datetime.datetime(2001, 1, 1), Binary(b"\x01", 0), Binary(b"x", 4), b"raw", Regex("^a", "i"), re.compile("b"),
        Timestamp(1, 2), MinKey(), MaxKey(), Code("f()"), Code("g()", {"x": 1}),
    ])
)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2), max_leaves=5)


def _answer(match: Any, document: dict[str, Any]) -> Any:
    """True, False, or the kind of error raised."""
    try:
        return bool(match(document))
    except Exception as error:
        return type(error)


def _plans(spec: Any, operator: str = "$type") -> Iterator[Any]:
    from mongoeco.core.query_plan import compile_filter

    for query in ({"f": {operator: spec}}, {"$and": [{"g": 1}, {"f": {operator: spec}}]}, {"f": {"$not": {operator: spec}}}):
        yield compile_filter(query)


def _original(plan: Any) -> Any:
    """The matcher mongoeco compiles for ``plan``, without the fix."""
    from mongoeco.core.compiled_query import CompiledQuery

    class Original(CompiledQuery):
        _node_to_code = CompiledQuery._node_to_code.__wrapped__  # type: ignore[attr-defined]

    return Original(plan)


@examples(thorough=600, quick=150)
def test_type_and_in_answer_what_mongoecos_matcher_answers(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.core.compiled_query import CompiledQuery

    @settings(max_examples=max_examples)
    @given(
        spec=st.sampled_from(ALIASES) | st.lists(st.sampled_from(ALIASES), min_size=1, max_size=3),
        listed=st.lists(leaves, max_size=4),
        documents=st.lists(st.dictionaries(st.sampled_from(["f", "g"]), values, max_size=2), min_size=1, max_size=8),
    )
    def check(spec: Any, listed: list[Any], documents: list[dict[str, Any]]) -> None:
        for plan in [*_plans(spec), *_plans(listed, "$in")]:
            compiled, original = CompiledQuery(plan), _original(plan)  # one matcher for all the documents
            for document in documents:
                assert _answer(compiled.match, document) == _answer(original.match, document), (plan, document)

    check()


KINDS: list[Any] = [
    0, 2**31 - 1, 2**31, -(2**31), -(2**31) - 1, 2**63 - 1, -(2**63), 2**63, 1.5, float("nan"), True, False, None, "s", "",
    datetime.datetime(2001, 1, 1), ObjectId(), Int64(3), Decimal128("1.5"), Decimal128("NaN"), [1], [], {"a": 1}, {},
    Binary(b"x", 4), b"raw", Regex("^a"), Timestamp(1, 2), MinKey(), MaxKey(), Code("f()"), Code("g()", {"x": 1}),
]


@pytest.mark.parametrize("spec", ALIASES)
def test_one_matcher_answers_each_kind_of_value_as_mongoeco(server: InProcessServer, spec: Any) -> None:
    """Every kind of value, in turn, through one compiled matcher: the answer kept for one kind is
    never given for another (an int32 and an int64, a float and a bool, a value and no value)."""
    from mongoeco.core.compiled_query import CompiledQuery

    documents: list[dict[str, Any]] = [{"f": value} for value in KINDS] + [{}, {"g": 1}, {"f": -0.0}, {"f": 0.0}, {"f": 1}, {"f": 1.0}]
    listed = [KINDS[:4], [None, 1], [0.0], [-0.0], ["s", True], [1.0], [float("nan")], [[1]], [{"a": 1}], [Decimal128("1.5")]]
    for plan in [*_plans(spec), *(p for values_ in listed for p in _plans(values_, "$in"))]:
        compiled, original = CompiledQuery(plan), _original(plan)
        for document in documents * 2:
            assert _answer(compiled.match, document) == _answer(original.match, document), (plan, document)


def test_a_number_bracket_count_decides_each_type_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The background engine's count of its number bracket asks mongoeco's type check once per kind
    of value, not once per document (it did so for each of the 300 documents before the fix)."""
    from mongoeco.core.filtering import QueryEngine

    client = sync_client(server)
    orders = client.t_type.orders
    orders.drop()
    orders.insert_many([{"_id": i, "__v": 1} for i in range(300)] + [{"_id": f"s{i}", "__v": 1} for i in range(5)])
    calls = 0
    evaluate = QueryEngine._evaluate_type.__func__

    def counted(cls: Any, *args: Any, **kwargs: Any) -> bool:
        nonlocal calls
        calls += 1
        return bool(evaluate(cls, *args, **kwargs))

    monkeypatch.setattr(QueryEngine, "_evaluate_type", classmethod(counted))
    assert orders.count_documents({"$and": [{"__v": 1}, {"_id": {"$type": "number"}}]}) == 300
    assert orders.count_documents({"__v": 1, "_id": {"$not": {"$type": "number"}}}) == 5
    assert 0 < calls <= 4


def test_a_count_of_what_is_left_decides_each_version_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The coordinator's count of what is left (``__v: {$in: [null, 1]}``) runs the original ``$in``
    code once per version value met, not once per document."""
    from mongoeco.core.filtering import QueryEngine

    client = sync_client(server)
    orders = client.t_type.left
    orders.drop()
    orders.insert_many([{"_id": i, "__v": i % 3 or None} for i in range(300)] + [{"_id": -1}])
    calls = 0
    matches = QueryEngine._in_item_matches_candidate

    def counted(*args: Any, **kwargs: Any) -> bool:
        nonlocal calls
        calls += 1
        return bool(matches(*args, **kwargs))

    monkeypatch.setattr(QueryEngine, "_in_item_matches_candidate", staticmethod(counted))
    from mongoeco.core.compiled_query import CompiledQuery

    CompiledQuery._compile_expression.cache_clear()  # the generated code binds the function when compiled
    try:
        assert orders.count_documents({"__v": {"$in": [None, 1]}}) == 201
    finally:
        CompiledQuery._compile_expression.cache_clear()  # no generated code keeps the counting function
    assert 0 < calls <= 8
