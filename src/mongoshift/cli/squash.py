"""``mongoshift squash``: the applied files up to NAME replaced by one squash file (docs/squash.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..project.wording import plural
from .app import confirm, global_options, named_file, output, run_async, settings
from .tenants import render as render_across, requested, tenant_options

if TYPE_CHECKING:
    from ..api.hygiene import SquashReport


@click.command()
@click.option("--to", "to", required=True, metavar="NAME", help="The last file (inclusive) the squash file replaces.")
@click.option("--dry-run", is_flag=True, help="Judge the squash and name what it would write; change nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@tenant_options
@global_options
def squash(to: str, dry_run: bool, yes: bool) -> int:
    """Replace the applied files up to NAME with one squash file (the files are archived, the database untouched)."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    tenants = requested(reading=True)
    if not dry_run:
        named_file(s, to)
        where = "every selected tenant" if tenants is not None else "this database"
        confirm(f"Replace the migration files up to {to} with one squash file (each must be applied in {where})?", yes)
    if tenants is not None:
        from ..api.hygiene import squash_across  # start-up time: the API loads when a command runs

        rollout, report = run_async(lambda cancel: squash_across(s, tenants, to, dry_run=dry_run, cancel=cancel))
        if report is None:
            render_across(rollout, result_json=lambda r: r.to_json())
            return rollout.exit_code
        _render(report)
        return 0
    _render(run_async(lambda cancel: per_call(s, cancel=cancel).squash(to, dry_run=dry_run)))
    return 0


def _render(report: SquashReport) -> None:
    out = output()
    if out.json_mode:
        out.json(report.to_json())
        return
    verb = "would replace" if report.dry_run else "replaced"
    where = f" (judged in {plural(report.tenants, 'tenant database')})" if report.tenants is not None else ""
    # an earlier squash file among them stands for its own files: the new file says how many it runs
    runs = f" ({plural(report.runs, 'migration file')} in all, an earlier squash file's among them)" if report.runs > len(report.replaced) else ""
    out.say(f"{report.name}: {verb} {plural(len(report.replaced), 'file')}, {report.replaced[0]} to {report.to}{runs}{where}")
