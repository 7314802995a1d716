"""One connected run of a project: the connection, who runs, the changelog, the lock.

Every command (migrations, converge, background) opens its run here, so they
share one way to connect, check mongoshift's own collections, take and lose
the lock, stop, read the declarations (once per run) and close.

What a run needs from its project (the files, the fetched URI, the client, the check of
the own collections) is a :class:`Project`: opened once by ``mongoshift.connect`` for
every call of a session, or by the run itself for a one-shot call. The lock is never
part of it: each writing run takes and releases its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pymongo
from pymongo import AsyncMongoClient, MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from ..errors import (
    ConfigInvalidError,
    LockLostError,
    LockReleaseFailedError,
    MongoshiftError,
    RunAbortedError,
)
from .changelog import Changelog
from .connection import connect, sync_client
from .declarations import Declarations, declarations_by_name
from .events import Events, Observer, end_fields
from .loader import MigrationFile, discover
from .lock import LeaseLock
from .own_collections import check_own_collections
from .run import CancelSignal, RunInfo, run_info
from .server_errors import from_pymongo, transactions_unsupported
from .settings import Settings
from .uri_source import resolve_uri

log = logging.getLogger("mongoshift")

#: How long closing a client may wait for a server to end its sessions on: the server forgets them on its
#: own after 30 minutes, and one that is gone would otherwise hold every exit for the server selection.
CLOSE_WAIT_S = 2.0


@dataclass
class Project:
    """A project as its runs use it, each part resolved at most once however many runs it serves.

    ``files`` (the migrations folder, scanned on first need), ``settings`` (with the URI
    fetched from ``uri_command`` / ``uri_factory``), ``client`` (connected, or the
    application's, left open) and ``checked`` (the own collections checked). ``one_shot``:
    the project of a single call, closed by the run that opened it (so its connect and close
    belong to that run, as its telemetry shows); otherwise :meth:`close` ends it.
    """

    settings: Settings
    client: AsyncMongoClient[Any] | None = None
    observers: list[Observer] = field(default_factory=list)
    #: The caller's cancel signal, shared by every run; None: each run gets its own.
    cancel: CancelSignal | None = None
    one_shot: bool = True
    files: list[MigrationFile] | None = None
    checked: bool = False
    resolved: bool = False
    #: Closed for good (a session that was left): a later call would connect again and never close.
    ended: bool = False
    _own_client: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        self.resolved = self.resolved or self.client is not None  # an application's client: its URI is its own

    def scanned(self) -> list[MigrationFile]:
        """The migration files, read from the folder on the first call only (:meth:`rescan` reads it again)."""
        if self.files is None:
            self.files = discover(self.settings.migrations_dir)
        return self.files

    def rescan(self) -> None:
        """Read the migrations folder again at the next call: a long-lived session sees files deployed since."""
        self.files = None

    async def resolve(self) -> Settings:
        """The settings with the URI fetched (``uri_command`` / ``uri_factory``), once."""
        if not self.resolved:
            self.settings = await resolve_uri(self.settings)
            self.resolved = True
        return self.settings

    def check_open(self) -> None:
        """Refuse a call on a project that was :meth:`end`-ed (a call after its session was left)."""
        if self.ended:
            raise ConfigInvalidError("this mongoshift session is closed: make the call inside 'async with mongoshift.connect(...)'")

    async def connected(self, cancel: CancelSignal | None = None) -> AsyncMongoClient[Any]:
        """The client: the application's, or one connected now and kept until :meth:`close`. A stop
        (``cancel``, else the project's) ends the wait for the server with RunAbortedError."""
        self.check_open()
        if self.client is None:
            self.client = await connect(await self.resolve(), cancel=cancel or self.cancel)
            self._own_client = True
        return self.client

    async def check(self) -> None:
        """Check mongoshift's own collections once, before anything of this project writes."""
        if not self.checked:
            client = await self.connected()
            try:
                await check_own_collections(client[self.settings.require_db()], self.settings)
            except PyMongoError as exc:
                raise from_pymongo(exc) from exc
            self.checked = True

    async def open(self) -> None:
        """Connect and check now (a session opens eagerly, so a wrong URI or own collection fails at its
        start); the folder is read by the first call that needs it (``lock``, ``converge`` or
        ``background status`` need none, and may run where there is no migrations folder)."""
        await self.check()

    async def end(self) -> None:
        """Close for good: every later call is refused (:meth:`check_open`) instead of connecting again."""
        self.ended = True
        await self.close()

    async def close(self) -> None:
        """Close the client this project connected (an application's stays open); idempotent."""
        client, self.client = (self.client, None) if self._own_client else (None, self.client)
        self._own_client = False
        if client is not None:
            try:
                with pymongo.timeout(CLOSE_WAIT_S):  # the driver's endSessions waits for a server: not for a gone one
                    await client.close()
            except PyMongoError as exc:
                log.debug("closing the connection failed: %s", type(exc).__name__)


@dataclass
class Session:
    """One connected run: settings, connection, identity, changelog, files and (when taken) the lock."""

    settings: Settings
    client: AsyncMongoClient[Any]
    run: RunInfo
    cancel: CancelSignal
    changelog: Changelog
    files: list[MigrationFile]
    lock: LeaseLock | None = None
    #: The run's events (:mod:`.events`), all stamped with its ``run_id``.
    events: Events = field(default_factory=Events)
    _declarations: Declarations | None = field(default=None, repr=False)
    _sync: MongoClient[Any] | None = field(default=None, repr=False)

    @property
    def db_name(self) -> str:
        return self.settings.require_db()

    @property
    def db(self) -> AsyncDatabase[Any]:
        return self.client[self.db_name]

    def declarations(self) -> Declarations:
        """The declared collections by name, read (and their ``.py`` files executed) once per run."""
        if self._declarations is None:
            self._declarations = declarations_by_name(self.settings)
        return self._declarations

    def sync_client(self) -> MongoClient[Any]:
        """The sync driver for plain ``def`` user code; opened on first use, closed with the run."""
        if self._sync is None:
            self._sync = sync_client(self.settings)
        return self._sync

    def new_lock(self, lock_id: str | None = None, *, ttl_seconds: float | None = None, on_lost: Callable[[str], None] | None = None) -> LeaseLock:
        """A lease lock in the lock collection: the migration lock by default, ``background:<name>`` for a lane set."""
        return LeaseLock(
            self.db[self.settings.lock_collection],
            self.run,
            ttl_seconds=self.settings.lock_ttl_seconds if ttl_seconds is None else ttl_seconds,
            lock_id=lock_id,
            on_lost=on_lost,
        )

    async def transactions_supported(self) -> bool:
        """Whether the server runs transactions, asked the way a migration's transaction would find out: one read of
        the changelog in a transaction, aborted (nothing is written). Only a refusal of the transaction itself (a
        standalone server) says no; any other failure says yes, leaving it to the run to meet as before."""
        try:
            async with self.client.start_session() as session:
                await session.start_transaction()
                try:
                    await self.db[self.settings.changelog_collection].find_one({}, session=session)
                finally:
                    await session.abort_transaction()
        except PyMongoError as exc:
            if transactions_unsupported(exc):
                return False
            log.debug("the probe for transactions failed (%s): the run finds out", type(exc).__name__)
        return True

    def lock_lost(self) -> bool:
        """The run's lock was lost and ``on_lock_lost = "abort"``: nothing more may be recorded as done."""
        return self.lock is not None and self.lock.lost.is_set() and self.settings.on_lock_lost == "abort"

    def check_stop(self, stopped: Callable[[str], str]) -> None:
        """Raise when the run must stop: its lock lost (policy ``abort``) or a cancel (Ctrl-C, timeout).

        ``stopped`` words the :class:`RunAbortedError` from the cancel reason.
        """
        if self.lock_lost():
            assert self.lock is not None
            raise LockLostError(f"the migration lock was lost: {self.lock.lost_reason}")
        if self.cancel.is_set():
            raise RunAbortedError(stopped(self.cancel.reason or "cancelled"))


def _on_lock_lost(settings: Settings, cancel: CancelSignal, events: Events) -> Callable[[str], None]:
    """With ``on_lock_lost = "abort"`` a lost lock sets ``ctx.cancelled`` at once; ``warn`` lets the run go on."""

    def lost(reason: str) -> None:
        events.emit("lock_lost", None, reason=reason, policy=settings.on_lock_lost)
        if settings.on_lock_lost == "abort":
            cancel.set(f"the migration lock was lost: {reason}")

    return lost


@asynccontextmanager
async def open_session(
    settings: Settings,
    *,
    take_lock: bool,
    wait: float | None = None,
    cancel: CancelSignal | None = None,
    run_id: str | None = None,
    with_files: bool = True,
    client: AsyncMongoClient[Any] | None = None,
    checked: bool = False,
    declarations: Declarations | None = None,
    observers: Iterable[Observer] = (),
    command: str | None = None,
    project: Project | None = None,
    before_writes: Callable[[Session], Awaitable[None]] | None = None,
) -> AsyncIterator[Session]:
    """Connect (or use ``client``, left open), check the own collections, take the lock, and always clean up.

    ``project``: an open :class:`Project` whose files, URI, client and check this run reuses
    (``client`` and ``checked`` are then its own); without one, the run opens a one-shot project.
    ``checked``: the caller's run already checked the own collections.
    ``declarations``: already read by the caller (a bad file failed before connecting).
    ``observers`` get the run's events; ``command`` (a writing command) brackets the run
    with ``run_start`` / ``run_end``, connecting and closing included, and enters the
    observers' ``run_scope`` between them.
    ``before_writes``: run once connected, before the session writes anything (the own collections'
    indexes, the lock): what must refuse the command with nothing written (``up`` imports its files).
    """
    if project is None:
        project = Project(settings, client, checked=checked)
    project.check_open()
    files = project.scanned() if with_files else []
    settings = await project.resolve()  # uri_command / uri_factory: fetched once per project
    cancel = cancel or CancelSignal()
    run = run_info(settings, run_id)
    events = Events(observers, run_id=run.run_id)
    failure: BaseException | None = None
    started = time.monotonic()
    start = events.emit("run_start", None, command=command, db=settings.db, lock="taken" if take_lock else "skipped") if command else None
    try:
        # the run's scope holds its set-up and tear-down too: the driver's ping, listCollections,
        # createIndexes and endSessions belong to the run
        with events.run_scope(start) if start is not None else nullcontext():
            async with _connected(project, cancel, run, events, files, declarations, take_lock, wait, before_writes) as session:
                yield session
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if command is not None:
            events.emit("run_end", None, command=command, db=settings.db, **end_fields(started, failure))


@asynccontextmanager
async def _connected(
    project: Project,
    cancel: CancelSignal,
    run: RunInfo,
    events: Events,
    files: list[MigrationFile],
    declarations: Declarations | None,
    take_lock: bool,
    wait: float | None,
    before_writes: Callable[[Session], Awaitable[None]] | None = None,
) -> AsyncIterator[Session]:
    """The session of :func:`open_session`: connected, checked, locked; always cleaned up."""
    settings = project.settings
    try:
        client = await project.connected(cancel)
    except BaseException:
        if project.one_shot:
            await project.close()
        raise
    db = client[settings.require_db()]
    session = Session(settings, client, run, cancel, Changelog(db[settings.changelog_collection]), files, events=events)
    session._declarations = declarations
    failure: BaseException | None = None
    try:
        try:
            await project.check()  # before any index or record is written (it only reads)
            if before_writes is not None:
                await before_writes(session)
            if take_lock:
                if settings.ensure_indexes:
                    await session.changelog.ensure_indexes()
                session.lock = session.new_lock(on_lost=_on_lock_lost(settings, cancel, events))
                await _acquire(session.lock, events, wait, cancel)
                session.lock.start_heartbeat()
            yield session
        except PyMongoError as exc:
            raise from_pymongo(exc) from exc
    except BaseException as exc:
        failure = exc
        raise
    finally:
        await _close(session, project, failure)


async def _acquire(lock: LeaseLock, events: Events, wait: float | None, cancel: CancelSignal) -> None:
    """Take the migration lock, telling observers whether it waited, got it, or was refused (a stop ends the wait)."""
    started = time.monotonic()
    held_since: list[float] = []  # when the lock was found held: the wait for its holder starts there

    def waited() -> None:
        held_since.append(time.monotonic())
        events.emit("lock_waited", None, wait_seconds=wait)

    try:
        await lock.acquire(wait_seconds=wait, on_wait=waited, cancel=cancel)
    except MongoshiftError as exc:
        events.emit("lock_refused", None, **_lock_times(started, held_since), error_kind=exc.kind)
        raise
    events.emit("lock_acquired", None, **_lock_times(started, held_since), ttl_seconds=lock.ttl_ms / 1000)


def _lock_times(started: float, held_since: list[float]) -> dict[str, float]:
    """``waited_ms`` since the lock was asked for and, when it was held, ``held_ms`` of it spent waiting for
    its holder: one clock reading for both, so the part never exceeds the whole by more than the rounding
    (an observer's own clock would add the time events take to reach it)."""
    now = time.monotonic()
    times: dict[str, float] = {"waited_ms": int((now - started) * 1000)}
    if held_since:
        times["held_ms"] = round((now - held_since[0]) * 1000, 3)
    return times


async def _close(session: Session, project: Project, failure: BaseException | None) -> None:
    """Release the lock and the connections; a release failure never masks the failure that ended the run."""
    try:
        if session.lock is not None:
            await session.lock.release()
    except LockReleaseFailedError as later:
        if failure is None:
            raise
        log.error("%s (after the run had already failed)", later.message)
        if isinstance(failure, MongoshiftError):
            failure.details.setdefault("later_errors", []).append(later.to_json())
    finally:
        try:
            if session._sync is not None:
                with pymongo.timeout(CLOSE_WAIT_S):  # copied into the thread's context
                    await asyncio.to_thread(session._sync.close)
                session._sync = None
        except PyMongoError as exc:
            log.debug("closing the connection failed: %s", type(exc).__name__)
        finally:
            if project.one_shot:
                await project.close()


def warn_unlocked(no_lock: bool) -> None:
    """Said once per writing run without the lock, before anything is written."""
    if no_lock:
        log.warning(
            "running without the migration lock (--no-lock): another run could apply the same migrations "
            "at the same time; use it for local work only"
        )
