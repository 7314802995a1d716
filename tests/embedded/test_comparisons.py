"""Fix (aq) of mongoshift.embedded.patches.comparisons: ``$gt``/``$gte``/``$lt``/``$lte`` compare a value
only with an operand of its own type bracket, as mongod does.

The property tests hold the server to a small model of mongod's rule written here from its
definition (``ComparisonMatchExpression::matchesSingleElement``), not from mongoeco: brackets, null
and undefined as one, MinKey and MaxKey, NaN, a missing field, arrays tried element by element and
whole. Inside a bracket the model orders the values whose order it knows (numbers by value, strings by
code point, booleans, dates, ObjectIds, timestamps, arrays of those); values of the other brackets
(documents, binaries, regexes, code) are stored and meet operands of other brackets only.
The other tests pin what must not change: aggregation expressions, sorts and ``$max`` keep the total
order, and the ``_id`` walks of (af) read only the bound's bracket.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from typing import Any

import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from hypothesis import given, settings, strategies as st
from pymongo.collation import Collation

from ..conftest import examples
from .in_process import InProcessServer, sync_client

# ------------------------------------------------------------------------------- mongod's rule

MISSING = object()
OPERATORS = ("$gt", "$gte", "$lt", "$lte")


def canonical(value: Any) -> int:
    """mongod's canonical type of a value as pymongo gives it (a missing field: EOO, as undefined)."""
    if value is MISSING:
        return 0
    if isinstance(value, bool):
        return 40
    if isinstance(value, (int, float, Decimal128)):  # int32, Int64, double, decimal: one bracket
        return 10
    if isinstance(value, Code):
        return 60 if value.scope is None else 65
    if isinstance(value, str):
        return 15
    if value is None:
        return 5
    if isinstance(value, MinKey):
        return -1
    if isinstance(value, MaxKey):
        return 127
    if isinstance(value, dict):
        return 20
    if isinstance(value, list):
        return 25
    if isinstance(value, bytes):
        return 30
    if isinstance(value, ObjectId):
        return 35
    if isinstance(value, datetime.datetime):
        return 45
    if isinstance(value, Timestamp):
        return 47
    if isinstance(value, Regex):
        return 50
    raise AssertionError(f"no canonical type for {value!r}")


def nan(value: Any) -> bool:
    if isinstance(value, float):
        return value != value
    return isinstance(value, Decimal128) and value.to_decimal().is_nan()


def order(value: Any) -> tuple[Any, ...]:
    """The total order of the values this model orders (an array's elements included)."""
    kind = canonical(value)
    if kind == 10:
        if nan(value):
            return (kind, 0)
        return (kind, 1, value.to_decimal() if isinstance(value, Decimal128) else Decimal(value))
    if kind == 25:
        return (kind, [order(item) for item in value])  # lists compare element by element, then by length
    if kind == 35:
        return (kind, value.binary)
    if kind == 47:
        return (kind, value.time, value.inc)
    if kind in (5, -1, 127):
        return (kind,)
    assert kind in (15, 40, 45), value  # strings by code point (UTF-8 byte order), booleans, dates
    return (kind, value)


def element_matches(element: Any, operator: str, operand: Any) -> bool:
    """One value against the operand: mongod's ``matchesSingleElement``."""
    ect, rct = canonical(element), canonical(operand)
    if ect != rct:
        if ect + rct == 5:  # null and undefined (or a missing field)
            return operator in ("$gte", "$lte")
        if rct == -1:
            return operator in ("$gt", "$gte")
        if rct == 127:
            return operator in ("$lt", "$lte")
        return False
    if nan(element) or nan(operand):
        return nan(element) and nan(operand) and operator in ("$gte", "$lte")
    left, right = order(element), order(operand)
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[operator]


def mongod_matches(value: Any, operator: str, operand: Any) -> bool:
    """A field's value (or MISSING) against ``{field: {operator: operand}}``: an array's elements are
    tried, then the array itself."""
    if isinstance(value, list):
        return any(element_matches(item, operator, operand) for item in value) or element_matches(value, operator, operand)
    return element_matches(value, operator, operand)


