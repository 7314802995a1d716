"""The commands, as an async Python API; the CLI is a thin layer over these.

Each writing command opens one connection, takes the lock (unless told not
to), re-reads the changelog under it, plans, imports every file it will run,
and only then executes, so a broken file or a bad selection never leaves half
a run behind.
"""

from __future__ import annotations

import getpass
import logging
import socket
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pymongo.errors import PyMongoError

from ..background.declared import align_file
from ..background.input_probe import unversioned_warning
from ..background.spec import Background
from ..background.store import BackgroundStore
from ..config import Settings
from ..connection import connect
from ..errors import ConfigInvalidError, LockReleaseFailedError, MongoshiftError
from ..own_collections import check_own_collections
from ..server_errors import from_pymongo
from .changelog import Changelog, ChangelogRecord, RunInfo
from .context import CancelSignal
from .executor import Executor, MigrationResult, Runtime
from .hooks import load_hooks
from .loader import MigrationFile, discover, resolve_name
from .lock import LockHolder, MigrationLock
from .plan import Plan, Step, StatusRow, plan_down, plan_up, status_rows

log = logging.getLogger("mongoshift")


@dataclass
class RunReport:
    """What a writing command did."""

    command: str
    run_id: str
    results: list[MigrationResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: With ``on_requires_pending = "stop"``: the migration the run stopped before, and what it waits for.
    waiting: list[dict[str, Any]] = field(default_factory=list)
    #: The converge that ended a bulk ``up`` (a ``ConvergeReport``), when one ran.
    converge: Any = None

    def to_json(self) -> dict[str, Any]:
        body = {
            "command": self.command,
            "run_id": self.run_id,
            "results": [r.to_json() for r in self.results],
            "warnings": self.warnings,
            "waiting": self.waiting,
        }
        if self.converge is not None:
            body["converge"] = self.converge.to_json()
        return body


@dataclass
class DryRunRow:
    name: str
    direction: Literal["up", "down"]
    batch: int | None
    checksum: str
    description: str | None
    transaction: bool


@dataclass
class DryRunReport:
    """What ``dry-run`` found: the rows the real command would run, its warnings, and where it would stop."""

    rows: list[DryRunRow]
    warnings: list[str] = field(default_factory=list)
    #: With ``on_requires_pending = "stop"``: the migration the real run would stop before.
    waiting: list[dict[str, Any]] = field(default_factory=list)


def run_info(settings: Settings, run_id: str | None = None) -> RunInfo:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return RunInfo(
        run_id=run_id or uuid.uuid4().hex,
        executed_by=settings.executed_by or user,
        host=socket.gethostname(),
        environment=settings.environment,
    )


@dataclass
class Session:
    """One connected run: the runtime, the changelog and (when taken) the lock."""

    settings: Settings
    runtime: Runtime
    changelog: Changelog
    lock: MigrationLock | None
    files: list[MigrationFile]

    async def records(self) -> dict[str, ChangelogRecord]:
        return await self.changelog.records()

    def background_store(self) -> BackgroundStore:
        """The background store, read by ``status`` (through the API the engine itself uses)."""
        return BackgroundStore(self.changelog.collection.database, self.settings.background_collection)

    def executor(self) -> Executor:
        return Executor(self.runtime, self.changelog, load_hooks(self.settings.hooks), self.lock)


def _on_lock_lost(settings: Settings, cancel: CancelSignal) -> Callable[[str], None]:
    """With ``on_lock_lost = "abort"`` a lost lock sets ``ctx.cancelled`` at once; ``warn`` lets the run go on."""

    def lost(reason: str) -> None:
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
) -> AsyncIterator[Session]:
    files = discover(settings.migrations_dir) if with_files else []
    client = await connect(settings)
    run = run_info(settings, run_id)
    runtime = Runtime(settings, client, run, cancel or CancelSignal())
    db = client[runtime.db_name]
    changelog = Changelog(db[settings.changelog_collection])
    lock: MigrationLock | None = None
    failure: BaseException | None = None
    try:
        try:
            await check_own_collections(db, settings)  # before any index or record is written
            if take_lock:
                if settings.ensure_indexes:
                    await changelog.ensure_indexes()
                lock = MigrationLock(
                    db[settings.lock_collection], run, ttl_seconds=settings.lock_ttl_seconds, on_lost=_on_lock_lost(settings, runtime.cancel)
                )
                await lock.acquire(wait_seconds=wait)
                lock.start_heartbeat()
            yield Session(settings, runtime, changelog, lock, files)
        except PyMongoError as exc:
            raise from_pymongo(exc) from exc
    except BaseException as exc:
        failure = exc
        raise
    finally:
        await _close(lock, runtime, client, failure)


