"""Fix (bs) of mongoshift.embedded.patches.updates: a collection with a validator (converge's versioning declares
one) keeps the guarded updates' fast path, and every statement answers and stores what mongoeco's own update path
does: the same refusals (code 121 and its errInfo), the same documents let through by a moderate level or a warn
action, and nothing else of the collection's options taken on.

The property test applies the same bulk write to two identical collections with the same validator, one with the
fix and one with mongoeco's path swapped back in, and compares the replies and the stored documents byte for byte.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, original_update_path, sync_client
from .test_guarded_updates import statements, stored
from .test_pipeline_updates import FILTERS, operator_updates, pipelines, stored as stored_for_many

#: Validators of the kinds a project declares: converge's versioning rule, a required field, a query expression.
VALIDATORS = [
    {"$jsonSchema": {"bsonType": "object", "properties": {"__v": {"bsonType": "int"}}}},
    {"$jsonSchema": {"bsonType": "object", "required": ["__v"], "properties": {"a": {"bsonType": ["int", "string"]}, "n": {"minimum": 0}}}},
    {"$or": [{"n": {"$exists": False}}, {"n": {"$gte": 0}}]},
    {"$jsonSchema": {"bsonType": "object", "additionalProperties": False, "properties": {"_id": {}, "a": {}, "b": {}, "__v": {}, "__rev": {}}}},
]


def twins(client: Any, docs: list[dict[str, Any]], validator: dict[str, Any], level: str, action: str) -> Any:
    """The database of two identical collections, ``fast`` and ``slow``, under the same validator, holding ``docs``
    (stored past the rule: some break it, and a moderate level lets their updates through)."""
    db = client.validated
    for name in ("fast", "slow"):
        db.drop_collection(name)
        db.create_collection(name, validator=validator, validationLevel=level, validationAction=action)
        db[name].create_index([("__v", 1), ("_id", 1)])
        if docs:
            db[name].insert_many(docs, bypass_document_validation=True)
    return db


def outcome(collection: Any, requests: list[Any], ordered: bool) -> Any:
    try:
        result = collection.bulk_write(requests, ordered=ordered).bulk_api_result
    except BulkWriteError as error:
        result = error.details
    except Exception as error:  # a command-level refusal, the same on both sides
        return type(error).__name__, getattr(error, "code", None)
    errors = [(e["index"], e["code"], encode(e.get("errInfo", {}))) for e in result["writeErrors"]]
    documents = [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]
    return result["nMatched"], result["nModified"], errors, documents


@examples(thorough=150, quick=30)
def test_a_guarded_update_under_a_validator_does_what_the_original_update_does(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(
        docs=stored(), data=st.data(), validator=st.sampled_from(VALIDATORS),
        level=st.sampled_from(["strict", "moderate", "off"]), action=st.sampled_from(["error", "warn"]),
    )
    def check(docs: list[dict[str, Any]], data: st.DataObject, validator: dict[str, Any], level: str, action: str) -> None:
        requests = data.draw(st.lists(statements(docs), min_size=1, max_size=6))
        ordered = data.draw(st.booleans())
        client = sync_client(server)
        try:
            db = twins(client, docs, validator, level, action)
            got = outcome(db.fast, requests, ordered)
            with original_update_path():
                expected = outcome(db.slow, requests, ordered)
            assert got == expected
        finally:
            client.close()

    check()


@pytest.mark.parametrize("bypass", [False, True])
def test_a_batch_under_a_validator_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch, bypass: bool) -> None:
    """200 guarded statements of one command on a collection with converge's versioning validator take the lock and
    dispatch their changes once (mongoeco's path: once a statement, compiling the validator each time); one
    statement the rule refuses fails alone, with code 121, and a command that bypasses validation writes it."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        client.validated.drop_collection("steps")
        collection = client.validated.create_collection("steps", validator=VALIDATORS[0])
        collection.create_index([("__v", 1), ("_id", 1)])
        ids = [ObjectId(f"{i:024x}") for i in range(300)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "qty": 2} for i in ids])
        requests = [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in ids[:200]]
        requests.append(UpdateOne({"_id": ids[250], "__v": 1}, {"$set": {"__v": "2"}}))  # the rule refuses a string version
        calls = count_calls(monkeypatch, (MemoryEngine, "_get_lock"), (CollectionRuntimeCoordinator, "_dispatch_engine_changes"))
        try:
            result = collection.bulk_write(requests, ordered=False, bypass_document_validation=bypass).bulk_api_result
        except BulkWriteError as error:
            result = error.details
        monkeypatch.undo()
        if bypass:  # no validator to judge by: the batch takes every statement
            assert result["nModified"] == 201 and not result["writeErrors"]
            assert calls == {"_get_lock": 1, "_dispatch_engine_changes": 1}
        else:
            assert result["nModified"] == 200 and [(e["index"], e["code"]) for e in result["writeErrors"]] == [(200, 121)]
            assert calls == {"_get_lock": 2, "_dispatch_engine_changes": 1}  # the batch; the refused statement takes its own path, writing nothing
        assert collection.count_documents({"__v": 2, "__rev": 2}) == 200
    finally:
        client.close()


