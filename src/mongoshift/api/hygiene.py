"""Keeping the line manageable: ``squash`` (docs/squash.md) and ``lint`` (docs/lint.md).

``squash`` is judged against a database (every file of the range applied there, see
:mod:`mongoshift.squash.planner`), or against every selected tenant's database, and only
then written: the files change, the databases do not. ``lint`` reads the line's files as
source (:mod:`mongoshift.lint`), never importing them; ``sizes`` connects to say how many
documents each unbounded bulk write would touch (an estimate from the collection's metadata:
nothing is scanned). ``*_in`` run on an open project (a session's); the flat functions are
their one-shot wrappers. Not named ``squash`` or ``lint``: a module of that name would
shadow the function on :mod:`mongoshift.api` once imported.
"""

from __future__ import annotations

import io
import tokenize
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ..errors import ConfigInvalidError, InvalidExportError, IOFailedError, RunAbortedError
from ..lint.checker import Finding, lint_source
from ..lint.rules import RULES
from ..project.loader import MigrationFile, discover, find, resolve_name
from ..project.run import CancelSignal
from ..project.session import Project, open_session
from ..project.settings import Settings
from ..squash.planner import SquashPlan, plan_range, plan_squash
from ..squash.writer import refuse_unfinished, write_squash
from .options import checked_flags, checked_settings, one_shot

if TYPE_CHECKING:
    from ..tenants.report import RolloutReport
    from .tenants import Tenants


# ---------------------------------------------------------------- squash

@dataclass
class SquashReport:
    """What ``squash`` wrote (or, with ``dry_run``, would write)."""

    to: str
    name: str
    replaced: list[str]
    dry_run: bool
    #: The squash file written (its name in the migrations folder); None for a dry run.
    file: str | None = None
    #: Across tenants: how many tenant databases were judged (each has the whole range applied).
    tenants: int | None = None
    #: How many migration files the squash file runs on a new database: ``replaced`` with each earlier
    #: squash file among them counted as the files it stands for (what the squash file's own text says).
    runs: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "to": self.to, "name": self.name, "replaced": self.replaced, "dry_run": self.dry_run,
            "file": self.file, "tenants": self.tenants, "runs": self.runs,
        }


async def squash(settings: Settings, to: str, *, dry_run: bool = False, client: AsyncMongoClient[Any] | None = None) -> SquashReport:
    """One-shot :meth:`Mongoshift.squash <mongoshift.api.session.Mongoshift.squash>` (:func:`squash_in`)."""
    return await squash_in(one_shot(settings, client=client), to, dry_run=dry_run)


async def squash_in(project: Project, to: str, *, dry_run: bool = False) -> SquashReport:
    """Replace the files up to ``to`` (inclusive) with one squash file, when every one of them is applied in
    this project's database; ``dry_run`` judges and names what would be written, writing nothing."""
    checked_flags(dry_run=dry_run)
    plan = await judge_in(project, to)
    try:
        return _report(plan, project.settings, dry_run=dry_run)
    finally:
        if not dry_run:  # the files moved: a session's next call reads the folder again (its list named files now archived)
            project.rescan()


async def judge_in(project: Project, to: str) -> SquashPlan:
    """The squash up to ``to`` as this project's database allows it, or :class:`~mongoshift.errors.SquashRefusedError`."""
    refuse_unfinished(project.settings.migrations_dir)
    async with open_session(project.settings, take_lock=False, cancel=project.cancel, project=project) as session:
        records = await session.changelog.records()
        return plan_squash(session.files, records, resolve_name(to, project.settings.migrations_dir))


async def squash_across(
    settings: Settings,
    tenants: Tenants,
    to: str,
    *,
    dry_run: bool = False,
    client: AsyncMongoClient[Any] | None = None,
    cancel: CancelSignal | None = None,
) -> tuple[RolloutReport, SquashReport | None]:
    """The squash judged in every selected tenant's database; written once, only when every tenant allows it
    (a tenant in between, or behind, fails its row with the reason and nothing is written). ``cancel`` (Ctrl-C)
    stops the judging: the tenants not judged are not reached, and nothing is written."""
    from .tenants import across_tenants, reading_every  # start-up time: the tenant machinery loads only across tenants

    checked_settings(settings)
    checked_flags(dry_run=dry_run)
    refuse_unfinished(settings.migrations_dir)  # once, before any tenant is read
    # what the files alone refuse (one file, a background migration or a requires in the range) is every tenant's
    # refusal: said once, with the single database's code, rather than in every row
    plan_range(discover(settings.migrations_dir), resolve_name(to, settings.migrations_dir))
    # every tenant is judged (no canary, no stop at the first refusal): the report names each one behind
    reading = reading_every(tenants)
    rollout = await across_tenants(settings, lambda ms: ms.squash(to, dry_run=True), reading, command="squash", client=client, cancel=cancel)
    if not rollout.ok:
        return rollout, None
    if cancel is not None and cancel.is_set():  # every tenant judged, the stop came after: still before the write
        raise RunAbortedError(f"squash stopped ({cancel.reason}) before writing: nothing was written")
    # every tenant judged its own changelog; the files are judged once more as they are now
    plan = plan_range(discover(settings.migrations_dir), resolve_name(to, settings.migrations_dir))
    report = _report(plan, settings, dry_run=dry_run)
    report.tenants = len(rollout.rows)
    return rollout, report


