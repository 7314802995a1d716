"""The embedded server as a single-node replica set, proved through the real pymongo driver.

Each test would fail on the standalone mongoeco answered as before (patches (u)-(y) in
docs/embedded.md). Like test_patches.py, they run unchanged against a real replica set
(MONGOSHIFT_TEST_URI, a mongod with ``--setParameter enableTestCommands=1`` for the fail
points); the standalone ones run against ``standalone_uri``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from bson import Int64, ObjectId, Timestamp
from pymongo import AsyncMongoClient, monitoring
from pymongo.errors import AutoReconnect, OperationFailure, WriteConcernError
from pymongo.server_type import SERVER_TYPE
from pymongo.uri_parser import parse_uri

from ..conftest import REAL_URI, TEST_CLIENT_OPTIONS, fail_command


class Replies(monitoring.CommandListener):
    """Every reply and failure a client saw, by command name."""

    def __init__(self) -> None:
        self.sent: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self.replies: list[tuple[str, dict[str, Any]]] = []
        self.failures: list[tuple[str, dict[str, Any] | None, BaseException | None]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        self.sent[event.command_name].set()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        self.replies.append((event.command_name, dict(event.reply)))

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        failure = event.failure if isinstance(event.failure, dict) else None
        self.failures.append((event.command_name, failure, None))

    def failed_codes(self, name: str) -> list[int | None]:
        return [failure.get("code") if failure else None for command, failure, _ in self.failures if command == name]

    def failure_labels(self, name: str) -> list[list[str]]:
        return [list(failure.get("errorLabels", [])) if failure else [] for command, failure, _ in self.failures if command == name]


@asynccontextmanager
async def watched(uri: str, **options: Any) -> AsyncIterator[tuple[AsyncMongoClient, Replies]]:
    listener = Replies()
    client: AsyncMongoClient = AsyncMongoClient(uri, event_listeners=[listener], **{**TEST_CLIENT_OPTIONS, **options})
    try:
        yield client, listener
    finally:
        await client.close()


# (u) hello --------------------------------------------------------------------


async def test_hello_presents_the_primary_of_a_single_node_replica_set(client) -> None:
    hello = await client.admin.command("hello")
    assert isinstance(hello["setName"], str) and hello["setName"]
    assert hello["isWritablePrimary"] is True and hello["secondary"] is False
    assert hello["primary"] == hello["me"] and hello["me"] in hello["hosts"]
    assert hello["logicalSessionTimeoutMinutes"] == 30
    assert isinstance(hello["setVersion"], int) and isinstance(hello["electionId"], ObjectId)
    assert isinstance(hello["topologyVersion"]["processId"], ObjectId)
    assert isinstance(hello["topologyVersion"]["counter"], int)
    assert isinstance(hello["lastWrite"]["opTime"]["ts"], Timestamp)
    assert hello["maxWireVersion"] >= 21  # MongoDB 7.0
    legacy = await client.admin.command("isMaster")
    assert legacy["ismaster"] is True and legacy["setName"] == hello["setName"]


@pytest.mark.skipif(bool(REAL_URI), reason="the embedded server's own address")
async def test_the_set_lists_the_address_its_uri_advertises(client, mongo_uri) -> None:
    host, port = parse_uri(mongo_uri)["nodelist"][0]
    hello = await client.admin.command("hello")
    assert hello["hosts"] == [f"{host}:{port}"] and hello["setName"] == "mongoshift"


async def test_the_driver_sees_a_replica_set_primary_and_connects_by_set_name(client, mongo_uri) -> None:
    await client.admin.command("ping")
    (description,) = client.topology_description.server_descriptions().values()
    assert description.server_type == SERVER_TYPE.RSPrimary
    hello = await client.admin.command("hello")
    host, port = hello["me"].rsplit(":", 1)
    async with AsyncMongoClient(host.strip("[]"), int(port), replicaSet=hello["setName"], **TEST_CLIENT_OPTIONS) as by_name:
        assert (await by_name.admin.command("ping"))["ok"] == 1.0


# (u) cluster time -------------------------------------------------------------


async def test_every_reply_carries_operation_time_and_a_growing_cluster_time(db, mongo_uri) -> None:
    async with watched(mongo_uri) as (client, seen):
        collection = client[db.name].t
        await collection.insert_one({"_id": 1})
        await collection.find_one({"_id": 1})
        await collection.insert_one({"_id": 2})
        with pytest.raises(OperationFailure):
            await client[db.name].command({"find": "t", "filter": {"$nope": 1}})
    times = []
    for name, reply in seen.replies:
        if name in ("insert", "find"):
            assert isinstance(reply["operationTime"], Timestamp)
            assert reply["$clusterTime"]["clusterTime"] == reply["operationTime"] or reply["$clusterTime"]["clusterTime"] > reply["operationTime"]
            assert isinstance(reply["$clusterTime"]["signature"]["keyId"], int)
            times.append(reply["operationTime"])
    assert len(times) == 3 and times == sorted(times) and times[0] < times[2]
    ((_, failure, _),) = [f for f in seen.failures if f[0] == "find"]
    assert failure is not None and isinstance(failure["operationTime"], Timestamp)


async def test_a_read_after_cluster_time_is_served(client, db) -> None:
    async with client.start_session(causal_consistency=True) as session:
        await db.t.insert_one({"_id": 1}, session=session)
        assert session.operation_time is not None
        assert await db.t.find_one({"_id": 1}, session=session) == {"_id": 1}  # sends readConcern.afterClusterTime


# (w) retryable writes ---------------------------------------------------------


async def test_a_retried_write_is_applied_once(client, db) -> None:
    # Transaction numbers far above the driver's own: the session may be one it used before.
    await db.t.insert_one({"_id": 1, "n": 0})
    update = {"update": "t", "updates": [{"q": {"_id": 1}, "u": {"$inc": {"n": 1}}}], "txnNumber": Int64(1_000_007)}
    async with client.start_session() as session:
        first = await db.command(dict(update), session=session)
        retry = await db.command(dict(update), session=session)
        insert = {"insert": "t", "documents": [{"_id": 2}, {"_id": 3}], "txnNumber": Int64(1_000_008)}
        await db.command(dict(insert), session=session)
        again = await db.command(dict(insert), session=session)  # no duplicate-key error: not run again
        with pytest.raises(OperationFailure) as too_old:
            await db.command(dict(update, txnNumber=Int64(1_000_006)), session=session)
    assert first["n"] == retry["n"] == 1 and first["nModified"] == retry["nModified"] == 1
    assert retry["retriedStmtIds"] == [0] and again["retriedStmtIds"] == [0, 1] and "writeErrors" not in again
    assert (await db.t.find_one({"_id": 1}))["n"] == 1
    assert await db.t.count_documents({}) == 3
    assert too_old.value.code == 225  # TransactionTooOld


async def test_a_write_whose_reply_was_lost_is_retried_by_the_driver_and_applied_once(client, db) -> None:
    await db.t.insert_one({"_id": 1, "n": 0})
    await client.admin.command({"configureFailPoint": "onPrimaryTransactionalWrite", "mode": {"times": 1}})
    try:
        result = await db.t.update_one({"_id": 1}, {"$inc": {"n": 1}})  # applied, connection dropped, retried
    finally:
        await client.admin.command({"configureFailPoint": "onPrimaryTransactionalWrite", "mode": "off"})
    assert result.modified_count == 1
    assert (await db.t.find_one({"_id": 1}))["n"] == 1


async def test_find_and_modify_retried_returns_the_recorded_document(client, db) -> None:
    await db.t.insert_one({"_id": 1, "n": 0})
    command = {"findAndModify": "t", "query": {"_id": 1}, "update": {"$inc": {"n": 1}}, "new": True, "txnNumber": Int64(1_000_001)}
    async with client.start_session() as session:
        first = await db.command(dict(command), session=session)
        retry = await db.command(dict(command), session=session)
    assert first["value"] == retry["value"] == {"_id": 1, "n": 1}
    assert (await db.t.find_one({"_id": 1}))["n"] == 1


# (v) fail points --------------------------------------------------------------


async def test_close_connection_drops_the_socket_without_a_reply(client, mongo_uri) -> None:
    async with watched(mongo_uri) as (other, seen):
        await other.admin.command("ping")
        async with fail_command(client, {"times": 1}, failCommands=["ping"], closeConnection=True):
            with pytest.raises(AutoReconnect):  # a network error, not an error reply
                await other.admin.command("ping")
        assert seen.failed_codes("ping") == [None]
        assert (await other.admin.command("ping"))["ok"] == 1.0


async def test_block_connection_delays_only_the_blocked_connection(client, mongo_uri, db) -> None:
    off = {"configureFailPoint": "failCommand", "mode": "off"}
    before = (await client.admin.command(off))["count"]
    async with watched(mongo_uri, appName="blocked") as (blocked, seen):
        async with fail_command(client, {"times": 1}, failCommands=["find"], appName="blocked", blockConnection=True, blockTimeMS=600_000):
            waiting = asyncio.create_task(blocked[db.name].t.find_one({}))
            try:
                await seen.sent["find"].wait()  # the find is on its way
                for n in range(3):
                    await db.t.insert_one({"n": n})  # the other connections go on meanwhile
                assert not waiting.done()
            finally:
                waiting.cancel()
        fired = (await client.admin.command(off))["count"] - before
    assert fired == 1  # the find met the fail point: it is what waits
    assert await db.t.count_documents({}) == 3


async def test_a_write_concern_error_is_reported_after_the_write(client, db) -> None:
    concern = {"code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "Not enough data-bearing nodes"}
    async with fail_command(client, {"times": 1}, failCommands=["insert"], writeConcernError=concern):
        with pytest.raises(WriteConcernError) as info:
            await db.t.insert_one({"_id": "kept"})
    assert info.value.code == 100
    assert await db.t.find_one({"_id": "kept"}) == {"_id": "kept"}


async def test_fail_points_fire_on_change_stream_getmore_as_mongod_labels_them(client, db, mongo_uri) -> None:
    """failCommand fails a getMore before its cursor is known: no ResumableChangeStreamError, the
    error reaches the application; failGetMoreAfterCursorCheckout fails it after: labelled, resumed."""
    async with watched(mongo_uri) as (other, seen):
        async with await other[db.name].t.watch(max_await_time_ms=100) as stream:
            await client.admin.command(
                {"configureFailPoint": "failGetMoreAfterCursorCheckout", "mode": {"times": 1}, "data": {"errorCode": 6}}
            )
            await db.t.insert_one({"_id": "resumed"})
            change = await stream.next()
            async with fail_command(client, {"times": 1}, failCommands=["getMore"], errorCode=6):
                await db.t.insert_one({"_id": "lost"})
                with pytest.raises(OperationFailure) as info:
                    await stream.next()
        assert change["documentKey"] == {"_id": "resumed"} and info.value.code == 6
        assert seen.failed_codes("getMore") == [6, 6]
        assert seen.failure_labels("getMore") == [["ResumableChangeStreamError"], []]


async def test_skip_mode_and_configure_fail_point_itself_never_failing(client, db) -> None:
    async with fail_command(client, {"skip": 1}, failCommands=["insert", "configureFailPoint"], errorCode=2):
        await db.t.insert_one({"_id": 1})  # skipped
        with pytest.raises(OperationFailure) as info:
            await db.t.insert_one({"_id": 2})
    assert info.value.code == 2 and info.value.details["errmsg"] == "Failing command via 'failCommand' failpoint"
    assert [d["_id"] async for d in db.t.find()] == [1]


async def test_a_write_concern_the_set_cannot_satisfy_is_reported_after_the_write(db) -> None:
    from pymongo import WriteConcern

    with pytest.raises(WriteConcernError) as many:
        await db.get_collection("t", write_concern=WriteConcern(w=10)).insert_one({"_id": 1})
    with pytest.raises(WriteConcernError) as tagged:
        await db.get_collection("t", write_concern=WriteConcern(w="noSuchTagSet")).insert_one({"_id": 2})
    assert many.value.code == 100 and tagged.value.code == 79
    assert await db.t.count_documents({}) == 2  # both written, as by mongod


# (x) error labels -------------------------------------------------------------


async def test_the_server_labels_retryable_write_and_transient_transaction_errors(client, db, mongo_uri) -> None:
    async with watched(mongo_uri) as (other, seen):
        collection = other[db.name].t
        async with fail_command(client, {"times": 1}, failCommands=["insert"], errorCode=262):
            await collection.insert_one({"_id": "retried"})  # the label makes the driver retry it
        async with fail_command(client, {"times": 1}, failCommands=["insert"], errorCode=262):
            async with other.start_session() as session:
                await session.start_transaction()
                with pytest.raises(OperationFailure) as inside:
                    await collection.insert_one({"_id": "in a transaction"}, session=session)
                await session.abort_transaction()
        async with fail_command(client, {"times": 1}, failCommands=["insert"], errorCode=262, errorLabels=[]):
            with pytest.raises(OperationFailure):
                await collection.insert_one({"_id": "not retried"})
    assert seen.failure_labels("insert") == [["RetryableWriteError"], ["TransientTransactionError"], []]
    assert inside.value.has_error_label("TransientTransactionError")
    assert [d["_id"] async for d in db.t.find()] == ["retried"]


# (y) getParameter and buildinfo -----------------------------------------------


async def test_build_info_in_both_spellings_and_get_parameter(client) -> None:
    info = await client.server_info()  # sends buildinfo, lower case
    assert info["versionArray"][0] >= 7
    assert (await client.admin.command("buildInfo"))["version"] == info["version"]
    assert (await client.admin.command("getParameter", "*"))["featureCompatibilityVersion"]["version"]
    one = await client.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
    assert one["featureCompatibilityVersion"]["version"]
    with pytest.raises(OperationFailure) as info_unknown:
        await client.admin.command({"getParameter": 1, "noSuchParameterAnywhere": 1})
    assert info_unknown.value.code == 72


async def test_kill_all_sessions_aborts_their_transactions(client, db) -> None:
    async with client.start_session() as session:
        await session.start_transaction()
        await db.t.insert_one({"_id": "killed"}, session=session)
        await client.admin.command("killAllSessions", [])
        with pytest.raises(OperationFailure) as info:
            await session.commit_transaction()
    assert info.value.code == 251  # NoSuchTransaction: mongod aborted it
    await db.t.insert_one({"_id": "killed"})  # nothing holds the key any more
    assert await db.t.count_documents({}) == 1


# (y) the standalone mode ---------------------------------------------------------


async def test_a_standalone_refuses_transactions_and_change_streams(standalone_uri) -> None:
    async with watched(standalone_uri) as (client, seen):
        hello = await client.admin.command("hello")
        assert "setName" not in hello and hello["isWritablePrimary"] is True
        db = client["standalone_refusals"]
        await db.t.insert_one({"_id": 1})
        async with client.start_session() as session:
            await session.start_transaction()
            with pytest.raises(OperationFailure) as txn:
                await db.t.insert_one({"_id": 2}, session=session)
            await session.abort_transaction()
        with pytest.raises(OperationFailure) as stream:
            await db.t.watch()
        with pytest.raises(OperationFailure) as numbered:
            await db.command({"insert": "t", "documents": [{"_id": 3}], "txnNumber": Int64(1)})
        assert [d["_id"] async for d in db.t.find()] == [1]
        await client.drop_database("standalone_refusals")
    assert txn.value.code == numbered.value.code == 20
    assert "only allowed on a replica set member or mongos" in str(txn.value)
    assert stream.value.code == 40573
    assert all("$clusterTime" not in reply and "operationTime" not in reply for _, reply in seen.replies)


# Unit tests of the pieces (no server) -----------------------------------------------


def test_the_hello_builder_needs_no_engine_reply() -> None:
    from mongoshift.embedded.change_streams import ClusterClock
    from mongoshift.embedded.replica_set import ReplicaSet, hello_reply

    clock = ClusterClock(lambda: 1_000.0)
    clock.tick()
    member = ReplicaSet(clock, me="example:27017")
    hello = hello_reply(member, "hello", {"helloOk": True}, 7)
    assert (hello["setName"], hello["hosts"], hello["primary"], hello["connectionId"]) == ("mongoshift", ["example:27017"], "example:27017", 7)
    stamp = hello["lastWrite"]["opTime"]["ts"]
    assert hello["isWritablePrimary"] is True and hello["helloOk"] is True and (stamp.time, stamp.inc) == (1_000, 1)
    alone = hello_reply(ReplicaSet(clock, standalone=True), "isMaster", {}, 8)
    assert "setName" not in alone and alone["ismaster"] is True and alone["maxWireVersion"] == 21


def test_the_retryable_write_table_forgets_the_least_recently_used_sessions() -> None:
    from mongoshift.embedded.retryable_writes import RetryableWrites

    table = RetryableWrites(max_sessions=2)
    table.session("a").record(1, (0,), "insert", {"n": 1, "ok": 1.0})
    table.session("b")
    table.session("a")  # used again: "b" is now the oldest
    table.session("c")
    assert len(table) == 2
    assert table.session("a").check(1, (0,), "insert") == {"n": 1, "ok": 1.0, "retriedStmtIds": [0]}
    assert table.session("b").check(1, (0,), "insert") is None  # forgotten: a retry would write again


def test_fail_point_modes_count_only_the_commands_they_select() -> None:
    from mongoshift.embedded.fail_points import CommandView, FailPoints

    points = FailPoints(chance=lambda: 0.5)
    insert, find = CommandView("insert", "db.t", None), CommandView("find", "db.t", None)
    points.configure({"configureFailPoint": "failCommand", "mode": {"skip": 1}, "data": {"failCommands": ["insert"], "errorCode": 2}})
    assert points.before_command(find) is None and points.before_command(insert) is None  # find not selected; insert skipped
    assert points.before_command(insert) is not None and points.before_command(insert) is not None  # then always
    points.configure({"configureFailPoint": "failCommand", "mode": {"times": 1}, "data": {"failCommands": ["insert"], "errorCode": 2}})
    assert points.before_command(insert) is not None and points.before_command(insert) is None
    data = {"failCommands": ["insert"], "errorCode": 2}
    points.configure({"configureFailPoint": "failCommand", "mode": {"activationProbability": 0.4}, "data": data})
    assert points.before_command(insert) is None  # the draw (0.5) is above the probability
    assert points.configure({"configureFailPoint": "failCommand", "mode": "off"})["count"] == 3
