"""Which files a command touches, decided from the files on disk and the changelog.

Pure functions: no I/O beyond hashing files, so every selection rule is
unit-testable and ``dry-run`` shows exactly what the real command would do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import groupby
from typing import Literal

from ..errors import (
    ChecksumMismatchError,
    ConfigInvalidError,
    ExitCode,
    FileNotFoundMigrationError,
    IrreversibleMigrationError,
    NotAppliedError,
    OutOfOrderError,
    SquashRefusedError,
)
from ..project.changelog import ChangelogRecord
from ..project.loader import MigrationFile, find, not_found, squashed_names
from ..project.settings import Settings
from ..project.wording import plural
from .context import Direction

State = Literal["applied", "pending", "failed", "reverted", "missing", "partial"]


@dataclass
class StatusRow:
    name: str
    state: State
    batch: int | None = None
    applied_at: datetime | None = None
    checksum: Literal["ok", "mismatch"] | None = None
    kind: str = "migration"
    error: str | None = None
    #: An applied background migration's own status (``pending``, ``running``, ``completed``,
    #: ``failed``...; ``unregistered`` when its state is gone): applied only registered it. A reverted
    #: one's revert while it is not completed (``revert pending``...): down only registered that.
    background: str | None = None
    #: ``baseline`` or the tool a record was imported from: mongoshift never ran it (forward-only).
    origin: str | None = None
    #: A squash file: how many of the files it replaced are applied here (``2 of 3 squashed files applied``),
    #: or ``squashed files applied`` when they were applied one by one before the squash.
    squash: str | None = None
    #: The run that applied this file (or failed it): its stored ``ctx.log`` lines are ``run_log(run_id)``.
    run_id: str | None = None
    #: A missing file found in an archive folder that no squash file names (``_squashed/NAME/``): a squash
    #: that did not finish, or a squash file deleted by hand (``status`` fills it).
    found_in: str | None = None

    @property
    def pending(self) -> bool:
        return self.state in ("pending", "failed", "reverted", "partial")

    @property
    def shown_state(self) -> str:
        """``applied (running)`` for a background migration, ``applied (migrate-mongo)`` for an adopted record."""
        note = self.background or self.squash or (self.origin if self.state == "applied" else None) or (
            f"in {self.found_in}" if self.state == "missing" and self.found_in else None
        )
        return f"{self.state} ({note})" if note else self.state


def background_run_hint(settings: Settings | None, names: Sequence[str] = ()) -> str:
    """The command that runs these background migrations (up to three by name, else ``--all``), quoted, as
    the user can type it: ``background run`` with neither runs nothing (exit 6), and in a project of tenants
    the bare command would act on no database (``error: no database given``)."""
    which = " ".join(name.removesuffix(".py") for name in names) if 0 < len(names) <= 3 else "--all"
    if settings is not None and settings.tenants is not None:
        every = f"'mongoshift background run {which} --all-tenants'"
        return f"'mongoshift background run {which} --db {settings.db}' (or {every})" if settings.db else every
    return f"'mongoshift background run {which}'"


def missing_words(rows: Sequence[StatusRow]) -> str | None:
    """The warning for applied files missing from the folder, saying where those a squash left behind are."""
    missing = [r for r in rows if r.state == "missing"]
    if not missing:
        return None
    said = f"the files of applied migrations are missing: {', '.join(r.name for r in missing)}"
    folders = sorted({r.found_in for r in missing if r.found_in})
    for folder in folders:
        held = [r.name for r in missing if r.found_in == folder]
        if len(held) == len(missing):  # all of them: not named twice
            who = "it is" if len(held) == 1 else "they are"
        else:
            who = f"{', '.join(held)} {'is' if len(held) == 1 else 'are'}"
        said += (
            f"; {who} in {folder}, which no squash file names (a squash that did not finish, or a squash file "
            f"deleted by hand): move {'it' if len(held) == 1 else 'them'} back into the migrations folder"
        )
    return said


def status_verdict(rows: list[StatusRow], settings: Settings | None = None, *, strict: bool | None = None) -> tuple[ExitCode, str] | None:
    """What ``status --check`` fails with: the first of missing (8), changed after being applied when
    strict (4: what ``up`` would refuse), background failed (32), pending (2), background not completed
    (31); None when everything is done. ``strict`` None takes the settings' ``strict``."""
    missing = missing_words(rows)
    if missing:
        return ExitCode.FILE_NOT_FOUND, missing
    if strict is None:
        strict = settings is not None and settings.strict
    changed = [r.name for r in rows if r.checksum == "mismatch"]
    if strict and changed:
        return ExitCode.CHECKSUM_MISMATCH, f"applied files changed on disk (strict): {', '.join(changed)}"
    failed = [r.name for r in rows if r.background == "failed"]
    if failed:
        return ExitCode.BACKGROUND_FAILED, f"background migrations failed: {', '.join(failed)} (see 'mongoshift background status')"
    pending = [r.name for r in rows if r.pending]
    if pending:
        # a failed one counts as pending (it runs again with the next 'up'), but CI should name it, not only count it
        failed_line = [r.name for r in rows if r.pending and r.state == "failed"]
        named = f" ({len(failed_line)} failed: {', '.join(failed_line)})" if failed_line else ""
        return ExitCode.PENDING, f"{plural(len(pending), 'migration')} pending{named}"
    unfinished = [r for r in rows if r.background not in (None, "completed")]
    if unfinished:
        # A paused or cancelled one waits for a person: 'background run' would exit 36 or 37 and do nothing.
        held = {"paused": ("resume", "continues it"), "cancelled": ("retry", "takes it up again")}
        said = []
        runnable = [r.name for r in unfinished if (r.background or "").split()[-1] not in held]
        if runnable:
            said.append(f"{', '.join(runnable)} (run {background_run_hint(settings, runnable)})")
        for r in unfinished:
            if (status := (r.background or "").split()[-1]) in held:
                verb, does = held[status]
                said.append(f"{r.name} {r.background} ({_control_hint(settings, verb, r.name)} {does})")
        return ExitCode.BACKGROUND_PENDING, f"background migrations not completed: {'; '.join(said)}"
    return None


