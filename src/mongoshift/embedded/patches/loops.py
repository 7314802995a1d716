"""Two event loops: heartbeats answered on the network loop, every other command on the engine's (al, am).

mongoeco's wire server (``wire/proxy.AsyncMongoEcoProxyServer``) runs each connection and each
command on the one loop it was started on, so a long command (a scan computes for seconds
without an ``await``) delays every ``hello``: pymongo's monitor then takes the server for lost
and cancels the operations in flight. With an :class:`~mongoshift.embedded.engine_thread.EngineThread`
attached to the server (:func:`attach`), requests are routed by command before their body is
decoded; a server without one behaves as mongoeco's.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from mongoshift.embedded.engine_thread import EngineThread

#: Answered on the network loop: they read no engine state (mongoeco's handshake service builds
#: ``hello`` from the connection and constants; ``ping`` runs no query), and drivers' monitors
#: and health checks send them.
HEARTBEATS = frozenset({"hello", "isMaster", "ismaster", "ping"})
_ENGINE = "_mongoshift_engine_thread"
_OP_QUERY = 2004
_OP_MSG = 2013


def attach(server: Any, engine: EngineThread) -> None:
    """Run ``server``'s commands, but the heartbeats, on ``engine``'s loop (and close it accordingly)."""
    setattr(server, _ENGINE, engine)


def _first_key(data: bytes, start: int) -> tuple[str, int] | None:
    """The name of the first element of the BSON document at ``start``, and where its value starts."""
    if len(data) < start + 6 or data[start + 4] == 0:
        return None
    end = data.find(b"\x00", start + 5)
    if end < 0:
        return None
    try:
        return data[start + 5 : end].decode("utf-8"), end + 1
    except UnicodeDecodeError:
        return None


def command_name(op_code: int, payload: bytes) -> str | None:
    """The command a request names, read from its raw bytes (``None`` when it is not plain to see).

    OP_MSG: the first element of the body section, when it comes first (drivers put it there).
    OP_QUERY on ``<db>.$cmd``: the query's first element, or that of its ``$query`` wrapper. Anything
    else (another layout, an opcode mongoeco refuses) gives ``None``, so it takes the engine's path,
    where mongoeco decodes and validates it as before.
    """
    try:
        if op_code == _OP_MSG:
            if len(payload) < 5 or payload[4] != 0:
                return None
            first = _first_key(payload, 5)
            return first[0] if first else None
        if op_code == _OP_QUERY:
            end = payload.find(b"\x00", 4)
            if end < 0 or not payload[4:end].endswith(b".$cmd"):
                return None
            first = _first_key(payload, end + 1 + 8)
            if first and first[0] == "$query" and payload[end + 1 + 8 + 4] == 0x03:
                first = _first_key(payload, first[1])
            return first[0] if first else None
    except (IndexError, struct.error):
        return None
    return None


# (al) Every command ran on the server's one loop: _dispatch_wire_request (decode, request
# context, WireCommandExecutor.execute_prepared, reply encoding) is now awaited on the engine's
# loop, whole, for every request but the heartbeats, which keep the network loop. Its exceptions
# come back to the connection handler (mongoeco's _handle_connection, on the network loop)
# unchanged; cancelling the handler cancels the command. Request context building stays with the
# command: it resolves the lsid's session (engine state).
def patch_engine_thread_dispatch() -> None:
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    original = AsyncMongoEcoProxyServer._dispatch_wire_request

    async def dispatch_wire_request(self: Any, header: Any, payload: bytes, *, connection: Any) -> bytes | None:
        engine: EngineThread | None = getattr(self, _ENGINE, None)
        if engine is None or command_name(header.op_code, payload) in HEARTBEATS:
            return await original(self, header, payload, connection=connection)
        return await engine.run(original(self, header, payload, connection=connection))

    AsyncMongoEcoProxyServer._dispatch_wire_request = dispatch_wire_request


# (am) Shutdown cleared the cursors and the sessions (closing a session aborts its transaction)
# from the loop that closed the listener. With an engine thread that is another thread than the
# commands': _close_resources is replaced for such a server by the same steps split by owner. The
# listener and the connection handlers close on the network loop (a handler cancelled there
# cancels its command); then, on the engine loop, the commands still running end (EngineThread.drain)
# before the cursors and sessions are cleared, so no command sees them go.
def patch_engine_thread_close() -> None:
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    original = AsyncMongoEcoProxyServer._close_resources

    async def close_engine_side(self: Any, engine: EngineThread) -> list[Exception]:
        await engine.drain()
        errors: list[Exception] = []
        for clear in (self._cursor_store.clear, self._session_store.clear):
            try:
                clear()
            except Exception as error:
                errors.append(error)
        if self._engine_connected:  # a server that built its own client: not the embedded server's
            try:
                await self._client._engine.disconnect()
                self._engine_connected = False
            except Exception as error:
                errors.append(error)
        return errors

    async def close_resources(self: Any) -> None:
        engine: EngineThread | None = getattr(self, _ENGINE, None)
        if engine is None:
            return await original(self)
        self._update_diagnostic_resources()
        self._diagnostics.record(
            "shutdown_started",
            pending_connections=len(self._connections),
            pending_cursors=len(self._cursor_store),
            pending_sessions=len(self._session_store),
        )
        server, self._server = self._server, None
        if server is not None:
            server.close()
            server.abort_clients()  # teardown does not wait for a peer to drain its replies
        while self._handlers:
            handlers = tuple(self._handlers)
            for handler in handlers:
                handler.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            self._handlers.difference_update(handlers)
        errors: list[Exception] = []
        if server is not None:
            try:
                await server.wait_closed()
            except Exception as error:
                errors.append(error)
        errors += await engine.run(close_engine_side(self, engine))
        self._update_diagnostic_resources()
        self._diagnostics.record("shutdown_finished", failed=bool(errors))
        if errors:
            raise ExceptionGroup("proxy cleanup failed", errors)

    AsyncMongoEcoProxyServer._close_resources = close_resources
