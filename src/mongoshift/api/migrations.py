"""The migration line as an async Python API: up, down, redo, status, dry-run, lock.

Each writing command opens one connection, takes the lock (unless told not
to), re-reads the changelog under it, plans, imports every file it will run,
and only then executes, so a broken file or a bad selection never leaves half
a run behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ..errors import ChecksumMismatchError, ConfigInvalidError, MongoshiftError
from ..line.plan import Plan, StatusRow, plan_down, plan_up, status_rows
from ..project.changelog import next_batch_after
from ..project.declarations import Declarations
from ..project.events import Event, Observer
from ..project.loader import import_first, load_all, resolve_name
from ..project.lock import LockHolder
from ..project.run import CancelSignal
from ..project.run_log import RunLogLine, RunLogWriter, read_run_log
from ..project.server_errors import from_pymongo
from ..project.session import Project, Session, open_session, warn_unlocked
from ..project.settings import Settings
from ..project.squashes import stranded_files
from .options import (
    DEFAULT_LOCK,
    Confirmation,
    Lock,
    checked_flags,
    checked_lock,
    checked_observers,
    confirm_parts,
    log_entries,
    one_shot,
    run_observers,
)

if TYPE_CHECKING:
    from ..converge.report import ConvergeReport
    from ..line.executor import MigrationResult
    from ..line.hooks import Hooks
    from ..project.changelog import ChangelogRecord
    from ..project.loader import MigrationFile

# Start-up time (bench/cli.py): ``status``, ``list`` and ``lock`` load this module, so the
# executor (and through it the background engine) and converge are imported by the
# functions that use them, not here.

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
    #: The converge that ended a bulk ``up``, when one ran.
    converge: ConvergeReport | None = None
    #: The ``ctx.log`` events of the run, in order (``log`` events of :mod:`mongoshift.project.events`).
    logs: list[Event] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "command": self.command,
            "run_id": self.run_id,
            "results": [r.to_json() for r in self.results],
            "warnings": self.warnings,
            "waiting": self.waiting,
            "logs": log_entries(self.logs),
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
    #: A file a squash file replaced: it runs as part of that squash file's step (named here), not as one of its own.
    squashed_into: str | None = None


@dataclass
class DryRunReport:
    """What ``dry-run`` found: the rows the real command would run, its warnings, and where it would stop."""

    rows: list[DryRunRow]
    warnings: list[str] = field(default_factory=list)
    #: With ``on_requires_pending = "stop"``: the migration the real run would stop before.
    waiting: list[dict[str, Any]] = field(default_factory=list)


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
    ordered: bool = False,
) -> Plan:
    """The selection of ``up``/``down`` and of their dry runs: one function, so they cannot diverge.

    ``batch`` selects a batch for ``down``; for ``up`` it is only the label the run records
    (see :func:`up`), so it plays no part in the selection."""
    settings = session.settings
    target = _bare(settings, target)
    to = _bare(settings, to)
    # Under the lock, this is the run's one read of the whole changelog: the plan and the batch it records
    # come from it (``up``'s check before the lock read it too, but a run may have applied files since).
    records = await session.changelog.records()
    if direction == "up":
        plan = plan_up(
            session.files,
            records,
            target=target,
            to=to,
            force=force,
            strict=settings.strict if strict is None else strict,
            out_of_order="allow" if target and not ordered else settings.out_of_order,
            ordered=ordered,
            stranded=stranded_files(settings.migrations_dir),
            strict_from="setting" if settings.strict else "flag",
        )
    else:
        plan = plan_down(
            session.files, records, target=target, batch=batch, steps=steps, to=to, ordered=ordered, stranded=stranded_files(settings.migrations_dir),
            strict=settings.strict if strict is None else strict, strict_from="setting" if settings.strict else "flag",
        )
    plan.next_batch = next_batch_after(records)
    return plan


#: The largest ``--batch`` label: a number every JSON reader keeps exact, and whose next batch still fits
#: the changelog's 64-bit integer (a larger one ran the migration, then could not record it: exit 1).
MAX_BATCH = 2**53 - 1


def _unless_none(**flags: bool | None) -> dict[str, bool]:
    """The optional flags a caller gave (None: the project's setting decides)."""
    return {name: value for name, value in flags.items() if value is not None}


def _check_batch_label(batch: int | None, step: bool) -> None:
    """``up --batch N`` names the one batch of the run: it cannot also give each file its own."""
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH):
        raise ConfigInvalidError(f"batch (--batch) must be a whole number from 1 to {MAX_BATCH:,}, not {batch!r}")
    if batch is not None and step:
        raise ConfigInvalidError("--batch and --step cannot be combined: --step gives each file its own batch")