def test_the_model_says_what_the_brief_and_the_documentation_say() -> None:
    """The model itself, on the cases MongoDB's documentation ("Comparison/Sort Order") spells out."""
    values = ["x", 5, True, datetime.datetime(2000, 1, 1), None, [1, "z"], MISSING]
    assert [v for v in values if mongod_matches(v, "$gte", 0)] == [5, [1, "z"]]
    assert [v for v in values if mongod_matches(v, "$lt", 10)] == [5, [1, "z"]]
    assert [v for v in values if mongod_matches(v, "$gte", None)] == [None, MISSING]
    assert [v for v in values if mongod_matches(v, "$gt", None)] == []
    assert [v for v in values if mongod_matches(v, "$gt", MinKey())] == values
    assert [v for v in values if mongod_matches(v, "$lt", MinKey())] == []
    assert mongod_matches(float("nan"), "$gte", Decimal128("NaN")) and not mongod_matches(float("nan"), "$gt", float("nan"))
    assert not mongod_matches(float("nan"), "$lt", 0) and not mongod_matches(1, "$gt", float("nan"))
    assert mongod_matches([1, 2], "$gt", [1]) and not mongod_matches([], "$gt", 0) and mongod_matches([], "$lt", [0])


# ------------------------------------------------------------------------------------- values

numbers = (
    st.integers(-5, 5) | st.builds(Int64, st.integers(-5, 5)) | st.sampled_from([0.5, -1.5, 2.0, float("inf"), float("-inf"), float("nan")])
    | st.sampled_from([Decimal128("1.5"), Decimal128("-3"), Decimal128("NaN"), Decimal128("Infinity")])
)
ordered = (
    numbers | st.text(alphabet="aZé0", max_size=2) | st.booleans()
    | st.sampled_from([datetime.datetime(2000, 1, 1), datetime.datetime(2020, 6, 1)])
    | st.sampled_from([ObjectId("0" * 24), ObjectId("f" * 24), Timestamp(1, 1), Timestamp(2, 0)])
)
specials = st.sampled_from([None, MinKey(), MaxKey()])
unordered = st.sampled_from([{"k": 1}, {}, Binary(b"\x01", 0), Binary(b"\x02" * 16, 4), Regex("^a", "i"), Code("f()"), Code("g()", {"x": 1})])
scalars = ordered | specials | unordered
#: What a field holds: a scalar of any bracket, an array of ordered scalars and specials, or nothing.
field_values = scalars | st.lists(ordered | specials, max_size=3) | st.just(MISSING)
#: Operands: the brackets the model orders, null, MinKey, MaxKey, arrays.
operands = ordered | specials | st.lists(ordered, max_size=2)


def stored(i: int, value: Any) -> dict[str, Any]:
    """A document with the value at ``a`` and at ``s.a`` (none of either for MISSING)."""
    if value is MISSING:
        return {"_id": i, "s": {}}
    return {"_id": i, "a": value, "s": {"a": value}}


# ---------------------------------------------------------------------------------- the answers


@examples(thorough=400, quick=60)
def test_comparisons_match_what_mongod_matches(server: InProcessServer, max_examples: int) -> None:
    """(aq) find (top-level and dotted fields, ``$not``) and aggregate ``$match`` against the model."""
    @settings(max_examples=max_examples)
    @given(values=st.lists(field_values, min_size=1, max_size=8), operator=st.sampled_from(OPERATORS), operand=operands)
    def check(values: list[Any], operator: str, operand: Any) -> None:
        client = sync_client(server)
        try:
            collection = client.comparisons.model
            collection.drop()
            collection.insert_many([stored(i, value) for i, value in enumerate(values)])
            expected = [i for i, value in enumerate(values) if mongod_matches(value, operator, operand)]
            rest = [i for i in range(len(values)) if i not in expected]
            for field in ("a", "s.a"):
                condition = {field: {operator: operand}}
                assert sorted(d["_id"] for d in collection.find(condition)) == expected, condition
                assert sorted(d["_id"] for d in collection.aggregate([{"$match": condition}])) == expected, condition
                assert collection.count_documents(condition) == len(expected), condition
                negated = {field: {"$not": {operator: operand}}}
                assert sorted(d["_id"] for d in collection.find(negated)) == rest, negated
        finally:
            client.close()

    check()


@examples(thorough=2_000, quick=300)
def test_the_interpreted_matcher_matches_what_mongod_matches(max_examples: int) -> None:
    """(aq) mongoeco's interpreted matcher (``QueryEngine.match``: ``$elemMatch``, ``$pull`` and
    validators take it) on documents as the engine holds them, against the model."""
    from mongoeco.core.codec import DocumentCodec
    from mongoeco.core.filtering import QueryEngine

    from mongoshift.embedded import patches

    patches.apply()

    @settings(max_examples=max_examples)
    @given(value=field_values, operator=st.sampled_from(OPERATORS), operand=operands)
    def check(value: Any, operator: str, operand: Any) -> None:
        document = DocumentCodec.decode(DocumentCodec.encode(stored(0, value)), preserve_bson_wrappers=True)
        wanted = mongod_matches(value, operator, operand)
        for field in ("a", "s.a"):
            condition = DocumentCodec.decode(DocumentCodec.encode({field: {operator: operand}}), preserve_bson_wrappers=True)
            assert QueryEngine.match(document, condition) is wanted, (field, value, operator, operand)

    check()


