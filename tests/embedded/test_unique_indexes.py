"""Fixes (ax) and (ay) of mongoshift.embedded.patches.indexes: a unique index over existing documents is
built in one pass over a set of their keys, and a write under a compound unique index looks its keys up
in the index's data, instead of comparing documents pairwise.

The property tests run the same steps with the fix and with mongoeco's original code swapped back in,
through the wire, and compare what each answers (success or the error's code) and what each leaves: for
(ax), a unique index built over generated documents (the index listed, unique or not; the documents; a
duplicate refused afterwards); for (ay), generated inserts, updates, replacements and deletions under a
compound unique index (each write's answer, then the documents). The counts of comparisons (the cost)
are in test_patch_costs.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from ..conftest import examples
from .in_process import InProcessServer, sync_client

pytest.importorskip("mongoeco")

MISSING = object()
scalars = st.sampled_from([1, 1.0, 2, "a", "b", None, True, MISSING])
field_values = scalars | st.lists(st.sampled_from([1, 2, "a"]), max_size=3)
documents = st.lists(st.fixed_dictionaries({"a": field_values, "b": scalars}), max_size=7)
index_options = st.fixed_dictionaries(
    {
        "keys": st.sampled_from([[("a", ASCENDING)], [("a", DESCENDING), ("b", ASCENDING)], [("b", ASCENDING)]]),
        "sparse": st.booleans(),
        "partial": st.booleans(),
    }
)


def stored(i: int, values: dict[str, Any]) -> dict[str, Any]:
    return {"_id": i, **{name: value for name, value in values.items() if value is not MISSING}}


def outcome(collection: Any, docs: list[dict[str, Any]], options: dict[str, Any]) -> tuple[Any, ...]:
    """What a unique index build answers and leaves behind."""
    collection.drop()
    if docs:
        collection.insert_many(docs)
    kwargs: dict[str, Any] = {"unique": True, "name": "u"}
    if options["sparse"] and not options["partial"]:
        kwargs["sparse"] = True
    if options["partial"]:
        kwargs["partialFilterExpression"] = {"b": {"$type": "string"}}
    try:
        collection.create_index(options["keys"], **kwargs)
        answer: Any = "created"
    except OperationFailure as error:
        answer = error.code
    listed = {index["name"]: bool(index.get("unique")) for index in collection.list_indexes()}
    after: Any = None
    if docs and answer == "created":
        try:
            collection.insert_one({**{k: v for k, v in docs[0].items() if k != "_id"}, "_id": "again"})
            after = "inserted"
        except OperationFailure as error:
            after = error.code
    return answer, listed, after, collection.count_documents({})


@examples(thorough=300, quick=40)
def test_a_unique_build_answers_as_mongoecos_own(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.engines.memory import MemoryEngine

    patched = MemoryEngine.create_index
    original = patched.__wrapped__  # type: ignore[attr-defined]

    @settings(max_examples=max_examples)
    @given(values=documents, options=index_options)
    def check(values: list[dict[str, Any]], options: dict[str, Any]) -> None:
        docs = [stored(i, value) for i, value in enumerate(values)]
        client = sync_client(server)
        try:
            collection = client.unique_builds.model
            answers = []
            for create_index in (patched, original):
                MemoryEngine.create_index = create_index  # type: ignore[method-assign]
                answers.append(outcome(collection, docs, options))
            assert answers[0] == answers[1], (docs, options)
        finally:
            MemoryEngine.create_index = patched  # type: ignore[method-assign]
            client.close()

    check()


def test_a_unique_build_over_duplicates_fails_and_leaves_no_index(server: InProcessServer) -> None:
    client = sync_client(server)
    try:
        collection = client.unique_builds.duplicates
        collection.drop()
        collection.insert_many([{"_id": i, "code": i % 500, "n": i} for i in range(1_000)])
        with pytest.raises(DuplicateKeyError) as raised:
            collection.create_index("code", unique=True)
        assert raised.value.code == 11000
        assert "Index build failed" in str(raised.value)
        assert [index["name"] for index in collection.list_indexes()] == ["_id_"]
        collection.insert_one({"_id": "x", "code": 1})  # no unique index left behind
        collection.delete_many({"n": {"$gte": 500}})
        collection.delete_one({"_id": "x"})
        assert collection.create_index("code", unique=True) == "code_1"
        assert collection.create_index("code", unique=True) == "code_1"  # the same index again: no error
        assert next(i for i in collection.list_indexes() if i["name"] == "code_1")["unique"] is True
        with pytest.raises(DuplicateKeyError):
            collection.insert_one({"_id": "y", "code": 7.0})  # 7.0 is the key of 7
        with pytest.raises(OperationFailure):
            collection.create_index("n", name="code_1", unique=True)  # another key under a taken name
    finally:
        client.close()


writes = st.lists(
    st.tuples(st.sampled_from(["insert", "insert_many", "set", "replace", "delete"]), st.integers(0, 6), field_values, scalars),
    min_size=1, max_size=12,
)
compound_indexes = st.sampled_from([
    ({"unique": True}, [("a", ASCENDING), ("b", ASCENDING)]),
    ({"unique": True, "sparse": True}, [("a", ASCENDING), ("b", DESCENDING)]),
    ({"unique": True, "partialFilterExpression": {"b": {"$type": "string"}}}, [("b", ASCENDING), ("a", ASCENDING)]),
])


def written(collection: Any, steps: list[tuple[str, int, Any, Any]], index: tuple[dict[str, Any], Any]) -> tuple[Any, ...]:
    """Each write's answer (None, or the error's codes), then the documents, under a compound unique index."""
    options, keys = index
    collection.drop()
    collection.create_index(keys, name="ab", **options)
    collection.create_index("c", unique=True, sparse=True)  # a single-field unique index beside it
    answers: list[Any] = []
    for n, (kind, target, a, b) in enumerate(steps):
        values = {name: value for name, value in (("a", a), ("b", b)) if value is not MISSING}
        try:
            if kind == "insert":
                collection.insert_one({"_id": n, **values})
            elif kind == "insert_many":
                collection.insert_many([{"_id": n, **values}, {"_id": -n - 1, **values, "c": target}], ordered=False)
            elif kind == "set":
                collection.update_one({"_id": target}, {"$set": values} if values else {"$unset": {"a": ""}})
            elif kind == "replace":
                collection.replace_one({"_id": target}, values)
            else:
                collection.delete_one({"_id": target})
            answers.append(None)
        except BulkWriteError as error:
            answers.append(sorted(e["code"] for e in error.details["writeErrors"]))
        except OperationFailure as error:
            answers.append(error.code)
    return answers, sorted(map(repr, collection.find().sort("_id")))


@examples(thorough=300, quick=60)
def test_writes_under_a_compound_unique_index_answer_as_mongoecos_own(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.engines.memory import MemoryEngine

    patched = (MemoryEngine._ensure_unique_indexes, MemoryEngine._index_keys)
    original = tuple(function.__wrapped__ for function in patched)  # type: ignore[attr-defined]

    @settings(max_examples=max_examples)
    @given(steps=writes, index=compound_indexes)
    def check(steps: list[tuple[str, int, Any, Any]], index: tuple[dict[str, Any], Any]) -> None:
        client = sync_client(server)
        try:
            collection = client.unique_indexes.writes
            answers = []
            for ensure, keys in (patched, original):
                MemoryEngine._ensure_unique_indexes, MemoryEngine._index_keys = ensure, keys  # type: ignore[method-assign]
                answers.append(written(collection, steps, index))
            assert answers[0] == answers[1], (steps, index)
        finally:
            MemoryEngine._ensure_unique_indexes, MemoryEngine._index_keys = patched  # type: ignore[method-assign]
            client.close()

    check()


def test_a_compound_unique_index_refuses_a_duplicate_through_any_array_element(server: InProcessServer) -> None:
    client = sync_client(server)
    try:
        collection = client.unique_indexes.arrays
        collection.drop()
        collection.create_index([("a", ASCENDING), ("b", ASCENDING)], unique=True)
        collection.insert_one({"_id": 1, "a": [1, 2, 3], "b": "x"})
        with pytest.raises(DuplicateKeyError):
            collection.insert_one({"_id": 2, "a": 3, "b": "x"})  # (3, "x") is a key of document 1
        with pytest.raises(DuplicateKeyError):
            collection.insert_one({"_id": 3, "a": [9, 2.0], "b": "x"})
        collection.insert_one({"_id": 4, "a": 3, "b": "y"})
        collection.insert_one({"_id": 5, "b": "x"})  # (null, "x")
        with pytest.raises(DuplicateKeyError):
            collection.insert_one({"_id": 6, "a": None, "b": "x"})  # a missing field is null in the index
        collection.update_one({"_id": 1}, {"$set": {"a": [1]}})  # document 1 keeps only (1, "x")
        collection.insert_one({"_id": 7, "a": 3, "b": "x"})
        collection.replace_one({"_id": 7}, {"a": 3, "b": "x", "more": True})  # replacing a document by itself
        collection.update_one({"_id": 7}, {"$set": {"a": [3, 8]}})  # and updating it: its own keys are no duplicate
        with pytest.raises(DuplicateKeyError):
            collection.update_one({"_id": 4}, {"$set": {"b": "x"}})  # (3, "x") is document 7's
        with pytest.raises(DuplicateKeyError):
            collection.replace_one({"_id": 4}, {"a": [0, 8], "b": "x"})  # (8, "x") too
        assert sorted(d["_id"] for d in collection.find()) == [1, 4, 5, 7]
    finally:
        client.close()
