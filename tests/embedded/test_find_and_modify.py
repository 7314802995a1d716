"""Fix (ao) of mongoshift.embedded.patches.find_and_modify: a ``findAndModify`` by ``_id`` answers and
stores exactly what mongoeco's own path does, and takes (ah)'s write steps.

The property test runs the same command on two identical collections through pymongo, one with the
fix and one with the original mongoeco function swapped back in (an in-process server,
:mod:`.in_process`), and compares the whole replies (value, lastErrorObject, or the error's code), the
stored documents byte for byte and the change events; the other tests count the engine's steps (no
timing) and check transactions.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId, encode
from hypothesis import given, settings, strategies as st
from pymongo.errors import OperationFailure, PyMongoError

from ..conftest import examples
from .in_process import InProcessServer, count_calls, in_process_server, original, sync_client


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessServer]:
    with in_process_server() as started:
        yield started


FIELDS = ["owner", "lease", "n", "done", "zz"]
scalars = (
    st.integers(-2, 2) | st.sampled_from([2**31 - 1, 2**63 - 1]) | st.builds(Int64, st.integers(-2, 2))
    | st.sampled_from([1.0, -0.0, 2.5, float("nan")]) | st.just(Decimal128("1"))
    | st.text(alphabet="ab", max_size=2) | st.booleans() | st.none()
    | st.sampled_from([datetime.datetime(2024, 1, 1), ObjectId("0" * 24)])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["p", "$q"]), inner, max_size=2), max_leaves=3)
STORED_IDS = [ObjectId(f"{i:024x}") for i in range(3)] + ["p1", 7, Int64(8)]
stored_ids = st.sampled_from(STORED_IDS)
ids = st.sampled_from([*STORED_IDS, 7.0, 8, "p2"])  # 7.0 and 8 find the stored 7 and Int64(8) by BSON equality
plain_ids = st.sampled_from([ObjectId(f"{i:024x}") for i in range(3)] + ["p1", 7, "p2"])  # the _id types the fast path looks up
#: Update operators: the taken ones, and some the fast path leaves to the original ($push, $setOnInsert, $rename).
OPERATORS = ["$set", "$set", "$inc", "$unset", "$push", "$setOnInsert", "$rename"]
TARGETS = st.sampled_from([*FIELDS, *FIELDS, "new", "_id", "a.b"])


@st.composite
def stored(draw: st.DrawFn) -> list[dict[str, Any]]:
    docs = []
    for value in draw(st.lists(stored_ids, min_size=1, max_size=4, unique=True)):
        doc: dict[str, Any] = {"_id": value}
        for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
            doc[name] = draw(values)
        docs.append(doc)
    return docs


#: Guard values: mostly the scalars the fast path compares, some it leaves to the original.
guard_values = st.integers(-2, 2) | st.text(alphabet="ab", max_size=2) | st.booleans() | st.builds(Int64, st.integers(-2, 2)) | st.just(1.0)
odd_guards = scalars | st.just({"$exists": False}) | st.just({"$gt": 0})


@st.composite
def commands(draw: st.DrawFn, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mostly commands the fast path takes (``_id`` and scalar guards, top-level ``$set``/``$inc``/
    ``$unset``); a quarter with something it leaves to the original (another operator, a path, an
    upsert, a sort, a remove, a guard it does not compare)."""
    odd = not draw(st.integers(0, 3))
    query: dict[str, Any] = {"_id": draw(ids if odd else plain_ids)} if not odd or draw(st.integers(0, 3)) else {"n": draw(scalars)}
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=2, unique=True)):
        query[name] = draw(odd_guards if odd else guard_values)
    if not odd and draw(st.booleans()):  # a stored document's own _id and fields: a guard that holds
        doc = draw(st.sampled_from(docs))
        query = {"_id": doc["_id"], **{name: doc[name] for name in draw(st.lists(st.sampled_from(sorted(doc)), max_size=2, unique=True))}}
    update: dict[str, Any] = {}
    operators = OPERATORS if odd else OPERATORS[:4]
    targets = TARGETS if odd else st.sampled_from([*FIELDS, "new"])
    used: set[str] = set()
    for operator in draw(st.lists(st.sampled_from(operators), min_size=1, max_size=3, unique=True)):
        names = [name for name in draw(st.lists(targets, min_size=1, max_size=2, unique=True)) if odd or name not in used] or ["zz"]
        used.update(names)
        if operator == "$inc":
            update[operator] = {name: draw(st.integers(-2, 2) | st.sampled_from([1.5, Int64(1), 2**63 - 1])) for name in names}
        elif operator == "$unset":
            update[operator] = dict.fromkeys(names, "")
        elif operator == "$rename":
            update[operator] = {name: f"{name}_renamed" for name in names if name != "_id"} or {"zz": "yy"}
        else:
            update[operator] = {name: draw(values) for name in names}
    command: dict[str, Any] = {"query": query, "update": update, "new": draw(st.booleans())}
    if draw(st.booleans()):
        command["fields"] = draw(st.sampled_from([{"owner": 1}, {"owner": 0}, {"_id": 0, "n": 1}, {"lease": 1, "_id": 0}]))
    if odd and draw(st.booleans()):
        command.update(draw(st.sampled_from([{"upsert": True}, {"sort": {"_id": 1}}, {"remove": True, "update": None}])))
        if command.get("upsert"):
            query.setdefault("_id", "up")  # an upsert's own _id: the same on both sides
    return {name: value for name, value in command.items() if value is not None}


