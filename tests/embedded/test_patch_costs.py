"""The cost fixes of mongoshift.embedded.patches, counted instead of timed.

A test that asserts seconds passes or fails with the machine's load; these count
the work the unpatched code does per document (the comparisons of a scan) on an
in-process mongoeco engine with the patches applied, so the verdict is the same on
a busy machine. They are embedded-only by nature: a real server has no mongoeco.
The wire-level behaviour of the same fixes (results, errors) is proved in
test_patches.py, also against a real replica set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("mongoeco")

from mongoeco.api import AsyncMongoClient as EngineClient
from mongoeco.engines.memory import MemoryEngine
from mongoeco.types import ObjectId

from mongoshift.embedded import patches
from mongoshift.embedded.server import ENGINE_OPTIONS


@pytest.fixture
async def engine_db() -> AsyncIterator[Any]:
    patches.apply()
    engine = MemoryEngine(**ENGINE_OPTIONS)
    client = EngineClient(engine)
    await engine.connect()
    try:
        yield client.get_database("costs")
    finally:
        await engine.disconnect()


def counting(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> list[int]:
    """Replace ``owner.name`` by a wrapper that counts its calls; the count is ``calls[0]``."""
    calls = [0]
    original: Callable[..., Any] = getattr(owner, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


# (p) single-document insert -----------------------------------------------------


async def test_a_single_insert_does_not_compare_its_id_with_every_stored_one(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from mongoeco.engines import memory

    await engine_db.one.insert_many([{"_id": ObjectId(), "i": i} for i in range(2_000)])
    compared = counting(monkeypatch, memory, "bson_equality_key")
    for i in range(50):
        await engine_db.one.insert_one({"_id": ObjectId(), "i": -i})
        await engine_db.one.insert_one({"_id": f"s{i}"})
    # Unpatched, each insert compares its _id with all 2,000+ stored ones: 100 inserts, 400,000 calls.
    assert compared[0] < 1_000, f"{compared[0]} _id comparisons for 100 single inserts"
    assert await engine_db.one.count_documents({}) == 2_100


async def test_a_numeric_id_is_still_checked_against_equal_numbers_of_another_type(engine_db: Any) -> None:
    from mongoeco.errors import DuplicateKeyError

    await engine_db.num.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError):
        await engine_db.num.insert_one({"_id": 1.0})


# (k) $in over ObjectIds -----------------------------------------------------------


async def test_an_in_of_object_ids_is_a_set_lookup(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from mongoeco.core._filtering_matching import FilteringMatchingMixin
    from mongoeco.core.compiled_query import CompiledQuery

    refs = [ObjectId() for _ in range(2_000)]
    await engine_db.many.insert_many([{"_id": i, "ref": ref} for i, ref in enumerate(refs)])
    wanted = refs[500:1_000]
    compared = counting(monkeypatch, FilteringMatchingMixin, "_in_item_matches_candidate")
    CompiledQuery._compile_expression.cache_clear()  # compiled matchers bind the function they were built with
    found = [d["_id"] async for d in engine_db.many.find({"ref": {"$in": wanted}}, {"_id": 1})]
    assert sorted(found) == list(range(500, 1_000))
    # Unpatched, every stored document is compared with listed values until one matches: about 1,000,000 calls.
    assert compared[0] == 0, f"{compared[0]} pairwise $in comparisons"


async def test_an_in_of_ids_of_every_kind_is_a_set_lookup(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane's batch check lists the ids it read, of whatever types the collection holds (legacy data)."""
    import datetime
    import uuid

    from bson.int64 import Int64
    from mongoeco.core._filtering_matching import FilteringMatchingMixin
    from mongoeco.core.compiled_query import CompiledQuery

    from mongoshift.embedded.patches.queries import in_key_function

    kinds = [
        lambda i: i, lambda i: f"s{i}", lambda i: ObjectId(), lambda i: uuid.UUID(int=i), lambda i: Int64(10**12 + i),
        lambda i: {"k": i, "t": "x"}, lambda i: i + 0.5, lambda i: datetime.datetime(2000, 1, 1) + datetime.timedelta(seconds=i),
    ]
    ids = [kinds[i % len(kinds)](i) for i in range(2_000)]
    await engine_db.mixed.insert_many([{"_id": value} for value in ids])
    wanted = ids[500:1_000]
    compared = counting(monkeypatch, FilteringMatchingMixin, "_in_item_matches_candidate")
    CompiledQuery._compile_expression.cache_clear()
    key_of = in_key_function()
    found = [d["_id"] async for d in engine_db.mixed.find({"_id": {"$in": wanted}})]
    assert sorted(map(repr, map(key_of, found))) == sorted(map(repr, map(key_of, wanted)))
    # Unpatched: each of the 2,000 documents compared with the listed values until one matches, about 750,000 calls.
    assert compared[0] == 0, f"{compared[0]} pairwise $in comparisons"
    left = [d["_id"] async for d in engine_db.mixed.find({"_id": {"$nin": wanted}})]
    assert len(left) == 1_500
    assert compared[0] == 0, f"{compared[0]} pairwise $nin comparisons"