def _control_hint(settings: Settings | None, verb: str, name: str) -> str:
    """``'mongoshift background resume NAME'``, quoted, with the database to act on in a project of tenants."""
    command = f"mongoshift background {verb} {name.removesuffix('.py')}"
    if settings is not None and settings.tenants is not None:
        return f"'{command} --db {settings.db}'" if settings.db else f"'{command} --all-tenants'"
    return f"'{command}'"


@dataclass
class Step:
    """One migration to run in one direction."""

    file: MigrationFile
    direction: Direction
    record: ChangelogRecord | None = None

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def line_name(self) -> str:
        """The file's name in the line: a squashed file's is its squash file's."""
        return self.file.squashed_into or self.file.name


@dataclass
class Plan:
    steps: list[Step]
    warnings: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    #: The batch a run of this plan records, from the changelog read it was planned from (None: not known).
    next_batch: int | None = None


def _applied(records: dict[str, ChangelogRecord]) -> list[ChangelogRecord]:
    return [r for r in records.values() if r.status == "applied"]


@dataclass
class SquashState:
    """Where one database stands with one squash file: which of the files it replaced are applied."""

    file: MigrationFile
    applied: list[str]
    #: The squash file's own record: written when a run began or ended it here (None: never ran here).
    record: ChangelogRecord | None

    @property
    def partial(self) -> bool:
        return 0 < len(self.applied) < len(self.file.parts)

    @property
    def resumable(self) -> bool:
        """In between because a run of the squash file itself stopped here: the next run finishes it.
        In between without such a record, the database was left part-way by the files before the squash."""
        return self.partial and self.record is not None

    @property
    def not_applied(self) -> list[str]:
        return [p.name for p in self.file.parts if p.name not in self.applied]