@pytest.mark.parametrize(
    "values",
    [
        [-(2**40), -1, 0, 1, 2, 2**40],
        ["", "A", "a", "ab", "b", "é", "😀"],  # by code point: the order of their UTF-8 bytes
        [False, True],
        [ObjectId(bytes([0] * 12)), ObjectId(bytes([0] * 11 + [1])), ObjectId(bytes([1] + [0] * 11)), ObjectId(bytes([255] * 12))],
    ],
    ids=["ints", "strings", "booleans", "object ids"],
)
def test_two_values_of_one_type_compare_by_mongods_order(server: InProcessServer, values: list[Any]) -> None:
    """(bc) Two ObjectIds compare by their bytes (Python's order of them, without mongoeco's collation
    layers); ints, strings and booleans, which mongoeco compares itself, pinned beside them. Every
    operator, every operand among the values (equal ones included), as a field and as ``_id``."""
    client = sync_client(server)
    try:
        collection = client.comparisons.same_type
        collection.drop()
        collection.insert_many([{"_id": value, "a": value} for value in values])
        for operand in values:
            for operator in OPERATORS:
                expected = sorted(i for i, value in enumerate(values) if element_matches(value, operator, operand))
                for field in ("a", "_id"):
                    found = sorted(values.index(d["a"]) for d in collection.find({field: {operator: operand}}))
                    assert found == expected, (field, operator, operand)
                ranged = sorted(values.index(d["a"]) for d in collection.find({"_id": {operator: operand}}, sort=[("_id", 1)], limit=100))
                assert ranged == expected, ("walk", operator, operand)
    finally:
        client.close()


def test_a_range_matches_only_values_of_its_bracket(server: InProcessServer) -> None:
    """(aq) The cases of the defect as found: numbers no longer match strings, booleans, dates, null."""
    client = sync_client(server)
    try:
        collection = client.comparisons.brackets
        collection.drop()
        collection.insert_many([
            {"_id": 1, "a": "x"}, {"_id": 2, "a": 5}, {"_id": 3, "a": True}, {"_id": 4, "a": datetime.datetime(2000, 1, 1)},
            {"_id": 5, "a": None}, {"_id": 6, "a": [1, "z"]}, {"_id": 7},
        ])
        collection.create_index("a")

        def ids(filter_: dict[str, Any], **options: Any) -> list[int]:
            return sorted(d["_id"] for d in collection.find(filter_, **options))

        assert ids({"a": {"$gte": 0}}) == [2, 6]
        assert ids({"a": {"$gt": 0}}) == [2, 6]
        assert ids({"a": {"$lt": 10}}) == [2, 6]
        assert ids({"a": {"$gte": 0, "$lt": 10}}) == [2, 6]
        assert ids({"a": {"$gte": 0}}, hint="a_1") == [2, 6]
        assert ids({"a": {"$gte": ""}}) == [1, 6]
        assert ids({"a": {"$gte": None}}) == [5, 7]
        assert ids({"a": {"$lt": None}}) == []
        assert ids({"a": {"$gt": MinKey()}}) == [1, 2, 3, 4, 5, 6, 7]
        assert ids({"a": {"$lte": MinKey()}}) == []
        assert ids({"a": {"$lt": MaxKey()}}) == [1, 2, 3, 4, 5, 6, 7]
        assert ids({"a": {"$elemMatch": {"$gte": 0}}}) == [6]
        assert ids({"a": {"$lt": datetime.datetime(2001, 1, 1)}}) == [4]
        others = client.comparisons.ids
        others.drop()
        others.insert_many([{"_id": "s"}, {"_id": 3}, {"_id": True}])
        assert [d["_id"] for d in others.find({"_id": {"$gte": 0}})] == [3]
        assert [d["_id"] for d in others.find({"_id": {"$gte": 0}}).sort("_id", 1)] == [3]
        assert [d["_id"] for d in others.find({"_id": {"$gte": 0}, "x": {"$exists": False}}).sort("_id", 1).limit(5)] == [3]
    finally:
        client.close()


