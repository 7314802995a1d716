"""Background migrations as an async Python API; ``mongoshift background ...`` is a thin layer over it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from pymongo import AsyncMongoClient

from ..config import Settings
from ..connection import connect
from ..errors import BackgroundFileChangedError, ConfigInvalidError, NotAppliedError
from ..own_collections import check_own_collections
from ..runner.command import run_info
from ..runner.context import CancelSignal
from ..runner.loader import discover, find, load
from .controls import Action, ControlResult, RepinResult, control, pin
from .coordinator import Coordinator
from .declared import align_file
from .events import Events, Observer
from .engine import EngineContext
from .runner import MigrationRun
from .spec import Background
from .status import BackgroundReport, PartitionRow, report
from .store import BackgroundStore
from .throttle import sleep

log = logging.getLogger("mongoshift.background")


@dataclass
class Engine:
    """One connection's worth of background machinery."""

    settings: Settings
    client: AsyncMongoClient[Any]
    context: EngineContext
    coordinator: Coordinator

    @property
    def store(self) -> BackgroundStore:
        return self.context.store

    def spec(self, name: str) -> Background:
        """The file's spec (its code): the functions are only in the file, not in the database."""
        return self.loaded(name)[0]

    def loaded(self, name: str) -> tuple[Background, str]:
        """The file's spec and the checksum of the version that was imported."""
        item = load(find(discover(self.settings.migrations_dir), name))
        align_file(item, self.settings)
        spec = item.background
        if spec is None:
            raise ConfigInvalidError(f"{item.name} is not a background migration")
        return spec, item.checksum

    async def run_one(self, name: str, concurrency: int) -> None:
        spec, checksum = self.loaded(name)
        await self.migration_run().run(name, spec, concurrency=concurrency, checksum=checksum, reload=lambda: self.loaded(name))

    def migration_run(self) -> MigrationRun:
        return MigrationRun(
            self.context,
            self.coordinator,
            poll_seconds=self.settings.background_poll_seconds,
            checksum_wait_seconds=self.settings.background_checksum_wait_seconds,
        )


@asynccontextmanager
async def open_engine(
    settings: Settings,
    *,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
    checked: bool = False,
) -> AsyncIterator[Engine]:
    """``checked``: the caller's run already checked the own collections (``open_session``)."""
    own = client is None
    client = client or await connect(settings)
    try:
        db = client[settings.require_connection()[1]]
        if not checked:
            await check_own_collections(db, settings)  # before the indexes below
        store = BackgroundStore(db, settings.background_collection)
        await store.ensure_indexes()
        context = EngineContext(
            db=db,
            store=store,
            events=Events(observers),
            cancel=cancel or CancelSignal(),
            lease_ttl_ms=int(settings.background_lease_ttl_seconds * 1000),
            client=client,
        )
        coordinator = Coordinator(context, run_info(settings), settings.lock_collection, settings.background_lease_ttl_seconds)
        yield Engine(settings, client, context, coordinator)
    finally:
        if own:
            await client.close()


async def _registered(engine: Engine, name: str) -> str:
    wanted = name if name.endswith(".py") else name + ".py"
    if await engine.store.state(wanted) is None:
        raise NotAppliedError(f"{wanted} is not a registered background migration (run 'mongoshift up' first)", file=wanted)
    return wanted


async def run(
    settings: Settings,
    names: list[str] | None = None,
    *,
    concurrency: int = 1,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
) -> list[BackgroundReport]:
    """Run the named migrations (None: every runnable one) in this process until each ends."""
    async with open_engine(settings, cancel=cancel, observers=observers) as engine:
        if names is None:
            targets = [s.name for s in await engine.store.states_all() if s.status in ("blocked", "pending", "running")]
        else:
            targets = [await _registered(engine, n) for n in names]
        reports = []
        for name in targets:
            if engine.context.cancel.is_set():
                break
            await engine.run_one(name, concurrency)
            state = await engine.store.state(name)
            if state is not None:
                reports.append(await report(engine.store, state))
        return reports


async def status(settings: Settings, name: str | None = None) -> list[BackgroundReport]:
    async with open_engine(settings) as engine:
        if name is not None:
            state = await engine.store.state(await _registered(engine, name))
            return [await report(engine.store, state)] if state else []
        return [await report(engine.store, s) for s in await engine.store.states_all()]


async def partitions(settings: Settings, name: str) -> list[PartitionRow]:
    async with open_engine(settings) as engine:
        state = await engine.store.state(await _registered(engine, name))
        assert state is not None
        return [PartitionRow.of(p) for p in await engine.store.partitions_of(state)]


async def apply_control(
    settings: Settings, name: str, action: Action, *, reason: str | None = None, from_start: bool = False
) -> ControlResult:
    async with open_engine(settings) as engine:
        result = await control(
            engine.store,
            await _registered(engine, name),
            action,
            by=run_info(settings).executed_by,
            reason=reason,
            from_start=from_start,
            lock_collection=settings.lock_collection,
        )
        engine.context.events.emit("control", result.name, action=action, applied=result.applied, status=result.status)
        return result


async def repin(settings: Settings, name: str, *, reason: str | None = None) -> RepinResult:
    """Pin the file as it is on disk now (after a deploy changed it); replan when what it matches changed."""
    async with open_engine(settings) as engine:
        wanted = await _registered(engine, name)
        spec, checksum = engine.loaded(wanted)
        result = await pin(engine.store, wanted, spec, checksum, by=run_info(settings).executed_by, reason=reason)
        await engine.client[settings.require_connection()[1]][settings.changelog_collection].update_one(
            {"name": wanted}, {"$set": {"checksum": checksum}}
        )
        engine.context.events.emit("control", wanted, action="repin", applied=result.applied, replan=result.replan)
        return result


class BackgroundRunner:
    """Runs every runnable background migration inside an application's event loop."""

    def __init__(self, settings: Settings, *, concurrency: int = 1, observers: Iterable[Observer] = (), client: AsyncMongoClient[Any] | None = None) -> None:
        self.settings = settings
        self.concurrency = concurrency
        self.observers = list(observers)
        self.client = client
        self.cancel = CancelSignal()
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="mongoshift-background-runner")

    async def _loop(self) -> None:
        async with open_engine(self.settings, cancel=self.cancel, observers=self.observers, client=self.client) as engine:
            while not self.cancel.is_set():
                try:
                    runnable = [s.name for s in await engine.store.states_all() if s.status in ("blocked", "pending", "running")]
                    for name in runnable:
                        if self.cancel.is_set():
                            break
                        try:
                            await engine.run_one(name, self.concurrency)
                        except BackgroundFileChangedError as exc:  # the others can still run; this one is retried later
                            log.warning("%s", exc.message)
                except Exception:
                    log.exception("the background runner hit an error; retrying")
                await sleep(self.settings.background_poll_seconds * 1000, self.cancel)

    async def stop(self) -> None:
        """Finish the current batches, release every lease, and return."""
        self.cancel.set("runner stopped")
        if self._task is not None:
            await self._task
            self._task = None


async def start_background_runner(
    settings: Settings, *, concurrency: int = 1, observers: Iterable[Observer] = (), client: AsyncMongoClient[Any] | None = None
) -> BackgroundRunner:
    runner = BackgroundRunner(settings, concurrency=concurrency, observers=observers, client=client)
    runner.start()
    return runner
