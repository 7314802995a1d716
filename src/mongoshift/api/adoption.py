"""Taking over an existing database: ``import`` another tool's history, ``baseline`` what is already there.

Both record files applied without running them, through the one changelog
writer, in one new batch, under the migration lock, and mark the records with
their ``origin`` so that ``down`` and ``redo`` refuse them (exit 13): mongoshift
never ran their ``up``, so it cannot vouch for their ``down``. The other tool's
collection is only read. ``*_in`` run on an open project (a session's); the flat
functions are their one-shot wrappers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePath
from typing import Any

from pymongo import ASCENDING, AsyncMongoClient

from ..errors import ConfigInvalidError, TargetNotEmptyError
from ..project.changelog import Changelog, ChangelogRecord
from ..project.events import Observer
from ..project.foreign_changelogs import BEANIE_ROOT, ForeignEntry, beanie_at_root, match, read_map, source_collection as checked_collection, tool as find_tool
from ..project.loader import find, resolve_name, unsquashed
from ..project.own_collections import own_collections
from ..project.run import CancelSignal
from ..project.session import Project, Session, open_session, warn_unlocked
from ..project.settings import Settings
from ..project.wording import plural
from .options import DEFAULT_LOCK, Lock, checked_flags, checked_lock, one_shot, run_observers

BASELINE = "baseline"


@dataclass
class AdoptedRow:
    """One file recorded applied: its mongoshift name, its name in the source, its time there."""

    name: str
    source_name: str | None = None
    applied_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "source_name": self.source_name,
            "applied_at": self.applied_at.isoformat() if self.applied_at else None,
        }


@dataclass
class AdoptionReport:
    """What ``import`` or ``baseline`` recorded (or, with ``dry_run``, would record)."""

    command: str
    origin: str
    batch: int | None
    dry_run: bool
    adopted: list[AdoptedRow] = field(default_factory=list)
    #: Already applied in mongoshift's changelog: left as they are.
    kept: list[str] = field(default_factory=list)
    #: Source names a ``--map`` file left out on purpose.
    left_out: list[str] = field(default_factory=list)
    #: Source records that name no file (no name field, or not a string): left out, none can be matched.
    unnamed: int = 0
    source: dict[str, str] | None = None
    #: What the run noticed (an import from a collection that holds nothing: a misspelt ``--collection``?).
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "origin": self.origin,
            "source": self.source,
            "batch": self.batch,
            "dry_run": self.dry_run,
            "adopted": [row.to_json() for row in self.adopted],
            "kept": self.kept,
            "left_out": self.left_out,
            "unnamed": self.unnamed,
            "warnings": self.warnings,
        }


async def import_history(
    settings: Settings,
    tool: str,
    *,
    collection: str | None = None,
    map_file: Path | str | None = None,
    dry_run: bool = False,
    force: bool = False,
    lock: Lock = DEFAULT_LOCK,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> AdoptionReport:
    """One-shot :meth:`Mongoshift.import_history <mongoshift.api.session.Mongoshift.import_history>` (:func:`import_history_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await import_history_in(project, tool, collection=collection, map_file=map_file, dry_run=dry_run, force=force, lock=lock)


async def import_history_in(
    project: Project,
    tool: str,
    *,
    collection: str | None = None,
    map_file: Path | str | None = None,
    dry_run: bool = False,
    force: bool = False,
    lock: Lock = DEFAULT_LOCK,
) -> AdoptionReport:
    """Adopt ``tool``'s changelog: every file it applied is recorded applied here, forward-only.

    Refused with exit 17 when mongoshift's changelog holds records that no earlier import of this
    same source wrote, unless ``force``; then those records are kept as they are. ``collection``:
    the tool's changelog collection when not its default; ``map_file``: a TOML file of source
    name = mongoshift file (``false``: leave it out). A dry run takes no lock and writes nothing.
    """
    lock = checked_lock(lock)
    checked_flags(dry_run=dry_run, force=force)
    source_tool = find_tool(tool)  # an unknown tool or a bad map fails before connecting
    if map_file is not None and not isinstance(map_file, (str, PurePath)):
        raise ConfigInvalidError(f"map_file must be a path (text or a Path) or None, not {type(map_file).__name__}")
    mapping = read_map(Path(map_file)) if map_file is not None else {}  # a path given as text was an AttributeError
    source_collection = checked_collection(source_tool, collection, own_collections(project.settings))
    async with _adopting(project, lock, "import", dry_run=dry_run) as session:
        cursor = session.db[source_collection].find({}, sort=[("_id", ASCENDING)])
        documents = [doc async for doc in cursor]
        entries = source_tool.applied(documents)
        matched, left_out = match(source_tool, entries, unsquashed(session.files), mapping)
        source = {"tool": source_tool.name, "collection": source_collection}
        records = await session.changelog.records()
        foreign = [name for name, r in records.items() if not _imported_from(r, source)]
        if foreign and not force:
            raise TargetNotEmptyError(
                f"mongoshift's changelog already holds {plural(len(foreign), 'record')} that this import did not write; "
                "pass --force to import beside them (records already applied are kept as they are)",
                records=len(foreign),
            )
        rows = [(m.file.name, m.entry) for m in matched]
        report = await _adopt(session, records, rows, origin=source_tool.name, source=source, dry_run=dry_run)
        report.command = "import"
        report.left_out = left_out
        report.unnamed = source_tool.unnamed(documents)
        report.source = source
        if report.unnamed:
            report.warnings.append(
                f"{plural(report.unnamed, f'{source_tool.name} record')} without a file name "
                "(the field missing, null, not text, or text without a letter or digit): left out, as no file can match such a record"
            )
        still = {entry.source_name for entry in entries}
        gone = [
            f"{name} ({r.extra['source'].get('name')})"
            for name, r in sorted(records.items())
            if r.status == "applied" and _imported_from(r, source) and r.extra["source"].get("name") not in still
        ]
        if gone:
            report.warnings.append(
                f"{plural(len(gone), 'file')} imported earlier from {source_tool.name} "
                f"{'is' if len(gone) == 1 else 'are'} no longer applied there (rolled back since?): {', '.join(gone)}; "
                f"{'it stays' if len(gone) == 1 else 'they stay'} applied here, so 'up' will not run "
                f"{'it' if len(gone) == 1 else 'them'}: check the database, and write a new migration if "
                f"{'its change is' if len(gone) == 1 else 'their changes are'} gone"
            )
        if source_tool.name == "beanie" and beanie_at_root(documents):
            report.warnings.append(
                f"{plural(len(documents), 'beanie record')}, the current one Beanie's start ({BEANIE_ROOT}): Beanie reads that as "
                "every migration rolled back, so none was adopted"
            )
        elif source_tool.name == "beanie" and documents and not any(d.get("is_current") is True for d in documents):
            report.warnings.append(
                f"{plural(len(documents), 'beanie record')} but none marked current (is_current: true): Beanie reads that as "
                "every migration rolled back, so none was adopted"
            )
        if not documents:
            exists = source_collection in await session.db.list_collection_names(filter={"name": source_collection})
            report.warnings.append(
                f"collection {source_collection!r} {'holds no record' if exists else 'does not exist'} in this database: nothing of "
                f"{source_tool.name}'s history was found (is the name right? --collection names it when not {source_tool.collection!r})"
            )
        return report


@asynccontextmanager
async def _adopting(project: Project, lock: Lock, command: str, *, dry_run: bool) -> AsyncIterator[Session]:
    """An adoption run of ``project``: under the lock as ``lock`` says and bracketed by ``command``'s
    run events, or, for a dry run, without the lock and without run events (it writes nothing)."""
    async with open_session(
        project.settings,
        take_lock=lock.take and not dry_run,
        wait=lock.wait,
        cancel=project.cancel,
        observers=run_observers(project.observers, project.settings),
        command=None if dry_run else command,
        project=project,
    ) as session:
        if not dry_run:
            warn_unlocked(not lock.take)
        yield session


def _imported_from(record: ChangelogRecord, source: dict[str, str]) -> bool:
    written = record.extra.get("source")
    return isinstance(written, dict) and all(written.get(k) == v for k, v in source.items())


async def baseline(
    settings: Settings,
    to: str,
    *,
    dry_run: bool = False,
    lock: Lock = DEFAULT_LOCK,
    cancel: CancelSignal | None = None,
    observers: Iterable[Observer] = (),
    client: AsyncMongoClient[Any] | None = None,
) -> AdoptionReport:
    """One-shot :meth:`Mongoshift.baseline <mongoshift.api.session.Mongoshift.baseline>` (:func:`baseline_in`)."""
    project = one_shot(settings, client=client, observers=observers, cancel=cancel)
    return await baseline_in(project, to, dry_run=dry_run, lock=lock)


async def baseline_in(project: Project, to: str, *, dry_run: bool = False, lock: Lock = DEFAULT_LOCK) -> AdoptionReport:
    """Record every pending file up to ``to`` (inclusive) applied without running it; idempotent.

    The project's observers get the run's events as for ``up`` (a ``baseline`` run, no migration
    events: no body runs); a dry run takes no lock and emits nothing."""
    lock = checked_lock(lock)
    checked_flags(dry_run=dry_run)
    async with _adopting(project, lock, "baseline", dry_run=dry_run) as session:
        limit = find(session.files, resolve_name(to, project.settings.migrations_dir)).name
        records = await session.changelog.records()
        # a squash file is recorded through the files it replaced: the line then counts it applied
        rows = [(f.name, None) for f in unsquashed([f for f in session.files if f.name <= limit])]
        report = await _adopt(session, records, rows, origin=BASELINE, source=None, dry_run=dry_run)
        report.command = "baseline"
        return report


async def _adopt(
    session: Session,
    records: dict[str, ChangelogRecord],
    rows: Sequence[tuple[str, ForeignEntry | None]],
    *,
    origin: str,
    source: dict[str, str] | None,
    dry_run: bool,
) -> AdoptionReport:
    """Record each not-yet-applied file applied, one batch after the current maximum, all in one write
    (:meth:`Changelog.write_all`): stopped or killed, an adoption has recorded every file or none."""
    kept = [name for name, _ in rows if name in records and records[name].status == "applied"]
    todo = [(name, entry) for name, entry in rows if name not in kept]
    batch = await session.changelog.next_batch() if todo else None
    report = AdoptionReport("", origin, batch, dry_run, kept=kept)
    files = {f.name: f for f in unsquashed(session.files)}
    writes = []
    for name, entry in todo:
        applied_at = entry.applied_at if entry else None
        report.adopted.append(AdoptedRow(name, entry.source_name if entry else None, applied_at))
        if dry_run:
            continue
        assert batch is not None
        source_fields = {**source, "name": entry.source_name} if source and entry else None
        writes.append(Changelog.adopted(
            name, batch=batch, checksum=files[name].checksum, applied_at=applied_at, origin=origin,
            run=session.run, source=source_fields,
        ))
    if writes:
        session.check_stop(lambda reason: f"stopped ({reason}) before recording {plural(len(writes), 'file')}; nothing was recorded")
        await session.changelog.write_all(writes)
    if report.adopted and not dry_run:
        # A row without the source's time was stamped with the server's clock: report what was stored.
        stored = await session.changelog.records()
        for row in report.adopted:
            if row.name in stored:
                row.applied_at = stored[row.name].applied_at
    return report
