"""The tenant flags of the commands that act on one database, and the per-tenant report (docs/tenants.md).

A command given ``--tenant NAME`` (repeatable), ``--tenants PATTERN`` or ``--all-tenants`` runs
once per selected tenant database through :func:`mongoshift.api.tenants.across_tenants`;
without them it acts on ``--db`` as always. While it runs, one line per tenant outcome goes to
stderr, and on a terminal a redrawn line under them (done / total, failed, running now, rate,
ETA); at the end comes the table (or, with ``--json``, one document) and the summary.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigInvalidError, TenantsInvalidError
from ..project.redaction import strip_controls
from .app import LEFT_BEHIND, options, output, run_async

if TYPE_CHECKING:
    from rich.console import Console

    from ..api.session import Mongoshift
    from ..api.tenants import Tenants
    from ..project.events import Event
    from ..project.run import CancelSignal
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
    ``--db`` given with a selection flag is refused (exit 6), before anything connects.

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
    if options().get("db") is not None:
        # --db names the one database to act on, the selection names others: taking either silently
        # would run where the user did not ask (the tenants, or only the one database)
        chosen = "--tenant" if names else "--tenants" if pattern is not None else "--all-tenants"
        raise ConfigInvalidError(
            f"--db and {chosen} cannot be combined: --db acts on one database, {chosen} on the selected tenant databases; give one of them"
        )
    from ..api.tenants import Tenants  # start-up time: the API loads when a command runs
    from ..tenants.selection import FLAG_WORDS  # start-up time: with the API

    parallel = given.get("parallel")
    return Tenants(
        names=names,
        pattern=pattern,
        all=everything,
        parallel=4 if parallel is None else parallel,
        canary=given.get("canary", 0),
        continue_on_error=reading or bool(given.get("continue_on_error")),
        words=FLAG_WORDS,  # a refusal names the flags given, not the API's parameters
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
    until_signal: bool = False,
    prepare: Callable[[list[Any]], None] | None = None,
    stopping: str = "stopping: no new tenant starts, running tenants stop at their next migration boundary (press Ctrl-C again to stop now)",
    left_behind: str = LEFT_BEHIND,
) -> int:
    """Run ``call`` across ``tenants``, print the per-tenant report, and return its exit code (0, 11 or 47).

    ``until_signal``: a call that runs until Ctrl-C / SIGTERM (``background watch``), every tenant at once:
    the signal is its normal end (exit 0 when every tenant's call ended cleanly), and a tenant that fails
    stops the others (exit 47, so that a supervisor restarts the process) unless ``--continue-on-error``."""
    from ..api.tenants import across_tenants, judge_done  # start-up time: the API loads when a command runs

    out = output()
    board = _Board(out.err, command) if out.err.is_terminal and not out.quiet and not out.log_json else None
    signal_cell: list[CancelSignal] = []

    def observer(event: Event) -> None:
        if board is not None:
            board.observe(event)
        elif event.kind == "tenant_end":
            out.progress(outcome_line(event.data), tenant=event.data["tenant"])
        if until_signal and event.kind == "tenant_end" and event.data["outcome"] == "failed" and not tenants.continue_on_error:
            signal_cell[0].set(f"tenant {event.data['tenant']} failed")

    def make(cancel: CancelSignal) -> Awaitable[RolloutReport]:
        signal_cell.append(cancel)
        return across_tenants(
            s, call, tenants, command=command, judge=judge or judge_done, scan=scan, observers=[observer], cancel=cancel, prepare=prepare
        )

    logger = logging.getLogger("mongoshift")
    named = _TenantLines(prefix=not out.log_json)
    for handler in logger.handlers:
        handler.addFilter(named)
    try:
        if board is not None:
            board.start()
        report = run_async(make, stopping=stopping, left_behind=left_behind)
    finally:
        if board is not None:
            board.stop()
        for handler in logger.handlers:
            handler.removeFilter(named)
    if until_signal and not any(row.outcome == "not reached" for row in report.rows):
        report.interrupted, report.stopped = False, None  # the signal is how such a call ends
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


def outcome_line(data: dict[str, Any]) -> str:
    """One tenant's outcome as it happens (stderr: stdout keeps the table or the JSON document): done / total,
    the tenant, its outcome and error kind, then failed and running now."""
    note = f" ({data['error_kind']})" if data.get("error_kind") else ""
    return (
        f"[{data['finished']}/{data['total']}] tenant {data['tenant']}: {data['outcome']}{note}; "
        f"failed {data['failed']}, running {data['running']}"
    )


class _Board:
    """On a terminal: the outcome lines scroll above one redrawn line, done / total with a bar, failed, the
    tenants running now, the rate and the ETA (from the tenants finished since the start). ``now`` is
    injectable for tests."""

    #: Running tenants named on the line; more are counted.
    NAMED = 3

    def __init__(self, console: Console, command: str, now: Callable[[], float] = time.monotonic) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn  # start-up time: a terminal only

        self.now = now
        self.started = now()
        self.running: dict[str, None] = {}  # insertion-ordered: the longest running first
        self.failed = 0
        self.progress = Progress(
            TextColumn(strip_controls(command)), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[note]}"),
            console=console, transient=True, auto_refresh=False,
        )
        self.task = self.progress.add_task("", total=None, note="selecting tenants")

    def start(self) -> None:
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def observe(self, event: Event) -> None:
        data = event.data
        if event.kind == "tenant_start":
            self.running[data["tenant"]] = None
            self.progress.update(self.task, total=data["total"])
        elif event.kind == "tenant_end":
            self.running.pop(data["tenant"], None)
            self.failed = data["failed"]
            self.progress.update(self.task, total=data["total"], completed=data["finished"])
            self.progress.console.print(strip_controls(outcome_line(data)), markup=False, highlight=False)
        else:
            return
        self.progress.update(self.task, note=self.note())
        self.progress.refresh()

    def note(self) -> str:
        """``failed 1, running 3 (a, b, c), 2.5 tenants/s, about 40 s left``."""
        task = self.progress.tasks[0]
        names = list(self.running)
        shown = ", ".join(names[: self.NAMED]) + (f" +{len(names) - self.NAMED}" if len(names) > self.NAMED else "")
        text = f"failed {self.failed}, running {len(names)}" + (f" ({shown})" if names else "")
        elapsed = self.now() - self.started
        if task.completed and elapsed > 0:
            rate = task.completed / elapsed
            text += f", {rate:.1f} tenants/s"
            if task.total is not None and task.completed < task.total:
                text += f", about {(task.total - task.completed) / rate:.0f} s left"
        return strip_controls(text)


def _tenant_warnings(report: RolloutReport) -> None:
    """What each tenant's own run warned about (a checksum changed on disk, a dead run's unfinished
    migration, a step waiting for another), named by tenant, as ``--db TENANT`` prints it; in ``--json``
    they are each row's ``result.warnings``."""
    out = output()
    for row in report.rows:
        for warning in getattr(row.result, "warnings", None) or ():
            out.warn(f"{row.name}: {warning}")
        for item in getattr(row.result, "waiting", None) or ():
            out.warn(f"{row.name}: stopped before {item['migration']}: it waits for {', '.join(item['waits_for'])}")


