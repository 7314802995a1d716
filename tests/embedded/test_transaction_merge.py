"""Fix (o)'s commit merge with (ah)'s write steps (mongoshift.embedded.patches.transactions): a
committed transaction's updates reach the live collection through only the indexes over the fields
that changed, and the result is exactly what the whole-steps merge gives.

The property test runs the same transaction (updates of every kind, inserts, deletes, replacements,
with plain writes of the same and of other documents in between) on two identical collections
through pymongo, one committed with the lean merge and one with the whole-steps merge swapped back
in (an in-process server, :mod:`.in_process`), and compares every reply and error code, the stored
documents byte for byte in natural order, the engine's index contents (entries, their ordinals, the
TTL schedule) and the change events; the other test counts the engine's steps (no timing).
"""

from __future__ import annotations

import contextlib
import datetime
from typing import Any

import pytest
from bson import Int64, ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo.errors import BulkWriteError, OperationFailure

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, sync_client

FIELDS = ["a", "b", "k", "t", "__v", "__rev"]
scalars = (
    st.integers(-2, 2) | st.builds(Int64, st.integers(-2, 2)) | st.sampled_from([1.0, 2.5])
    | st.text(alphabet="ab", max_size=2) | st.none() | st.booleans()
    | st.sampled_from([datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), ObjectId("1" * 24)])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2), max_leaves=3)
IDS = [ObjectId(f"{i:024x}") for i in range(5)] + ["s", 7]
ids = st.sampled_from(IDS)
fields = st.sampled_from(FIELDS)


@st.composite
def documents(draw: st.DrawFn, document_id: Any = None) -> dict[str, Any]:
    document: dict[str, Any] = {"_id": draw(ids) if document_id is None else document_id}
    for name in draw(st.lists(fields, max_size=4, unique=True)):
        document[name] = draw(values)
    return document