def _checked_checksums(checksums: object, settings: Settings) -> dict[str, str] | None:
    """``checksums=``: a mapping of migration name to checksum, checked before anything connects (a list or
    a number was an AttributeError or a TypeError after the lock was taken). A name is taken as every
    migration name is, with or without ``.py``: a key ``0001_a`` was silently never compared."""
    if checksums is None:
        return None
    if not isinstance(checksums, Mapping):
        raise ConfigInvalidError(f"checksums must be a mapping of migration name to checksum, not {type(checksums).__name__}")
    checked: dict[str, str] = {}
    for name, checksum in checksums.items():
        if not isinstance(checksum, str) or not checksum:
            raise ConfigInvalidError(f"checksums: the checksum of {name!r} must be non-empty text, not {type(checksum).__name__}")
        bare = resolve_name(name, settings.migrations_dir)
        checked[bare if bare.endswith(".py") else bare + ".py"] = checksum
    return checked


def _check_unchanged(plan: Plan, checksums: Mapping[str, str] | None) -> None:
    """``checksums`` (a job system's, taken when it queued the run): refuse, before anything runs,
    a planned file that changed since, so that a task never runs another file than the one queued."""
    for step in plan.steps if checksums else ():
        expected = checksums.get(step.name) if checksums else None
        if expected is not None and step.file.checksum != expected:
            raise ChecksumMismatchError(
                f"{step.name} changed since it was queued (checksum {step.file.checksum[:12]}, queued {expected[:12]}); "
                "nothing was run: queue it again to run the file as it is now",
                file=step.name,
            )


def _bare(settings: Settings, name: str | None) -> str | None:
    return None if name is None else resolve_name(name, settings.migrations_dir)


@dataclass
class _Imported:
    """What a writing run of the line imported before it took the lock (see :func:`_imports_rolled_back`): the
    hooks module, handed to its executor, which would otherwise import it under the lock."""

    hooks: Hooks | None = None

    def load_hooks(self, session: Session) -> None:
        from ..line.hooks import load_hooks  # start-up time: see the note at the top

        self.hooks = load_hooks(session.settings.hooks)


async def _execute(
    session: Session, command: str, plan: Plan, *, batch_per_step: bool = False, batch: int | None = None, hooks: Hooks | None = None
) -> RunReport:
    from ..line.executor import Executor  # start-up time: see the note at the top

    report = RunReport(command, session.run.run_id, warnings=list(plan.warnings))
    session.events.observers.append(lambda event: report.logs.append(event) if event.kind == "log" else None)
    stored = RunLogWriter(session.db[session.settings.run_log_collection], session.run.run_id, create_indexes=session.settings.ensure_indexes)
    session.events.observers.append(stored)
    batch = batch or plan.next_batch or await session.changelog.next_batch()
    executor = Executor(session, hooks)
    try:
        report.results = await executor.execute(plan, batch=batch, batch_per_step=batch_per_step)
    except MongoshiftError as exc:
        report.warnings[:0] = executor.warnings
        await _store_log(stored, report)
        exc.details["warnings"] = report.warnings
        exc.details["logs"] = log_entries(report.logs)
        raise
    except BaseException:
        await asyncio.shield(_store_log(stored, report))  # a cancelled run keeps the lines it logged
        raise
    report.warnings[:0] = executor.warnings
    await _store_log(stored, report)
    report.waiting = executor.waiting
    return report


async def _store_log(stored: RunLogWriter, report: RunReport) -> None:
    """The run's last log lines written; lines that could not be stored are a warning of the run, never its failure."""
    warning = await stored.close()
    if warning is not None:
        log.warning("%s", warning)
        report.warnings.append(warning)


