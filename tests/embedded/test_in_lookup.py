"""Fix (k) of mongoshift.embedded.patches.queries: ``$in`` and ``$nin`` look each candidate up in a set of
the listed values' equality keys instead of comparing it with every listed value.

The fix is only right if two values with keys have equal keys exactly when mongoeco's own comparison
says they are equal, and if a null candidate matches no value that has a key: the first two tests hold
the keys to that comparison over generated values of every kind, as the server stores them (decoded from
what pymongo sends). The third runs generated ``$in``/``$nin`` queries through the wire and compares their
answers with those of mongoeco's original matcher, swapped back in. Binaries are left out of the
generated values: there mongoeco's comparison is not mongod's, and the keys follow mongod (the last
test), and so it is for a double beside the decimal of its shortest form (0.1 and Decimal128("0.1")). The
count of comparisons (the cost) is in test_patch_costs.py.
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from hypothesis import given, settings, strategies as st

from ..conftest import examples
from .in_process import InProcessServer, sync_client

pytest.importorskip("mongoeco")

MISSING = object()

# No double without an exact decimal form beside a decimal (0.1 and Decimal128("0.1")): inside documents and
# arrays compared whole, mongoeco's comparison is still not mongod's there (fix (az) makes it so at the top).
numbers = st.sampled_from([0, 1, -1, 2, 2**31, 2**53 + 1, 0.0, -0.0, 1.0, 2.5, float(2**53), float("inf"), float("-inf"), float("nan")])
wrapped = st.sampled_from(
    [Int64(0), Int64(1), Int64(2**53 + 1), Int64(2**31)]
    + [Decimal128(text) for text in ("0", "-0", "1", "1.0", "1.00", "2.5", "Infinity", "-Infinity", "NaN", "-NaN", "9007199254740993", "1E+2")]
)
others = st.sampled_from(
    [
        True, False, "", "1", "a", "A", datetime.datetime(2000, 1, 1), datetime.datetime(2000, 1, 1, 0, 0, 0, 1000),
        ObjectId("0" * 24), ObjectId("f" * 24), Binary.from_uuid(uuid.UUID(int=1)), Binary.from_uuid(uuid.UUID(int=2)),
        Timestamp(1, 1), Timestamp(1, 2),
        Regex("^a"), Code("f()"), None, MinKey(), MaxKey(),
    ]
)
scalars = numbers | wrapped | others
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    max_leaves=5,
)


def stored(value: Any, *, internal: bool = False) -> Any:
    """The value as the server holds it: decoded from BSON the way requests are, and with ``internal``
    as the engine keeps a stored document's values (subdocuments, arrays and binaries of its own types)."""
    from mongoeco.core.codec import _own_internal_bson
    from mongoeco.wire import bson_bridge

    from mongoshift.embedded import patches

    patches.apply()
    convert = getattr(bson_bridge.decode_wire_value, "__wrapped__", bson_bridge.decode_wire_value)
    decoded = convert(value)
    return _own_internal_bson(decoded) if internal else decoded


@examples(thorough=5_000, quick=600)
def test_in_keys_agree_with_the_original_comparison(max_examples: int) -> None:
    from mongoeco.compat import MONGODB_DIALECT_70, MONGODB_DIALECT_80, MONGODB_DIALECT_90
    from mongoeco.core.filtering import QueryEngine

    from mongoshift.embedded.patches.queries import in_key_function

    key_of = in_key_function()

    @settings(max_examples=max_examples)
    @given(left=values, right=values, left_internal=st.booleans(), right_internal=st.booleans())
    def check(left: Any, right: Any, left_internal: bool, right_internal: bool) -> None:
        left, right = stored(left, internal=left_internal), stored(right, internal=right_internal)
        left_key, right_key = key_of(left), key_of(right)
        for dialect in (MONGODB_DIALECT_70, MONGODB_DIALECT_80, MONGODB_DIALECT_90):
            equal = QueryEngine._in_item_matches_candidate(left, right, null_matches_undefined=False, dialect=dialect)
            if left_key is not None and right_key is not None:
                assert equal is (left_key == right_key), (left, right, left_key, right_key)
                assert (left_key == right_key) is (hash(left_key) == hash(right_key)) or left_key != right_key
            if right_key is not None:
                for null_matches_undefined in (False, True):
                    assert not QueryEngine._in_item_matches_candidate(None, right, null_matches_undefined=null_matches_undefined, dialect=dialect)

    check()


