"""Background migrations as an async Python API; ``mongoshift background ...`` is a thin layer over it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from pymongo import AsyncMongoClient

from ..background.connected import Engine, open_engine
from ..background.controls import Action, ControlResult, RepinResult, control, pin
from ..background.events import Observer
from ..background.status import BackgroundReport, PartitionRow, report
from ..background.throttle import sleep
from ..errors import BackgroundFileChangedError, FileNotFoundMigrationError, MongoshiftError, NotAppliedError
from ..project.run import CancelSignal
from ..project.settings import Settings

log = logging.getLogger("mongoshift.background")


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
    once: bool = False,
) -> list[BackgroundReport]:
    """Run the named migrations (None: every runnable one) in this process until each ends.

    ``once``: one round each (one coordinator step and one slice per lane) instead; a report whose
    status is still ``pending``, ``running`` or ``blocked`` has work left (``remaining`` estimates it).
    A migration whose file is missing or differs from the registered version holds up no other:
    the others run first, and its error (exit 8 or 38, after the wait bound) is raised once they
    did, with their reports in ``details["background"]``.
    """
    async with open_engine(settings, cancel=cancel, observers=observers) as engine:
        if names is None:
            targets = [s.name for s in await engine.store.states_all() if s.status in ("blocked", "pending", "running")]
        else:
            targets = [await _registered(engine, n) for n in names]
        targets.sort(key=engine.absent)  # stable: a file not deployed here yet is waited for last
        reports = []
        unrunnable: list[MongoshiftError] = []
        for name in targets:
            if engine.context.cancel.is_set():
                break
            try:
                await engine.run_one(name, concurrency, once=once)
            except (FileNotFoundMigrationError, BackgroundFileChangedError) as exc:
                if len(targets) > 1:
                    log.warning("%s", exc.message)
                unrunnable.append(exc)
                continue
            state = await engine.store.state(name)
            if state is not None:
                reports.append(await report(engine.store, state))
        if unrunnable:
            raise _unrunnable(unrunnable, reports)
        return reports


def _unrunnable(errors: list[MongoshiftError], reports: list[BackgroundReport]) -> MongoshiftError:
    """The first file error of a run, naming every migration whose file was missing or changed, with the others' reports."""
    first = errors[0]
    by_kind = {
        kind: [str(e.details.get("file")) for e in errors if isinstance(e, cls)]
        for kind, cls in (("missing", FileNotFoundMigrationError), ("file_changed", BackgroundFileChangedError))
    }
    message = first.message
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more: {', '.join(str(e.details.get('file')) for e in errors[1:])})"
    if reports:
        message += "; the others ran: " + ", ".join(f"{r.name} {r.status}" for r in reports)
    return type(first)(message, **{**first.details, **by_kind, "background": [r.to_json() for r in reports]})


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
            by=engine.session.run.executed_by,
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
        result = await pin(engine.store, wanted, spec, checksum, by=engine.session.run.executed_by, reason=reason)
        await engine.session.changelog.repin(wanted, checksum)
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
                        except (BackgroundFileChangedError, FileNotFoundMigrationError) as exc:  # the others can still run; this one is retried later
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
