"""The tenant flags of the commands that act on one database, and the per-tenant report (docs/tenants.md).

A command given ``--tenant NAME`` (repeatable), ``--tenants PATTERN`` or ``--all-tenants`` runs
once per selected tenant database through :func:`mongoshift.api.tenants.across_tenants`;
without them it acts on ``--db`` as always. While it runs, one plain line per tenant outcome
goes to stderr; at the end comes the table (or, with ``--json``, one document) and the summary.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from ..errors import TenantsInvalidError
from ..project.redaction import strip_controls
from .app import options, output, run_async

if TYPE_CHECKING:
    from ..api.session import Mongoshift
    from ..api.tenants import Tenants
    from ..project.events import Event
    from ..project.settings import Settings
    from ..tenants.report import Judged, RolloutReport

#: Where the tenant flags are kept in the root context's object (click passes nothing else down).
_KEY = "tenant_flags"


def _keep(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    if param.name and value is not None and value is not False and value != ():  # 0 is a value (refused later), not "not given"
        ctx.find_root().ensure_object(dict).setdefault(_KEY, {})[param.name] = value
    return value


def tenant_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--tenant``, ``--tenants``, ``--all-tenants``, ``--parallel``, ``--canary``, ``--continue-on-error``."""
    flags: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option("--tenant", "tenant", multiple=True, metavar="NAME", help="Act on tenant database NAME (repeatable).",
                     callback=_keep, expose_value=False),
        click.option("--tenants", "tenants", metavar="PATTERN", help="Act on the tenants whose names match PATTERN (a glob).",
                     callback=_keep, expose_value=False),
        click.option("--all-tenants", "all_tenants", is_flag=True, help="Act on every tenant of the [tenants] section.",
                     callback=_keep, expose_value=False),
        click.option("--parallel", "parallel", type=int, metavar="N", help="Tenants at once (default 4).", callback=_keep, expose_value=False),
        click.option("--canary", "canary", type=int, metavar="K",
                     help="Run the first K tenants first; stop before the others if any of them fails.", callback=_keep, expose_value=False),
        click.option("--continue-on-error", "continue_on_error", is_flag=True,
                     help="Go on after a tenant fails (default: start no new tenant).", callback=_keep, expose_value=False),
    ]
    for flag in reversed(flags):
        fn = flag(fn)
    return fn


def requested(*, reading: bool = False) -> Tenants | None:
    """The tenants the command line asked for; None without a selection flag (the command acts on ``--db``).

    ``reading``: a read-only command visits every tenant whatever one of them answers."""
    given: dict[str, Any] = options().get(_KEY, {})
    names = tuple(given.get("tenant", ()))
    pattern = given.get("tenants")
    everything = bool(given.get("all_tenants"))
    if not (names or pattern is not None or everything):
        rollout_only = [f"--{k.replace('_', '-')}" for k in ("parallel", "canary", "continue_on_error") if k in given]
        if rollout_only:
            raise TenantsInvalidError(f"{', '.join(rollout_only)} needs a selection: --tenant NAME, --tenants PATTERN or --all-tenants")
        return None
    from ..api.tenants import Tenants  # start-up time: the API loads when a command runs

    parallel = given.get("parallel")
    return Tenants(
        names=names,
        pattern=pattern,
        all=everything,
        parallel=4 if parallel is None else parallel,
        canary=given.get("canary", 0),
        continue_on_error=reading or bool(given.get("continue_on_error")),
    )


def given(flag: str) -> bool:
    """Whether the tenant flag ``flag`` (``parallel``, ``canary``, ...) was given on the command line."""
    return flag in options().get(_KEY, {})


def across(
    s: Settings,
    tenants: Tenants,
    command: str,
    call: Callable[[Mongoshift], Awaitable[Any]],
    *,
    judge: Callable[[Any], Judged] | None = None,
    scan: bool = True,
    result_json: Callable[[Any], Any] | None = None,
    extra_json: Callable[[RolloutReport], dict[str, Any]] | None = None,
    before_table: Callable[[RolloutReport], None] | None = None,
) -> int:
    """Run ``call`` across ``tenants``, print the per-tenant report, and return its exit code (0, 11 or 47)."""
    from ..api.tenants import across_tenants, judge_done  # start-up time: the API loads when a command runs

    out = output()
    started = time.monotonic()
    live = out.err.is_terminal

    def observer(event: Event) -> None:
        if not out.quiet and event.kind == "tenant_end":
            _progress_line(event, time.monotonic() - started if live else None)

    logger = logging.getLogger("mongoshift")
    named = _TenantLines(prefix=not out.log_json)
    for handler in logger.handlers:
        handler.addFilter(named)
    try:
        report = run_async(
            lambda cancel: across_tenants(
                s, call, tenants, command=command, judge=judge or judge_done, scan=scan, observers=[observer], cancel=cancel
            ),
            stopping="stopping: no new tenant starts, running tenants stop at their next migration boundary (press Ctrl-C again to stop now)",
        )
    finally:
        for handler in logger.handlers:
            handler.removeFilter(named)
    render(report, result_json=result_json, extra_json=extra_json, before_table=before_table)
    return report.exit_code


class _TenantLines(logging.Filter):
    """A log line of a tenant's call names the tenant: ``tenant`` on the record (``--log-format json``), and a
    ``NAME: `` prefix on a text line."""

    def __init__(self, *, prefix: bool) -> None:
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        from ..tenants.rollout import current_tenant  # loaded by the command that installed this filter

        tenant = current_tenant.get()
        if tenant is not None and getattr(record, "tenant", None) is None:
            record.tenant = tenant
            if self.prefix and isinstance(record.msg, str):
                record.msg = tenant.replace("%", "%%") + ": " + record.msg
        return True


def _progress_line(event: Event, elapsed: float | None) -> None:
    """One line per tenant outcome, as it happens, on stderr (stdout keeps the table or the JSON document):
    done / total, failed, running now; on a terminal (``elapsed`` given) also the rate and the ETA."""
    data = event.data
    note = f" ({data['error_kind']})" if data.get("error_kind") else ""
    finished, total = data["finished"], data["total"]
    line = f"[{finished}/{total}] tenant {data['tenant']}: {data['outcome']}{note}; failed {data['failed']}, running {data['running']}"
    if elapsed is not None and elapsed > 0:
        rate = finished / elapsed
        eta = (total - finished) / rate if rate > 0 else None
        line += f", {rate:.1f} tenants/s" + (f", about {eta:.0f} s left" if eta is not None and finished < total else "")
    print(strip_controls(line), file=sys.stderr, flush=True)


def render(
    report: RolloutReport,
    *,
    result_json: Callable[[Any], Any] | None = None,
    extra_json: Callable[[RolloutReport], dict[str, Any]] | None = None,
    before_table: Callable[[RolloutReport], None] | None = None,
) -> None:
    out = output()
    if out.json_mode:
        document = report.to_json(result_json)
        if extra_json is not None:
            document.update(extra_json(report))
        out.json(document)
        return
    if before_table is not None:
        before_table(report)
    rows = [
        (
            r.name + (" (canary)" if r.canary else ""),
            r.outcome,
            r.applied,
            r.rolled_back,
            "" if r.duration_ms is None else f"{r.duration_ms} ms",
            f"{r.error.kind}: {r.error.message}" if r.error else "",
        )
        for r in report.rows
    ]
    out.table(["tenant", "outcome", "applied", "rolled back", "duration", "note"], rows, title=f"{report.command} across tenants")
    if report.ok:
        out.say(report.summary())
    else:
        out.warn(report.summary())