def _report(plan: SquashPlan, settings: Settings, *, dry_run: bool) -> SquashReport:
    report = SquashReport(plan.to, plan.name, plan.replaced, dry_run, runs=len(plan.parts))
    if not dry_run:
        report.file = write_squash(plan, settings.migrations_dir).name
    return report


# ---------------------------------------------------------------- lint

@dataclass
class LintReport:
    """Findings that remain (the verdict), findings a comment accepted, and comments that accepted nothing."""

    files: list[str]
    findings: list[Finding] = field(default_factory=list)
    suppressed: list[Finding] = field(default_factory=list)
    unused_suppressions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "findings": [f.to_json() for f in self.findings],
            "suppressed": [f.to_json() for f in self.suppressed],
            "unused_suppressions": self.unused_suppressions,
            "rules": {rule.id: {"name": rule.name, "summary": rule.summary} for rule in RULES.values()},
        }


async def lint(
    settings: Settings, files: list[str] | None = None, *, sizes: bool = False, client: AsyncMongoClient[Any] | None = None
) -> LintReport:
    """One-shot :meth:`Mongoshift.lint <mongoshift.api.session.Mongoshift.lint>` (:func:`lint_in`)."""
    return await lint_in(one_shot(settings, client=client), files, sizes=sizes)


async def lint_in(project: Project, files: list[str] | None = None, *, sizes: bool = False) -> LintReport:
    """Lint ``files`` (names in the migrations folder; default: every file of the line). Squash files and the
    files they archived ran already and are left out. ``sizes``: count the documents of the collections
    that unbounded bulk writes name."""
    settings = project.settings
    checked_flags(sizes=sizes)
    if files is not None and (isinstance(files, (str, bytes)) or not isinstance(files, (list, tuple))):
        # one name given as text was read letter by letter ("migration file not found: 0.py")
        raise ConfigInvalidError(f"files must be a list of migration names (or None for every file), not {type(files).__name__}")
    project.check_open()  # reading files only, but a closed session takes no call
    line = project.scanned()
    chosen = [find(line, resolve_name(name, settings.migrations_dir)) for name in files] if files else [f for f in line if not f.is_squash]
    # one file named twice ("0007_x", "0007_x.py", "migrations/0007_x.py") is one file: its findings once, counted once
    chosen = list({item.name: item for item in chosen}.values())
    report = LintReport([f.name for f in chosen])
    for item in chosen:
        verdict = lint_source(item.name, _python_text(item), use_transaction_default=settings.use_transaction)
        report.findings += verdict.findings
        report.suppressed += verdict.suppressed
        report.unused_suppressions += [{"file": item.name, "line": s.line, "rules": list(s.rules)} for s in verdict.unused]
    if sizes:
        await _count(project, [f for f in report.findings if f.rule == "MS102" and f.collection])
    return report


def _python_text(item: MigrationFile) -> str:
    """A migration file's text as Python's import reads it: UTF-8 (a byte order mark allowed), or the encoding its
    first two lines declare (PEP 263: a legacy ``# -*- coding: latin-1 -*-`` file is a module ``up`` runs). Text
    that import would refuse is refused as ``up`` refuses it (20)."""
    try:
        raw = item.path.read_bytes()
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read", item.path) from None
    encoding = "utf-8"
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        said = "UTF-8" if encoding.startswith("utf-8") else encoding
        raise InvalidExportError(f"{item.name}: failed to parse: it is not {said} text (at byte {exc.start})", file=item.name) from None
    except SyntaxError as exc:  # an encoding declaration Python does not know, or undecodable first lines
        if exc.msg.startswith("unknown encoding"):  # it declares one, which Python does not know: say so, as import does
            raise InvalidExportError(f"{item.name}: failed to parse: {exc.msg}", file=item.name) from None
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as undecodable:
            raise InvalidExportError(
                f"{item.name}: failed to parse: it is not UTF-8 text (at byte {undecodable.start}) and declares no other encoding", file=item.name
            ) from None
        raise InvalidExportError(f"{item.name}: failed to parse: {exc.msg}", file=item.name) from None


async def _count(project: Project, findings: list[Finding]) -> None:
    """Each named collection's estimated size, said in its findings (a collection that is not there holds 0)."""
    if not findings:
        return
    async with open_session(project.settings, take_lock=False, with_files=False, cancel=project.cancel, project=project) as session:
        counted: dict[str, int] = {}
        for finding in findings:
            name = finding.collection
            assert name is not None
            if name not in counted:
                try:
                    counted[name] = await session.db[name].estimated_document_count()
                except PyMongoError:
                    continue  # a view or a refused count: the finding stands without its size
            finding.documents = counted[name]
            finding.message += f" ({name} holds about {counted[name]:,} documents here)"
