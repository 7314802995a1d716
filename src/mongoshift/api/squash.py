"""``squash``: the applied files up to NAME replaced by one squash file (docs/squash.md).

The squash is judged against a database (every file of the range applied there, see
:mod:`mongoshift.squash.planner`), or against every selected tenant's database, and only
then written: the files change, the databases do not. ``squash_in`` runs on an open project
(a session's); :func:`squash` is its one-shot wrapper.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pymongo import AsyncMongoClient

from ..project.loader import discover, resolve_name
from ..project.session import Project, open_session
from ..project.settings import Settings
from ..squash.planner import SquashPlan, plan_range, plan_squash
from ..squash.writer import write_squash
from .options import one_shot

if TYPE_CHECKING:
    from ..tenants.report import RolloutReport
    from .tenants import Tenants


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
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "to": self.to, "name": self.name, "replaced": self.replaced, "dry_run": self.dry_run,
            "file": self.file, "tenants": self.tenants, "warnings": self.warnings,
        }


async def squash(settings: Settings, to: str, *, dry_run: bool = False, client: AsyncMongoClient[Any] | None = None) -> SquashReport:
    """One-shot :meth:`Mongoshift.squash <mongoshift.api.session.Mongoshift.squash>` (:func:`squash_in`)."""
    return await squash_in(one_shot(settings, client=client), to, dry_run=dry_run)


async def squash_in(project: Project, to: str, *, dry_run: bool = False) -> SquashReport:
    """Replace the files up to ``to`` (inclusive) with one squash file, when every one of them is applied in
    this project's database; ``dry_run`` judges and names what would be written, writing nothing."""
    plan = await judge_in(project, to)
    return _report(plan, project.settings, dry_run=dry_run)


async def judge_in(project: Project, to: str) -> SquashPlan:
    """The squash up to ``to`` as this project's database allows it, or :class:`~mongoshift.errors.SquashRefusedError`."""
    async with open_session(project.settings, take_lock=False, cancel=project.cancel, project=project) as session:
        records = await session.changelog.records()
        return plan_squash(session.files, records, resolve_name(to, project.settings.migrations_dir))


async def squash_across(
    settings: Settings, tenants: Tenants, to: str, *, dry_run: bool = False, client: AsyncMongoClient[Any] | None = None
) -> tuple[RolloutReport, SquashReport | None]:
    """The squash judged in every selected tenant's database; written once, only when every tenant allows it
    (a tenant in between, or behind, fails its row with the reason and nothing is written)."""
    from .tenants import Tenants, across_tenants  # start-up time: the tenant machinery loads only across tenants

    # every tenant is judged (no canary, no stop at the first refusal): the report names each one behind
    reading = Tenants(tenants.names, tenants.pattern, tenants.all, tenants.parallel, 0, True)
    rollout = await across_tenants(settings, lambda ms: ms.squash(to, dry_run=True), reading, command="squash", client=client)
    if not rollout.ok:
        return rollout, None
    # every tenant judged its own changelog; the files are judged once more as they are now
    plan = plan_range(discover(settings.migrations_dir), resolve_name(to, settings.migrations_dir))
    report = _report(plan, settings, dry_run=dry_run)
    report.tenants = len(rollout.rows)
    return rollout, report


def _report(plan: SquashPlan, settings: Settings, *, dry_run: bool) -> SquashReport:
    report = SquashReport(plan.to, plan.name, plan.replaced, dry_run)
    if not dry_run:
        report.file = write_squash(plan, settings.migrations_dir).name
    return report
