"""Fix (h4-a) of mongoshift.embedded.patches.updates: a batch of guarded updates holds its insertions into the
collection's persistent map of stored values and into each lean index's buckets, and applies them at its close with
one ``update`` a map.

The model test holds :class:`_Deferred` to rpds' own map under any steps; the engine tests hold a batch (repeated
``_id``s, a unique index, a fault part way through, a transaction) to mongoeco's own update path and to the state
before a rolled-back command, and count the insertions each map takes at once (no timing).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest
from bson import encode
from hypothesis import given, settings, strategies as st
from pymongo import UpdateOne
from pymongo.errors import BulkWriteError
from rpds import HashTrieMap

from ..conftest import examples
from .in_process import InProcessServer, original_update_path, sync_client

NAN = float("nan")
#: Keys as the maps hold them: storage keys and index keys (tuples), some holding one shared NaN or a new one.
KEYS = st.sampled_from([1, 2, "a", ("k", 1), ("k", 2), ("n", NAN), ("o", 1.0)]) | st.builds(lambda: ("n", float("nan")))
STEPS = st.lists(
    st.tuples(st.sampled_from(["insert", "remove", "get", "getitem", "in", "len", "iter", "eq", "resolve", "keys", "discard"]), KEYS, st.integers(0, 3)),
    max_size=40,
)


@settings(max_examples=400)
@given(initial=st.lists(st.tuples(KEYS, st.integers(0, 3)), max_size=8), steps=STEPS)
def test_a_deferred_map_answers_as_rpds_map(initial: list[tuple[Any, int]], steps: list[tuple[str, Any, int]]) -> None:
    """Every read of a :class:`_Deferred` gives what the rpds map with the same steps made one by one gives, and
    its resolved map equals that map: a later read sees an earlier insertion, a removal of a held or a base key
    or an absent one (KeyError, as rpds), overwrites, and a fold part way through."""
    from mongoshift.embedded.patches.updates import _Deferred

    expected = HashTrieMap(initial)
    deferred: Any = _Deferred(expected)
    got: Any = deferred
    for step, key, value in steps:
        if step == "insert":
            expected, got = expected.insert(key, value), got.insert(key, value)
        elif step == "remove":
            try:
                expected = expected.remove(key)
            except KeyError:
                with pytest.raises(KeyError):
                    got.remove(key)
            else:
                got = got.remove(key)
        elif step == "discard":  # a method the deferred map does not hold back: the resolved map's, returned
            expected, got = expected.discard(key), got.discard(key)
        elif step == "get":
            assert got.get(key, "absent") == expected.get(key, "absent")
        elif step == "getitem":
            if key in expected:
                assert got[key] == expected[key]
            else:
                with pytest.raises(KeyError):
                    got[key]
        elif step == "in":
            assert (key in got) == (key in expected)
        elif step == "len":
            assert len(got) == len(expected)
        elif step == "iter":
            assert sorted(map(repr, got)) == sorted(map(repr, expected))
        elif step == "keys":
            assert sorted(map(repr, got.keys())) == sorted(map(repr, expected.keys()))
        elif step == "eq":
            assert got == expected
        else:
            got = got.resolved() if type(got) is _Deferred else got
    final = got.resolved() if type(got) is _Deferred else got
    assert type(final) is HashTrieMap
    assert final == expected
    assert sorted(map(repr, final.items())) == sorted(map(repr, expected.items()))


def test_a_batch_applies_its_insertions_to_each_persistent_map_at_once(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(h4-a) 300 guarded updates in one command: the collection's map of stored values and the version index's
    buckets each take their 300 insertions in one ``update`` at the batch's close, and are rpds maps again after
    it; reads through the index and the stored documents are the updated ones."""
    from mongoshift.embedded.patches import updates

    resolved: list[tuple[str, int]] = []
    resolve = updates._Deferred.resolved

    def counted(self: Any) -> Any:
        resolved.append((type(self.base).__name__, len(self.pending)))
        return resolve(self)

    client = sync_client(server)
    try:
        collection = client.updates.deferred
        collection.drop()
        hint = [("__v", 1), ("_id", 1)]
        collection.create_index(hint)
        collection.insert_many([{"_id": i, "__v": 1, "__rev": 1} for i in range(400)])
        monkeypatch.setattr(updates._Deferred, "resolved", counted)
        result = collection.bulk_write(
            [UpdateOne({"_id": i, "__v": 1, "__rev": 1}, {"$set": {"__v": 2}, "$inc": {"__rev": 1}}) for i in range(100, 400)], ordered=False,
        )
        monkeypatch.undo()
        assert result.modified_count == 300
        assert resolved == [("HashTrieMap", 300), ("HashTrieMap", 300)]  # the stored values', the index's: once each
        stored = server.engine._storage["updates"]["deferred"]
        index_map = server.engine._index_data["updates"]["deferred"]["__v_1__id_1"]
        assert type(stored._values) is HashTrieMap and type(index_map._buckets) is HashTrieMap
        assert [d["_id"] for d in collection.find({"__v": 2}, sort=[("_id", 1)]).hint(hint)] == list(range(100, 400))
        assert [d["_id"] for d in collection.find({"__v": 1}, sort=[("_id", 1)]).hint(hint)] == list(range(100))
        assert [d["__rev"] for d in collection.find({}, sort=[("_id", 1)])] == [1] * 100 + [2] * 300
    finally:
        client.close()


