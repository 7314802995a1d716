"""The replica-set layer around every command: hello and cluster time (u), fail points (v),
retryable writes (w), error labels (x), getParameter, buildinfo, search-index commands,
killSessions, transaction lifetimes and the standalone's refusals (y), snapshot reads (ad).

It wraps mongoeco's ``WireCommandExecutor.execute_prepared``, the one call every
command goes through (OP_MSG and legacy OP_QUERY alike), outside every other fix. A
server's state (:class:`~mongoshift.embedded.replica_set.ServerState`) hangs on its
mongoeco client; a client without one (mongoeco used on its own) is served as before.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from mongoshift.embedded import fail_points as points, replica_set as rs, retryable_writes as retryable

_HELLO = frozenset({"hello", "isMaster", "ismaster"})
_SEARCH_INDEX_COMMANDS = frozenset({"createSearchIndexes", "updateSearchIndex", "dropSearchIndex"})
_KILL_SESSIONS = frozenset({"killAllSessions", "killSessions"})
_ADDED_COMMANDS = frozenset({"buildinfo", "getParameter"}) | _SEARCH_INDEX_COMMANDS | _KILL_SESSIONS
# mongod aborts a transaction open longer than transactionLifetimeLimitSeconds (60 s by default).
TRANSACTION_LIFETIME_SECONDS = 60.0
# A mongod outside Atlas (no search host configured) answers search-index management so (31082).
_SEARCH_NOT_ENABLED = (
    "Using Atlas Search Database Commands and the $listSearchIndexes aggregation stage requires additional "
    "configuration. Please connect to Atlas or an AtlasCLI local deployment to enable."
)
_COMMIT_OR_ABORT = frozenset({"commitTransaction", "abortTransaction"})
_NO_TRANSACTION_NUMBERS = "Transaction numbers are only allowed on a replica set member or mongos"
_NO_CHANGE_STREAMS = "The $changeStream stage is only supported on replica sets"


class _Refusal(Exception):
    """A command answered with an error document of this layer's own (code, codeName, extra fields)."""

    def __init__(self, message: str, code: int, extra: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.extra = extra or {}

    def document(self) -> dict[str, Any]:
        return {"ok": 0.0, "errmsg": str(self), "code": self.code, "codeName": rs.code_name(self.code), **self.extra}


class _Call:
    """One command's passage through the layer: the labels a fail point imposed on it."""

    __slots__ = ("failed_before_checkout", "label_override")

    def __init__(self) -> None:
        self.label_override: list[str] | None = None
        # failCommand fails a getMore before its cursor is checked out: mongod then cannot
        # tell it is a change stream's, and adds no ResumableChangeStreamError.
        self.failed_before_checkout = False


def _namespace(context: Any) -> str:
    """The namespace mongod gives a command (what a fail point's ``namespace`` selects)."""
    command = context.command_document
    target = command.get("collection") if context.command_name == "getMore" else command.get(context.command_name)
    return f"{context.db_name}.{target}" if isinstance(target, str) and target else f"{context.db_name}.$cmd"


def _app_name(connection: Any) -> str | None:
    metadata = getattr(connection, "client_metadata", None) or {}
    application = metadata.get("application") if isinstance(metadata, dict) else None
    name = application.get("name") if isinstance(application, dict) else None
    return name if isinstance(name, str) else None


def _standalone_refusal(context: Any) -> _Refusal | None:
    """What a standalone mongod refuses: transaction numbers (20) and change streams (40573)."""
    if "txnNumber" in context.raw_body:
        return _Refusal(_NO_TRANSACTION_NUMBERS, 20)
    if rs.is_change_stream(context.command_name, context.command_document, change_stream_cursor=False):
        return _Refusal(_NO_CHANGE_STREAMS, 40573)
    return None


def _is_change_stream_cursor(command: dict[str, Any]) -> bool:
    from mongoshift.embedded.change_streams import is_change_stream_cursor

    return is_change_stream_cursor(command.get("getMore"))


async def _hello(state: rs.ServerState, run: Any, context: Any) -> dict[str, Any]:
    base = await run(context)  # mongoeco's handshake: it registers the client's metadata on the connection
    await rs.await_topology_change(state.replica_set, context.raw_body)
    return rs.hello_reply(state.replica_set, context.command_name, context.raw_body, context.connection.connection_id, base)


async def _build_info(client: Any) -> dict[str, Any]:
    from mongoeco.api._async.database_commands import build_info_result

    info = build_info_result(client.mongodb_dialect)
    return rs.build_info(
        {"version": info.version, "gitVersion": info.git_version, "versionArray": list(info.version_array)}
    )


async def _retryable_write(state: rs.ServerState, run: Any, context: Any) -> dict[str, Any]:
    """(w) Apply a retryable write once: a retry of the same (lsid, txnNumber) gets the recorded reply."""
    from mongoeco.wire._session_identity import wire_session_key

    body, name = context.raw_body, context.command_name
    number = retryable._integer(body.get("txnNumber"))
    assert number is not None  # is_retryable_write checked it
    statements = retryable.statement_ids(name, context.command_document)
    entry = state.retryable.session(wire_session_key(body["lsid"]))
    async with entry.lock:  # a retry waits for the first attempt, as on mongod's session checkout
        try:
            recorded = entry.check(number, statements, name)
        except retryable.RetryError as error:
            raise _Refusal(str(error), error.code) from None
        if recorded is not None:
            return recorded
        injected = state.fail_points.transactional_write()
        if injected is not None and injected[1] is not None:  # failBeforeCommitExceptionCode: nothing applied
            if injected[0]:
                raise points.CloseConnection("onPrimaryTransactionalWrite closed the connection")
            raise _Refusal("Failing write via 'onPrimaryTransactionalWrite' failpoint", injected[1])
        reply: dict[str, Any] = await run(context)
        if reply.get("ok"):
            entry.record(number, statements, name, reply)
        if injected is not None and injected[0]:  # applied and recorded, then the reply is lost
            raise points.CloseConnection("onPrimaryTransactionalWrite closed the connection")
        return reply


_SNAPSHOT_READS = frozenset({"find", "aggregate", "distinct"})


async def _snapshot_read(state: rs.ServerState, run: Any, client: Any, context: Any, concern: dict[str, Any]) -> dict[str, Any]:
    """(ad) A read at one cluster time outside a transaction (mongod 5.0's snapshot reads).

    mongoeco reads the latest data whatever the read concern, so a session's later reads
    saw writes made after its first one. The read now runs in the snapshot the server
    keeps for that time (``SnapshotReads``), and its reply names the time (``atClusterTime``)."""
    import dataclasses

    from mongoeco.types import Timestamp

    name = context.command_name
    if name not in _SNAPSHOT_READS:
        raise _Refusal(f"Command {name} does not support {{ readConcern: {{ level: \"snapshot\" }} }} outside of a transaction", 72)
    at = concern.get("atClusterTime")
    if at is not None and not isinstance(at, Timestamp):
        raise _Refusal("atClusterTime must be a timestamp", 2)
    try:
        reader, time = state.snapshots.reader(client, at, state.replica_set.cluster_time())
    except rs.SnapshotTooOld as error:
        raise _Refusal(str(error), 239) from None
    command = {key: value for key, value in context.command_document.items() if key != "readConcern"}
    reply: dict[str, Any] = await run(dataclasses.replace(context, session=reader, command_document=command))
    if reply.get("ok"):
        cursor = reply.get("cursor")
        if isinstance(cursor, dict):
            cursor["atClusterTime"] = time
        else:
            reply["atClusterTime"] = time
    return reply


def _abort_transactions(sessions: Any, keep: Any = None, *, only: set[str] | None = None, older_than: float | None = None) -> None:
    """Abort the open transactions of the wire sessions (``only`` these keys; ``older_than``
    seconds only), leaving ``keep``'s: killSessions/killAllSessions, and mongod's reaper."""
    from .transactions import _abort_open_transaction

    now = time.monotonic()
    for key, entry in list(sessions._sessions.items()):
        session = entry.session
        if session is keep or not session.transaction_active or (only is not None and key not in only):
            continue
        if older_than is not None and now - getattr(session, "_mongoshift_txn_started", now) < older_than:
            continue
        _abort_open_transaction(session)


def _kill_sessions(sessions: Any, context: Any) -> dict[str, Any]:
    """(y) killAllSessions / killSessions abort the sessions' transactions, as mongod does
    (the unified test runner calls it between tests; mongoeco knew neither command)."""
    from mongoeco.wire._session_identity import wire_session_key

    if context.command_name == "killAllSessions":
        _abort_transactions(sessions, context.session)
    else:
        listed = context.command_document.get("killSessions") or []
        _abort_transactions(sessions, only={wire_session_key(item) for item in listed if isinstance(item, dict)})
    return {"ok": 1.0}


async def _execute(state: rs.ServerState, call: _Call, run: Any, client: Any, context: Any) -> dict[str, Any]:
    """Run one command as a replica-set member does: the part that can fail, before labels and times."""
    name = context.command_name
    if state.replica_set.standalone:
        refusal = _standalone_refusal(context)
        if refusal is not None:
            if context.session is not None and context.session.transaction_active:
                from .transactions import _abort_open_transaction

                _abort_open_transaction(context.session)  # startTransaction opened one while the request was read
            raise refusal
    if name == "configureFailPoint":
        try:
            return state.fail_points.configure(context.command_document)
        except points.FailPointError as error:
            raise _Refusal(str(error), 2) from None
    view = points.CommandView(name, _namespace(context), _app_name(context.connection))
    injected = state.fail_points.before_command(view)
    if injected is not None:
        call.label_override = injected.error_labels
        call.failed_before_checkout = injected.close_connection or injected.error_code is not None
        if injected.block_ms:
            await asyncio.sleep(injected.block_ms / 1000)  # this connection only: the loop serves the others
        # A command failed here never ran: a transaction it belongs to stays open, as in mongod
        # (the driver may retry the statement inside it).
        if injected.close_connection:
            raise points.CloseConnection("failCommand closed the connection")
        if injected.error_code is not None:
            raise _Refusal(points.FAIL_COMMAND_MESSAGE, injected.error_code, injected.error_extra)
    if name == "getMore":
        code = state.fail_points.get_more()
        if code is not None:
            raise _Refusal("Hit the 'failGetMoreAfterCursorCheckout' failpoint", code)
    if name in _HELLO:
        return await _hello(state, run, context)
    pipeline = context.command_document.get("pipeline") if name == "aggregate" else None
    if name in _SEARCH_INDEX_COMMANDS or (
        isinstance(pipeline, list) and pipeline and isinstance(pipeline[0], dict) and "$listSearchIndexes" in pipeline[0]
    ):
        raise _Refusal(_SEARCH_NOT_ENABLED, 31082)
    if name in _KILL_SESSIONS:
        return _kill_sessions(state.session_store, context)
    if name in ("buildinfo", "buildInfo"):
        return await _build_info(client)
    if name == "getParameter":
        try:
            return rs.get_parameter(context.command_document)
        except KeyError as error:
            raise _Refusal(str(error.args[0]), 72) from None
    concern = context.command_document.get("readConcern")
    if (
        not state.replica_set.standalone
        and isinstance(concern, dict)
        and concern.get("level") == "snapshot"
        and "autocommit" not in context.raw_body
    ):
        return await _snapshot_read(state, run, client, context, concern)
    if not state.replica_set.standalone and retryable.is_retryable_write(name, context.raw_body):
        return await _retryable_write(state, run, context)
    reply: dict[str, Any] = await run(context)
    return reply


# Commands that wait for a write concern (mongod's supportsWriteConcern).
_TAKE_WRITE_CONCERN = frozenset(
    {
        "insert", "update", "delete", "findAndModify", "findandmodify", "create", "drop", "dropDatabase",
        "createIndexes", "dropIndexes", "renameCollection", "collMod", "commitTransaction", "abortTransaction",
        "aggregate",
    }
)


def _unsatisfiable_write_concern(state: rs.ServerState, context: Any) -> dict[str, Any] | None:
    """The write concern error a one-member set reports after the write: ``w`` above 1
    (100 UnsatisfiableWriteConcern) or a tag set it has no mode for (79 UnknownReplWriteConcern)."""
    concern = context.raw_body.get("writeConcern")
    if state.replica_set.standalone or context.command_name not in _TAKE_WRITE_CONCERN or not isinstance(concern, dict):
        return None
    w = rs_code(concern.get("w"))
    if w is not None and w > 1:
        return {"code": 100, "codeName": "UnsatisfiableWriteConcern", "errmsg": "Not enough data-bearing nodes",
                "errInfo": {"writeConcern": dict(concern)}}
    tag = concern.get("w")
    if isinstance(tag, str) and tag != "majority":
        return {"code": 79, "codeName": "UnknownReplWriteConcern",
                "errmsg": f"No write concern mode named '{tag}' found in replica set configuration",
                "errInfo": {"writeConcern": dict(concern)}}
    return None


def _acknowledged_by_one(context: Any) -> Any:
    """The request with ``w: 1``: the write is made as mongod makes it before it finds that no
    other member can acknowledge it (mongoeco refuses ``w`` > 1 as a standalone does)."""
    import dataclasses

    concern = {**context.raw_body["writeConcern"], "w": 1}
    return dataclasses.replace(
        context,
        command_document={**context.command_document, "writeConcern": concern},
        raw_body={**context.raw_body, "writeConcern": concern},
    )


def _write_conflict_as_command_error(context: Any, reply: dict[str, Any]) -> dict[str, Any]:
    """Inside a transaction, mongod fails the command with a WriteConflict (labelled, below)
    where mongoeco reports it as a statement's write error."""
    errors = reply.get("writeErrors")
    if context.raw_body.get("autocommit") is not False or not reply.get("ok") or not isinstance(errors, list):
        return reply
    conflict = next((error for error in errors if isinstance(error, dict) and rs_code(error.get("code")) == 112), None)
    if conflict is None:
        return reply
    return {"ok": 0.0, "errmsg": str(conflict.get("errmsg", "")), "code": 112, "codeName": "WriteConflict"}


def _label(context: Any, reply: dict[str, Any], override: list[str] | None, cursor_known: bool = True) -> None:
    """(x) The labels mongod puts on a failed reply, or one with a write concern error."""
    failed = not reply.get("ok")
    concern = reply.get("writeConcernError")
    if not failed and not isinstance(concern, dict):
        return
    if override is not None:  # a fail point's errorLabels replace the server's own
        if override:
            reply["errorLabels"] = list(override)
        else:
            reply.pop("errorLabels", None)
        return
    code = rs_code(reply.get("code")) if failed else None
    concern_code = rs_code(concern.get("code")) if isinstance(concern, dict) else None
    added = rs.error_labels(
        command_name=context.command_name,
        body=context.raw_body,
        code=code,
        write_concern_code=concern_code,
        change_stream=rs.is_change_stream(
            context.command_name, context.command_document, cursor_known and _is_change_stream_cursor(context.command_document)
        ),
    )
    labels = list(reply.get("errorLabels") or [])
    labels += [label for label in added if label not in labels]
    if labels:
        reply["errorLabels"] = labels


def _track_sessions(state: rs.ServerState, context: Any) -> None:
    """The sessions in use, for $listLocalSessions: every lsid seen, until endSessions."""
    from mongoeco.wire._session_identity import wire_session_key

    lsid = context.raw_body.get("lsid")
    if isinstance(lsid, dict):
        state.sessions.seen(wire_session_key(lsid), lsid)
    if context.command_name == "endSessions":
        for ended in context.command_document.get("endSessions") or []:
            if isinstance(ended, dict):
                state.sessions.ended(wire_session_key(ended))


def rs_code(value: object) -> int | None:
    value = getattr(value, "value", value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def patch_replica_set() -> None:
    """(u)-(y) Wrap execute_prepared (after (r), so outside every other fix)."""
    from mongoeco.wire.executor import WireCommandExecutor
    from mongoeco.wire.surface import WireSurface

    original = WireCommandExecutor.execute_prepared
    supports = WireSurface.supports_command

    def supports_command(self: Any, command_name: str) -> bool:
        # (y) buildinfo (lower case, which pymongo's server_info() sends) and getParameter
        # pass mongoeco's command check; the layer below answers them.
        return command_name in _ADDED_COMMANDS or bool(supports(self, command_name))

    async def execute_prepared(self: Any, context: Any) -> dict[str, Any]:
        state = rs.state_of(self._client)
        if state is None:
            return await original(self, context)

        async def run(context: Any) -> dict[str, Any]:
            return await original(self, context)

        _track_sessions(state, context)
        state.session_store = self._session_store
        now = time.monotonic()
        if now - state.reaped >= 1.0:  # mongod's transaction reaper: at most once a second
            state.reaped = now
            _abort_transactions(self._session_store, context.session, older_than=TRANSACTION_LIFETIME_SECONDS)
        call = _Call()
        unsatisfiable = _unsatisfiable_write_concern(state, context)
        try:
            reply = await _execute(state, call, run, self._client, _acknowledged_by_one(context) if unsatisfiable else context)
        except points.CloseConnection:
            raise  # the connection handler drops the socket without a reply
        except _Refusal as refusal:
            reply = refusal.document()
        except Exception as error:  # every other failure is the command's error reply, as before
            reply = WireCommandExecutor.error_document(error)
        override = call.label_override
        reply = _write_conflict_as_command_error(context, reply)
        if reply.get("ok") and unsatisfiable is not None and "writeConcernError" not in reply:
            reply = {**reply, "writeConcernError": unsatisfiable}
        if reply.get("ok") and context.command_name not in _HELLO:
            injected = state.fail_points.write_concern_error(
                points.CommandView(context.command_name, _namespace(context), _app_name(context.connection))
            )
            if injected is not None:  # (v) after the write, which stays applied
                reply = {**reply, "writeConcernError": injected[0]}
                override = injected[1] if injected[1] is not None else override
        _label(context, reply, override, cursor_known=not call.failed_before_checkout)
        if not state.replica_set.standalone:
            reply.update(state.replica_set.gossip())  # (u)
        return reply

    WireSurface.supports_command = supports_command
    WireCommandExecutor.execute_prepared = execute_prepared


def patch_close_connection() -> None:
    """(v) closeConnection drops the socket: the proxy's failure path lets CloseConnection through.

    AsyncMongoEcoProxyServer._dispatch_wire_request turns every exception of a command
    into an error reply (through _wire_failure); CloseConnection, a ConnectionError,
    now leaves it, and _handle_connection closes the connection as it does when the
    peer goes away."""
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    original = AsyncMongoEcoProxyServer._wire_failure

    def wire_failure(self: Any, error: BaseException, header: Any, state: Any) -> None:
        if isinstance(error, points.CloseConnection):
            raise error
        original(self, error, header, state)  # type: ignore[no-untyped-call]  # mongoeco leaves it unannotated

    AsyncMongoEcoProxyServer._wire_failure = wire_failure
