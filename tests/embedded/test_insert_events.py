"""Fix (bu) of mongoshift.embedded.change_streams: an insert's event holds the stored document the insert
wrote, by reference, instead of a deep copy of it. Proved against the payload before the fix (kept as
``__wrapped__``) on random documents: the same events on the wire."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bson import encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from hypothesis import given, settings, strategies as st

from mongoshift.embedded import change_streams

from ..conftest import examples
from .in_process import InProcessServer, in_process_server, original, sync_client
from .test_values import documents

_RAW = CodecOptions(document_class=RawBSONDocument)


@pytest.fixture(scope="module")
def served(monkeypatch_module: pytest.MonkeyPatch) -> Iterator[tuple[InProcessServer, change_streams.ChangeHistory]]:
    """An in-process server and its change history."""
    histories: list[change_streams.ChangeHistory] = []
    attach = change_streams.attach_history

    def attached(client: Any, max_events: int) -> change_streams.ChangeHistory:
        histories.append(attach(client, max_events))
        return histories[-1]

    monkeypatch_module.setattr(change_streams, "attach_history", attached)
    with in_process_server() as server:
        yield server, histories[-1]


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patcher:
        yield patcher


def _insert_events(client: Any, batch: list[dict[str, Any]]) -> list[bytes]:
    """The insert events' full documents, as bytes, of ``batch`` inserted in one insert_many and one insert_one."""
    collection = client.inserts.c
    collection.drop()
    with collection.watch(max_await_time_ms=200) as stream:
        collection.insert_many(batch)
        collection.insert_one({**batch[0], "_id": "alone"})
        events = [stream.next() for _ in range(len(batch) + 1)]
    assert [event["operationType"] for event in events] == ["insert"] * (len(batch) + 1)
    return [encode(event["fullDocument"]) for event in events]


@examples(thorough=150, quick=30)
def test_insert_events_are_the_documents_the_payload_before_the_fix_gave(served: Any, max_examples: int) -> None:
    """Any documents inserted (several in one command, and one alone): their events' full documents are the
    same bytes as with mongoeco's deep copy, and the same as the documents read back."""
    from mongoeco.engines.memory import MemoryEngine

    server, _ = served

    @settings(max_examples=max_examples, deadline=None)
    @given(batch=st.lists(documents, min_size=1, max_size=3))
    def check(batch: list[dict[str, Any]]) -> None:
        batch = [{"_id": number, **document} for number, document in enumerate(batch)]
        client = sync_client(server)
        try:
            fast = _insert_events(client, [dict(document) for document in batch])
            stored = [encode(document) for document in client.inserts.get_collection("c", codec_options=_RAW).find(sort=[("_id", 1)])]
            with original(MemoryEngine, "_change_payload"):
                slow = _insert_events(client, [dict(document) for document in batch])
            assert fast == slow
            assert sorted(fast) == sorted(stored)
        finally:
            client.close()

    check()


def test_an_insert_event_holds_the_stored_document_and_keeps_it_after_updates(served: Any) -> None:
    """The history's insert events hold the collection's stored documents themselves (no copy), and an event
    read after its document was updated and deleted still gives the document inserted."""
    server, history = served
    client = sync_client(server)
    try:
        collection = client.inserts.kept
        collection.drop()
        with collection.watch(max_await_time_ms=200) as stream:
            collection.insert_many([{"_id": n, "k": [n, {"v": n}]} for n in range(3)])
            storage = server.engine._storage["inserts"]["kept"]
            held = [event for event in history.events_after(0, 10**9) if event.coll == "kept" and event.operation_type == "insert"]
            assert [type(event.full_document) for event in held] == [change_streams._Inserted] * 3
            key = server.engine._storage_key
            assert all(event.full_document.stored is storage[key(n)] for n, event in enumerate(held))  # type: ignore[union-attr]
            collection.update_many({}, {"$set": {"k": "changed"}})
            collection.delete_one({"_id": 1})
            events = [stream.next() for _ in range(3)]
        assert [event["fullDocument"] for event in events] == [{"_id": n, "k": [n, {"v": n}]} for n in range(3)]
    finally:
        client.close()

