"""The embedded MongoDB-compatible server: mongoeco's wire server on its memory engine.

Used by ``mongoshift embedded`` and ``python -m mongoshift.embedded`` to give
developers and tests a local server that the real pymongo driver talks to, with
no ``mongod`` to install. mongoeco is an optional dependency
(``pip install "mongoshift[embedded]"``) and is imported only when a server starts.

The server runs mongoeco's memory engine with the fixes of
:mod:`mongoshift.embedded.patches`. It presents itself as a MongoDB 7.0 single-node
replica set (:mod:`mongoshift.embedded.replica_set`), or with ``standalone`` as a
standalone mongod, refusing what one refuses. With ``path`` it loads a snapshot at start
and writes it at a clean shutdown (:mod:`mongoshift.embedded.snapshot`):
**a crash loses every write since the last clean shutdown**. The engine computes
on a thread of its own while the connections and the heartbeats are served from
the caller's loop (:mod:`mongoshift.embedded.engine_thread`), so a long command
does not make drivers take the server for lost.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mongoshift.embedded.collector import Collector, watch
from mongoshift.embedded.engine_thread import SWITCH_INTERVAL_S, EngineThread

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 27017
# Events a change stream can resume from (mongod's oplog window, in events).
DEFAULT_CHANGE_HISTORY = 100_000

# MemoryEngine options (mongoeco.engines.memory.MemoryEngine.__init__):
# - the change-stream hub degrades for good once one command publishes more
#   events than change_log_max_entries (default 10,000); the log is pruned to
#   the slowest consumer, so a high cap costs no memory without watchers;
# - count_documents is an aggregation, and fails past
#   aggregation_materialization_limit matching documents (default 50,000).
ENGINE_OPTIONS: dict[str, Any] = {
    "change_log_max_entries": 1_000_000,
    "aggregation_materialization_limit": None,
}


class EmbeddedServerUnavailable(Exception):
    """The embedded server cannot run here: mongoeco is missing or has the wrong version."""


class AddressUnavailable(Exception):
    """The server cannot listen on ``host``:``port`` (taken, not an address of this machine, ...)."""

    def __init__(self, host: str, port: int, reason: str) -> None:
        super().__init__(f"cannot listen on {host} port {port}: {reason}")
        self.host = host
        self.port = port
        self.reason = reason


def _bind_reason(error: OSError) -> str:
    """Why binding failed, in words a user acts on (the usual case: a local mongod on 27017)."""
    if isinstance(error, socket.gaierror):
        return f"the host name cannot be resolved ({error.strerror or error})"
    if error.errno == errno.EADDRINUSE:
        return "the port is taken by another server (a local mongod?); stop it, or pass another --port (0 picks a free one)"
    # asyncio drops an address it cannot assign (EADDRNOTAVAIL), then fails with no errno at all
    if error.errno == errno.EADDRNOTAVAIL or (error.errno is None and str(error).startswith("could not bind on any address")):
        return "the host is not an address of this machine"
    if error.errno == errno.EACCES:
        return "permission denied (ports below 1024 need privileges)"
    return os.strerror(error.errno) if error.errno else str(error)


def print_uri(uri: str) -> None:
    """Default ``on_ready``: print the URI as one line on stdout and flush it."""
    print(uri, flush=True)


def _import_mongoeco() -> None:
    try:
        import mongoeco  # noqa: F401
    except ImportError as error:
        raise EmbeddedServerUnavailable(
            "the embedded server needs mongoeco, which is not installed: "
            'install mongoshift[embedded] (pip install "mongoshift[embedded]")'
        ) from error
    from mongoshift.embedded import patches

    try:
        patches.apply()
    except patches.UnsupportedMongoecoVersion as error:
        raise EmbeddedServerUnavailable(str(error)) from error


def _advertised_member(host: str, port: int) -> str:
    """``host:port`` as clients reach the server (a replica set's ``hosts`` and ``me``)."""
    # A wildcard bind is reachable locally through the loopback address.
    if host in {"", "0.0.0.0"}:
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{port}"


def _advertised_uri(host: str, port: int) -> str:
    # A direct connection needs no replica-set name and works with a standalone as well; with
    # the set's hello the driver sees its primary, so writes, commits and aborts are retried.
    return f"mongodb://{_advertised_member(host, port)}/?directConnection=true"


async def serve(
    host: str,
    port: int,
    path: Path | None,
    *,
    on_ready: Callable[[str], None],
    stop: asyncio.Event,
    change_history: int = DEFAULT_CHANGE_HISTORY,
    standalone: bool = False,
    on_activity: Callable[[], None] | None = None,
) -> None:
    """Serve until ``stop`` is set, then shut down (and write the snapshot if ``path``).

    ``port`` 0 picks a free port. ``on_ready`` gets the URI (for pymongo) once the
    snapshot, if any, is loaded and the server accepts connections.
    Raises :class:`EmbeddedServerUnavailable` without mongoeco 4.11.0,
    :class:`~mongoshift.embedded.snapshot.SnapshotError` if ``path`` cannot be
    used (a missing folder) or is not a readable snapshot (the file is then left
    untouched), its subclass ``SnapshotIOError`` when the system refuses to read or
    write it (a read-only location, a full disk at shutdown), and
    :class:`AddressUnavailable` if the address cannot be bound.
    ``change_history`` bounds the events change streams can resume from
    (:mod:`mongoshift.embedded.change_streams`). A ``path`` another server serves raises
    :class:`~mongoshift.embedded.snapshot.SnapshotInUse` (a ``SnapshotError``). ``standalone`` serves a standalone
    mongod instead of the single-node replica set: no transactions, retryable writes or
    change streams (refused with mongod's codes 20 and 40573). ``on_activity`` is called as each
    command starts and ends on the engine (:meth:`.Collector.active`, in the server's own process).
    """
    from mongoshift.embedded import snapshot

    if path is None:
        return await _serve(host, port, None, on_ready, stop, change_history, standalone, on_activity)
    snapshot.check_path(Path(path))  # before anything starts: a bad location fails at once
    with snapshot.claimed(Path(path)):  # a second server on it is refused before it loads or serves anything
        await _serve(host, port, Path(path), on_ready, stop, change_history, standalone, on_activity)


async def _serve(
    host: str,
    port: int,
    path: Path | None,
    on_ready: Callable[[str], None],
    stop: asyncio.Event,
    change_history: int,
    standalone: bool,
    on_activity: Callable[[], None] | None,
) -> None:
    """:func:`serve` once ``path`` (if any) is checked and claimed."""
    _import_mongoeco()
    from mongoeco.wire.proxy import AsyncMongoEcoProxyServer

    from mongoshift.embedded.patches import loops

    # The engine computes on a thread of its own, the connections and heartbeats stay on this loop
    # (engine_thread.py says why): everything that touches the engine is awaited through engine.run.
    engine = EngineThread(on_activity=on_activity)
    engine.start()
    try:
        opened = await _opened(engine, path, change_history, standalone, stop)
        if opened is None:
            return
        client, state = opened
        try:
            if stop.is_set():  # asked as the load ended: no URI for a server that is stopping, the snapshot left as it was
                log.info("stopped before serving: the snapshot is left as it was")
                return
            # The server does not own the client: the engine outlives the listener
            # so the snapshot is written after the last connection is closed.
            server = AsyncMongoEcoProxyServer(client=client, host=host, port=port)
            loops.attach(server, engine)
            try:
                address = await server.start()
            except OSError as error:  # nothing was served, so the snapshot is left as it was
                raise AddressUnavailable(host, port, _bind_reason(error)) from None
            try:
                uri = _advertised_uri(host, address.port)
                state.replica_set.me = _advertised_member(host, address.port)
                log.info(
                    "embedded server (mongoeco memory engine, %s) listening on %s",
                    "standalone" if standalone else f"replica set {state.replica_set.set_name!r}",
                    uri,
                )
                on_ready(uri)
                await stop.wait()
                log.info("stopping")
            finally:
                # Closing also ends every session, so open transactions are aborted.
                await server.close()
                await engine.run(_close_snapshots(state))
                if path is not None:
                    await engine.run(_save(client, Path(path)))
        finally:
            await engine.run(client._engine.disconnect())
    finally:
        engine.stop()


async def _opened(engine: EngineThread, path: Path | None, change_history: int, standalone: bool, stop: asyncio.Event) -> tuple[Any, Any] | None:
    """The engine opened (and the snapshot loaded), or None when ``stop`` is set first: a large snapshot loads for
    seconds (about 4,000 documents/s), and SIGINT/SIGTERM meanwhile ends the load at once. The file is only read
    while it loads, so nothing is lost, and nothing is served or written."""
    opening: asyncio.Future[tuple[Any, Any]] = asyncio.ensure_future(engine.run(_open_engine(path, change_history, standalone)))
    stopping: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait([opening, stopping], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if opening.done():
        return opening.result()
    opening.cancel()
    await asyncio.wait({opening})
    await engine.run(engine.drain())  # the load's own cleanup (the engine disconnected) ends before the thread stops
    log.info("stopped while the snapshot loaded: not served, the snapshot is left as it was")
    return None


async def _close_snapshots(state: Any) -> None:
    """On the engine loop: end the engine sessions that hold snapshot reads (fix (ad))."""
    state.snapshots.close()


async def _open_engine(path: Path | None, change_history: int, standalone: bool) -> tuple[Any, Any]:
    """On the engine loop: mongoeco's client on a fresh memory engine as a replica set (or a
    standalone), with the snapshot at ``path`` loaded; the client and its replica-set state."""
    from mongoeco.api import AsyncMongoClient
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.embedded import replica_set, snapshot
    from mongoshift.embedded.change_streams import attach_history

    engine = MemoryEngine(**ENGINE_OPTIONS)
    client = AsyncMongoClient(engine)
    history = attach_history(client, change_history)
    state = replica_set.attach(client, history, standalone=standalone)
    await engine.connect()
    try:
        if path is not None:
            await snapshot.load(client, Path(path))
            history.forget()  # loading is not history: resume tokens start after it
    except BaseException:
        await engine.disconnect()
        raise
    return client, state


async def _save(client: Any, path: Path) -> None:
    """On the engine loop, after the last connection closed: write the snapshot."""
    from mongoshift.embedded import snapshot

    try:
        await snapshot.save(client, path)
    except OSError as error:  # a full disk, a folder made read-only meanwhile
        reason = error.strerror or str(error)
        raise snapshot.SnapshotIOError(
            f"cannot write the snapshot {path}: {reason}; the previous one is kept, the writes of this session are lost",
            path, reason,
        ) from None


#: How often a server started by a parent process looks whether that parent is still there.
PARENT_CHECK_SECONDS = 0.5


async def _stop_when_orphaned(parent_pid: int, stop: asyncio.Event) -> None:
    """Set ``stop`` once ``parent_pid`` is no longer the parent (a dead parent's children are adopted)."""
    while not stop.is_set():
        if os.getppid() != parent_pid:
            log.warning("the process that started this server (pid %d) is gone: stopping", parent_pid)
            stop.set()
            return
        try:
            await asyncio.wait_for(stop.wait(), PARENT_CHECK_SECONDS)
        except TimeoutError:
            pass


def run(
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    path: Path | str | None = None,
    on_ready: Callable[[str], None] = print_uri,
    change_history: int = DEFAULT_CHANGE_HISTORY,
    standalone: bool = False,
    parent_pid: int | None = None,
) -> int:
    """Run :func:`serve` until SIGINT or SIGTERM; return 0 after a clean stop.

    ``parent_pid``: stop too when that process is no longer this one's parent (it died, even by ``kill -9``,
    or was stopped by a CI timeout): a test session's or the demo's server never outlives it."""
    path = Path(path) if path is not None else None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - Windows
                signal.signal(sig, lambda *_: loop.call_soon_threadsafe(stop.set))
        # This process is the server's: its garbage collector follows the server's policy, (ak) and (aw).
        collector = Collector()
        collector.install()
        watching = asyncio.create_task(watch(collector, stop))
        orphaned = asyncio.create_task(_stop_when_orphaned(parent_pid, stop)) if parent_pid is not None else None
        try:
            await serve(
                host, port, path, on_ready=on_ready, stop=stop, change_history=change_history, standalone=standalone,
                on_activity=collector.active,
            )
        finally:
            stop.set()
            await watching
            if orphaned is not None:
                await orphaned
            collector.uninstall()
            for sig in installed:
                loop.remove_signal_handler(sig)

    # Heartbeats get the GIL back from a scanning engine within a millisecond (engine_thread.py says why).
    switch_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(switch_interval, SWITCH_INTERVAL_S))
    try:
        asyncio.run(main())
    finally:
        sys.setswitchinterval(switch_interval)
    return 0