def test_an_array_operand_compares_with_the_whole_array(server: InProcessServer) -> None:
    """(aq) An array operand orders the stored array itself (element by element, then by length); its
    elements, of other brackets, do not match it. mongoeco never ordered a wire array operand."""
    client = sync_client(server)
    try:
        collection = client.comparisons.arrays
        collection.drop()
        collection.insert_many([{"_id": 1, "a": [0]}, {"_id": 2, "a": [1, 2]}, {"_id": 3, "a": []}, {"_id": 4, "a": 5}, {"_id": 5, "a": [[0, 1]]}])
        assert sorted(d["_id"] for d in collection.find({"a": {"$gt": []}})) == [1, 2, 5]
        assert sorted(d["_id"] for d in collection.find({"a": {"$gte": [0]}})) == [1, 2, 5]
        assert sorted(d["_id"] for d in collection.find({"a": {"$lt": [1]}})) == [1, 3, 5]
        assert sorted(d["_id"] for d in collection.find({"a": {"$lte": [[0, 1]]}})) == [1, 2, 3, 5]
    finally:
        client.close()


def test_nan_matches_only_nan_and_only_inclusively(server: InProcessServer) -> None:
    """(aq) NaN, double or decimal, on either side: ``$lt``/``$gt`` never, ``$lte``/``$gte`` NaN only."""
    client = sync_client(server)
    try:
        collection = client.comparisons.nan
        collection.drop()
        collection.insert_many([{"_id": 1, "a": float("nan")}, {"_id": 2, "a": Decimal128("NaN")}, {"_id": 3, "a": 1}, {"_id": 4, "a": float("-inf")}])
        assert sorted(d["_id"] for d in collection.find({"a": {"$gte": float("nan")}})) == [1, 2]
        assert sorted(d["_id"] for d in collection.find({"a": {"$lte": Decimal128("NaN")}})) == [1, 2]
        assert list(collection.find({"a": {"$gt": float("nan")}})) == []
        assert sorted(d["_id"] for d in collection.find({"a": {"$lt": 5}})) == [3, 4]
        assert sorted(d["_id"] for d in collection.find({"a": {"$gte": float("-inf")}})) == [3, 4]
    finally:
        client.close()


def test_a_collation_compares_strings_only_among_strings(server: InProcessServer) -> None:
    """(aq) Under a collation the brackets are the same; strings compare by it."""
    client = sync_client(server)
    try:
        collection = client.comparisons.collated
        collection.drop()
        collection.insert_many([{"_id": 1, "a": "b"}, {"_id": 2, "a": "B"}, {"_id": 3, "a": 5}, {"_id": 4, "a": True}, {"_id": 5, "a": "a"}])
        collation = Collation("en", strength=2)
        assert sorted(d["_id"] for d in collection.find({"a": {"$gte": "B"}}, collation=collation)) == [1, 2]
        assert sorted(d["_id"] for d in collection.find({"a": {"$gt": 0}}, collation=collation)) == [3]
    finally:
        client.close()


def test_a_partial_index_is_not_taken_for_a_value_of_another_bracket(server: InProcessServer) -> None:
    """(aq) ``{a: "x"}`` does not imply a partial filter ``{a: {$gt: 0}}``: the string is outside that
    index, so the query reads the collection and finds it (the index would have left it out)."""
    client = sync_client(server)
    try:
        collection = client.comparisons.partial
        collection.drop()
        collection.create_index("a", partialFilterExpression={"a": {"$gt": 0}})
        collection.insert_many([{"_id": 1, "a": "x"}, {"_id": 2, "a": 5}])
        assert [d["_id"] for d in collection.find({"a": "x"})] == [1]
        assert [d["_id"] for d in collection.find({"a": 5})] == [2]
        assert [d["_id"] for d in collection.find({"a": 5}).hint("a_1")] == [2]
    finally:
        client.close()


def test_expressions_sorts_and_updates_keep_the_total_order(server: InProcessServer) -> None:
    """What mongod orders by the total BSON order stays so: ``$expr`` comparisons, a sort, ``$max``."""
    client = sync_client(server)
    try:
        collection = client.comparisons.total
        collection.drop()
        collection.insert_many([{"_id": 1, "a": "x"}, {"_id": 2, "a": 5}, {"_id": 3, "a": None}])
        assert sorted(d["_id"] for d in collection.find({"$expr": {"$gt": ["$a", 0]}})) == [1, 2]
        assert [d["_id"] for d in collection.aggregate([{"$match": {"$expr": {"$lt": ["$a", 10]}}}, {"$sort": {"_id": 1}}])] == [2, 3]
        assert [d["_id"] for d in collection.find().sort("a", 1)] == [3, 2, 1]
        collection.update_one({"_id": 2}, {"$max": {"a": "y"}})
        collection.update_one({"_id": 1}, {"$min": {"a": 0}})
        assert [d["a"] for d in collection.find().sort("_id", 1)] == [0, "y", None]
    finally:
        client.close()