def _state(server: InProcessServer, collection: Any) -> Any:
    maps = server.engine._index_data["updates"][collection.name]
    return [encode(d) for d in collection.find({}, sort=[("_id", 1)])], {name: sorted(map(repr, maps[name].items())) for name in maps}


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[Any], bool, bool]:
    """Guarded updates of ten documents (an ``_id`` may come back, its guard then of the version it had or of the
    one an earlier statement gave it), ordered or not, on a collection with or without a unique index."""
    requests = []
    for _ in range(draw(st.integers(1, 25))):
        document_id = draw(st.integers(0, 9))
        change: dict[str, Any] = {"$inc": {"__v": draw(st.sampled_from([1, 0, -1]))}}
        if draw(st.booleans()):
            change["$set"] = {"email": f"u{draw(st.integers(0, 12))}"}
        if draw(st.integers(0, 5)) == 0:
            change["$unset"] = {"qty": ""}
        requests.append(UpdateOne({"_id": document_id, "__v": draw(st.integers(1, 3))}, change))
    return requests, draw(st.booleans()), draw(st.booleans())


@examples(thorough=120, quick=25)
def test_a_batch_with_repeated_ids_ends_as_the_original_path_or_as_before(
    server: InProcessServer, monkeypatch: pytest.MonkeyPatch, max_examples: int
) -> None:
    """(h4-a) A batch whose statements name the same ``_id`` again (each reading what the one before wrote,
    while the insertions wait), with a unique index or without (its check reads the waiting insertions), ordered
    or not: the replies, the stored documents and every index's entries are mongoeco's own path's. The same batch
    with a fault injected in its write steps at any statement leaves every document and index entry as before."""
    from mongoeco.engines.memory import MemoryEngine

    rolled_back: list[int] = []

    @settings(max_examples=max_examples, deadline=None)
    @given(batch=batches(), fault=st.integers(1, 25))
    def check(batch: tuple[list[Any], bool, bool], fault: int) -> None:
        requests, ordered, unique = batch
        client = sync_client(server)
        try:
            outcomes = []
            for name, path in (("fast", nullcontext()), ("slow", original_update_path()), ("faulty", nullcontext())):
                collection = client.updates[f"repeat_{name}"]
                collection.drop()
                collection.create_index([("__v", 1), ("_id", 1)])
                if unique:
                    collection.create_index("email", unique=True)  # lean: its buckets wait too, and its check reads them
                collection.insert_many([{"_id": i, "__v": 1 + i % 3, "qty": i, "email": f"u{i}"} for i in range(10)])
                before = _state(server, collection)
                calls: list[int] = []
                if name == "faulty":
                    written = MemoryEngine._set_storage_document_locked

                    def failing(self: Any, *args: Any, calls: list[int] = calls, written: Any = written, **kwargs: Any) -> Any:
                        calls.append(1)
                        if len(calls) == fault:
                            raise RuntimeError("injected")
                        return written(self, *args, **kwargs)

                    monkeypatch.setattr(MemoryEngine, "_set_storage_document_locked", failing)
                with path:
                    try:
                        reply: Any = collection.bulk_write(requests, ordered=ordered).bulk_api_result
                        reply = (reply["nMatched"], reply["nModified"], [])
                    except BulkWriteError as error:
                        reply = (error.details["nMatched"], error.details["nModified"], [(e["index"], e["code"]) for e in error.details["writeErrors"]])
                    except Exception as error:  # the batch's fault: the command fails, rolled back
                        reply = ("failed", "rolled back" in str(error))
                monkeypatch.undo()
                if name == "faulty":
                    if reply == ("failed", True):  # the fault met in the batch's write steps: the whole command rolled back
                        assert _state(server, collection) == before
                        rolled_back.append(1)
                    continue
                outcomes.append((reply, _state(server, collection)))
            assert outcomes[0] == outcomes[1]
        finally:
            client.close()

    check()
    assert rolled_back  # some examples met the fault inside a batch


def test_a_batch_in_a_transaction_holds_nothing_back(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(h4-a) In a transaction the batch writes the transaction's views as before: no insertion is held back
    (its conflict checks and the commit's merge read the views as mongoeco keeps them), and the commit gives
    the updated documents."""
    from mongoshift.embedded.patches import updates

    made: list[int] = []
    monkeypatch.setattr(updates, "_held", lambda *args: made.append(1))
    client = sync_client(server)
    try:
        collection = client.updates.deferred_txn
        collection.drop()
        collection.create_index([("__v", 1), ("_id", 1)])
        collection.insert_many([{"_id": i, "__v": 1} for i in range(20)])
        with client.start_session() as session, session.start_transaction():
            result = collection.bulk_write([UpdateOne({"_id": i, "__v": 1}, {"$set": {"__v": 2}}) for i in range(20)], session=session)
        assert result.modified_count == 20
        assert made == []
        assert [d["__v"] for d in collection.find({}, sort=[("_id", 1)])] == [2] * 20
    finally:
        client.close()
