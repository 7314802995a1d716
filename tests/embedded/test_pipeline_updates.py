"""Fix (an) of mongoshift.embedded.patches.pipeline_updates: a pipeline ``update_many`` answers and
stores exactly what mongoeco's own ``update_many`` does, and takes the engine's steps once per command.

The property test runs the same pipeline update on two identical collections through pymongo, one
with the fix and one with the original mongoeco function swapped back in (an in-process server,
:mod:`.in_process`), and compares the replies (counts, error codes), the stored documents byte for
byte and the change events; the other tests count the engine's steps (no timing) and check
transactions.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo.errors import OperationFailure, PyMongoError

from mongoshift.embedded.patches.pipeline_updates import stages

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, stale_decodes, sync_client, versioned

FIELDS = ["a", "b", "n", "__v", "__rev", "zz"]
scalars = (
    st.integers(-3, 3) | st.sampled_from([2**31 - 1, 2**40]) | st.builds(Int64, st.integers(-3, 3))
    | st.sampled_from([1.0, -0.0, 2.5, float("nan")]) | st.sampled_from([Decimal128("1"), Decimal128("1.0")])
    | st.text(alphabet="ab@", max_size=3) | st.booleans() | st.none()
    | st.sampled_from([datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), ObjectId("0" * 24)])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2), max_leaves=4)
references = st.sampled_from([f"${name}" for name in [*FIELDS, "missing", "b.p"]])
#: Expressions: field references, literals, object and array expressions, and operators that fail on
#: some inputs ($add of a string, $split of a number): the original raises those. $$REMOVE is a field's
#: whole expression only: inside an array or an object mongoeco 4.11 stores its sentinel (then fails
#: to read the document back), on both paths alike.
expressions = st.recursive(
    references | st.builds(lambda v: {"$literal": v}, values) | st.sampled_from([1, "x", True, None]),
    lambda inner: (
        st.builds(lambda a, b: {"$add": [a, b]}, inner, st.integers(-1, 1))
        | st.builds(lambda a: {"$ifNull": [a, 0]}, inner)
        | st.builds(lambda a: {"$arrayElemAt": [{"$split": [a, "@"]}, 1]}, inner)
        | st.builds(lambda a: {"$toString": a}, inner)
        | st.builds(lambda a, b: {"$concat": [a, "-", b]}, inner, references)
        | st.builds(lambda a, b, c: {"$cond": [{"$gt": [a, 0]}, b, c]}, inner, inner, references)
        | st.builds(lambda a, b: {"$eq": [a, b]}, inner, inner)
        | st.dictionaries(st.sampled_from(["p", "q"]), inner, min_size=1, max_size=2)
        | st.lists(inner, max_size=2)
    ),
    max_leaves=3,
)
#: Set or removed fields: mostly top-level, some the fast path leaves to the original (_id, a path).
TARGETS = st.sampled_from([*FIELDS, *FIELDS, "new", "new", "_id", "b.p"])
ids = st.sampled_from([ObjectId(f"{i:024x}") for i in range(6)] + ["k1", 7, 8.0])
FILTERS = [
    {}, {"__v": 1}, {"__v": {"$in": [None, 0]}}, {"_id": {"$gte": ObjectId("0" * 24), "$lte": ObjectId("f" * 24)}},
    {"$and": [{"__v": 1}, {"_id": {"$gt": ObjectId(f"{1:024x}")}}]}, {"a": {"$exists": True}}, {"_id": {"$type": "string"}},
    # a pipeline= range as the engine's planner writes it (the source shape after the cursor, up to the range's last)
    {"$and": [{"$and": [{"__v": 1}, {"_id": {"$gt": ObjectId(f"{1:024x}"), "$lte": ObjectId("f" * 24)}}]}, {"_id": {"$lte": ObjectId(f"{4:024x}")}}]},
]


@st.composite
def stored(draw: st.DrawFn) -> list[dict[str, Any]]:
    docs = []
    for value in dict.fromkeys(draw(st.lists(ids, min_size=1, max_size=6))):
        doc: dict[str, Any] = {"_id": value}
        for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
            doc[name] = draw(values)
        docs.append(doc)
    return docs


@st.composite
def pipelines(draw: st.DrawFn) -> list[dict[str, Any]]:
    pipeline: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        operator = draw(st.sampled_from(["$set", "$set", "$addFields", "$unset", "$project"]))
        names = draw(st.lists(TARGETS, min_size=1, max_size=3, unique=True))
        if operator == "$unset":
            pipeline.append({"$unset": names[0] if len(names) == 1 and draw(st.booleans()) else names})
        elif operator == "$project":  # not taken: the original answers it, on both sides
            pipeline.append({"$project": {name: 1 for name in names}})
        else:
            pipeline.append({operator: {name: draw(expressions | st.just("$$REMOVE")) for name in names}})
    return pipeline


def outcome(client: Any, collection: Any, query: dict[str, Any], pipeline: list[dict[str, Any]] | dict[str, Any], in_transaction: bool) -> Any:
    """The update (a pipeline, or (bf) an operator document) run on ``collection``: the reply (counts, or
    the error's code), the stored documents' bytes, and the change events."""
    with collection.watch(full_document="updateLookup", max_await_time_ms=50) as stream:
        try:
            if in_transaction:
                with client.start_session() as session, session.start_transaction():
                    result = collection.update_many(query, pipeline, session=session)
            else:
                result = collection.update_many(query, pipeline)
            reply: Any = (result.matched_count, result.modified_count)
        except OperationFailure as error:
            reply = ("error", error.code)
        collection.insert_one({"_id": "end", "u": "end"})  # the events up to this one are the update's ("u": see (bf)'s unique index)
        events = []
        while (event := stream.next())["operationType"] != "insert":
            events.append((encode(event["documentKey"]), encode(event["updateDescription"]), encode(event["fullDocument"])))
    documents = [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]
    return reply, documents, events


def _compare(server: InProcessServer, docs: list[dict[str, Any]], data: st.DataObject, updates: st.SearchStrategy[Any]) -> None:
    """One update drawn from ``updates`` (pipelines, or (bf) operator documents) on two identical
    collections, with the fix and with mongoeco's ``update_many``: the same outcome and version index."""
    from mongoeco.api._async import _collection_modify

    pipeline = data.draw(updates)
    query = data.draw(st.sampled_from(FILTERS))
    in_transaction = data.draw(st.booleans())
    unique = data.draw(st.booleans())  # (bf) a unique index on "u": the fast path stays open while the update leaves "u" alone
    client = sync_client(server)
    try:
        fast, slow = client.pipelines.fast, client.pipelines.slow
        for collection in (fast, slow):
            collection.drop()
            collection.create_index([("__v", 1), ("_id", 1)])
            if unique:
                collection.create_index("u", unique=True)
            collection.insert_many([{**doc, "u": number} for number, doc in enumerate(docs)] if unique else docs)
        got = outcome(client, fast, query, pipeline, in_transaction)
        with original(_collection_modify, "update_many"):
            expected = outcome(client, slow, query, pipeline, in_transaction)
        assert got == expected, (docs, pipeline, got, expected)
        for value in (1, 2, "a", None):  # the version index holds the same documents under the same keys
            hint = [("__v", 1), ("_id", 1)]
            assert [d["_id"] for d in fast.find({"__v": value}).hint(hint)] == [d["_id"] for d in slow.find({"__v": value}).hint(hint)]
        assert stale_decodes(server) == []  # (bl) the decoded form each write kept is its payload's
    finally:
        client.close()


@examples(thorough=1000, quick=25)
def test_a_pipeline_update_does_what_the_original_update_does(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        _compare(server, docs, data, pipelines())

    check()


def test_a_field_removed_and_set_again_to_the_same_value_moves_to_the_end(server: InProcessServer) -> None:
    """(an) ``$$REMOVE`` then ``$ifNull`` gives the field back the very object it held (the int 0),
    at the end of the document: the document is modified, as on mongoeco's path (found by the
    property test's 1,000 examples; the fast path answered "not modified" and kept the old order)."""
    client = sync_client(server)
    try:
        collection = client.pipelines.moved
        collection.drop()
        collection.insert_one({"_id": 1, "a": 0, "b": 0})
        result = collection.update_many({}, [{"$set": {"a": "$$REMOVE"}}, {"$set": {"a": {"$ifNull": ["$a", 0]}}}])
        assert (result.matched_count, result.modified_count) == (1, 1)
        assert list(collection.find_one({"_id": 1}) or {}) == ["_id", "b", "a"]
    finally:
        client.close()


def test_the_stages_taken_are_top_level_set_and_unset() -> None:
    assert stages([{"$set": {"a": "$b"}}, {"$addFields": {"c": 1}}, {"$unset": "d"}, {"$unset": ["e"]}]) is not None
    for pipeline in ([], [{"$project": {"a": 1}}], [{"$set": {"a.b": 1}}], [{"$set": {"_id": 1}}], [{"$unset": "_id"}],
                     [{"$set": {}}], [{"$set": {"$a": 1}}], [{"$set": {"a": 1}, "$unset": "b"}], [{"$replaceWith": "$a"}], {"$set": {}}):
        assert stages(pipeline) is None


B0 = [
    {"$set": {"full_name": "$name", "domain": {"$arrayElemAt": [{"$split": ["$email", "@"]}, 1]}, "__v": 2,
              "__rev": {"$add": ["$__rev", 1]}}},
    {"$unset": ["name", "legacy"]},
]


def test_a_pipeline_update_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(an) A pipeline update_many of 200 documents takes the collection lock twice (the read of the
    matched documents, the batch), re-encodes no whole document, copies no document whole and
    dispatches its changes once; mongoeco's path takes each of these per document."""
    from mongoeco.api._async import _collection_modify
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.core.aggregation import transform_stages
    from mongoeco.core.filtering import QueryEngine
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.pipelines.steps
        ids = versioned(collection, 1_000, {"name": "n", "email": "a@b", "legacy": [1, {"x": 2}]})
        steps = ((MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"), (transform_stages, "deepcopy"))
        calls = count_calls(monkeypatch, *steps, (CollectionRuntimeCoordinator, "_dispatch_engine_changes"), (QueryEngine, "match_plan"))
        result = collection.update_many({"__v": 1, "_id": {"$gte": ids[100], "$lt": ids[300]}}, B0)
        monkeypatch.undo()
        assert (result.matched_count, result.modified_count) == (200, 200)
        # (bd) no document matched again: none was replaced between the read and the batch
        assert calls == {"_get_lock": 2, "_encode_storage_document": 0, "_dispatch_engine_changes": 1, "deepcopy": 0, "match_plan": 0}
        assert collection.count_documents({"__v": 2, "__rev": 2, "full_name": "n", "domain": "b", "legacy": {"$exists": False}}) == 200
        # the same update by mongoeco's path, for the record of what the fix saves
        with original(_collection_modify, "update_many"):
            calls = count_calls(monkeypatch, *steps)
            collection.update_many({"__v": 1, "_id": {"$gte": ids[300], "$lt": ids[500]}}, B0)
            monkeypatch.undo()
        assert calls["_get_lock"] == 201 and calls["_encode_storage_document"] == 200 and calls["deepcopy"] >= 400
    finally:
        client.close()


#: What a ``pipeline=`` migration of bench/background.py sends: its stages, then the engine's stamp.
ENGINE = [
    {"$set": {"full_name": "$name", "town": "$city", "email_domain": {"$arrayElemAt": [{"$split": ["$email", "@"]}, 1]}}},
    {"$unset": ["name", "city", "legacy"]},
    {"$set": {"__v": {"$literal": 2}, "__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}}},
]


def test_the_engines_pipeline_is_evaluated_without_mongoecos_evaluator(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27, item 2: the expressions of a ``pipeline=`` range (the bench's stages and the stamp) are
    compiled once per command (:mod:`mongoshift.embedded.patches.expressions`): mongoeco's evaluator,
    three calls a document before, is not called for 200 documents, and the documents stored are
    those mongoeco's path stores (int32 and int64 revisions, one missing)."""
    from mongoeco.api._async import _collection_modify
    from mongoeco.core.aggregation import transform_stages

    client = sync_client(server)
    try:
        docs = [{"_id": i, "__v": 1, "__rev": Int64(i) if i % 3 else i, "name": f"n{i}", "city": "c", "email": f"u{i}@d{i % 7}", "legacy": [i]}
                for i in range(200)]
        del docs[5]["__rev"]
        fast, slow = client.pipelines.compiled, client.pipelines.evaluated
        for collection in (fast, slow):
            collection.drop()
            collection.create_index([("__v", 1), ("_id", 1)])
            collection.insert_many(docs)
        calls = count_calls(monkeypatch, (transform_stages, "_evaluate_expression_with_missing"))
        with client.start_session() as session, session.start_transaction():
            result = fast.update_many({"__v": 1}, ENGINE, session=session)
        monkeypatch.undo()
        assert (result.matched_count, result.modified_count, calls["_evaluate_expression_with_missing"]) == (200, 200, 0)
        with original(_collection_modify, "update_many"), client.start_session() as session, session.start_transaction():
            slow.update_many({"__v": 1}, ENGINE, session=session)
        assert [encode(doc) for doc in fast.find({}, sort=[("_id", 1)])] == [encode(doc) for doc in slow.find({}, sort=[("_id", 1)])]
    finally:
        client.close()


def test_a_walked_range_is_updated_from_its_stored_values_without_public_copies(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 27 item 2 (stop 50): a ``pipeline=`` range whose read is (af)'s walk of the ``_id`` order
    takes the walk's (storage key, stored value) pairs alone; no matched document is copied to its
    public form (one copy a document before), and the documents stored, the counts and the version
    index are those of mongoeco's path, in a transaction as the engine runs it."""
    from mongoeco.api._async import _collection_modify

    from mongoshift.embedded.patches import scans

    client = sync_client(server)
    try:
        ids = [ObjectId(f"{i:024x}") for i in range(300)]
        docs = [{"_id": i, "__v": 1 if n % 5 else 2, "__rev": n, "name": f"n{n}", "city": "c", "email": f"u{n}@d", "legacy": [n, {"x": n}]}
                for n, i in enumerate(ids)]
        query = {"$and": [{"$and": [{"__v": 1}, {"_id": {"$gt": ids[49], "$lte": ObjectId("f" * 24)}}]}, {"_id": {"$lte": ids[249]}}]}
        fast, slow = client.pipelines.walked, client.pipelines.walked_original
        for collection in (fast, slow):
            collection.drop()
            collection.create_index([("__v", 1), ("_id", 1)])
            collection.insert_many(docs)
        calls = count_calls(monkeypatch, (scans, "_public_copy"))
        with client.start_session() as session, session.start_transaction():
            result = fast.update_many(query, ENGINE, session=session)
        monkeypatch.undo()
        assert (result.matched_count, result.modified_count, calls["_public_copy"]) == (160, 160, 0)
        with original(_collection_modify, "update_many"), client.start_session() as session, session.start_transaction():
            expected = slow.update_many(query, ENGINE, session=session)
        assert (expected.matched_count, expected.modified_count) == (160, 160)
        assert [encode(doc) for doc in fast.find({}, sort=[("_id", 1)])] == [encode(doc) for doc in slow.find({}, sort=[("_id", 1)])]
        hint = [("__v", 1), ("_id", 1)]
        for value in (1, 2):
            assert [d["_id"] for d in fast.find({"__v": value}).hint(hint)] == [d["_id"] for d in slow.find({"__v": value}).hint(hint)]
        assert stale_decodes(server) == []
    finally:
        client.close()


def test_a_document_written_between_the_read_and_the_batch_is_matched_again(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bd) The update reads its documents, then opens its batch: a write in between (another task's)
    replaces a document's stored value, and that document is matched again under the batch. Here
    the write moves it out of the filter: it is neither counted nor rewritten."""
    from mongoshift.embedded.patches import updates

    client = sync_client(server)
    try:
        collection = client.pipelines.between
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": "n", "email": "a@b"} for i in range(20)])
        opened = updates.Batch.open
        wrote: list[int] = []

        async def open_after_a_write(self: Any, engine_collection: Any, *args: Any, **kwargs: Any) -> Any:
            if not wrote:  # once: the write of another task, before the batch takes the lock
                wrote.append(1)
                await engine_collection.update_one({"_id": 7}, {"$set": {"__v": 9}})
            return await opened(self, engine_collection, *args, **kwargs)

        monkeypatch.setattr(updates.Batch, "open", open_after_a_write)
        result = collection.update_many({"__v": 1, "_id": {"$gte": 0, "$lt": 20}}, B0)
        monkeypatch.undo()
        assert wrote == [1]
        assert (result.matched_count, result.modified_count) == (19, 19)
        assert collection.find_one({"_id": 7}) == {"_id": 7, "__v": 9, "__rev": 1, "name": "n", "email": "a@b"}
        assert collection.count_documents({"__v": 2, "full_name": "n"}) == 19
    finally:
        client.close()


def test_a_pipeline_update_in_a_transaction_is_seen_at_commit_and_gone_at_abort(server: InProcessServer) -> None:
    """(an) inside a transaction: the writes are the transaction's until it commits, nothing of them
    after an abort, and their change events are delivered at the commit, described."""
    client = sync_client(server)
    try:
        collection = client.pipelines.transactions
        collection.drop()
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": f"n{i}", "email": "a@b", "legacy": 1} for i in range(5)])
        with client.start_session() as session:
            session.start_transaction()
            assert collection.update_many({"__v": 1}, B0, session=session).modified_count == 5
            assert collection.count_documents({"__v": 2}, session=session) == 5
            assert collection.count_documents({"__v": 2}) == 0
            session.abort_transaction()
        assert collection.count_documents({"__v": 1, "legacy": 1}) == 5
        with collection.watch(max_await_time_ms=50) as stream:
            with client.start_session() as session, session.start_transaction():
                assert collection.update_many({"__v": 1, "_id": {"$lt": 3}}, B0, session=session).modified_count == 3
            events = [stream.next() for _ in range(3)]
        assert [e["documentKey"]["_id"] for e in events] == [0, 1, 2]
        for number, event in enumerate(events):
            assert event["updateDescription"] == {
                "updatedFields": {"__v": 2, "__rev": 2, "full_name": f"n{number}", "domain": "b"},
                "removedFields": ["name", "legacy"], "truncatedArrays": [],
            }
        assert collection.count_documents({"__v": 2}) == 3
    finally:
        client.close()


def test_a_batch_records_its_changes_through_the_engines_checks_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cb) A pipeline update_many of 200 documents in a transaction, and 200 guarded statements of one
    ``update`` command outside one, each record their changes through MemoryEngine._record_committed_change
    once (its checks of the publication scope, then each next change appended to the same scope): 200
    calls each before. A change stream still sees every update, in order, described."""
    from mongoeco.engines.memory import MemoryEngine
    from pymongo import UpdateOne

    client = sync_client(server)
    try:
        collection = client.pipelines.recorded
        ids = versioned(collection, 400, {"name": "n", "email": "a@b", "legacy": 1})
        with collection.watch(max_await_time_ms=50) as stream:
            calls = count_calls(monkeypatch, (MemoryEngine, "_record_committed_change"))
            with client.start_session() as session, session.start_transaction():
                assert collection.update_many({"__v": 1, "_id": {"$lt": ids[200]}}, B0, session=session).modified_count == 200
            in_transaction = calls["_record_committed_change"]
            result = collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}}) for i in ids[200:]], ordered=False)
            monkeypatch.undo()
            assert result.modified_count == 200
            events = [stream.next() for _ in range(400)]
        assert (in_transaction, calls["_record_committed_change"] - in_transaction) == (1, 1)
        assert [(e["operationType"], e["documentKey"]["_id"]) for e in events] == [("update", i) for i in ids]
        assert all(e["updateDescription"]["removedFields"] == ["name", "legacy"] for e in events[:200])
        assert all(e["updateDescription"]["updatedFields"] == {"__v": 2} for e in events[200:])
    finally:
        client.close()


def test_a_pipeline_update_in_a_transaction_looks_each_document_up_once_a_view(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cc) A pipeline update_many of 200 documents in a transaction reads each stored document of the
    transaction's copy once after its scan (its decision), and of the live collection once (the
    first-writer-wins check): the transaction's note of the statement's writes is taken at once, before
    them, and the writes do not look the documents up again for their pre-images, their check and their
    base (six lookups a document before, with the scan's)."""
    from mongoeco.engines._memory_collection import MemoryCollection

    client = sync_client(server)
    try:
        collection = client.pipelines.lookups
        ids = versioned(collection, 300, {"name": "n", "email": "a@b", "legacy": 1})
        with client.start_session() as session, session.start_transaction():
            calls = count_calls(monkeypatch, (MemoryCollection, "get"))
            result = collection.update_many({"__v": 1, "_id": {"$gte": ids[50], "$lt": ids[250]}}, B0, session=session)
            monkeypatch.undo()
        assert (result.matched_count, result.modified_count) == (200, 200)
        assert calls["get"] <= 3 * 200 + 10  # the scan's, the decision's, the live one's
        assert collection.count_documents({"__v": 2, "__rev": 2, "full_name": "n", "domain": "b"}) == 200
    finally:
        client.close()


EVENT_FIELDS = ("operationType", "documentKey", "updateDescription", "fullDocument", "fullDocumentBeforeChange")


@pytest.mark.parametrize("meanwhile", ["nothing", "another open transaction", "a write since the snapshot", "a delete since the snapshot", "its own write"])
def test_a_pipeline_update_in_a_transaction_notes_its_writes_as_each_write_did(server: InProcessServer, meanwhile: str) -> None:
    """(cc) The transaction's note of a statement's writes taken at once answers as each write's own
    note: the same reply or write conflict (112, TransientTransactionError), the same documents after
    both commits, the same change events (pre-images included), whatever wrote the range's documents
    before it (nothing, another open transaction, a write or a delete outside any since this one's
    snapshot, this transaction itself)."""
    from mongoshift.embedded.patches import updates

    def run(name: str) -> Any:
        collection = client.pipelines[name]
        collection.drop()
        client.pipelines.create_collection(name, changeStreamPreAndPostImages={"enabled": True})
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": f"n{i}", "email": "a@b", "legacy": 1} for i in range(8)])
        with collection.watch(full_document="whenAvailable", full_document_before_change="whenAvailable", max_await_time_ms=50) as stream:
            with client.start_session() as first, client.start_session() as second:
                first.start_transaction()
                second.start_transaction()
                collection.find_one({"_id": 0}, session=second)  # its snapshot
                if meanwhile == "another open transaction":
                    collection.update_one({"_id": 5}, {"$set": {"other": 1}}, session=first)
                elif meanwhile == "a write since the snapshot":
                    collection.update_one({"_id": 5}, {"$set": {"other": 2}})
                elif meanwhile == "a delete since the snapshot":
                    collection.delete_one({"_id": 5})
                elif meanwhile == "its own write":
                    collection.update_one({"_id": 5}, {"$set": {"other": 3}}, session=second)
                try:
                    reply: Any = collection.update_many({"__v": 1}, B0, session=second).modified_count
                    second.commit_transaction()
                except OperationFailure as error:
                    reply = (error.code, error.has_error_label("TransientTransactionError"))
                first.commit_transaction()
            collection.insert_one({"_id": "end"})
            events = []
            while (event := stream.next())["operationType"] != "insert":
                events.append(encode({key: event.get(key) for key in EVENT_FIELDS}))
        return reply, [encode(d) for d in collection.find({}, sort=[("_id", 1)])], events

    client = sync_client(server)
    checks = updates.STATEMENT_CHECKS[:]
    try:
        at_once = run("noted_at_once")
        updates.STATEMENT_CHECKS[:] = []  # each write noted by its own note, as before (cc)
        each = run("noted_each")
    finally:
        updates.STATEMENT_CHECKS[:] = checks
        client.close()
    assert at_once == each
    assert (at_once[0] == 8) == (meanwhile in {"nothing", "its own write"})


def test_a_batchs_change_records_enter_the_outbox_without_copies(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cd) The change records of a pipeline update_many in a transaction (at its commit) and of a
    command's guarded statements (at the batch's close) become the engine's CommittedChanges without
    CommittedChange's own check and copy (200 each before), and the outbox the engine builds is the
    one its own steps build from the same records: the same sequences, payloads and floor."""
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.engines.results import CommittedChange
    from pymongo import UpdateOne

    from mongoshift.embedded.patches.updates import _Owned

    client = sync_client(server)
    try:
        collection = client.pipelines.outbox
        collection.drop()
        ids = [ObjectId(f"{i:024x}") for i in range(400)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": "n", "email": "a@b", "legacy": 1} for i in ids])
        with collection.watch(max_await_time_ms=50) as stream:
            calls = count_calls(monkeypatch, (CommittedChange, "__post_init__"))
            with client.start_session() as session, session.start_transaction():
                collection.update_many({"__v": 1, "_id": {"$lt": ids[200]}}, B0, session=session)
            collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}}) for i in ids[200:]], ordered=False)
            monkeypatch.undo()
            assert [stream.next()["documentKey"]["_id"] for _ in range(400)] == ids
        assert calls["__post_init__"] == 0
    finally:
        client.close()
    engine = server.engine
    prepare = MemoryEngine._prepare_committed_changes_locked
    payloads = [_Owned(operation_type="update", n=1), {"operation_type": "insert", "n": [2]}, None, _Owned(operation_type="delete")]
    got, expected = prepare(engine, payloads), prepare.__wrapped__(engine, payloads)  # type: ignore[attr-defined]
    assert got[0] == expected[0] and got[2] == expected[2]
    assert [(c.sequence, c.payload) for c in got[1]] == [(c.sequence, c.payload) for c in expected[1]]
    assert got[1][-4].payload is payloads[0] and got[1][-3].payload is not payloads[1]


def test_a_batchs_events_go_into_the_history_without_a_snapshot_each(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ce) The events of a pipeline update_many in a transaction and of a command's guarded statements
    reach the server's change history without a ChangeEventSnapshot each (built for the history's
    append to read its fields back: 400 before), the collection's pre-image option read once a
    delivery, not once an event; a change stream still reads each, described from its pre-image."""
    from mongoeco._types.documents import ChangeEventSnapshot
    from pymongo import UpdateOne

    from mongoshift.embedded.change_streams import ChangeHistory

    client = sync_client(server)
    try:
        collection = client.pipelines.snapshots
        collection.drop()
        ids = [ObjectId(f"{i:024x}") for i in range(400)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": "n", "email": "a@b", "legacy": 1} for i in ids])
        recorded: list[Any] = []
        record = ChangeHistory.record_locked

        def recording(self: Any, *args: Any) -> None:
            recorded.append(args[-1] if len(args) == 8 else None)
            record(self, *args)

        with collection.watch(max_await_time_ms=50) as stream:
            calls = count_calls(monkeypatch, (ChangeEventSnapshot, "__init__"))
            monkeypatch.setattr(ChangeHistory, "record_locked", recording)
            with client.start_session() as session, session.start_transaction():
                collection.update_many({"__v": 1, "_id": {"$lt": ids[200]}}, B0, session=session)
            collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}}) for i in ids[200:]], ordered=False)
            monkeypatch.undo()
            events = [stream.next() for _ in range(400)]
        assert calls["__init__"] == 0 and recorded == [False] * 400
        assert [e["documentKey"]["_id"] for e in events] == ids
        assert all(e["updateDescription"]["updatedFields"]["__v"] == 2 for e in events)
        assert all(e["updateDescription"]["removedFields"] == ["name", "legacy"] for e in events[:200])
    finally:
        client.close()


