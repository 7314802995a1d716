"""``mongoshift lint``: risky operations in migration files and background specs, before they run (docs/lint.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ..errors import ExitCode
from ..project.wording import plural
from .app import global_options, output, run_async, settings

if TYPE_CHECKING:
    from ..api.hygiene import LintReport


@click.command()
@click.argument("files", nargs=-1)
@click.option("--sizes", is_flag=True, help="Connect and say how many documents each unbounded bulk write would touch.")
@global_options
def lint(files: tuple[str, ...], sizes: bool) -> int:
    """Flag risky operations in migration FILES (default: every file of the line); exit 51 when findings remain."""
    from ..api.session import per_call  # start-up time: the API loads when a command runs

    s = settings()
    report = run_async(lambda cancel: per_call(s, cancel=cancel).lint(list(files) or None, sizes=sizes))
    _render(report)
    return 0 if report.ok else int(ExitCode.LINT_FINDINGS)


def _render(report: LintReport) -> None:
    out = output()
    if out.json_mode:
        out.json(report.to_json())
        return
    if report.findings:
        out.table(["file", "line", "rule", "finding"], [(f.file, f.line, f.rule, f.message) for f in report.findings])
    for unused in report.unused_suppressions:
        out.warn(f"{unused['file']}:{unused['line']}: the suppression of {', '.join(unused['rules'])} accepts no finding (remove it)")
    summary = f"{plural(len(report.files), 'file')}: {plural(len(report.findings), 'finding')}"
    if report.suppressed:
        summary += f", {len(report.suppressed)} accepted by a suppression comment"
    out.verdict(summary, failed=not report.ok)