def fold_squashes(files: list[MigrationFile], records: dict[str, ChangelogRecord]) -> tuple[dict[str, ChangelogRecord], dict[str, SquashState]]:
    """The changelog as the line sees it: the records of squashed files folded into their squash file.

    A squash file counts as applied where it ran (its own record) or where every file it replaced
    is applied (a database that was up to date when the squash was made: it never runs it). The
    records themselves are untouched: the history of every replaced file stays in the changelog."""
    squashes = {f.name: f for f in files if f.is_squash}
    if not squashes:
        return records, {}
    folded = dict(records)
    states: dict[str, SquashState] = {}
    for name, item in squashes.items():
        parts = [records.get(p.name) for p in item.parts]
        for replaced in [*(p.name for p in item.parts), *item.absorbs]:
            folded.pop(replaced, None)
        applied = [r.name for r in parts if r is not None and r.status == "applied"]
        state = SquashState(item, applied, records.get(name))
        states[name] = state
        if state.record is None and len(applied) == len(item.parts):
            done = [r for r in parts if r is not None]
            # each file as it ran against the checksum the squash kept: a file changed after it ran makes the
            # squash file's verdict a mismatch, as that file's was before the squash
            same = all(r.checksum == item.part_checksums.get(r.name) for r in done)
            origins = {r.origin for r in done if r.origin}
            folded[name] = ChangelogRecord(
                name,
                "applied",
                batch=max((r.batch for r in done if r.batch is not None), default=None),
                checksum=item.checksum if same else "squashed files differ",
                applied_at=max((r.applied_at for r in done if r.applied_at is not None), default=None),
                kind="squash",
                origin=", ".join(sorted(origins)) or None,
                extra={"absorbed": True},
            )
    return folded, states


def _squash_note(state: SquashState | None) -> str | None:
    if state is None:
        return None
    if state.partial:
        done = f"{len(state.applied)} of {len(state.file.parts)} squashed files applied"
        return f"{done}, 'up' finishes it" if state.resumable else done
    if state.record is None and state.applied:
        return "squashed files applied"
    return None


def status_rows(
    files: list[MigrationFile], records: dict[str, ChangelogRecord], *, checksums: bool = True, stranded: Mapping[str, str] | None = None
) -> list[StatusRow]:
    """Every file and applied record with its state. ``stranded``: the files of archive folders that no squash
    file names, by name, with their folder (:func:`~mongoshift.project.squashes.stranded_files`): a missing
    row found there says where (``found_in``)."""
    rows: list[StatusRow] = []
    names = {f.name for f in files}
    records, squashes = fold_squashes(files, records)
    for f in files:
        record = records.get(f.name)
        state = squashes.get(f.name)
        if state is not None and state.partial:
            rows.append(StatusRow(f.name, "partial", kind="squash", squash=_squash_note(state)))
            continue
        if record is None:
            rows.append(StatusRow(f.name, "pending", kind="squash" if f.is_squash else "migration"))
            continue
        # The time it was applied, while it is: a failed or reverted record keeps the time of an earlier application,
        # which a row would show as if it were this state's.
        applied_at = record.applied_at if record.status == "applied" else None
        row = StatusRow(
            f.name, record.status, record.batch, applied_at, kind=record.kind, error=record.error, origin=record.origin,
            squash=_squash_note(state), run_id=record.run_id,
        )
        if record.status == "applied" and checksums and record.checksum:
            row.checksum = "ok" if f.checksum == record.checksum else "mismatch"
        rows.append(row)
    for record in _applied(records):
        if record.name not in names:
            found_in = stranded.get(record.name) if stranded else None
            rows.append(
                StatusRow(record.name, "missing", record.batch, record.applied_at, kind=record.kind, found_in=found_in, run_id=record.run_id)
            )
    rows.sort(key=lambda r: r.name)
    return rows


def sorts_before_applied(pending: list[str], records: dict[str, ChangelogRecord]) -> tuple[list[str], str | None]:
    """The pending names that sort before the latest applied one (``up`` would apply them out of
    order), and that latest name."""
    applied_names = [r.name for r in _applied(records)]
    latest = max(applied_names) if applied_names else None
    return [name for name in pending if latest is not None and name < latest], latest