def many_outcome(client: Any, collection: Any, query: dict[str, Any], update: Any, in_transaction: bool, bypass: bool) -> Any:
    """An ``update_many`` on ``collection``: the reply (counts, or the error's code), the stored documents' bytes."""
    try:
        if in_transaction:
            with client.start_session() as session, session.start_transaction():
                result = collection.update_many(query, update, session=session, bypass_document_validation=bypass)
        else:
            result = collection.update_many(query, update, bypass_document_validation=bypass)
        reply: Any = (result.matched_count, result.modified_count)
    except OperationFailure as error:
        reply = ("error", error.code)
    return reply, [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]


@examples(thorough=300, quick=30)
@pytest.mark.parametrize("kind", ["pipeline", "operators"])
def test_an_update_many_under_a_validator_does_what_the_original_update_does(server: InProcessServer, max_examples: int, kind: str) -> None:
    """(bs) for fixes (an) and (bf): a pipeline or operator ``update_many`` on a collection with a validator (some of
    its documents breaking the rule), with and without ``bypassDocumentValidation``, in and out of a transaction,
    answers and stores what mongoeco's ``update_many`` does."""
    from mongoeco.api._async import _collection_modify

    @settings(max_examples=max_examples)
    @given(
        docs=stored_for_many(), data=st.data(), validator=st.sampled_from(VALIDATORS),
        level=st.sampled_from(["strict", "moderate"]), action=st.sampled_from(["error", "warn"]),
    )
    def check(docs: list[dict[str, Any]], data: st.DataObject, validator: dict[str, Any], level: str, action: str) -> None:
        update = data.draw(pipelines() if kind == "pipeline" else operator_updates())
        query, in_transaction, bypass = data.draw(st.sampled_from(FILTERS)), data.draw(st.booleans()), data.draw(st.booleans())
        client = sync_client(server)
        try:
            db = twins(client, docs, validator, level, action)
            got = many_outcome(client, db.fast, query, update, in_transaction, bypass)
            with original(_collection_modify, "update_many"):
                expected = many_outcome(client, db.slow, query, update, in_transaction, bypass)
            assert got == expected
        finally:
            client.close()

    check()


def test_an_update_many_under_a_validator_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bs) ``update_many`` of 200 documents on a collection with converge's versioning rule takes the lock twice (the
    read, the batch) and dispatches once, where mongoeco's path locks per document; one the rule refuses sends the
    statement to that path, which refuses it (121) after the documents before it, as it always did."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        client.validated.drop_collection("many")
        collection = client.validated.create_collection("many", validator=VALIDATORS[0])
        collection.insert_many([{"_id": i, "__v": 1} for i in range(200)])
        calls = count_calls(monkeypatch, (MemoryEngine, "_get_lock"), (CollectionRuntimeCoordinator, "_dispatch_engine_changes"))
        result = collection.update_many({"__v": 1}, {"$set": {"__v": 2}})
        monkeypatch.undo()
        assert (result.matched_count, result.modified_count) == (200, 200)
        assert calls == {"_get_lock": 2, "_dispatch_engine_changes": 1}
        with pytest.raises(OperationFailure) as refused:
            collection.update_many({"_id": {"$gte": 150}}, [{"$set": {"__v": {"$toString": "$__v"}}}])
        assert refused.value.code == 121
    finally:
        client.close()