def outcome(client: Any, collection: Any, command: dict[str, Any], in_transaction: bool) -> Any:
    """The reply (value and lastErrorObject, or the error's code), the stored documents' bytes, and
    the change events."""
    database = collection.database
    with collection.watch(full_document="updateLookup", max_await_time_ms=50) as stream:
        try:
            if in_transaction:
                with client.start_session() as session, session.start_transaction():
                    reply = database.command({"findAndModify": collection.name, **command}, session=session)
            else:
                reply = database.command({"findAndModify": collection.name, **command})
            answer: Any = (encode({"value": reply.get("value")}), reply.get("lastErrorObject"))
        except OperationFailure as error:
            answer = ("error", error.code)
        collection.insert_one({"_id": "end"})  # the events up to this one are the command's
        events = []
        while (event := stream.next())["operationType"] != "insert":
            events.append((event["operationType"], encode(event["documentKey"]), encode(event.get("updateDescription") or {}),
                           encode(event.get("fullDocument") or {})))
    documents = [encode(doc) for doc in collection.find({}, sort=[("_id", 1)])]
    return answer, documents, events


@examples(thorough=1000, quick=40)
def test_a_find_and_modify_does_what_the_original_does(server: InProcessServer, max_examples: int) -> None:
    from mongoeco.api._async import _collection_modify

    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        command = data.draw(commands(docs))
        in_transaction = data.draw(st.booleans())
        client = sync_client(server)
        try:
            fast, slow = client.leases.fast, client.leases.slow
            for collection in (fast, slow):
                collection.drop()
                collection.create_index([("owner", 1), ("_id", 1)])
                collection.insert_many(docs)
            got = outcome(client, fast, command, in_transaction)
            with original(_collection_modify, "find_one_and_update_outcome"):
                expected = outcome(client, slow, command, in_transaction)
            assert got == expected, (docs, command, got, expected)
            for value in (1, "a", None):  # the owner index holds the same documents under the same keys
                hint = [("owner", 1), ("_id", 1)]
                assert [d["_id"] for d in fast.find({"owner": value}).hint(hint)] == [d["_id"] for d in slow.find({"owner": value}).hint(hint)]
        finally:
            client.close()

    check()


def _claim(owner: str, now: datetime.datetime) -> dict[str, Any]:
    return {"$set": {"owner": owner, "lease_until": now}, "$inc": {"claims": 1}}