def applied_out_of_order(records: dict[str, ChangelogRecord]) -> list[str]:
    """Applied migrations that ran in a later batch than one that sorts after them: they ran out of order
    (``out_of_order = "warn"``/``"allow"``, or ``up FILE``), so a fresh database would apply them differently."""
    late: list[str] = []
    highest = ""  # the latest name of the earlier batches
    by_batch = sorted((r for r in _applied(records) if r.batch is not None), key=lambda r: r.batch or 0)
    for _, group in groupby(by_batch, key=lambda r: r.batch):
        names = [r.name for r in group]
        late.extend(name for name in names if name < highest)
        highest = max(highest, *names)
    return sorted(late)


#: How to turn strict off, by where it came from: the flag, or the setting (the project file, the environment).
STRICT_OFF = {
    "flag": "run without --strict",
    "setting": "turn the strict setting off: strict = false in the project file, or MONGOSHIFT_STRICT=false",
}


def checksum_warnings(
    files: list[MigrationFile],
    records: dict[str, ChangelogRecord],
    *,
    strict: bool,
    stranded: Mapping[str, str] | None = None,
    strict_from: Literal["flag", "setting"] = "flag",
) -> list[str]:
    """Applied files changed since they ran: an error when strict, warnings otherwise; applied files missing
    from the folder, a warning in ``status``'s words (where a squash left them, from ``stranded``;
    ``status --check`` fails on them with 8). ``strict_from``: where strict came from, for the way out the
    error names (``strict = true`` in the project file has no ``--strict`` to leave out)."""
    rows = status_rows(files, records, stranded=stranded)
    changed = [r.name for r in rows if r.checksum == "mismatch"]
    if changed and strict:
        raise ChecksumMismatchError(
            f"applied migration files changed on disk: {', '.join(changed)} "
            f"(restore them, or {STRICT_OFF[strict_from]})",
            files=changed,
        )
    missing = missing_words(rows)
    said = [f"{missing} (status --check fails on them)"] if missing else []
    return [f"{name} changed on disk after it was applied (checksum mismatch)" for name in changed] + said


def plan_up(
    files: list[MigrationFile],
    records: dict[str, ChangelogRecord],
    *,
    target: str | None = None,
    to: str | None = None,
    force: bool = False,
    strict: bool = False,
    out_of_order: Literal["warn", "error", "allow"] = "warn",
    ordered: bool = False,
    stranded: Mapping[str, str] | None = None,
    strict_from: Literal["flag", "setting"] = "flag",
) -> Plan:
    """What ``up`` applies. ``ordered`` (a queue driving one FILE at a time): refuse the file
    while a file that sorts before it is not applied, and judge it by ``out_of_order`` as a
    bulk run would, so the files of a line still apply in name order. ``stranded``: as for
    :func:`status_rows`, so that the warning about missing files says where they are."""
    if ordered and not target:
        raise ConfigInvalidError("--ordered applies to one named FILE; name it")
    if target and to:
        raise ConfigInvalidError("give either a FILE or --to, not both")
    if force and not target:
        raise ConfigInvalidError("--force re-runs one named FILE; name it")
    warnings = checksum_warnings(files, records, strict=strict, stranded=stranded, strict_from=strict_from)
    raw = records
    records, squashes = fold_squashes(files, records)

    if target:
        item = find(files, target)
        record = records.get(item.name)
        state = squashes.get(item.name)
        if record is not None and record.status == "applied" and not force and not (state and state.partial):
            return Plan([], warnings, skipped=[(item.name, "already applied (use --force to run it again)")])
        if ordered:
            warnings += _ordered_up(files, records, item.name, out_of_order)
        return Plan(_up_steps(item, raw, squashes, force=force), warnings)

    pending = [
        f for f in files
        if records.get(f.name) is None or records[f.name].status != "applied" or (f.name in squashes and squashes[f.name].partial)
    ]
    if to:
        limit = find(files, to).name
        pending = [f for f in pending if f.name <= limit]

    warnings += _out_of_order([f.name for f in pending], records, out_of_order)
    return Plan([step for f in pending for step in _up_steps(f, raw, squashes)], warnings)


