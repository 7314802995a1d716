"""Fix (bw) of mongoshift.embedded.patches.distinct: ``distinct`` answers what mongoeco's loop answers,
by lookups instead of a comparison of each value with every value kept.

The property test runs each ``distinct`` twice through pymongo on the same data, with the fix and with
mongoeco's method swapped back in (an in-process server, :mod:`.in_process`), over values of every
type whose equality crosses representations (int32, int64, doubles, Decimal128, -0.0, NaN, infinities,
dates, documents and arrays holding numbers), and compares the replies byte for byte. The other test
counts the comparisons the fix removes (no timing).
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Binary, Decimal128, Int64, ObjectId, encode
from hypothesis import given, settings, strategies as st
from mongoeco.api._async._database_admin_read_commands import DatabaseAdminReadCommandService
from mongoeco.core.filtering import QueryEngine

from mongoshift.embedded import patches
from mongoshift.embedded.patches.distinct import equality_key

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, sync_client

_BASE = datetime.datetime(2026, 1, 1)
#: Values that are equal across types, or nearly: each one's equal twins of other types are in the pool too.
SCALARS: list[Any] = [
    0, Int64(0), 0.0, -0.0, Decimal128("0"), Decimal128("-0"), Decimal128("0.00"),
    1, Int64(1), 1.0, Decimal128("1"), Decimal128("1.0"), True, False,
    2**60, Int64(2**60), float(2**60), Decimal128(str(2**60)),
    0.1, Decimal128("0.1"), Decimal128("0.1000000000000000055511151231257827"),
    1.5, Decimal128("1.5"), -7, Int64(-7), -7.0,
    float("nan"), Decimal128("NaN"), float("inf"), Decimal128("Infinity"), float("-inf"), Decimal128("-Infinity"),
    "a", "A", "", "1", None,
    ObjectId("0" * 24), ObjectId("f" * 24),
    _BASE, _BASE + datetime.timedelta(milliseconds=1), datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    b"ab", Binary(b"ab", 0), Binary(b"ab", 0x80), Binary(b"\x00" * 16, 4), Binary(b"\x00" * 16, 3),
]
values = st.recursive(
    st.sampled_from(SCALARS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2),
    max_leaves=4,
)


def _reply(client: Any, db: str, key: str, query: dict[str, Any]) -> bytes:
    return encode(client[db].command({"distinct": "c", "key": key, "query": query}))


@examples(thorough=400, quick=40)
def test_distinct_answers_what_mongoecos_loop_answers(server: InProcessServer, max_examples: int) -> None:
    client = sync_client(server)

    @settings(max_examples=max_examples)
    @given(st.lists(values, min_size=1, max_size=25), st.sampled_from(["v", "v.x", "w"]))
    def check(stored: list[Any], key: str) -> None:
        db = client["distinct_property"]
        db.c.drop()
        db.c.insert_many([{"_id": n, "v": value} for n, value in enumerate(stored)])
        for query in ({}, {"_id": {"$gte": 3}}):
            fixed = _reply(client, "distinct_property", key, query)
            with original(DatabaseAdminReadCommandService, "execute_distinct_command"):
                before = _reply(client, "distinct_property", key, query)
            assert fixed == before

    try:
        check()
    finally:
        client.close()


def test_a_distinct_of_many_values_compares_each_with_few(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """3,000 distinct values (numbers, strings, ObjectIds, dates, Decimal128s, binaries, a document): the
    fix compares each candidate with its bucket and the few kept values without a key; mongoeco's loop
    compared it with every value kept, about 4.5 million comparisons."""
    client = sync_client(server)
    try:
        db = client["distinct_many"]
        db.c.drop()
        kinds = [lambda n: n, lambda n: float(n) + 0.5, lambda n: f"s{n}", lambda n: ObjectId(f"{n:024x}"),
                 lambda n: _BASE + datetime.timedelta(seconds=n)]
        kinds += [lambda n: Decimal128(f"{n}.25"), lambda n: Binary(n.to_bytes(4), 0x80)]  # keyed too, not compared with all
        stored = [kinds[n % 7](n) for n in range(3_000)] + [Decimal128("1.5"), {"x": 1}, [2, 3]]
        db.c.insert_many([{"v": value} for value in stored] + [{"v": 0.0}, {"v": Int64(7)}])  # two repeats, of other types
        calls = count_calls(monkeypatch, (QueryEngine, "_values_equal"))
        answer = db.command({"distinct": "c", "key": "v"})["values"]
        assert len(answer) == 3_000 + 1 + 1 + 2  # the array's elements are candidates of their own
        assert calls["_values_equal"] < 20 * len(stored)
    finally:
        client.close()


def test_equal_values_share_a_key() -> None:
    """The key never separates values mongoeco's equality calls equal (unequal ones may share one)."""
    patches.apply()  # mongoeco's equality as the server has it: (az) compares a double and a decimal exactly
    keyed = [value for value in SCALARS if equality_key(value) is not None]
    for left in keyed:
        for right in keyed:
            if QueryEngine._values_equal(left, right):
                assert equality_key(left) == equality_key(right), (left, right)


def test_a_distinct_with_a_regional_english_collation_is_answered(server: InProcessServer) -> None:
    """(z) takes `en_US` and the other English locales: a distinct under one is answered by mongoeco's loop with
    (z)'s collation, not refused ("only 'simple' and 'en' collations are supported", as when the fix kept the
    collation function it found before (z) replaced it)."""
    client = sync_client(server)
    try:
        db = client["distinct_collation"]
        db.c.drop()
        db.c.insert_many([{"v": "a"}, {"v": "A"}, {"v": "b"}])
        answer = db.command({"distinct": "c", "key": "v", "collation": {"locale": "en_US", "strength": 2}})["values"]
        assert answer == ["a", "b"]
    finally:
        client.close()