@st.composite
def writes(draw: st.DrawFn) -> tuple[str, Any]:
    """One write: what it is and its arguments (the same on both collections)."""
    kind = draw(st.sampled_from(["set", "set", "inc", "unset", "pipeline", "pipeline", "insert", "delete", "replace", "many"]))
    target = draw(ids)
    if kind == "set":
        return kind, ({"_id": target}, {"$set": draw(st.dictionaries(fields, values, min_size=1, max_size=3))})
    if kind == "inc":
        return kind, ({"_id": target}, {"$inc": {draw(st.sampled_from(["__v", "__rev", "a"])): draw(st.integers(1, 2))}})
    if kind == "unset":
        return kind, ({"_id": target}, {"$unset": {draw(fields): ""}})
    if kind == "pipeline":  # (an)'s path, or mongoeco's when a unique index or a stage refuses it
        stage = draw(st.sampled_from([
            [{"$set": {"__v": 2, "__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}, "b": "$a"}}, {"$unset": ["a"]}],
            [{"$set": {"t": "$__v"}}],
            [{"$set": {"a": {"$literal": {"p": 1}}}}],
            [{"$unset": "k"}],
        ]))
        query = draw(st.sampled_from([{"_id": target}, {}, {"__v": {"$exists": True}}]))
        return kind, (query, stage)
    if kind == "many":
        return kind, ({}, {"$set": {"b": draw(values)}})
    if kind == "insert":
        return kind, draw(documents())
    if kind == "delete":
        return kind, {"_id": target}
    replacement = draw(documents(document_id=target))
    replacement.pop("_id")
    return kind, ({"_id": target}, replacement)


def run(collection: Any, write: tuple[str, Any], session: Any) -> Any:
    """``write`` on ``collection``: its reply, or its error's code."""
    kind, arguments = write
    try:
        if kind in ("set", "inc", "unset"):
            result: Any = collection.update_one(*arguments, session=session)
        elif kind in ("pipeline", "many"):
            result = collection.update_many(*arguments, session=session)
        elif kind == "insert":
            return ("inserted", collection.insert_one(dict(arguments), session=session).inserted_id)
        elif kind == "delete":
            return ("deleted", collection.delete_one(arguments, session=session).deleted_count)
        else:
            result = collection.replace_one(*arguments, session=session)
        return (result.matched_count, result.modified_count)
    except OperationFailure as error:
        return ("error", error.code)


def index_contents(server: InProcessServer, collection: Any) -> Any:
    """Each index's entries (key -> storage keys with their ordinals) and TTL schedule, as the engine holds them."""
    maps = server.engine._index_data.get(collection.database.name, {}).get(collection.name, {})
    contents = {}
    for name, index_map in maps.items():
        entries = {key: sorted((repr(k), index_map.ordinal_for(key, k)) for k in members) for key, members in index_map.items()}
        schedule = sorted((repr(k), when) for k, (when, _) in index_map._expiry_by_storage.items())
        contents[name] = (repr(sorted(entries.items(), key=repr)), schedule)
    return contents


def outcome(server: InProcessServer, client: Any, collection: Any, steps: list[tuple[bool, tuple[str, Any]]]) -> Any:
    """The replies of the transaction's writes (and of the plain writes between them), the commit's,
    the stored documents in natural order, the index contents and the change events."""
    replies = []
    with collection.watch(full_document="updateLookup", max_await_time_ms=50) as stream:
        with client.start_session() as session:
            session.start_transaction()
            for in_transaction, write in steps:
                replies.append(run(collection, write, session if in_transaction else None))
            try:
                session.commit_transaction()
                replies.append("committed")
            except OperationFailure as error:
                replies.append(("commit", error.code, error.has_error_label("TransientTransactionError")))
        collection.insert_one({"_id": "end"})  # the events up to this one are the writes'
        events = []
        while (event := stream.next())["documentKey"]["_id"] != "end":
            events.append(encode({k: event.get(k) for k in ("operationType", "documentKey", "updateDescription", "fullDocument")}))
    collection.delete_one({"_id": "end"})
    documents = [encode(doc) for doc in collection.find({})]
    return replies, documents, index_contents(server, collection), events


@examples(thorough=1000, quick=15)
def test_the_lean_merge_commits_what_the_whole_merge_commits(server: InProcessServer, max_examples: int) -> None:
    @settings(max_examples=max_examples, deadline=None)
    @given(
        seed=st.lists(documents(), max_size=6),
        steps=st.lists(st.tuples(st.booleans() | st.just(True), writes()), min_size=1, max_size=6),
        unique=st.booleans(),
    )
    def check(seed: list[dict[str, Any]], steps: list[tuple[bool, tuple[str, Any]]], unique: bool) -> None:
        _compare(server, seed, steps, unique)

    check()


def _compare(server: InProcessServer, seed: list[dict[str, Any]], steps: list[tuple[bool, tuple[str, Any]]], unique: bool) -> None:
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        lean, whole = client.merge.lean, client.merge.whole
        for collection in (lean, whole):
            collection.drop()
            collection.create_index([("__v", 1), ("_id", 1)])
            collection.create_index("a.p")
            collection.create_index("t", expireAfterSeconds=10**9)  # TTL: mongoeco's steps, never expiring here
            collection.create_index("b", partialFilterExpression={"b": {"$exists": True}})
            if unique:
                collection.create_index("k", unique=True, sparse=True)
            if seed:
                with contextlib.suppress(BulkWriteError):  # a duplicate unique key: the same documents left out of both
                    collection.insert_many(list({doc["_id"]: doc for doc in seed}.values()), ordered=False)
        got = outcome(server, client, lean, steps)
        with original(MemoryEngine, "_mongoshift_merge"):
            expected = outcome(server, client, whole, steps)
        assert got == expected, (seed, steps, got, expected)
    finally:
        client.close()


SEED = [{"_id": i, "__v": 1, "a": {"p": i}, "k": i} for i in IDS]


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([("delete", {"_id": IDS[1]}), ("insert", {"_id": IDS[1], "__v": 9})], id="deleted-and-inserted-again"),
        pytest.param([("insert", {"_id": 100}), ("insert", {"_id": 101}), ("delete", {"_id": 100}), ("insert", {"_id": 100})], id="new-ones-reordered"),
        pytest.param([("insert", {"_id": 100}), ("delete", {"_id": 100})], id="inserted-and-deleted"),
        pytest.param(
            [("set", ({"_id": IDS[2]}, {"$set": {"k": 50}})), ("set", ({"_id": IDS[3]}, {"$set": {"__v": 2}})), ("delete", {"_id": IDS[4]})], id="updates"
        ),
        pytest.param([("replace", ({"_id": IDS[0]}, {"b": 1})), ("many", ({}, {"$set": {"b": 2}}))], id="replaced-then-all-updated"),
    ],
)
def test_the_lean_merge_keeps_the_natural_order_of_the_whole_merge(server: InProcessServer, steps: list[tuple[str, Any]]) -> None:
    """The cases where installing the transaction's copy would change the natural order (a document
    deleted and inserted again, new documents in another order): the merge applies them instead."""
    _compare(server, SEED, [(True, step) for step in steps], unique=True)
    _compare(server, SEED, [(True, step) for step in steps], unique=False)


PIPELINE = [{"$set": {"full": "$name", "__v": 2, "__rev": {"$add": ["$__rev", 1]}}}, {"$unset": ["name", "legacy"]}]


def _seeded(client: Any, name: str) -> tuple[Any, list[dict[str, Any]]]:
    collection = client.merge[name]
    collection.drop()
    collection.create_index([("__v", 1), ("_id", 1)])
    documents = [{"_id": ObjectId(f"{i:024x}"), "__v": 1, "__rev": 1, "name": "n", "legacy": {"x": [1, 2]}} for i in range(401)]
    collection.insert_many(documents)
    return collection, documents


def _commit_counted(client: Any, collection: Any, query: dict[str, Any], monkeypatch: pytest.MonkeyPatch, *, meanwhile: Any = None) -> dict[str, int]:
    """A range's pipeline update of 200 documents in a transaction; the engine's steps its commit takes."""
    from mongoeco.engines.memory import MemoryEngine

    with client.start_session() as session:
        session.start_transaction()
        assert collection.update_many(query, PIPELINE, session=session).modified_count == 200
        if meanwhile is not None:
            meanwhile()
        steps = ("_update_indexes_locked", "_decode_codec_payload", "_record_index_membership_undo_locked", "_set_storage_document_locked")
        calls = count_calls(monkeypatch, *((MemoryEngine, step) for step in steps))
        session.commit_transaction()
        monkeypatch.undo()
    return calls


def _check_migrated(collection: Any, documents: list[dict[str, Any]]) -> None:
    assert collection.count_documents({"__v": 2, "__rev": 2, "full": "n", "legacy": {"$exists": False}}) == 400
    hint = [("__v", 1), ("_id", 1)]
    assert [d["_id"] for d in collection.find({"__v": 2}).hint(hint)] == [d["_id"] for d in documents[:400]]
    assert [d["_id"] for d in collection.find({"__v": 1}).hint(hint)] == [documents[400]["_id"]]


def test_a_commit_applies_updates_through_the_indexes_they_change(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """With another document of the collection written meanwhile, the commit of a range's pipeline
    update of 200 documents (the version changes, nothing the ``_id`` index holds) applies each one
    with (ah)'s steps: its version index entries only (two journaled changes), none of mongoeco's
    whole index steps, no whole new document decoded; the whole-steps merge takes both for each."""
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection, documents = _seeded(client, "lean")

        def meanwhile() -> None:
            collection.update_one({"_id": documents[400]["_id"]}, {"$set": {"other": 1}})

        calls = _commit_counted(client, collection, {"_id": {"$lt": documents[200]["_id"]}}, monkeypatch, meanwhile=meanwhile)
        assert calls == {
            "_update_indexes_locked": 0, "_decode_codec_payload": 0, "_record_index_membership_undo_locked": 400, "_set_storage_document_locked": 200,
        }
        with original(MemoryEngine, "_mongoshift_merge"):
            calls = _commit_counted(client, collection, {"_id": {"$gte": documents[200]["_id"]}, "other": None}, monkeypatch, meanwhile=meanwhile)
        # (the whole steps decoded each new document too, before (bl) kept the decoded form of what a fast path writes)
        assert calls["_update_indexes_locked"] == 400
        _check_migrated(collection, documents)
    finally:
        client.close()


def test_a_commit_installs_the_transactions_copy_when_nobody_wrote_the_collection(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """With nothing written to the collection meanwhile, the commit of the same range writes no
    document and no index entry: the transaction's copy of the collection and of its index maps
    becomes the live one; the whole-steps merge writes each document and its index entries again."""
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection, documents = _seeded(client, "install")
        calls = _commit_counted(client, collection, {"_id": {"$lt": documents[200]["_id"]}}, monkeypatch)
        assert calls == {"_update_indexes_locked": 0, "_decode_codec_payload": 0, "_record_index_membership_undo_locked": 0, "_set_storage_document_locked": 0}
        with original(MemoryEngine, "_mongoshift_merge"):
            calls = _commit_counted(client, collection, {"_id": {"$gte": documents[200]["_id"], "$lt": documents[400]["_id"]}}, monkeypatch)
        assert calls["_set_storage_document_locked"] == 200 and calls["_update_indexes_locked"] == 400
        _check_migrated(collection, documents)
    finally:
        client.close()


def test_a_commit_of_a_collection_nobody_wrote_skips_its_documents_checks(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(cf) With nothing written to the collection since the transaction began, the commit of a range's
    pipeline update of 200 documents looks up neither their live values (the conflict check) nor
    their presence and places in the natural order (whether its copy can be installed): 200 of each
    kind of lookup fewer (the plan's count of the documents it deleted keeps its own); with a
    write of another document meanwhile it checks each one as before, and a write of one of its own
    documents after its update still fails the commit (112, TransientTransactionError), nothing of it
    committed."""
    from mongoeco.engines._memory_collection import MemoryCollection

    client = sync_client(server)
    try:
        collection, documents = _seeded(client, "lookups")
        counted = ((MemoryCollection, "get"), (MemoryCollection, "__contains__"))
        with client.start_session() as session:
            session.start_transaction()
            collection.update_many({"_id": {"$lt": documents[200]["_id"]}}, PIPELINE, session=session)
            calls = count_calls(monkeypatch, *counted)
            session.commit_transaction()
            monkeypatch.undo()
        assert calls == {"get": 0, "__contains__": 200}

        def other() -> None:
            collection.update_one({"_id": documents[400]["_id"]}, {"$set": {"other": 1}})

        with client.start_session() as session:
            session.start_transaction()
            collection.update_many({"_id": {"$gte": documents[200]["_id"], "$lt": documents[400]["_id"]}}, PIPELINE, session=session)
            other()
            calls = count_calls(monkeypatch, *counted)
            session.commit_transaction()
            monkeypatch.undo()
        assert calls["get"] >= 200
        _check_migrated(collection, documents)
        with client.start_session() as session:
            session.start_transaction()
            collection.update_many({"_id": documents[400]["_id"]}, [{"$set": {"late": 1}}], session=session)
            collection.update_one({"_id": documents[400]["_id"]}, {"$set": {"other": 2}})
            with pytest.raises(OperationFailure) as error:
                session.commit_transaction()
        assert error.value.code == 112 and error.value.has_error_label("TransientTransactionError")
        assert collection.find_one({"_id": documents[400]["_id"]}, {"_id": 0, "other": 1, "late": 1}) == {"other": 2}
    finally:
        client.close()