def _up_steps(item: MigrationFile, records: dict[str, ChangelogRecord], squashes: dict[str, SquashState], *, force: bool = False) -> list[Step]:
    """``item``'s steps up: a squash file runs the files it replaced that are not applied, then records itself.

    A database in between (some replaced files applied, and the squash file never ran here) is
    refused: the squash file stands for all of them at once, and which of the rest are safe to run
    on that database was decided by the line before the squash."""
    state = squashes.get(item.name)
    if state is None:
        return [Step(item, "up", records.get(item.name))]
    if state.partial and not state.resumable and not force:
        last = item.parts[-1].name
        raise SquashRefusedError(
            f"this database is in between squash {item.name}: of the {len(item.parts)} files it replaced, {len(state.applied)} "
            f"{'is' if len(state.applied) == 1 else 'are'} applied and {len(state.not_applied)} "
            f"{'is' if len(state.not_applied) == 1 else 'are'} not ({', '.join(state.not_applied)}); apply them with the release before the squash "
            f"('mongoshift up --to {last}'; with tenants, roll that release out to every tenant), then run this one",
            file=item.name,
            applied=state.applied,
            not_applied=state.not_applied,
        )
    parts = [p for p in item.parts if force or p.name not in state.applied]
    return [*(Step(p, "up", records.get(p.name)) for p in parts), Step(item, "up", records.get(item.name))]


def _out_of_order(pending: list[str], records: dict[str, ChangelogRecord], policy: Literal["warn", "error", "allow"]) -> list[str]:
    """The ``out_of_order`` policy over the files a run would apply: raise (``error``) or the warnings."""
    late, latest = sorts_before_applied(pending, records)
    if late and policy == "error":
        raise OutOfOrderError(
            f"pending migrations sort before the latest applied one ({latest}): {', '.join(late)}; "
            "apply them one by one with 'up FILE', or set out_of_order = \"warn\"",
            files=late,
        )
    if late and policy == "warn":
        return [f"{name} is applied out of order (it sorts before {latest})" for name in late]
    return []


def _ordered_up(
    files: list[MigrationFile], records: dict[str, ChangelogRecord], name: str, policy: Literal["warn", "error", "allow"]
) -> list[str]:
    """``up FILE --ordered``: every file that sorts before ``name`` must be applied (a failed one blocks too)."""
    earlier = [f.name for f in files if f.name < name and (records.get(f.name) is None or records[f.name].status != "applied")]
    if earlier:
        raise OutOfOrderError(
            f"{name} waits for earlier migrations that are not applied: {', '.join(earlier)} "
            "(--ordered applies files in name order; apply those first)",
            file=name,
            blocked_by=earlier,
        )
    return _out_of_order([name], records, policy)


