"""Fix (ax) of mongoshift.embedded.patches.indexes: a unique index over existing documents is built in one
pass over a set of their keys, not by comparing each document with every one before it.

The property test builds the same unique index over generated documents with the fix and with
mongoeco's original ``create_index`` swapped back in, through the wire, and compares what each answers
(success or the error's code) and what each leaves (the index listed, unique or not; the documents; a
duplicate refused afterwards). The count of comparisons (the cost) is in test_patch_costs.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st
from pymongo import ASCENDING, DESCENDING
from pymongo.errors import DuplicateKeyError, OperationFailure

from ..conftest import examples
from .in_process import InProcessServer, in_process_server, sync_client

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


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessServer]:
    with in_process_server() as started:
        yield started


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
