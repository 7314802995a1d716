"""The embedded server's two loops: heartbeats answered while the engine computes, order, shutdown.

The engine runs on a thread of its own (``embedded/engine_thread.py``, fixes (al) and (am) in
docs/embedded.md). These start their own servers (they test the server, not MongoDB), so they
run the same with or without MONGOSHIFT_TEST_URI.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

from .test_server import CLIENT_OPTIONS, server

pytest.importorskip("mongoeco")

#: Only a guard against a hung test: a blocked engine thread is released by the test itself
#: long before, unless heartbeats wait for the engine (the defect these tests catch).
HANG_GUARD_S = 120.0
BLOCKED_DB = "blocked_by_test"


class EngineBlock:
    """Makes a command on ``BLOCKED_DB`` hold the engine thread without an ``await`` until released,
    as a long scan does; records whether the test released it or the guard did."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.guard_expired = False

    def hold(self) -> None:
        self.entered.set()
        if not self.release.wait(HANG_GUARD_S):
            self.guard_expired = True


@pytest.fixture
def engine_block(monkeypatch: pytest.MonkeyPatch) -> Iterator[EngineBlock]:
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers

    from mongoshift.embedded import patches

    patches.apply()
    block = EngineBlock()
    dispatch = WireSpecialCommandHandlers.dispatch

    async def blocking_dispatch(self: Any, context: Any) -> dict[str, object]:
        if context.db_name == BLOCKED_DB:
            block.hold()  # synchronous on purpose: the engine's loop cannot run anything else meanwhile
        return await dispatch(self, context)

    monkeypatch.setattr(WireSpecialCommandHandlers, "dispatch", blocking_dispatch)
    yield block
    block.release.set()


async def test_heartbeats_are_answered_while_a_command_holds_the_engine(engine_block: EngineBlock) -> None:
    from mongoshift.embedded import serve

    stop = asyncio.Event()
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(serve("127.0.0.1", 0, None, on_ready=ready.set_result, stop=stop))
    uri = await ready
    try:
        async with AsyncMongoClient(uri, **CLIENT_OPTIONS) as busy, AsyncMongoClient(uri, **CLIENT_OPTIONS) as other:
            await busy.admin.command("ping")
            held = asyncio.create_task(busy[BLOCKED_DB].command("count", "c"))
            assert await asyncio.to_thread(engine_block.entered.wait, HANG_GUARD_S)
            try:
                # The engine thread is held: only the network loop can answer these.
                hello = await other.admin.command("hello")
                assert hello["ok"] == 1 and hello["isWritablePrimary"] is True
                assert (await other.admin.command("isMaster"))["ismaster"] is True
                assert (await other.admin.command("ping"))["ok"] == 1
                # A new client: its monitor's handshake and its pool's connection handshakes too
                # (closed once the engine is free: its endSessions is a command like any other).
                fresh: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri, **CLIENT_OPTIONS)
                assert (await fresh.admin.command("ping"))["ok"] == 1
                assert not held.done()
            finally:
                engine_block.release.set()
            await fresh.close()
            assert (await held)["ok"] == 1
            assert not engine_block.guard_expired, "the heartbeats were answered only once the engine was free"
    finally:
        stop.set()
        await serving


def _op_msg(body: dict[str, Any], *, sequence_first: bool = False) -> bytes:
    encoded = bson.encode(body)
    if sequence_first:
        documents = bson.encode({"_id": 1})
        section = b"documents\x00" + documents
        return struct.pack("<I", 0) + b"\x01" + struct.pack("<i", 4 + len(section)) + section + b"\x00" + encoded
    return struct.pack("<I", 0) + b"\x00" + encoded


def _op_query(namespace: str, query: dict[str, Any]) -> bytes:
    return struct.pack("<i", 0) + namespace.encode() + b"\x00" + struct.pack("<ii", 0, -1) + bson.encode(query)


def test_the_command_is_read_from_the_raw_request() -> None:
    from mongoshift.embedded.patches.loops import command_name

    assert command_name(2013, _op_msg({"hello": 1, "$db": "admin"})) == "hello"
    assert command_name(2013, _op_msg({"ping": 1, "$db": "admin"})) == "ping"
    assert command_name(2013, _op_msg({"find": "c", "$db": "d"})) == "find"
    assert command_name(2013, _op_msg({"insert": "c", "$db": "d"}, sequence_first=True)) is None
    assert command_name(2004, _op_query("admin.$cmd", {"isMaster": 1, "helloOk": True})) == "isMaster"
    assert command_name(2004, _op_query("admin.$cmd", {"$query": {"ismaster": 1}, "$readPreference": {"mode": "primary"}})) == "ismaster"
    assert command_name(2004, _op_query("db.people", {"isMaster": 1})) is None  # not a command namespace
    assert command_name(2012, _op_msg({"hello": 1})) is None  # OP_COMPRESSED: mongoeco refuses it on the engine's path
    for truncated in (b"", b"\x00\x00\x00\x00", _op_msg({"hello": 1})[:9], _op_query("admin.$cmd", {"ping": 1})[:12]):
        assert command_name(2013, truncated) is None and command_name(2004, truncated) is None


def test_commands_of_one_connection_keep_their_order() -> None:
    with server() as running:
        # The client closes before the server stops: closed after, it would look for the server to
        # end its sessions until server selection times out.
        with MongoClient(running.uri, maxPoolSize=1, **CLIENT_OPTIONS) as client:
            coll = client.order.get_collection("c", write_concern=WriteConcern(w=0))
            for i in range(300):  # unacknowledged: sent back to back, no reply awaited
                coll.insert_one({"_id": i})
            assert client.order.c.count_documents({}) == 300  # the same connection: after every insert
        assert running.stop()[0] == 0


class GetMoreSent(monitoring.CommandListener):
    def __init__(self) -> None:
        self.sent = threading.Event()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "getMore":
            self.sent.set()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_stop_while_commands_run_aborts_transactions_ends_waits_and_writes_the_snapshot(tmp_path: Path) -> None:
    snapshot = tmp_path / "snap.bson"
    get_more = GetMoreSent()
    with server("--path", str(snapshot)) as running:
        # Its close() after the stop looks for the server to end its sessions: not for long.
        options = {**CLIENT_OPTIONS, "serverSelectionTimeoutMS": 1_000}
        client: MongoClient[dict[str, Any]] = MongoClient(running.uri, event_listeners=[get_more], **options)
        people = client.stop.people
        people.insert_one({"_id": "kept"})
        session = client.start_session()
        session.start_transaction()
        people.insert_one({"_id": "in a transaction"}, session=session)
        # A change stream whose getMore waits on the engine's loop for an event that never comes:
        # the stop cancels it there (its connection's handler is cancelled, then the engine drained)
        # instead of sitting it out.
        stream = people.watch(max_await_time_ms=int(HANG_GUARD_S * 10 * 1000))

        def wait_for_an_event() -> None:
            with contextlib.suppress(PyMongoError):  # the server goes away under it
                next(stream)

        waiting = threading.Thread(target=wait_for_an_event, daemon=True)
        waiting.start()
        assert get_more.sent.wait(HANG_GUARD_S)
        code, err = running.stop(signal.SIGTERM)  # its bound (60 s) is far below the getMore's wait
        assert code == 0, err
        waiting.join()
        client.close()
    with server("--path", str(snapshot)) as again:
        with MongoClient(again.uri, **CLIENT_OPTIONS) as client:
            assert [d["_id"] for d in client.stop.people.find()] == ["kept"]  # the open transaction was aborted
        assert again.stop()[0] == 0