async def _close(lock: MigrationLock | None, runtime: Runtime, client: Any, failure: BaseException | None) -> None:
    """Release the lock and the connections; a release failure never masks the failure that ended the run."""
    try:
        if lock is not None:
            await lock.release()
    except LockReleaseFailedError as later:
        if failure is None:
            raise
        log.error("%s (after the run had already failed)", later.message)
        if isinstance(failure, MongoshiftError):
            failure.details.setdefault("later_errors", []).append(later.to_json())
    finally:
        try:
            await runtime.close()
            await client.close()
        except PyMongoError as exc:
            log.debug("closing the connection failed: %s", type(exc).__name__)


async def _plan(
    session: Session,
    direction: Literal["up", "down"],
    *,
    target: str | None = None,
    to: str | None = None,
    force: bool = False,
    strict: bool | None = None,
    batch: int | None = None,
    steps: int | None = None,
) -> Plan:
    """The selection of ``up``/``down`` and of their dry runs: one function, so they cannot diverge."""
    settings = session.settings
    target = _bare(settings, target)
    to = _bare(settings, to)
    records = await session.records()
    if direction == "up":
        return plan_up(
            session.files,
            records,
            target=target,
            to=to,
            force=force,
            strict=settings.strict if strict is None else strict,
            out_of_order="allow" if target else settings.out_of_order,
        )
    return plan_down(session.files, records, target=target, batch=batch, steps=steps, to=to)


def _bare(settings: Settings, name: str | None) -> str | None:
    return None if name is None else resolve_name(name, settings.migrations_dir)


def warn_unlocked(no_lock: bool) -> None:
    """Said once per writing run without the lock, before anything is written."""
    if no_lock:
        log.warning(
            "running without the migration lock (--no-lock): another run could apply the same migrations "
            "at the same time; use it for local work only"
        )


async def _execute(session: Session, command: str, plan: Plan, *, batch_per_step: bool = False) -> RunReport:
    report = RunReport(command, session.runtime.run.run_id, warnings=list(plan.warnings))
    batch = await session.changelog.next_batch()
    executor = session.executor()
    try:
        report.results = await executor.execute(plan, batch=batch, batch_per_step=batch_per_step)
    except MongoshiftError as exc:
        exc.details["warnings"] = report.warnings
        raise
    report.waiting = executor.waiting
    return report


async def up(
    settings: Settings,
    *,
    target: str | None = None,
    to: str | None = None,
    step: bool = False,
    force: bool = False,
    strict: bool | None = None,
    no_lock: bool = False,
    wait: float | None = None,
    cancel: CancelSignal | None = None,
    converge: bool | None = None,
    yes: bool = False,
    confirm: Any = None,
) -> RunReport:
    """Apply pending migrations (or one FILE), in name order.

    A bulk run (no FILE, no ``to``) ends with a converge of the declared
    collections under the same lock when ``converge`` (default: the
    ``converge_after_up`` setting) is on; ``yes`` / ``confirm`` decide its
    destructive steps as for ``mongoshift converge``.
    """
    if converge and (target or to):
        raise ConfigInvalidError("--converge runs only after a bulk up (not with FILE or --to)")
    converge_after = bool(settings.converge_after_up if converge is None else converge) and not (target or to)
    declarations = None
    if converge_after:
        from ..converge.declaration import load_declarations

        declarations = load_declarations(settings)  # a bad declaration fails before any migration runs
    async with open_session(settings, take_lock=not no_lock, wait=wait, cancel=cancel) as session:
        warn_unlocked(no_lock)
        plan = await _plan(session, "up", target=target, to=to, force=force, strict=strict)
        report = await _execute(session, "up", plan, batch_per_step=step)
        if declarations is not None and not report.waiting:
            from ..converge.command import converge_after_up

            try:
                report.converge = await converge_after_up(session, declarations, yes=yes, confirm=confirm)
            except MongoshiftError as exc:
                exc.details.setdefault("results", [r.to_json() for r in report.results])  # the migrations did apply
                raise
        return report


async def down(
    settings: Settings,
    *,
    target: str | None = None,
    batch: int | None = None,
    steps: int | None = None,
    to: str | None = None,
    no_lock: bool = False,
    wait: float | None = None,
    cancel: CancelSignal | None = None,
) -> RunReport:
    """Roll back the last batch, or what a selector names."""
    async with open_session(settings, take_lock=not no_lock, wait=wait, cancel=cancel) as session:
        warn_unlocked(no_lock)
        plan = await _plan(session, "down", target=target, batch=batch, steps=steps, to=to)
        return await _execute(session, "down", plan)


