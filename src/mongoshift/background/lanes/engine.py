"""The engine of one connected run: the machinery every background command and lane set shares.

An :class:`Engine` is built on a project :class:`~mongoshift.project.session.Session`,
so it connects, identifies itself, takes ``background:<name>`` locks and reads
the declarations the same way every other command does (declarations once per
run, even when a deploy makes the engine reload a file on every poll).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient

from ...errors import ConfigInvalidError, FileNotFoundMigrationError
from ...project.loader import discover, find, load
from ...project.run import CancelSignal
from ...project.session import Project, Session, open_session
from ...project.settings import Settings
from ...schema.background import Background
from ..plan.declared import align_file
from ..state.events import Events, Observer
from ..state.model import State
from ..state.store import BackgroundStore
from .context import EngineContext
from .coordinator import Coordinator, Decision
from .drive import Loaded, MigrationRun
from .lane import Lane, SliceResult


@dataclass
class Engine:
    """One connection's worth of background machinery."""

    session: Session
    context: EngineContext
    coordinator: Coordinator

    @property
    def settings(self) -> Settings:
        return self.session.settings

    @property
    def client(self) -> AsyncMongoClient[Any]:
        return self.session.client

    @property
    def store(self) -> BackgroundStore:
        return self.context.store

    def spec(self, name: str) -> Background:
        """The file's spec (its code): the functions are only in the file, not in the database."""
        return self.loaded(name)[0]

    def loaded(self, name: str) -> tuple[Background, str]:
        """The file's spec and the checksum of the version that was imported."""
        return load_background(self.session, name)

    def absent(self, name: str) -> bool:
        """The file is not in the migrations folder (a rolling deploy that has not brought it yet)."""
        folder = self.settings.migrations_dir
        return folder.is_dir() and not (folder / name).exists()

    def present(self, name: str) -> Loaded:
        """:meth:`loaded`, or None while the file is :meth:`absent`; a missing folder is still an error."""
        try:
            return self.loaded(name)
        except FileNotFoundMigrationError:
            if self.absent(name):
                return None
            raise

    async def run_one(self, name: str, concurrency: int, *, once: bool = False, state: State | None = None) -> State | None:
        """Run a registered migration to its end (``once``: one round); a missing or changed file is waited for.

        ``state``: its state as just read, which the run starts from (see :meth:`MigrationRun.run`). The state
        the run ended on is returned (None: no longer registered)."""
        loaded = self.present(name)
        spec, checksum = loaded if loaded is not None else (None, None)
        return await self.migration_run().run(
            name, spec, concurrency=concurrency, checksum=checksum, reload=lambda: self.present(name), once=once, state=state
        )

    def runnable_spec(self, state: State) -> Background | None:
        """The spec to run ``state`` with, or None while this process's file is missing or differs from the
        registered version (a rolling deploy): one step or slice at a time, a job system waits by asking again."""
        loaded = self.present(state.name)
        if loaded is None or loaded[1] != state.checksum:
            return None
        return loaded[0]

    async def step_once(self, name: str) -> tuple[Decision | None, State | None]:
        """One coordinator step (None while the file cannot run here), and the state it started from."""
        state = await self.store.state(name)
        if state is None:
            return None, None
        spec = self.runnable_spec(state)
        if spec is None:
            return None, state
        return await self.coordinator.step(name, spec, state=state), state

    async def slice_once(self, name: str) -> SliceResult:
        """One slice of one new lane: the unit a job system's lane task runs between its re-enqueues."""
        state = await self.store.state(name)
        if state is None or state.status != "running":
            return SliceResult("stale")
        spec = self.runnable_spec(state)
        if spec is None:
            return SliceResult("stale")
        return await Lane(self.context, f"lane-{secrets.token_hex(4)}").run_slice(state, spec)

    def migration_run(self) -> MigrationRun:
        return MigrationRun(
            self.context,
            self.coordinator,
            poll_seconds=self.settings.background_poll_seconds,
            checksum_wait_seconds=self.settings.background_checksum_wait_seconds,
            reconnect_seconds=self.settings.background_reconnect_seconds,
        )


def load_background(session: Session, name: str) -> tuple[Background, str]:
    """A background file of the migrations folder, registered or not, as the engine runs it (aligned
    with its collection's declaration), and the checksum of the version imported.

    A missing file is exit 8, a file that does not import or has a bad spec exit 20, and one that is
    not a background migration exit 6, as for every other command."""
    item = load(find(discover(session.settings.migrations_dir), name))
    align_file(item, session.declarations())
    spec = item.background
    if spec is None:
        raise ConfigInvalidError(f"{item.name} is not a background migration")
    return spec, item.checksum


async def start_engine(session: Session, *, observers: Iterable[Observer] = (), reading: bool = False) -> Engine:
    """The engine on an open session (its connection, identity, cancel signal and lock collection).

    ``reading``: a call that only reads the engine's state (status, partitions, verify without reopening) makes no
    index, so that it never creates a database it was pointed at (a typo, a tenant not made yet), nor needs the
    privilege to; a write through its store still makes them first."""
    settings = session.settings
    store = BackgroundStore(session.db, settings.background_collection, create_indexes=settings.ensure_indexes)
    if not reading:
        await store.ensure_indexes()
    context = EngineContext(
        db=session.db,
        store=store,
        events=Events(observers, run_id=session.run.run_id),
        cancel=session.cancel,
        lease_ttl_ms=int(settings.background_lease_ttl_seconds * 1000),
        client=session.client,
        changelog=session.changelog,
        runner=runner_key(session.run.run_id),
        shard_aware=settings.shard_aware,
        shard_keys={name: dict(key) for name, key in settings.shard_keys.items()},
    )

    def new_lock(lock_id: str) -> Any:
        return session.new_lock(lock_id, ttl_seconds=settings.background_lease_ttl_seconds)

    return Engine(session, context, Coordinator(context, new_lock))


@asynccontextmanager
async def open_engine(
    settings: Settings,
    *,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
    project: Project | None = None,
    reading: bool = False,
) -> AsyncIterator[Engine]:
    """Connect (or use ``client``, left open; or ``project``'s connection) and start the engine; closed on exit.
    ``reading``: see :func:`start_engine`."""
    async with open_session(settings, take_lock=False, with_files=False, cancel=cancel, client=client, project=project) as session:
        yield await start_engine(session, observers=observers, reading=reading)


def runner_key(run_id: str) -> str:
    """The run id as this runner's name on leases and asks: a field name in the state document,
    so an id that is not a plain token (``.``, ``$``; ``open_session(run_id=...)`` takes any
    string) goes by its hash instead."""
    if re.fullmatch(r"[A-Za-z0-9_-]{1,64}", run_id):
        return run_id
    return hashlib.sha256(run_id.encode()).hexdigest()[:32]