def plan_down(
    files: list[MigrationFile],
    records: dict[str, ChangelogRecord],
    *,
    target: str | None = None,
    batch: int | None = None,
    steps: int | None = None,
    to: str | None = None,
    ordered: bool = False,
    stranded: Mapping[str, str] | None = None,
    strict: bool = False,
    strict_from: Literal["flag", "setting"] = "flag",
) -> Plan:
    """What ``down`` rolls back. ``ordered``: refuse FILE while a migration that sorts after it
    is still applied, so a queue undoes a line from its end only. ``stranded``: as for
    :func:`status_rows`, so that the refusal of a missing file says where it is. ``strict``: refuse
    (exit 4) while an applied file changed on disk, as ``up`` does: a changed file's ``down`` may not
    undo what its ``up`` did when it ran, and strict asks for no such guess (else a warning)."""
    for option, value in (("batch", batch), ("steps", steps)):
        if value is not None and (type(value) is not int):
            raise ConfigInvalidError(f"{option} must be a whole number, not {type(value).__name__}")
        if value is not None and value < 1:  # as the command line's --batch / --steps refuse it (a batch -1 was "not applied")
            raise ConfigInvalidError(f"{option} (--{option}) must be a whole number of at least 1, not {value}")
    chosen = [x for x in (target, batch, steps, to) if x is not None]
    if len(chosen) > 1:
        raise ConfigInvalidError("FILE, --batch, --steps and --to are mutually exclusive")
    if ordered and target is None:
        raise ConfigInvalidError("--ordered applies to one named FILE; name it")
    warnings = checksum_warnings(files, records, strict=strict, stranded=stranded, strict_from=strict_from)
    raw = records
    records, squashes = fold_squashes(files, records)
    applied = _applied(records)

    if target is not None:
        name = target if target.endswith(".py") else target + ".py"
        record = records.get(name)
        _not_squashed(files, name)
        _known(files, records, name, "", target)
        if record is None or record.status != "applied":
            raise NotAppliedError(f"{name} is not applied", file=name)
        later = sorted(r.name for r in applied if r.name > name)
        if ordered and later:
            raise OutOfOrderError(
                f"{name} cannot be rolled back while later migrations are applied: {', '.join(later)} "
                "(--ordered rolls back from the end of the line; roll those back first)",
                file=name,
                blocked_by=later,
            )
        selected = [record]
    elif to is not None:
        name = to if to.endswith(".py") else to + ".py"
        _not_squashed(files, name)
        _known(files, records, name, "--to ", to)
        if name not in records or records[name].status != "applied":
            raise NotAppliedError(f"--to {name}: that migration is not applied", file=name)
        selected = sorted((r for r in applied if r.name > name), key=lambda r: r.name, reverse=True)
    elif steps is not None:
        if steps < 1:
            raise ConfigInvalidError("steps (--steps) must be at least 1")
        newest_first = sorted(applied, key=lambda r: (r.applied_at or datetime.min, r.name), reverse=True)
        selected = newest_first[:steps]
    else:
        if batch is None:
            batches = [r.batch for r in applied if r.batch is not None]
            if not batches:
                return Plan([], warnings)
            batch = max(batches)
        selected = sorted((r for r in applied if r.batch == batch), key=lambda r: r.name, reverse=True)
        if not selected:
            raise NotAppliedError(f"no applied migration in batch {batch}", batch=batch)

    selected = [part for r in selected for part in _down_records(r, raw, squashes)]
    adopted = [r.name for r in selected if r.origin]
    if adopted:
        origins = sorted({r.origin or "" for r in selected if r.origin})
        raise IrreversibleMigrationError(
            f"cannot roll back migrations mongoshift never ran (origin {', '.join(origins)}): {', '.join(adopted)}; "
            "imported and baseline records are forward-only (write a new migration that undoes them)",
            files=adopted,
        )
    by_name = {f.name: f for f in files}
    by_name.update({p.name: p for f in files for p in f.parts})
    missing = [r.name for r in selected if r.name not in by_name]
    if missing:
        found = {name: stranded[name] for name in missing if stranded and name in stranded}
        words = missing_words([StatusRow(name, "missing", found_in=found.get(name)) for name in missing])
        raise FileNotFoundMigrationError(f"cannot roll back: {words}", files=missing, **({"found_in": found} if found else {}))
    return Plan([Step(by_name[r.name], "down", r) for r in selected], warnings)


def _known(files: list[MigrationFile], records: Mapping[str, ChangelogRecord], name: str, flag: str, given: str) -> None:
    """A name that is neither a file nor a record is a typo, not a migration that is not applied: exit 8,
    saying what was looked for and which files are nearest, as for ``up FILE``."""
    if name not in records and not any(f.name == name for f in files):
        raise not_found(files, given, name, flag=flag)


def _not_squashed(files: list[MigrationFile], name: str) -> None:
    """A file a squash replaced is not a file of the line any more: name the squash file that stands for it (exit 8)."""
    if name in squashed_names(files):
        find(files, name)


def _down_records(record: ChangelogRecord, records: dict[str, ChangelogRecord], squashes: dict[str, SquashState]) -> list[ChangelogRecord]:
    """A squash file rolls back as one: the applied files it replaced, newest first, then its own record
    (an absorbed one's is the folded view; the executor records it applied before the first ``down``)."""
    state = squashes.get(record.name)
    if state is None:
        return [record]
    parts = [records[p.name] for p in reversed(state.file.parts) if p.name in state.applied]
    return [*parts, record]