async def redo(
    settings: Settings,
    *,
    target: str | None = None,
    no_lock: bool = False,
    wait: float | None = None,
    cancel: CancelSignal | None = None,
) -> RunReport:
    """Roll back and re-apply one migration (default: the newest applied) under one lock."""
    async with open_session(settings, take_lock=not no_lock, wait=wait, cancel=cancel) as session:
        warn_unlocked(no_lock)
        target = _bare(settings, target)
        records = await session.records()
        plan = plan_down(session.files, records, target=target) if target else plan_down(session.files, records, steps=1)
        if not plan.steps:
            return RunReport("redo", session.runtime.run.run_id, warnings=["nothing is applied: nothing to redo"])
        back = plan.steps[0]
        reapply = plan_up(session.files, records, target=back.name, force=True, strict=False)
        combined = Plan(plan.steps + reapply.steps, reapply.warnings)
        return await _execute(session, "redo", combined)


async def status(settings: Settings, *, checksums: bool = True) -> list[StatusRow]:
    """Every file with its state; an applied background migration also with its own status."""
    async with open_session(settings, take_lock=False) as session:
        rows = status_rows(session.files, await session.records(), checksums=checksums)
        store = session.background_store()
        for row in rows:
            if row.kind == "background" and row.state == "applied":
                state = await store.state(row.name)
                if state is None:
                    row.background = "unregistered"
                else:
                    row.background = state.status if state.direction == "forward" else f"revert {state.status}"
        return rows


async def dry_run(
    settings: Settings,
    direction: Literal["up", "down"],
    *,
    target: str | None = None,
    to: str | None = None,
    force: bool = False,
    strict: bool | None = None,
    batch: int | None = None,
    steps: int | None = None,
    step: bool = False,
) -> DryRunReport:
    """What the real command would do, refused exactly as it would refuse; no lock, no writes.

    The selection, the hooks module, the import and checks of every file and
    the ``requires`` gate are the real command's own code (:func:`_plan`,
    :meth:`Executor.preview`); only the writes are left out.
    """
    async with open_session(settings, take_lock=False) as session:
        plan = await _plan(session, direction, target=target, to=to, force=force, strict=strict, batch=batch, steps=steps)
        next_batch = await session.changelog.next_batch() if direction == "up" else None
        would_run, waiting = await session.executor().preview(plan)
        rows = []
        for index, item in enumerate(would_run):
            use_txn = item.file.use_transaction
            rows.append(
                DryRunRow(
                    name=item.name,
                    direction=direction,
                    batch=(next_batch + (index if step else 0)) if next_batch else (item.record.batch if item.record else None),
                    checksum=item.file.checksum,
                    description=item.file.description,
                    transaction=settings.use_transaction if use_txn is None else use_txn,
                )
            )
        warnings = plan.warnings + [f"{name}: {why}" for name, why in plan.skipped]
        if direction == "up":
            warnings += await _registration_warnings(session, plan.steps)
        return DryRunReport(rows, warnings, waiting)


async def _registration_warnings(session: Session, steps: list[Step]) -> list[str]:
    """What registering the plan's background files would warn about (read only)."""
    db = session.runtime.client[session.runtime.db_name]
    store = BackgroundStore(db, session.settings.background_collection)
    earlier: list[Background] = []
    found: list[str] = []
    for item in steps:
        align_file(item.file, session.settings)
        spec = item.file.background
        if spec is None:
            continue
        warning = await unversioned_warning(db, store, item.name, spec, planned_before=earlier)
        if warning:
            found.append(warning)
        earlier.append(spec)
    return found


async def lock_status(settings: Settings) -> LockHolder | None:
    async with open_session(settings, take_lock=False, with_files=False) as session:
        lock = MigrationLock(
            session.runtime.client[session.runtime.db_name][settings.lock_collection],
            session.runtime.run,
            ttl_seconds=settings.lock_ttl_seconds,
        )
        return await lock.holder()


async def unlock(settings: Settings) -> LockHolder | None:
    """Clear the lock whoever holds it; returns who held it (None: nothing to clear)."""
    async with open_session(settings, take_lock=False, with_files=False) as session:
        lock = MigrationLock(
            session.runtime.client[session.runtime.db_name][settings.lock_collection],
            session.runtime.run,
            ttl_seconds=settings.lock_ttl_seconds,
        )
        holder = await lock.holder()
        if holder is not None:
            await lock.force_release()
        return holder


def rows_to_json(rows: list[Any]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        data = asdict(row)
        for key, value in data.items():
            if hasattr(value, "isoformat"):
                data[key] = value.isoformat()
        out.append(data)
    return out