def test_a_pipeline_statement_rebuilds_each_chunk_of_the_natural_order_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cg) A pipeline update_many of 300 documents (in a transaction, then outside one) stores its
    values with each chunk of the collection's natural order (128 places) rebuilt once, not once a
    document (300 chunks each before); the documents read back in natural and in _id order are the
    updated ones, and the version index finds them."""
    from mongoeco.engines._memory_collection import _OrderChunk

    client = sync_client(server)
    try:
        collection = client.pipelines.chunks
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        ids = [ObjectId(f"{i:024x}") for i in range(700)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": f"n{i}", "email": "a@b", "legacy": 1} for i in ids])
        collection.delete_many({"_id": {"$in": ids[::7]}})  # places left empty in the chunks
        kept = [i for i in ids if i not in set(ids[::7])]
        calls = count_calls(monkeypatch, (_OrderChunk, "__init__"))
        with client.start_session() as session, session.start_transaction():
            assert collection.update_many({"_id": {"$lte": kept[299]}}, B0, session=session).modified_count == 300
        in_transaction = calls["__init__"]
        assert collection.update_many({"_id": {"$gt": kept[299]}}, B0).modified_count == len(kept) - 300
        monkeypatch.undo()
        assert in_transaction <= 4 and calls["__init__"] - in_transaction <= 4
        assert [d["_id"] for d in collection.find({})] == kept
        assert [(d["_id"], d["full_name"], d["__v"]) for d in collection.find({}, sort=[("_id", 1)])] == [(i, f"n{i}", 2) for i in kept]
        assert [d["_id"] for d in collection.find({"__v": 2}).hint([("__v", 1), ("_id", 1)])] == kept
    finally:
        client.close()


def test_a_statement_whose_deferred_store_fails_is_rolled_back_whole(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cg) A failure while a pipeline statement stores its kept values (a fault injected after the values
    went in) rolls its batch back whole, index entries and change records included, and mongoeco's own
    path then answers the statement: the same documents, index and events as a statement that never failed."""
    from mongoshift.embedded.patches import updates

    def run(name: str, failing: bool) -> Any:
        collection = client.pipelines[name]
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": f"n{i}", "email": "a@b", "legacy": 1} for i in range(300)])
        store = updates._store_replacements
        faults = []

        def broken(coll: Any, writes: Any) -> None:
            store(coll, writes)
            faults.append(1)
            raise RuntimeError("injected")

        with collection.watch(max_await_time_ms=50) as stream:
            if failing:
                monkeypatch.setattr(updates, "_store_replacements", broken)
            result = collection.update_many({"_id": {"$lt": 200}}, B0)
            monkeypatch.undo()
            events = [encode({k: e.get(k) for k in ("operationType", "documentKey", "updateDescription")}) for e in (stream.next() for _ in range(200))]
        assert faults == ([1] if failing else [])
        hint = [("__v", 1), ("_id", 1)]
        return (
            result.modified_count, [encode(d) for d in collection.find({})], [d["_id"] for d in collection.find({"__v": 2}).hint(hint)],
            [d["_id"] for d in collection.find({"__v": 1}).hint(hint)], events,
        )

    client = sync_client(server)
    try:
        assert run("store_fails", True) == run("store_holds", False)
    finally:
        client.close()


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 300), data=st.data())
def test_replacements_stored_at_once_are_the_collections_own_writes(size: int, data: st.DataObject) -> None:
    """(cg) :func:`_store_replacements` leaves a collection (with fix (ae)'s _id order on) exactly as
    its own __setitem__ of each (key, value) in turn does: every map and chunk of its state, its items
    in natural order and its keys in _id order; keys written twice, and chunks with empty places."""
    from mongoeco.engines._memory_collection import MemoryCollection

    from mongoshift.embedded import patches
    from mongoshift.embedded.patches import scans
    from mongoshift.embedded.patches.updates import _store_replacements

    patches.apply()
    keys = [ObjectId(f"{i:024x}") for i in range(size)]
    deleted = set(data.draw(st.lists(st.sampled_from(keys), max_size=size // 3)))
    held = [key for key in keys if key not in deleted]
    writes = data.draw(st.lists(st.tuples(st.sampled_from(held), st.integers()), max_size=2 * size)) if held else []
    built = []
    for _ in range(2):
        collection: Any = MemoryCollection((key, {"_id": key, "n": 0}) for key in keys)
        scans.id_order(collection)  # kept from now on by (ae)'s hooks
        for key in deleted:
            del collection[key]
        built.append(collection)
    one, other = built
    for key, n in writes:
        one[key] = {"_id": key, "n": n}
    _store_replacements(other, [(key, {"_id": key, "n": n}) for key, n in writes])
    assert one._snapshot_state() == other._snapshot_state()
    assert list(one.items()) == list(other.items())
    kept = other.__dict__[scans._ATTR]
    assert kept.ordinals is other._ordinals  # still valid: not built again
    assert scans.id_order(one).storage_keys == kept.storage_keys


def test_a_pipeline_update_takes_the_values_its_read_walked_when_nothing_was_written_since(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(ch) A pipeline update_many of 200 documents, outside a transaction and in one, looks none of
    them up again after its read when nothing was written to the collection since (the read's own
    lookups only, plus, in a transaction, the first-writer-wins check's of the live collection: 400 and
    600 lookups before); a document written between the read and the batch is still read again and
    matched again (test_a_document_written_between_the_read_and_the_batch_is_matched_again)."""
    from mongoeco.engines._memory_collection import MemoryCollection

    client = sync_client(server)
    try:
        collection = client.pipelines.walked
        collection.drop()
        ids = [ObjectId(f"{i:024x}") for i in range(500)]
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": "n", "email": "a@b", "legacy": 1} for i in ids])
        calls = count_calls(monkeypatch, (MemoryCollection, "get"))
        assert collection.update_many({"__v": 1, "_id": {"$gte": ids[0], "$lt": ids[200]}}, B0).modified_count == 200
        outside = calls["get"]
        with client.start_session() as session, session.start_transaction():
            collection.find_one({"_id": ids[0]}, session=session)  # its snapshot, before the count starts
            before = calls["get"]
            assert collection.update_many({"__v": 1, "_id": {"$gte": ids[200], "$lt": ids[400]}}, B0, session=session).modified_count == 200
            inside = calls["get"] - before
        monkeypatch.undo()
        assert outside <= 200 + 10 and inside <= 2 * 200 + 10
        assert collection.count_documents({"__v": 2, "full_name": "n", "legacy": {"$exists": False}}) == 400
    finally:
        client.close()


def test_a_pipeline_update_that_conflicts_in_a_transaction_fails_as_the_original(server: InProcessServer) -> None:
    """(an) A document another open transaction wrote: the batch is rolled back and mongoeco's path
    answers, with the write conflict (112, TransientTransactionError) of fix (o)."""
    client = sync_client(server)
    try:
        collection = client.pipelines.conflicts
        collection.drop()
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1, "name": "n", "email": "a@b"} for i in range(4)])
        with client.start_session() as first, client.start_session() as second:
            first.start_transaction()
            collection.update_one({"_id": 2}, {"$set": {"other": 1}}, session=first)
            second.start_transaction()
            with pytest.raises(PyMongoError) as error:
                collection.update_many({"__v": 1}, B0, session=second)
            assert getattr(error.value, "code", None) == 112
            assert error.value.has_error_label("TransientTransactionError")
            first.commit_transaction()
        assert collection.count_documents({"__v": 1}) == 4
        assert collection.find_one({"_id": 2})["other"] == 1
    finally:
        client.close()


# (bf) update_many with an operator document ($set, $unset, $inc of top-level fields) takes the same batch.

#: Increments: numbers of each type, and values mongoeco refuses ($inc of a string, of null).
increments = st.integers(-2, 2) | st.builds(Int64, st.integers(-2, 2)) | st.sampled_from([0.5, -0.0, 2**62, "x", None])
#: Operators the fast path takes, and some it leaves to the original ($push, $min, $rename; not
#: $currentDate, whose value differs between the two runs compared).
OPERATORS = ["$set", "$set", "$unset", "$inc", "$push", "$min", "$rename"]


@st.composite
def operator_updates(draw: st.DrawFn) -> dict[str, Any]:
    update: dict[str, Any] = {}
    for operator in draw(st.lists(st.sampled_from(OPERATORS), min_size=1, max_size=3, unique=True)):
        names = draw(st.lists(TARGETS | st.just("u"), min_size=draw(st.sampled_from([0, 1, 1, 2])), max_size=2, unique=True))
        if operator == "$inc":
            update[operator] = {name: draw(increments) for name in names}
        elif operator == "$unset":
            update[operator] = dict.fromkeys(names, "")
        elif operator == "$rename":
            update[operator] = {name: f"{name}_renamed" for name in names}
        else:
            update[operator] = {name: draw(values | st.just({"$bad": 1})) for name in names}
    return update


@examples(thorough=1000, quick=25)
def test_an_operator_update_does_what_the_original_update_does(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        _compare(server, docs, data, operator_updates())

    check()


def test_an_operator_update_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bf) ``update_many({...}, {$set, $unset, $inc})`` of 200 documents, on a collection with a unique
    index the update does not touch, takes the collection lock twice and dispatches its changes once;
    an update that touches the unique index's field takes mongoeco's path, which reports the duplicate."""
    from mongoeco.api._async._collection_runtime import CollectionRuntimeCoordinator
    from mongoeco.engines.memory import MemoryEngine
    from pymongo.errors import DuplicateKeyError

    client = sync_client(server)
    try:
        collection = client.pipelines.operator_steps
        collection.drop()
        collection.create_index("email", unique=True)
        collection.insert_many([{"_id": i, "email": f"u{i}@x", "n": 1, "legacy": True} for i in range(500)])
        steps = ((MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"), (CollectionRuntimeCoordinator, "_dispatch_engine_changes"))
        calls = count_calls(monkeypatch, *steps)
        result = collection.update_many({"_id": {"$gte": 100, "$lt": 300}}, {"$set": {"step": 1}, "$unset": {"legacy": ""}, "$inc": {"n": 2}})
        monkeypatch.undo()
        assert (result.matched_count, result.modified_count) == (200, 200)
        assert calls == {"_get_lock": 2, "_encode_storage_document": 0, "_dispatch_engine_changes": 1}
        assert collection.count_documents({"step": 1, "n": 3, "legacy": {"$exists": False}}) == 200
        assert collection.count_documents({"step": {"$exists": False}, "n": 1, "legacy": True}) == 300
        calls = count_calls(monkeypatch, *steps)
        with pytest.raises(DuplicateKeyError):
            collection.update_many({"_id": {"$lt": 3}}, {"$set": {"email": "same"}})
        monkeypatch.undo()
        assert calls["_get_lock"] > 2  # mongoeco's path: a lock per document
        assert collection.count_documents({"email": "same"}) == 1  # the first written, as mongod leaves it
        # a $set of the values a document holds already matches it and modifies nothing
        result = collection.update_many({"_id": {"$gte": 100, "$lt": 110}}, {"$set": {"step": 1, "n": 3}})
        assert (result.matched_count, result.modified_count) == (10, 0)
    finally:
        client.close()
