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
from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId, decode, encode
from hypothesis import given, settings, strategies as st
from pymongo.errors import OperationFailure, PyMongoError

from ..conftest import examples
from .in_process import InProcessServer, count_calls, original, stale_decodes, sync_client

FIELDS = ["owner", "lease", "n", "done", "zz"]
scalars = (
    st.integers(-2, 2) | st.sampled_from([2**31 - 1, 2**63 - 1]) | st.builds(Int64, st.integers(-2, 2))
    | st.sampled_from([1.0, -0.0, 2.5, float("nan")]) | st.just(Decimal128("1"))
    | st.text(alphabet="ab", max_size=2) | st.booleans() | st.none()
    | st.sampled_from([datetime.datetime(2024, 1, 1), ObjectId("0" * 24)])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["p", "$q"]), inner, max_size=2), max_leaves=3)
#: Values a taken $set stores (no $-prefixed name inside).
set_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["p", "q"]), inner, max_size=2), max_leaves=3)
#: Sub-documents like the engine's lease and counters: mostly documents of scalars (with a token, as
#: a lease has), some with a document inside, some an array or a scalar themselves (paths mongoeco's
#: path answers).
SUB_KEYS = ["token", "at", "n", "p"]
leases = st.fixed_dictionaries(
    {"token": st.sampled_from(["t0", "t1"])},
    optional={"at": scalars, "n": st.integers(-2, 2) | scalars, "p": st.dictionaries(st.sampled_from(["q", "r"]), scalars, max_size=2)},
)


@st.composite
def sub_documents(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 5))
    if kind < 3:
        return draw(leases)
    if kind == 3:
        return draw(st.dictionaries(st.sampled_from(SUB_KEYS), scalars, max_size=3))
    if kind == 4:
        return draw(st.lists(st.fixed_dictionaries({"token": st.sampled_from(["t0", "t1"])}), min_size=1, max_size=2))
    return draw(scalars)


SUB_FIELDS = ["lease", "counters"]
STORED_IDS = [ObjectId(f"{i:024x}") for i in range(3)] + ["p1", 7, Int64(8)]
stored_ids = st.sampled_from(STORED_IDS)
ids = st.sampled_from([*STORED_IDS, 7.0, 8, "p2"])  # 7.0 and 8 find the stored 7 and Int64(8) by BSON equality
plain_ids = st.sampled_from([ObjectId(f"{i:024x}") for i in range(3)] + ["p1", 7, "p2"])  # the _id types the fast path looks up
#: Update operators: the taken ones, and some the fast path leaves to the original ($push, $setOnInsert, $rename).
OPERATORS = ["$set", "$set", "$inc", "$unset", "$currentDate", "$push", "$setOnInsert", "$rename"]
TAKEN = OPERATORS[:5]
#: Paths through sub-documents (the engine's lease.token, counters.n), one two levels down, and one
#: through a scalar or an array when the document has one there.
PATHS = ["lease.token", "lease.at", "counters.n", "counters.new", "lease.p.q", "zz.a"]
TARGETS = st.sampled_from([*FIELDS, *FIELDS, "new", "_id", "a.b", *PATHS, "lease.0.token", "lease.$", "counters.$[]"])
#: What $currentDate is given: a date (taken), a timestamp and a refused value (the original's).
CURRENT_DATES = st.sampled_from([True, True, {"$type": "date"}, {"$type": "timestamp"}, False, 1])


@st.composite
def stored(draw: st.DrawFn) -> list[dict[str, Any]]:
    docs = []
    for value in draw(st.lists(stored_ids, min_size=1, max_size=4, unique=True)):
        doc: dict[str, Any] = {"_id": value}
        for name in draw(st.lists(st.sampled_from(FIELDS + SUB_FIELDS), max_size=5, unique=True)):
            doc[name] = draw(values)
        for name in SUB_FIELDS:  # mostly there, mostly documents
            if draw(st.integers(0, 5)) < 5:
                doc[name] = draw(sub_documents())
        if draw(st.booleans()):
            doc["status"] = draw(st.sampled_from(["running", "done"]))
        docs.append(doc)
    return docs


#: Guard values: mostly the scalars the fast path compares, some it leaves to the original.
guard_values = st.integers(-2, 2) | st.text(alphabet="ab", max_size=2) | st.booleans() | st.builds(Int64, st.integers(-2, 2)) | st.just(1.0)
odd_guards = scalars | st.just({"$exists": False}) | st.just({"$gt": 0})


