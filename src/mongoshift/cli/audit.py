"""``mongoshift audit``: the project's health in one read-only command, for monitors and CI."""

from __future__ import annotations

from typing import Any

import click

from ..project.wording import plural
from .app import FloatRange, global_options, output, run_async, settings
from .tenants import across, requested, tenant_options


@click.command()
@click.option(
    "--stale-after",
    type=FloatRange(min=0),  # at most a year: api.health says so in its own words
    default=900.0,
    show_default=True,
    metavar="SECONDS",
    help="How long a pending background migration may wait for a runner, or a running one go without a lane, before audit warns.",
)
@tenant_options
@global_options
def audit(stale_after: float) -> int:
    """Check the migration line and the background migrations; read-only. Exit 0 healthy, 40 warnings, 22 a failed check."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs

        def judged(report: Any) -> Judged:
            code = int(report.exit_code)
            fails = sum(1 for f in report.findings if f.severity == "fail")
            kind = "audit_failed" if fails else "audit_warnings"
            error = TenantError(kind, code, f"{fails} failed, {plural(len(report.findings) - fails, 'warning')}") if code else None
            return Judged("done", error=error, result=report)

        def findings(report: Any) -> None:  # each tenant's findings, as one database's audit shows them
            rows = [(row.name, f.severity, f.check, f.subject, f.message) for row in report.rows if row.result for f in row.result.findings]
            if rows:
                output().table(["tenant", "severity", "check", "subject", "message"], rows, title="findings by tenant")

        return across(
            s, tenants, "audit", lambda ms: ms.audit(stale_after=stale_after), judge=judged, result_json=lambda r: r.to_json(), before_table=findings
        )
    report = run_async(lambda cancel: per_call(s, cancel=cancel).audit(stale_after=stale_after))
    out = output()
    if out.json_mode:
        out.json(report.to_json())
        return int(report.exit_code)
    if report.findings:
        out.table(["severity", "check", "subject", "message"], [(f.severity, f.check, f.subject, f.message) for f in report.findings])
    fails = sum(1 for f in report.findings if f.severity == "fail")
    warns = len(report.findings) - fails
    summary = "healthy" if not report.findings else f"{fails} failed, {plural(warns, 'warning')}"
    out.verdict(f"audit: {summary} ({plural(len(report.checks), 'check')}; exit {int(report.exit_code)})", failed=bool(report.exit_code))
    return int(report.exit_code)