async def up(
    settings: Settings,
    target: str | None = None,
    *,
    to: str | None = None,
    step: bool = False,
    force: bool = False,
    strict: bool | None = None,
    lock: Lock = DEFAULT_LOCK,
    converge: bool | None = None,
    confirm: Confirmation = False,
    batch: int | None = None,
    ordered: bool = False,
    checksums: Mapping[str, str] | None = None,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> RunReport:
    """One-shot :meth:`Mongoshift.up <mongoshift.api.session.Mongoshift.up>` (:func:`up_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await up_in(
        project, target=target, to=to, step=step, force=force, strict=strict, lock=lock,
        converge=converge, confirm=confirm, batch=batch, ordered=ordered, checksums=checksums,
    )


async def up_in(
    project: Project,
    *,
    target: str | None = None,
    to: str | None = None,
    step: bool = False,
    force: bool = False,
    strict: bool | None = None,
    lock: Lock = DEFAULT_LOCK,
    converge: bool | None = None,
    confirm: Confirmation = False,
    batch: int | None = None,
    ordered: bool = False,
    checksums: Mapping[str, str] | None = None,
) -> RunReport:
    """Apply pending migrations (or one FILE), in name order.

    ``checksums`` (file name to checksum, as a job system took them when it queued the run):
    a planned file whose checksum differs is refused with
    :class:`~mongoshift.errors.ChecksumMismatchError` before anything runs.
    ``batch`` records the run in batch N instead of a new one (a label, not a reservation),
    so several single-file runs form one rollback unit; ``ordered`` refuses FILE while an
    earlier file is not applied (:func:`~mongoshift.line.plan.plan_up`).

    A bulk run (no FILE, no ``to``) ends with a converge of the declared
    collections under the same lock when ``converge`` (default: the
    ``converge_after_up`` setting) is on; ``confirm`` decides its
    destructive steps as for ``mongoshift converge``.
    """
    settings = project.settings
    lock = checked_lock(lock)
    checked_flags(step=step, force=force, ordered=ordered, **_unless_none(strict=strict, converge=converge))
    checksums = _checked_checksums(checksums, settings)
    yes, ask = confirm_parts(confirm)
    if converge and (target or to):
        raise ConfigInvalidError("--converge runs only after a bulk up (not with FILE or --to)")
    _check_batch_label(batch, step)
    converge_after = bool(settings.converge_after_up if converge is None else converge) and not (target or to)
    from ..project.declarations import declarations_by_name  # start-up time: see the note at the top

    # a bad declaration fails before connecting, and the run reads the declarations only this once
    declarations = declarations_by_name(settings) if converge_after else None
    imported = _Imported()
    before_writes = _imports_pending(target, to, force=force, imported=imported)
    async with _writing(project, lock, "up", declarations=declarations, before_writes=before_writes) as session:
        plan = await _plan(session, "up", target=target, to=to, force=force, strict=strict, ordered=ordered)
        _check_unchanged(plan, checksums)
        report = await _execute(session, "up", plan, batch_per_step=step, batch=batch, hooks=imported.hooks)
        if declarations is not None and not report.waiting:
            from ..converge.orchestrator import converge_in_session  # start-up time: see the note at the top

            try:
                report.converge = await converge_in_session(session, yes=yes, confirm=ask, trigger="up")
            except MongoshiftError as exc:
                exc.details.setdefault("results", [r.to_json() for r in report.results])  # the migrations did apply
                raise
        return report


def _imports_pending(
    target: str | None, to: str | None, *, force: bool = False, imported: _Imported | None = None
) -> Callable[[Session], Awaitable[None]]:
    """``up``'s check before its session writes anything (the lock, the changelog's indexes): the files it
    may run are imported, so one that does not import fails with nothing written, as the README says.
    The files recorded applied are left out (the changelog is read, which creates nothing), but for the
    FILE of ``--force``, which runs again (see :func:`_imports_rolled_back` for why before the lock); then the
    hooks module, into ``imported``."""

    async def imported_first(session: Session) -> None:
        records = await session.changelog.records()
        applied = [] if force else [name for name, record in records.items() if record.status == "applied"]
        import_first(session.files, target=_bare(session.settings, target), to=_bare(session.settings, to), applied=applied)
        if imported is not None:
            imported.load_hooks(session)

    return imported_first


def _imports_rolled_back(
    selection: Callable[[list[MigrationFile], dict[str, ChangelogRecord]], Plan], imported: _Imported
) -> Callable[[Session], Awaitable[None]]:
    """``down``'s and ``redo``'s check before their session writes anything, as ``up``'s: the files the
    rollback selects are imported before the lock is taken. Imported under it, a file's import ran on the
    event loop that renews the lock, so an import slower than the lock's time-to-live (a heavy module, a
    loaded machine) lost the lock (exit 10), and one that does not import failed after the lock was
    taken. The selection is made again under the lock (a run may have changed the line meanwhile), which
    imports what this one did not; a refusal of the selection is left to it, so it is said as before. The
    hooks module is imported here too, into ``imported``, for the same reason."""

    async def imported_first(session: Session) -> None:
        try:
            plan = selection(session.files, await session.changelog.records())
        except MongoshiftError:
            return
        load_all(step.file for step in plan.steps)
        imported.load_hooks(session)

    return imported_first


@asynccontextmanager
async def _writing(
    project: Project, lock: Lock, command: str, *, declarations: Declarations | None = None,
    before_writes: Callable[[Session], Awaitable[None]] | None = None,
) -> AsyncIterator[Session]:
    """A writing run of ``project``: its observers with OpenTelemetry, the lock as ``lock`` says, said when skipped."""
    async with open_session(
        project.settings,
        take_lock=lock.take,
        wait=lock.wait,
        cancel=project.cancel,
        declarations=declarations,
        command=command,
        observers=run_observers(project.observers, project.settings),
        project=project,
        before_writes=before_writes,
    ) as session:
        warn_unlocked(not lock.take)
        yield session


async def down(
    settings: Settings,
    target: str | None = None,
    *,
    batch: int | None = None,
    steps: int | None = None,
    to: str | None = None,
    lock: Lock = DEFAULT_LOCK,
    ordered: bool = False,
    checksums: Mapping[str, str] | None = None,
    strict: bool | None = None,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> RunReport:
    """One-shot :meth:`Mongoshift.down <mongoshift.api.session.Mongoshift.down>` (:func:`down_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await down_in(project, target=target, batch=batch, steps=steps, to=to, lock=lock, ordered=ordered, checksums=checksums, strict=strict)


async def down_in(
    project: Project,
    *,
    target: str | None = None,
    batch: int | None = None,
    steps: int | None = None,
    to: str | None = None,
    lock: Lock = DEFAULT_LOCK,
    ordered: bool = False,
    checksums: Mapping[str, str] | None = None,
    strict: bool | None = None,
) -> RunReport:
    """Roll back the last batch, or what a selector names; ``ordered``: FILE only when nothing after it is applied.

    ``checksums``: as for :func:`up_in`. ``strict`` (default: the setting): refuse while an applied file changed
    on disk (:class:`~mongoshift.errors.ChecksumMismatchError`), as ``up`` does."""
    checked_flags(ordered=ordered, **_unless_none(strict=strict))
    checksums = _checked_checksums(checksums, project.settings)
    to = _bare(project.settings, to)  # a name of another type is refused before anything connects (it was an AttributeError)

    def selection(files: list[MigrationFile], records: dict[str, ChangelogRecord]) -> Plan:
        return plan_down(
            files, records, target=_bare(project.settings, target), batch=batch, steps=steps, to=to, ordered=ordered,
            stranded=stranded_files(project.settings.migrations_dir),
        )

    imported = _Imported()
    async with _writing(project, checked_lock(lock), "down", before_writes=_imports_rolled_back(selection, imported)) as session:
        plan = await _plan(session, "down", target=target, batch=batch, steps=steps, to=to, ordered=ordered, strict=strict)
        _check_unchanged(plan, checksums)
        return await _execute(session, "down", plan, hooks=imported.hooks)


async def redo(
    settings: Settings,
    target: str | None = None,
    *,
    lock: Lock = DEFAULT_LOCK,
    checksums: Mapping[str, str] | None = None,
    strict: bool | None = None,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> RunReport:
    """One-shot :meth:`Mongoshift.redo <mongoshift.api.session.Mongoshift.redo>` (:func:`redo_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await redo_in(project, target=target, lock=lock, checksums=checksums, strict=strict)


async def redo_in(
    project: Project, *, target: str | None = None, lock: Lock = DEFAULT_LOCK, checksums: Mapping[str, str] | None = None, strict: bool | None = None
) -> RunReport:
    """Roll back and re-apply one migration (default: the newest applied) under one lock.

    ``checksums``: as for :func:`up_in`. ``strict``: as for :func:`down_in` (a changed file is neither rolled back
    nor run again under strict: without it, redo is how a changed file runs again, with a warning)."""
    checked_flags(**_unless_none(strict=strict))
    target = _bare(project.settings, target)
    checksums = _checked_checksums(checksums, project.settings)
    settings = project.settings
    strict_on = settings.strict if strict is None else strict
    strict_from: Literal["flag", "setting"] = "setting" if settings.strict else "flag"

    def selection(files: list[MigrationFile], records: dict[str, ChangelogRecord]) -> Plan:
        stranded = stranded_files(project.settings.migrations_dir)
        which: dict[str, Any] = {"target": target} if target else {"steps": 1}
        return plan_down(files, records, **which, stranded=stranded, strict=strict_on, strict_from=strict_from)

    imported = _Imported()
    async with _writing(project, checked_lock(lock), "redo", before_writes=_imports_rolled_back(selection, imported)) as session:
        records = await session.changelog.records()
        plan = selection(session.files, records)
        if not plan.steps:
            return RunReport("redo", session.run.run_id, warnings=["nothing is applied: nothing to redo"])
        back = plan.steps[0]  # a squash file's newest replaced file: the squash is redone whole
        reapply = plan_up(
            session.files, records, target=back.line_name, force=True, strict=False, stranded=stranded_files(project.settings.migrations_dir)
        )
        warnings = list(dict.fromkeys(plan.warnings + reapply.warnings))  # both read the same changed files
        combined = Plan(plan.steps + reapply.steps, warnings, next_batch=next_batch_after(records))
        _check_unchanged(combined, checksums)
        return await _execute(session, "redo", combined, hooks=imported.hooks)


def _reading(project: Project, *, with_files: bool = True) -> AbstractAsyncContextManager[Session]:
    """A read-only run of ``project``: no lock, no observers (nothing it does is an event)."""
    return open_session(project.settings, take_lock=False, with_files=with_files, cancel=project.cancel, project=project)


async def status(settings: Settings, *, checksums: bool = True, client: AsyncMongoClient[Any] | None = None) -> list[StatusRow]:
    """One-shot :meth:`Mongoshift.status <mongoshift.api.session.Mongoshift.status>`."""
    return await status_in(one_shot(settings, client=client), checksums=checksums)


async def status_in(project: Project, *, checksums: bool = True) -> list[StatusRow]:
    """Every file with its state; an applied background migration also with its own status, a
    reverted one with its revert while that is not completed."""
    checked_flags(checksums=checksums)
    async with _reading(project) as session:
        rows = status_rows(
            session.files, await session.changelog.records(), checksums=checksums, stranded=stranded_files(project.settings.migrations_dir)
        )
        shown = [row for row in rows if row.kind == "background" and row.state in ("applied", "reverted")]
        if shown:
            from ..background.steps import BackgroundSteps  # start-up time: see the note at the top

            background = BackgroundSteps(session)
            for row in shown:
                row.background = await background.shown_state(row.name, reverted=row.state == "reverted")
        return rows


def only_rows(rows: list[StatusRow], only: Literal["pending", "applied"] | None) -> list[StatusRow]:
    """``list --pending`` / ``--applied``: the status rows of one kind (None: all)."""
    if only not in (None, "pending", "applied"):
        raise ConfigInvalidError(f"only must be 'pending', 'applied' or None, not {only!r}")
    if only == "pending":
        return [r for r in rows if r.pending]
    if only == "applied":
        return [r for r in rows if r.state == "applied"]
    return rows


async def list_migrations(
    settings: Settings, only: Literal["pending", "applied"] | None = None, *, client: AsyncMongoClient[Any] | None = None
) -> list[StatusRow]:
    """Every migration file with its state and checksum verdict, as ``status`` shows them, optionally only the pending or applied ones."""
    return only_rows(await status(settings, client=client), only)


async def dry_run(
    settings: Settings,
    direction: Literal["up", "down"] = "up",
    target: str | None = None,
    *,
    to: str | None = None,
    force: bool = False,
    strict: bool | None = None,
    batch: int | None = None,
    steps: int | None = None,
    step: bool = False,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
    ordered: bool = False,
) -> DryRunReport:
    """One-shot :meth:`Mongoshift.plan <mongoshift.api.session.Mongoshift.plan>`."""
    project = one_shot(settings, client=client, observers=observers)
    return await dry_run_in(project, direction, target=target, to=to, force=force, strict=strict, batch=batch, steps=steps, step=step, ordered=ordered)


async def dry_run_in(
    project: Project,
    direction: Literal["up", "down"],
    *,
    target: str | None = None,
    to: str | None = None,
    force: bool = False,
    strict: bool | None = None,
    batch: int | None = None,
    steps: int | None = None,
    step: bool = False,
    ordered: bool = False,
) -> DryRunReport:
    """What the real command would do, refused exactly as it would refuse; no lock, no writes.

    The selection, the hooks module, the import and checks of every file and
    the ``requires`` gate are the real command's own code (:func:`_plan`,
    :meth:`Executor.preview`); only the writes are left out. No migration body runs and
    no lock is taken, so the project's observers get no event.
    """
    from ..background.steps import BackgroundSteps  # start-up time: see the note at the top
    from ..line.executor import Executor

    settings = project.settings
    checked_flags(step=step, force=force, ordered=ordered, **_unless_none(strict=strict))
    if direction not in ("up", "down"):
        raise ConfigInvalidError(f"direction must be 'up' or 'down', not {direction!r}")
    if direction == "up":
        _check_batch_label(batch, step)
    # checked_observers, not run_observers: a dry run records no span and no metric, so it does not load OpenTelemetry
    # (start-up time: the read-only commands never do, docs/observability.md).
    async with open_session(
        settings, take_lock=False, cancel=project.cancel, observers=checked_observers(project.observers), project=project
    ) as session:
        plan = await _plan(session, direction, target=target, to=to, force=force, strict=strict, batch=batch, steps=steps, ordered=ordered)
        next_batch = (batch or plan.next_batch) if direction == "up" else None
        would_run, waiting = await Executor(session).preview(plan)
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
                    squashed_into=item.file.squashed_into,
                )
            )
        warnings = plan.warnings + [f"{name}: {why}" for name, why in plan.skipped]
        if direction == "up":
            # only background files: the declarations are read (imported) only by a run that needs them, as by the real up
            registering = [(item.name, item.file) for item in plan.steps if item.file.background is not None]
            warnings += await BackgroundSteps(session).registration_warnings(registering)
            if settings.converge_after_up and not (target or to) and not waiting:
                # the real bulk up would also change indexes and validators: say so rather than preview it partly
                warnings.append("converge_after_up: this up ends with a converge of the declared collections, not previewed here "
                                "(see 'mongoshift converge --dry-run')")
        return DryRunReport(rows, warnings, waiting)