def test_pull_by_a_range_removes_values_of_its_bracket_only(server: InProcessServer) -> None:
    """(aq) ``$pull`` with a range (mongoeco's interpreted matcher) removes numbers, not the others."""
    client = sync_client(server)
    try:
        collection = client.comparisons.pull
        collection.drop()
        collection.insert_one({"_id": 1, "a": [1, "x", True, 7, None]})
        collection.update_one({"_id": 1}, {"$pull": {"a": {"$gte": 0}}})
        assert collection.find_one({"_id": 1}) == {"_id": 1, "a": ["x", True, None]}
    finally:
        client.close()


# --------------------------------------------------------------------------- the _id walks (af)


@contextmanager
def matches_counted() -> Iterator[list[int]]:
    """How many documents mongoeco's compiled matcher is asked about."""
    from mongoeco.core.compiled_query import CompiledQuery

    seen = [0]
    match = CompiledQuery.match

    def counted(query: Any, document: Any, *args: Any, **kwargs: Any) -> Any:
        seen[0] += 1
        return match(query, document, *args, **kwargs)

    CompiledQuery.match = counted  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        CompiledQuery.match = match  # type: ignore[method-assign]


def test_an_id_range_walks_only_its_bracket(server: InProcessServer) -> None:
    """(af) with (aq): a range on ``_id`` matches its bracket only, so a sorted, limited read that runs
    out of numbers stops at the last number instead of walking every string, date and ObjectId after
    them, and never meets the document ``_id`` (whose order it does not model) at the end."""
    client = sync_client(server)
    try:
        collection = client.comparisons.walk
        collection.drop()
        collection.insert_many(
            [{"_id": i} for i in range(10)] + [{"_id": f"s{i:04}"} for i in range(500)]
            + [{"_id": ObjectId(f"{i:024x}")} for i in range(500)] + [{"_id": None}, {"_id": True}, {"_id": {"d": 1}}, {"_id": float("nan")}]
        )
        with matches_counted() as seen:
            found = [d["_id"] for d in collection.find({"_id": {"$gte": 5}}, sort=[("_id", 1)], limit=100)]
        assert (found, seen[0]) == ([5, 6, 7, 8, 9], 5)
        with matches_counted() as seen:
            found = [d["_id"] for d in collection.find({"_id": {"$lt": 3}}, sort=[("_id", -1)], limit=100)]
        assert (found, seen[0]) == ([2, 1, 0], 3)
        with matches_counted() as seen:
            assert collection.count_documents({"_id": {"$gt": "s0490"}}) == 9
        assert seen[0] == 9
    finally:
        client.close()


def test_object_id_ranges_compare_their_bytes_without_copying_them(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bx) A top-level range on ObjectIds compares the stored value's bytes with the operand's
    through bson's own getter: neither mongoeco's comparison steps nor its ObjectId's ``binary``, which
    copies the 12 bytes (a ``pipeline=`` range compares each document's ``_id`` four times). The
    answers are the bytes' order, for each operator, an operand inside, at and outside the stored
    ids, and beside values of other types, arrays of ObjectIds and missing fields."""
    from mongoeco.types import ObjectId as EcoObjectId

    copies = [0]
    binary = vars(EcoObjectId)["binary"]

    def counted(self: Any) -> bytes:
        copies[0] += 1
        return binary.fget(self)  # type: ignore[no-any-return]

    client = sync_client(server)
    try:
        collection = client.comparisons.object_ids
        collection.drop()
        ids = [ObjectId(f"{i:024x}") for i in range(0, 600, 2)]
        collection.insert_many(
            [{"_id": value, "a": value} for value in ids]
            + [{"_id": i, "a": [ids[i], ids[-1 - i]]} for i in range(5)] + [{"_id": "none"}, {"_id": "int", "a": 7}]
        )
        monkeypatch.setattr(EcoObjectId, "binary", property(counted))
        for operand in (ObjectId(f"{0:024x}"), ObjectId(f"{301:024x}"), ids[150], ObjectId("f" * 24)):
            for operator in OPERATORS:
                expected = sum(element_matches(value, operator, operand) for value in ids)
                assert collection.count_documents({"_id": {operator: operand}}) == expected, (operator, operand)
                arrays = sum(any(element_matches(v, operator, operand) for v in (ids[i], ids[-1 - i])) for i in range(5))
                assert collection.count_documents({"a": {operator: operand}}) == expected + arrays, (operator, operand)
        assert copies[0] == 0  # without the cut: 7,320 copies, one a comparison
    finally:
        client.close()