def test_a_lease_claim_takes_the_engine_steps_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(ao) A findAndModify by _id with guards takes the collection lock once, encodes no whole
    document and compiles no update plan; mongoeco's path compiles the update and encodes the
    document, and answers the same."""
    from mongoeco.api._async import _collection_modify
    from mongoeco.engines.memory import MemoryEngine

    client = sync_client(server)
    try:
        collection = client.leases.steps
        collection.drop()
        collection.insert_many([{"_id": f"p{i}", "owner": "", "claims": 0, "range": [i, i + 1]} for i in range(4)])
        now = datetime.datetime(2026, 1, 1)
        steps = ((MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"), (_collection_modify, "compile_update_operation"))
        calls = count_calls(monkeypatch, *steps)
        reply = client.leases.command({"findAndModify": "steps", "query": {"_id": "p1", "owner": ""}, "update": _claim("a", now), "new": True,
                                       "fields": {"range": 0}})
        monkeypatch.undo()
        assert reply["value"] == {"_id": "p1", "owner": "a", "claims": 1, "lease_until": now}
        assert reply["lastErrorObject"] == {"n": 1, "updatedExisting": True}
        assert calls == {"_get_lock": 1, "_encode_storage_document": 0, "compile_update_operation": 0}
        with original(_collection_modify, "find_one_and_update_outcome"):
            calls = count_calls(monkeypatch, *steps)
            reply = client.leases.command({"findAndModify": "steps", "query": {"_id": "p2", "owner": ""}, "update": _claim("a", now), "new": True,
                                           "fields": {"range": 0}})
            monkeypatch.undo()
        assert reply["value"] == {"_id": "p2", "owner": "a", "claims": 1, "lease_until": now}
        assert calls["compile_update_operation"] >= 1 and calls["_encode_storage_document"] >= 1
        # a guard that no longer holds: no match, nothing written
        reply = client.leases.command({"findAndModify": "steps", "query": {"_id": "p1", "owner": ""}, "update": _claim("b", now)})
        assert reply["value"] is None and reply["lastErrorObject"] == {"n": 0, "updatedExisting": False}
        assert collection.find_one({"_id": "p1"})["owner"] == "a"
    finally:
        client.close()


def test_a_find_and_modify_in_a_transaction_is_seen_at_commit_and_gone_at_abort(server: InProcessServer) -> None:
    """(ao) inside a transaction: the write is the transaction's until it commits, gone after an
    abort, and its change event, described, is delivered at the commit."""
    client = sync_client(server)
    try:
        collection = client.leases.transactions
        collection.drop()
        collection.insert_many([{"_id": i, "owner": "", "claims": 0} for i in range(3)])
        with client.start_session() as session:
            session.start_transaction()
            before = collection.find_one_and_update({"_id": 1, "owner": ""}, {"$set": {"owner": "a"}, "$inc": {"claims": 1}}, session=session)
            assert before == {"_id": 1, "owner": "", "claims": 0}
            assert collection.find_one({"_id": 1}, session=session)["owner"] == "a"
            assert collection.find_one({"_id": 1})["owner"] == ""
            session.abort_transaction()
        assert collection.find_one({"_id": 1}) == {"_id": 1, "owner": "", "claims": 0}
        with collection.watch(max_await_time_ms=50) as stream:
            with client.start_session() as session, session.start_transaction():
                collection.find_one_and_update({"_id": 2}, {"$set": {"owner": "b"}, "$unset": {"claims": ""}}, session=session)
            event = stream.next()
        assert event["documentKey"] == {"_id": 2}
        assert event["updateDescription"] == {"updatedFields": {"owner": "b"}, "removedFields": ["claims"], "truncatedArrays": []}
    finally:
        client.close()


def test_a_find_and_modify_that_conflicts_in_a_transaction_fails_as_the_original(server: InProcessServer) -> None:
    """(ao) A document another open transaction wrote: the statement is rolled back and mongoeco's
    path answers, with the write conflict (112, TransientTransactionError) of fix (o)."""
    client = sync_client(server)
    try:
        collection = client.leases.conflicts
        collection.drop()
        collection.insert_many([{"_id": i, "owner": ""} for i in range(2)])
        with client.start_session() as first, client.start_session() as second:
            first.start_transaction()
            collection.update_one({"_id": 1}, {"$set": {"other": 1}}, session=first)
            second.start_transaction()
            with pytest.raises(PyMongoError) as error:
                collection.find_one_and_update({"_id": 1, "owner": ""}, {"$set": {"owner": "b"}}, session=second)
            assert getattr(error.value, "code", None) == 112
            assert error.value.has_error_label("TransientTransactionError")
            first.commit_transaction()
        assert collection.find_one({"_id": 1}) == {"_id": 1, "owner": "", "other": 1}
    finally:
        client.close()
