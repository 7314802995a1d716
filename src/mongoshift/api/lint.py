"""``lint``: the risky operations of the line's files, before they run (docs/lint.md).

The files are read as source (:mod:`mongoshift.lint`), never imported. ``sizes`` connects to
the project's database to say how many documents each unbounded bulk write would touch
(an estimate from the collection's metadata: nothing is scanned). ``lint_in`` runs on an
open project (a session's); :func:`lint` is its one-shot wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import PyMongoError

from ..errors import IOFailedError
from ..lint.checker import Finding, lint_source
from ..lint.rules import RULES
from ..project.loader import find, resolve_name
from ..project.session import Project, open_session
from ..project.settings import Settings
from .options import one_shot


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
    line = project.scanned()
    chosen = [find(line, resolve_name(name, settings.migrations_dir)) for name in files] if files else [f for f in line if not f.is_squash]
    report = LintReport([f.name for f in chosen])
    for item in chosen:
        try:
            source = item.path.read_text(encoding="utf-8-sig")
        except OSError as exc:
            raise IOFailedError.from_os(exc, "read", item.path) from None
        verdict = lint_source(item.name, source, use_transaction_default=settings.use_transaction)
        report.findings += verdict.findings
        report.suppressed += verdict.suppressed
        report.unused_suppressions += [{"file": item.name, "line": s.line, "rules": list(s.rules)} for s in verdict.unused]
    if sizes:
        await _count(project, [f for f in report.findings if f.rule == "MS102" and f.collection])
    return report


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