def test_the_keys_that_must_meet_and_the_ones_that_must_not() -> None:
    from mongoshift.embedded.patches.queries import in_key_function

    key_of = in_key_function()

    def same(*items: Any) -> bool:
        return len({key_of(stored(item)) for item in items}) == 1

    assert same(1, 1.0, Int64(1), Decimal128("1"), Decimal128("1.00"))
    assert same(0, -0.0, Decimal128("-0"))
    assert same({"a": 1, "b": [1, "x"]}, {"a": 1.0, "b": [Int64(1), "x"]})
    assert len({key_of(stored({"a": [Binary(b"x", 5)]}, internal=internal)) for internal in (False, True)}) == 1
    assert key_of(stored({"a": [Binary(b"x", 5)]}, internal=True)) is not None
    assert not same(True, 1)
    assert not same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # field order counts
    assert not same(Binary(b"\x01", 0), Binary(b"\x01", 5))
    assert same(Binary(b"\x01", 5), Binary(b"\x01", 5))
    assert not same("1", 1)
    assert not same(0.1, Decimal128("0.1"))  # a double's 0.1 is not the decimal 0.1
    assert key_of(stored(float("nan"))) is None
    assert key_of(stored(Decimal128("NaN"))) is None
    assert key_of(None) is None
    assert key_of(stored({"a": Regex("x")})) is None


def document(i: int, value: Any) -> dict[str, Any]:
    if value is MISSING:
        return {"_id": i, "s": {}}
    return {"_id": i, "a": value, "s": {"a": value}}


@examples(thorough=400, quick=60)
def test_in_and_nin_answer_as_the_original_matcher(server: InProcessServer, max_examples: int) -> None:
    """(k) Generated ``$in``/``$nin`` queries, top-level and dotted, answer as mongoeco's own matcher does."""
    from mongoeco.core.compiled_query import CompiledQuery
    from mongoeco.core.filtering import QueryEngine

    original = CompiledQuery._node_to_code
    while hasattr(original, "__wrapped__"):
        original = original.__wrapped__
    patched = CompiledQuery._node_to_code
    # the interpreted matcher's keys (an update's or a delete's check of each document it matched)
    patched_key = QueryEngine._hashable_in_lookup_key
    original_key = patched_key.__wrapped__  # type: ignore[attr-defined]

    @settings(max_examples=max_examples)
    @given(
        stored_values=st.lists(values | st.just(MISSING), min_size=1, max_size=8),
        listed=st.lists(values, max_size=6),
    )
    def check(stored_values: list[Any], listed: list[Any]) -> None:
        client = sync_client(server)
        try:
            collection = client.in_lookup.model
            collection.drop()
            collection.insert_many([document(i, value) for i, value in enumerate(stored_values)])
            for field in ("a", "s.a"):
                for operator in ("$in", "$nin"):
                    condition = {field: {operator: listed}}
                    answers = []
                    for node_to_code, key in ((patched, patched_key), (original, original_key)):
                        CompiledQuery._node_to_code = node_to_code  # type: ignore[method-assign]
                        QueryEngine._hashable_in_lookup_key = staticmethod(key)  # type: ignore[method-assign,assignment]
                        CompiledQuery._compile_expression.cache_clear()
                        found = sorted(d["_id"] for d in collection.find(condition))
                        collection.update_many({}, {"$unset": {"hit": ""}})
                        collection.update_many(condition, {"$set": {"hit": True}})
                        answers.append((found, sorted(d["_id"] for d in collection.find({"hit": True}))))
                    assert answers[0] == answers[1], condition
        finally:
            CompiledQuery._node_to_code = patched  # type: ignore[method-assign]
            QueryEngine._hashable_in_lookup_key = staticmethod(patched_key)  # type: ignore[method-assign,assignment]
            CompiledQuery._compile_expression.cache_clear()
            client.close()

    check()