def _fields(doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """A stored document's fields and its sub-documents' fields, by path (guards that hold)."""
    found = []
    for name, value in doc.items():
        found.append((name, value))
        if type(value) is dict:
            found.extend((f"{name}.{key}", inner) for key, inner in value.items())
    return found


@st.composite
def engine_commands(draw: st.DrawFn, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The background engine's checkpoints and releases (``BackgroundStore.checkpoint``, ``release``)
    on one of the documents: guarded on ``lease.token`` (mostly the document's own), ``$set`` of
    top-level documents and scalars, ``$unset`` of ``inflight`` or ``lease``, ``$inc`` of
    ``counters.*`` and ``failures``, ``$currentDate`` of ``lease.at`` or ``done_at``."""
    doc = draw(st.sampled_from(docs))
    lease = doc.get("lease")
    own = lease.get("token") if type(lease) is dict and draw(st.sampled_from([True, True, True, False])) else None
    query: dict[str, Any] = {"_id": doc["_id"], "lease.token": own or draw(st.sampled_from(["t0", "t1"]))}
    update: dict[str, Any]
    if draw(st.sampled_from([True, True, True, False])):  # a checkpoint
        if draw(st.booleans()):
            query["status"] = draw(st.sampled_from(["running", "done"]))
        done = draw(st.booleans())
        set_: dict[str, Any] = {"cursor": {"after": draw(st.integers(0, 9))}}
        unset: dict[str, Any] = {}
        if draw(st.booleans()):
            set_["failures"] = 0
        if draw(st.booleans()):
            set_["inflight"] = {"token": query["lease.token"], "ids": [1, 2]}
        else:
            unset["inflight"] = ""
        if done:
            set_["status"] = "done"
            unset["lease"] = ""
        update = {"$set": set_}
        if unset:
            update["$unset"] = unset
        counters = draw(st.lists(st.sampled_from(["n", "migrated", "batches"]), max_size=2, unique=True))
        if counters:
            update["$inc"] = {f"counters.{name}": draw(st.integers(1, 3)) for name in counters}
        update["$currentDate"] = {"done_at": True} if done else {"lease.at": True}
    else:  # a release, after a failure or not
        update = {"$unset": {"lease": ""}}
        if draw(st.booleans()):
            update["$inc"] = {"failures": 1}
            update["$set"] = {"last_error": "boom"}
    command: dict[str, Any] = {"query": query, "update": update, "new": draw(st.booleans())}
    if draw(st.booleans()):
        command["fields"] = {"_id": 0, "control": 1}
    return command


@st.composite
def commands(draw: st.DrawFn, docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Half the background engine's own commands (:func:`engine_commands`); the others mostly
    commands the fast path takes (``_id`` and scalar guards at paths through sub-documents,
    ``$set``/``$inc``/``$unset``/``$currentDate`` of such paths), some with something it leaves to
    the original (another operator, a positional or numeric path, an upsert, a sort, a remove, a
    guard it does not compare)."""
    if draw(st.booleans()):
        return draw(engine_commands(docs))
    odd = draw(st.integers(0, 2)) == 2  # (hypothesis draws small integers most: 0 is the common case)
    query: dict[str, Any] = {"_id": draw(ids if odd else plain_ids)} if not odd or draw(st.integers(0, 3)) < 3 else {"n": draw(scalars)}
    for name in draw(st.lists(st.sampled_from(FIELDS + PATHS), max_size=2, unique=True)):
        query[name] = draw(odd_guards if odd else guard_values | st.just({"$exists": False}))
    if not odd and draw(st.booleans()):  # a stored document's own _id and fields: a guard that holds
        doc = draw(st.sampled_from(docs))
        held = draw(st.lists(st.sampled_from(_fields(doc)), max_size=3, unique_by=lambda item: item[0]))
        query = {"_id": doc["_id"], **dict(held)}
    update: dict[str, Any] = {}
    operators = OPERATORS if odd else TAKEN
    targets = TARGETS if odd else st.sampled_from([*FIELDS, "new", *PATHS, *PATHS])
    used: set[str] = set()
    for operator in draw(st.lists(st.sampled_from(operators), min_size=1, max_size=4, unique=True)):
        names = [name for name in draw(st.lists(targets, min_size=1, max_size=2, unique=True)) if odd or name not in used] or ["zz"]
        used.update(names)
        if operator == "$inc":
            update[operator] = {name: draw(st.integers(-2, 2) | st.sampled_from([1.5, Int64(1), 2**63 - 1])) for name in names}
        elif operator == "$unset":
            update[operator] = dict.fromkeys(names, "")
        elif operator == "$rename":
            update[operator] = {name: f"{name}_renamed" for name in names if name != "_id"} or {"zz": "yy"}
        elif operator == "$currentDate":
            update[operator] = {name: draw(CURRENT_DATES if odd else CURRENT_DATES.filter(lambda v: v is True or v == {"$type": "date"}))
                                for name in names}
        else:
            update[operator] = {name: draw(values if odd else set_values) for name in names}
    command: dict[str, Any] = {"query": query, "update": update, "new": draw(st.booleans())}
    if draw(st.booleans()):
        command["fields"] = draw(st.sampled_from([{"owner": 1}, {"owner": 0}, {"_id": 0, "n": 1}, {"lease": 1, "_id": 0}, {"_id": 0, "control": 1}]))
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


@pytest.fixture
def held_clock(monkeypatch: pytest.MonkeyPatch) -> datetime.datetime:
    """One clock for both paths, so that $currentDate's values compare: the one each request's
    context reads (the server's client's, which the command passes as its ``let``; a collection's
    own for a command without one), held still: a naive UTC datetime in milliseconds, as mongoeco's
    ``utc_bson_now`` gives it, a day back, so that a fast path reading another clock would store
    another value."""
    from mongoeco.api._async import client as client_module, collection as collection_module

    now = client_module.utc_bson_now() - datetime.timedelta(days=1)
    for module in (client_module, collection_module):
        monkeypatch.setattr(module, "utc_bson_now", lambda: now)
    return now


def compare(server: InProcessServer, docs: list[dict[str, Any]], command: dict[str, Any], in_transaction: bool) -> None:
    """The command on two identical collections, with the fix and with mongoeco's own path: the same
    reply, stored bytes, change events and index entries."""
    from mongoeco.api._async import _collection_modify

    client = sync_client(server)
    try:
        fast, slow = client.leases.fast, client.leases.slow
        for collection in (fast, slow):
            collection.drop()
            collection.create_index([("owner", 1), ("_id", 1)])
            collection.create_index([("lease.token", 1)])
            collection.insert_many(docs)
        got = outcome(client, fast, command, in_transaction)
        with original(_collection_modify, "find_one_and_update_outcome"):
            expected = outcome(client, slow, command, in_transaction)
        assert got == expected, (docs, command, got, expected)
        for value in (1, "a", "t0", None):  # the indexes hold the same documents under the same keys
            hint = [("owner", 1), ("_id", 1)]
            assert [d["_id"] for d in fast.find({"owner": value}).hint(hint)] == [d["_id"] for d in slow.find({"owner": value}).hint(hint)]
            hint = [("lease.token", 1)]  # the index through the sub-document
            assert sorted(map(repr, (d["_id"] for d in fast.find({"lease.token": value}).hint(hint)))) == sorted(
                map(repr, (d["_id"] for d in slow.find({"lease.token": value}).hint(hint))))
        assert stale_decodes(server) == []  # (bl) the decoded form each write kept is its payload's
    finally:
        client.close()


@examples(thorough=1000, quick=25)
def test_a_find_and_modify_does_what_the_original_does(server: InProcessServer, max_examples: int, held_clock: datetime.datetime) -> None:
    @settings(max_examples=max_examples)
    @given(docs=stored(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        compare(server, docs, data.draw(commands(docs)), data.draw(st.booleans()))

    check()


@st.composite
def partitions(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Partitions as the background engine stores them: most leased (a token, times, sub-documents
    of the lease), with counters or not yet, running or done, some with an intent in flight."""
    docs = []
    for value in draw(st.lists(st.sampled_from(["p0", "p1", ObjectId("0" * 24)]), min_size=1, max_size=3, unique=True)):
        doc: dict[str, Any] = {"_id": value, "background": "bg", "seq": 1, "status": draw(st.sampled_from(["running", "running", "done", "pending"]))}
        doc["cursor"] = draw(st.none() | st.fixed_dictionaries({"after": st.integers(0, 9)}))
        if draw(st.sampled_from([True, True, True, False])):
            counts = st.integers(0, 5) | st.builds(Int64, st.integers(0, 5)) | st.just(1.5)
            doc["counters"] = draw(st.dictionaries(st.sampled_from(["migrated", "batches", "n"]), counts, max_size=3))
        if draw(st.sampled_from([True, True, True, False])):
            doc["lease"] = {"slot": 0, **draw(leases), "renewed_at": datetime.datetime(2024, 1, 1)}
        if draw(st.booleans()):
            doc["inflight"] = {"token": "t0", "ids": [1, 2]}
        doc["control"] = "c1"
        docs.append(doc)
    return docs


@examples(thorough=300, quick=12)
def test_the_engines_commands_do_what_the_original_does(server: InProcessServer, max_examples: int, held_clock: datetime.datetime) -> None:
    """(ao) The background engine's own checkpoints and releases on its partitions, against
    mongoeco's path: the same reply, stored bytes, change events and index entries (the clock held)."""

    @settings(max_examples=max_examples)
    @given(docs=partitions(), data=st.data())
    def check(docs: list[dict[str, Any]], data: st.DataObject) -> None:
        compare(server, docs, data.draw(engine_commands(docs)), data.draw(st.booleans()))

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


def _partition(i: int, now: datetime.datetime) -> dict[str, Any]:
    """A partition as the background engine stores it once claimed (the second has no counters yet)."""
    at = now - datetime.timedelta(seconds=1)
    lease = {"slot": i, "token": f"t{i}", "owner": "o", "runner": "r", "host": "h", "pid": 1, "ttl_ms": 1000, "renewed_at": at, "claimed_at": at}
    doc = {"_id": f"p{i}", "background": "bg", "generation": 1, "plan": "x", "seq": i, "status": "running", "scope": {"lo": i},
           "estimate": 10, "cursor": None, "counters": {"migrated": 3}, "claims": 1, "claimed_by": ["h:1"], "lease": lease, "control": "c1"}
    if i == 1:
        del doc["counters"]
    return doc


async def test_the_engines_checkpoints_and_releases_take_the_engine_steps_once(server: InProcessServer) -> None:
    """(ao) The background engine's own findAndModifys, through its store: checkpoints (guarded on
    the dotted ``lease.token``, ``$currentDate`` of ``lease.renewed_at`` or ``done_at``, dotted ``$inc``
    of ``counters.*``, with and without an intent, done, and fenced off) and releases (after a
    failure too) take the fast path: no compiled update operation, no whole-document encode, one
    lock each. With the same clock, mongoeco's path answers and stores the same, byte for byte."""
    from mongoeco.api._async import _collection_modify, client as client_module
    from mongoeco.engines.memory import MemoryEngine
    from pymongo import AsyncMongoClient

    from mongoshift.background.state.model import Lease
    from mongoshift.background.state.store import BackgroundStore

    def lease(i: int) -> Lease:
        return Lease(f"p{i}", f"t{i}", i, "o", 1000)

    async def steps(store: BackgroundStore) -> list[Any]:
        return [
            await store.checkpoint(lease(0), cursor={"after": 5}, counters={"migrated": 5, "skipped": 0, "batches": 1}, done=False,
                                   intent={"token": "t0", "ids": [1, 2]}, throttle={"batch": 500}),
            await store.checkpoint(lease(0), cursor={"after": 9}, counters={"migrated": 4, "batches": 1}, done=False),
            await store.checkpoint(lease(1), cursor={"after": 2}, counters={"migrated": 2, "batches": 1}, done=False, clean=False),
            await store.checkpoint(lease(0), cursor={"after": 10}, counters={"migrated": 1}, done=True),
            await store.checkpoint(lease(0), cursor={"after": 11}, counters={"migrated": 1}, done=False),  # fenced off: None
            await store.release(lease(1), failure="boom"),
            await store.release(lease(2)),
        ]

    with pytest.MonkeyPatch.context() as clock:
        now = client_module.utc_bson_now() - datetime.timedelta(days=1)
        clock.setattr(client_module, "utc_bson_now", lambda: now)  # each request's clock, held still
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(server.uri)
        try:
            results, documents = [], []
            for name in ("fast", "slow"):
                store = BackgroundStore(client.leases, name)
                await store.partitions.drop()
                await store.ensure_indexes()
                await store.partitions.insert_many([_partition(i, now) for i in range(3)])
                with pytest.MonkeyPatch.context() as counting:
                    steps_counted = ((MemoryEngine, "_get_lock"), (MemoryEngine, "_encode_storage_document"),
                                     (_collection_modify, "compile_update_operation"))
                    if name == "slow":
                        counting.setattr(_collection_modify, "find_one_and_update_outcome", _collection_modify.find_one_and_update_outcome.__wrapped__)
                    calls = count_calls(counting, *steps_counted)
                    results.append(await steps(store))
                if name == "fast":
                    assert calls == {"_get_lock": 7, "_encode_storage_document": 0, "compile_update_operation": 0}
                else:
                    assert calls["compile_update_operation"] == 7 and calls["_encode_storage_document"] >= 5
                documents.append([encode(doc) async for doc in store.partitions.find({}, sort=[("_id", 1)])])
        finally:
            await client.close()
    assert results[0] == results[1] and documents[0] == documents[1]
    assert results[0][4] is None and results[0][0] is not None and results[0][0].control == "c1"
    done = decode(documents[0][0])
    assert done["status"] == "done" and "lease" not in done and done["done_at"] == now and done["counters"] == {"migrated": 13, "batches": 2}
    failed = decode(documents[0][1])
    assert "lease" not in failed and failed["failures"] == 1 and failed["last_error"] == "boom" and failed["counters"] == {"migrated": 2, "batches": 1}


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
