"""``mongoshift import`` and ``mongoshift baseline``: taking over a database that already has a history."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..project.wording import plural
from .app import WAIT_HELP, FloatRange, confirm, global_options, named_file, output, run_async, settings
from .tenants import across, requested, tenant_options

if TYPE_CHECKING:
    from ..api.adoption import AdoptionReport
    from ..tenants.report import Judged

TOOLS = ("migrate-mongo", "beanie", "pymongo-migrate", "mongodb-migrations")


@click.command(name="import")
@click.option("--from", "tool", required=True, type=click.Choice(TOOLS), help="The tool whose changelog to adopt.")
@click.option("--collection", metavar="NAME", help="The tool's changelog collection, when not its default.")
@click.option("--map", "map_file", type=click.Path(dir_okay=False, path_type=Path), help="TOML file: source name = mongoshift file (false: leave out).")
@click.option("--dry-run", is_flag=True, help="Show what would be recorded; write nothing.")
@click.option("--force", is_flag=True, help="Import although mongoshift's changelog already holds other records.")
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@tenant_options
@global_options
def import_command(
    tool: str, collection: str | None, map_file: Path | None, dry_run: bool, force: bool, no_lock: bool, wait: float | None
) -> int:
    """Record what another tool applied as applied here (forward-only); its collection is only read."""
    from ..api.options import Lock  # start-up time: the API loads when a command runs
    from ..api.session import per_call

    s = settings()
    if (tenants := requested()) is not None:
        return across(
            s, tenants, "import",
            lambda ms: ms.import_history(tool, collection=collection, map_file=map_file, dry_run=dry_run, force=force, lock=Lock(not no_lock, wait)),
            judge=_judged, result_json=lambda r: r.to_json(),
        )
    report = run_async(
        lambda cancel: per_call(s, cancel=cancel).import_history(
            tool, collection=collection, map_file=map_file, dry_run=dry_run, force=force, lock=Lock(not no_lock, wait)
        )
    )
    _render(report)
    return 0


@click.command()
@click.option("--to", "to", required=True, metavar="NAME", help="The last file (inclusive) to mark applied.")
@click.option("--dry-run", is_flag=True, help="Show what would be recorded; write nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--no-lock", is_flag=True, help="Do not take the lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@tenant_options
@global_options
def baseline(to: str, dry_run: bool, yes: bool, no_lock: bool, wait: float | None) -> int:
    """Mark every pending file up to NAME applied without running it (the database already has its changes)."""
    from ..api.options import Lock  # start-up time: the API loads when a command runs
    from ..api.session import per_call

    s = settings()
    tenants = requested()
    named_file(s, to)  # a typo is refused (8, 19) once, before any question or tenant
    if not dry_run:
        confirm(f"Mark every pending migration up to {to} applied without running it{' in every selected tenant' if tenants else ''}?", yes)
    if tenants is not None:
        return across(
            s, tenants, "baseline", lambda ms: ms.baseline(to, dry_run=dry_run, lock=Lock(not no_lock, wait)),
            judge=_judged, result_json=lambda r: r.to_json(),
        )
    report = run_async(lambda cancel: per_call(s, cancel=cancel).baseline(to, dry_run=dry_run, lock=Lock(not no_lock, wait)))
    _render(report)
    return 0


def _judged(report: AdoptionReport) -> Judged:
    """``import`` / ``baseline`` in one tenant: ``applied`` counts the files recorded (or, dry, that would be)."""
    from ..tenants.report import Judged  # start-up time: loaded only when a command runs across tenants

    return Judged("done" if report.adopted else "already at target", applied=len(report.adopted), result=report)


def _render(report: AdoptionReport) -> None:
    out = output()
    for warning in report.warnings:
        out.warn(warning)
    if out.json_mode:
        out.json(report.to_json())
        return
    if report.adopted:
        rows = [(r.name, r.source_name or "", r.applied_at or "", report.batch) for r in report.adopted]
        out.table(["migration", "source", "applied at", "batch"], rows)
    verb = "would record" if report.dry_run else "recorded"
    summary = f"{report.command}: {verb} {plural(len(report.adopted), 'file')} applied (origin {report.origin})"
    if report.kept:
        summary += f", {len(report.kept)} already applied"
    if report.left_out:
        summary += f", {len(report.left_out)} left out by --map"
    if report.unnamed:
        summary += f", {report.unnamed} left out for naming no file"
    out.say(summary)