def test_in_matches_doubles_and_decimals_as_mongod(server: InProcessServer) -> None:
    """A double equals a decimal when their values are exactly equal, as mongod compares them: the double
    0.1 is 0.1000000000000000055..., not the decimal 0.1. mongoeco's comparison found them equal."""
    client = sync_client(server)
    try:
        collection = client.in_lookup.numbers
        collection.drop()
        collection.insert_many([{"_id": 1, "n": 0.1}, {"_id": 2, "n": Decimal128("0.1")}, {"_id": 3, "n": 2.5}, {"_id": 4, "n": Decimal128("2.50")}])
        assert sorted(d["_id"] for d in collection.find({"n": {"$in": [0.1]}})) == [1]
        assert sorted(d["_id"] for d in collection.find({"n": {"$in": [Decimal128("0.1")]}})) == [2]
        assert sorted(d["_id"] for d in collection.find({"n": {"$in": [2.5, 7]}})) == [3, 4]
        assert sorted(d["_id"] for d in collection.find({"n": {"$nin": [0.1, Decimal128("2.5")]}})) == [2]
    finally:
        client.close()


def test_in_matches_binaries_as_mongod(server: InProcessServer) -> None:
    """A binary equals another when its subtype and bytes do (mongod's BSON comparison). mongoeco's own
    comparison found no stored binary of subtype 5 for the same binary listed, and matched a subtype-0
    binary with every subtype."""
    client = sync_client(server)
    try:
        collection = client.in_lookup.binaries
        collection.drop()
        collection.insert_many([
            {"_id": 1, "b": Binary(b"\x01", 0)}, {"_id": 2, "b": [Binary(b"\x01", 0)]},
            {"_id": 3, "b": {"x": Binary(b"\x01", 5)}}, {"_id": 4, "b": Binary(b"\x01", 5)}, {"_id": 5, "b": Binary(b"\x02", 5)},
        ])

        def ids(condition: dict[str, Any]) -> list[int]:
            return sorted(d["_id"] for d in collection.find(condition))

        assert ids({"b": {"$in": [Binary(b"\x01", 0)]}}) == [1, 2]
        assert ids({"b": {"$in": [Binary(b"\x01", 5)]}}) == [4]
        assert ids({"b": {"$in": [{"x": Binary(b"\x01", 5)}, Binary(b"\x02", 5)]}}) == [3, 5]
        assert ids({"b": {"$nin": [Binary(b"\x01", 5), Binary(b"\x01", 0)]}}) == [3, 5]
        assert collection.update_many({"b": {"$in": [Binary(b"\x01", 5)]}}, {"$set": {"hit": 1}}).modified_count == 1
        assert ids({"hit": 1}) == [4]
    finally:
        client.close()


def test_equality_of_doubles_decimals_and_binaries_is_mongods(server: InProcessServer) -> None:
    """(az) A plain value, ``$eq`` and ``$ne`` compare a double with a decimal by exact value and binaries by
    subtype and bytes, as ``$in`` does; with an index on the field too (its candidates are checked)."""
    client = sync_client(server)
    try:
        collection = client.in_lookup.equality
        collection.drop()
        collection.insert_many([
            {"_id": 1, "b": Binary(b"\x01", 0)}, {"_id": 2, "b": [Binary(b"\x01", 0)]}, {"_id": 4, "b": Binary(b"\x01", 5)},
            {"_id": 5, "n": 0.1}, {"_id": 6, "n": Decimal128("0.1")}, {"_id": 7, "n": 2.5}, {"_id": 8, "n": Decimal128("2.50")},
            {"_id": 9, "n": [0.1, 3]}, {"_id": 10, "n": float("nan")}, {"_id": 11, "n": Decimal128("NaN")},
        ])

        def ids(condition: dict[str, Any]) -> list[int]:
            return sorted(d["_id"] for d in collection.find(condition))

        for indexed in (False, True):
            if indexed:
                collection.create_index("n")
                collection.create_index("b")
            assert ids({"n": 0.1}) == [5, 9]
            assert ids({"n": Decimal128("0.1")}) == [6]
            assert ids({"n": {"$eq": Decimal128("2.5")}}) == [7, 8]
            assert ids({"n": float("nan")}) == [10, 11]  # NaN equals NaN of either type, as before
            assert ids({"n": {"$ne": 0.1}}) == [1, 2, 4, 6, 7, 8, 10, 11]
            assert ids({"b": Binary(b"\x01", 5)}) == [4]
            assert ids({"b": Binary(b"\x01", 0)}) == [1, 2]
            assert ids({"b": {"$ne": Binary(b"\x01", 5)}}) == [1, 2, 5, 6, 7, 8, 9, 10, 11]
            assert collection.count_documents({"n": 0.1}) == 2
    finally:
        client.close()