async def lock_status(settings: Settings, *, client: AsyncMongoClient[Any] | None = None) -> LockHolder | None:
    """One-shot :meth:`Mongoshift.lock_status <mongoshift.api.session.Mongoshift.lock_status>`."""
    return await lock_status_in(one_shot(settings, client=client))


async def lock_status_in(project: Project) -> LockHolder | None:
    """Who holds the migration lock (None: nobody)."""
    async with _reading(project, with_files=False) as session:
        return await session.new_lock().holder()


async def unlock(settings: Settings, *, client: AsyncMongoClient[Any] | None = None) -> LockHolder | None:
    """One-shot :meth:`Mongoshift.unlock <mongoshift.api.session.Mongoshift.unlock>`."""
    return await unlock_in(one_shot(settings, client=client))


async def unlock_in(project: Project) -> LockHolder | None:
    """Clear the lock whoever holds it; returns who held it (None: nothing to clear)."""
    async with _reading(project, with_files=False) as session:
        lock = session.new_lock()
        holder = await lock.holder()
        if holder is not None:
            await lock.force_release()
        return holder


async def run_log(settings: Settings, run_id: str, *, client: AsyncMongoClient[Any] | None = None) -> list[RunLogLine]:
    """One-shot :meth:`Mongoshift.run_log <mongoshift.api.session.Mongoshift.run_log>`."""
    return await run_log_in(one_shot(settings, client=client), run_id)


async def run_log_in(project: Project, run_id: str) -> list[RunLogLine]:
    """The ``ctx.log`` lines a run of the line stored (``run_log_collection``), in order; empty when it
    stored none (it logged nothing, its lines expired, or no run has that id)."""
    if not isinstance(run_id, str) or not run_id.strip() or len(run_id) > 200:
        raise ConfigInvalidError("a run id is the non-empty text a run reports as run_id (at most 200 characters)")
    async with _reading(project, with_files=False) as session:
        try:
            return await read_run_log(session.db[session.settings.run_log_collection], run_id.strip())
        except PyMongoError as exc:
            raise from_pymongo(exc) from exc


def rows_to_json(rows: list[Any]) -> list[dict[str, Any]]:
    out = []
    for row in rows:
        data = asdict(row)
        for key, value in data.items():
            if hasattr(value, "isoformat"):
                data[key] = value.isoformat()
        out.append(data)
    return out