#: The commands whose rows count migrations run (or, dry, that would run) or recorded: the table's ``applied`` and
#: ``rolled back`` columns. Every other command (status, lock, audit, converge, background ...) leaves them out: a
#: column of zeros beside a tenant whose every migration is applied read as "nothing applied there".
_COUNTING = frozenset({"up", "down", "redo", "dry-run up", "dry-run down", "import", "baseline"})


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
    _tenant_warnings(report)
    counts = report.command in _COUNTING
    rows = [
        (
            r.name + (" (canary)" if r.canary else ""),
            r.outcome,
            *((r.applied, r.rolled_back) if counts else ()),
            "" if r.duration_ms is None else f"{r.duration_ms} ms",
            f"{r.error.kind}: {r.error.message}" if r.error else "",
        )
        for r in report.rows
    ]
    counted = ["would apply", "would roll back"] if report.command.startswith("dry-run") else ["applied", "rolled back"]  # nothing ran
    out.table(["tenant", "outcome", *(counted if counts else ()), "duration", "note"], rows, title=f"{report.command} across tenants")
    if out.quiet:
        _quiet_rows(report)
    if report.ok:
        out.say(report.summary())
    else:
        out.warn(report.summary())


def _quiet_rows(report: RolloutReport) -> None:
    """``-q`` prints no table, yet a tenant that is not done is an error of the command: each one's outcome and why,
    and the tenants not reached, on stderr (as one database's failure is), so that the summary's counts have names."""
    out = output()
    for row in report.rows:
        if not row.ok and row.outcome != "not reached":
            out.warn(f"tenant {row.name}: {row.outcome}" + (f": {row.error.kind}: {row.error.message}" if row.error else ""))
    unreached = [row.name for row in report.rows if row.outcome == "not reached"]
    if unreached:
        out.warn(f"not reached: {', '.join(unreached)}")