async def test_a_unique_index_is_built_without_comparing_documents_pairwise(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ax) A migration or ``converge`` adding a unique index to a populated collection."""
    await engine_db.codes.insert_many([{"_id": i, "code": f"c{i}", "tags": [i, -i - 1]} for i in range(2_000)])
    compared = counting(monkeypatch, MemoryEngine, "_unique_index_conflict")
    assert await engine_db.codes.create_index("code", unique=True) == "code_1"
    assert await engine_db.codes.create_index([("tags", 1), ("code", -1)], unique=True) == "tags_1_code_-1"
    # Unpatched, each document is compared with every one before it: about 2,000,000 calls per index.
    assert compared[0] == 0, f"{compared[0]} pairwise comparisons"


async def test_a_write_under_a_compound_unique_index_compares_no_documents(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ay) mongoshift's run log has one ({run_id: 1, seq: 1}); so may any application's collection."""
    await engine_db.lines.create_index([("run", 1), ("seq", 1)], unique=True)
    compared = counting(monkeypatch, MemoryEngine, "_unique_index_conflict")
    for start in range(0, 2_000, 200):
        await engine_db.lines.insert_many([{"run": "r", "seq": seq, "tags": [seq, "x"]} for seq in range(start, start + 200)])
    await engine_db.lines.update_many({"seq": {"$lt": 100}}, {"$set": {"note": 1}})
    # Unpatched, each write compares the document with every stored one: about 2,000,000 calls.
    assert compared[0] == 0, f"{compared[0]} pairwise comparisons"


async def test_a_write_by_int64_ids_finds_each_document_by_its_key(engine_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ag) update_many and delete_many update each matched document by its own ``_id`` (as pymongo's Int64):
    that lookup finds the document under its key instead of matching every stored one."""
    from bson.int64 import Int64
    from mongoeco.core.filtering import QueryEngine

    await engine_db.longs.insert_many([{"_id": Int64(10**12 + i), "n": i} for i in range(2_000)])
    wanted = [Int64(10**12 + i) for i in range(0, 2_000, 10)]
    compared = counting(monkeypatch, QueryEngine, "_evaluate_equals")
    result = await engine_db.longs.update_many({"_id": {"$in": wanted}}, {"$set": {"m": 1}})
    assert result.modified_count == 200
    assert await engine_db.longs.count_documents({"m": 1}) == 200
    # Unpatched, each of the 200 updates compares its _id with every stored document: about 400,000 calls.
    assert compared[0] <= 1_000, f"{compared[0]} equality checks"
    assert (await engine_db.longs.delete_many({"_id": {"$in": wanted}})).deleted_count == 200
    assert await engine_db.longs.count_documents({}) == 1_800
