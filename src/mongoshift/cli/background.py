"""``mongoshift background ...``: run, watch and steer background migrations."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..errors import (
    BackgroundCancelledError,
    BackgroundFailedError,
    BackgroundPausedError,
    BackgroundPendingError,
    ConfigInvalidError,
    ExitCode,
    MongoshiftError,
    RequirementsPendingError,
    RunAbortedError,
    TenantsInvalidError,
)
from ..project.run import CancelSignal
from ..project.wording import clock, plural
from .app import FloatRange, IntRange, confirm, global_options, output, run_async, settings
from .tenants import across, given, requested, tenant_options

if TYPE_CHECKING:
    from ..api.session import Mongoshift
    from ..api.tenants import Tenants
    from ..background.inspect.drift import Verified
    from ..background.inspect.preview import Preview
    from ..background.inspect.status import BackgroundReport
    from ..background.state.controls import Action
    from ..background.state.model import WatchRecord
    from ..background.watch.watcher import WatchOptions
    from ..project.settings import Settings
    from ..tenants.report import RolloutReport


@click.group(name="background")
@global_options
def background() -> None:
    """Background migrations: run them, see their progress, pause, resume, cancel, retry, verify."""


#: What a first Ctrl-C or SIGTERM does to ``background run`` and ``background watch`` (a second one stops at once).
RUN_STOPPING = (
    "stopping: each lane finishes the batch it is writing, checkpoints it and releases its lease; "
    "a later run goes on from there (press Ctrl-C again to stop now)"
)
WATCH_STOPPING = "stopping: finishing the events at hand, saving the position and releasing the watch leases (press Ctrl-C again to stop now)"
#: What a second signal leaves behind in ``background run`` and ``background watch`` (the migration line's lock is not theirs).
RUN_LEFT_BEHIND = (
    "the leases this run held lapse after background_lease_ttl_seconds (or 'mongoshift background unlock NAME' clears them now); "
    "a batch being written is settled by the next lane, and the next 'background run' goes on from the partitions' checkpoints"
)
#: What a second signal leaves behind in the commands that only read (``dry-run``, ``status``): no lock, no lease,
#: no write (not the migration line's words, which speak of its lock and a migration left unrecorded).
READ_LEFT_BEHIND = (
    "this command holds no lock and writes nothing, so nothing is left behind (a --validate transaction still open is "
    "never committed: the server aborts it)"
)
#: ``background verify``: no lock either; a migration it reopened stays reopened.
VERIFY_LEFT_BEHIND = (
    "verify holds no lock; a migration it reopened before the stop stays reopened, and 'mongoshift background verify' "
    "looks at every migration again"
)


def control_left_behind(name: str) -> str:
    """What a second signal leaves behind in the controls (pause, resume, cancel, retry, repin, unlock, throttle):
    no lock and no migration of the line, only their change of NAME's state, made or not."""
    return (
        "this command holds no lock and leaves nothing to clear; the change it was making may or may not be made: "
        f"'mongoshift background status {name}' shows the migration as it is now"
    )


WATCH_LEFT_BEHIND = (
    "the watch leases this process held lapse after their time-to-live; the next 'background watch' resumes from the last "
    "position saved, so events since then are looked at again"
)


def _interval(value: float) -> float:
    if not 0.1 <= value <= 86_400:  # also refuses nan
        raise click.BadParameter(f"must be between 0.1 and 86400 seconds, got {value}", param_hint="'--progress-interval'")
    return value


def _render(reports: list[BackgroundReport], *, detail: bool = False, watchers: list[WatchRecord] | None = None) -> None:
    """The list (one migration in two lines), or with ``detail`` everything about one migration.

    On a terminal both wrap to its width (docs/background.md); piped, the list is tab-separated
    text with a fixed set of columns and the detail ``label<TAB>value`` lines. ``watchers``
    (``background status``) adds the live watchers' table (``watchers`` in ``--json``)."""
    out = output()
    if out.json_mode:
        document: dict[str, object] = {"background": [r.to_json() for r in reports]}
        if watchers is not None:
            document["watchers"] = [w.to_json() for w in watchers]
        out.json(document)
        return
    _render_text(reports, detail=detail)
    if watchers:
        _render_watchers(watchers)


def _render_text(reports: list[BackgroundReport], *, detail: bool) -> None:
    """The migrations as rich tables on a terminal, tab-separated text when piped."""
    from . import background_view as view  # start-up time: rich loads only when a background command runs

    out = output()
    if not reports:
        out.say("no background migrations registered")
        return
    if out.out.is_terminal:
        if detail:
            view.render_detail(out.out, reports[0])
        else:
            view.render_list(out.out, reports)
        return
    for r in reports:
        for warning in r.warnings:
            out.warn(f"{r.name}: {warning}")
    if detail:
        r = reports[0]
        print(f"migration\t{r.name}")
        for label, value in view.details(r):
            print(f"{label}\t{value}")
        if r.doc_error_counts:
            out.table(["count", "reason", "class / code"], view.error_rows(r), title="failed documents (counts per reason)")
        if r.doc_errors:
            out.table(["last seen", "times", "reason", "class / code", "message"], view.recent_rows(r), title="most recent messages")
        return
    rows = [
        (
            r.name,
            r.status,
            r.direction,
            r.pass_number,
            f"{r.partitions_done}/{r.partitions_total}",
            r.leases,
            r.totals["migrated"],
            r.totals["conflicts"],
            r.failed_documents,
            f"{r.rate_per_second:g}/s" if r.rate_per_second else "-",
            clock(r.eta_seconds),
            (r.last_error or "")[:80],
        )
        for r in reports
    ]
    out.table(
        ["migration", "status", "direction", "pass", "partitions", "leases", "migrated", "conflicts", "failed", "rate", "eta", "last error"],
        rows,
    )


@background.command(name="run")
@click.argument("names", nargs=-1)
@click.option("--all", "all_", is_flag=True, help="Every registered migration that is pending or running.")
@click.option("--concurrency", type=IntRange(1, 64), default=1, show_default=True, help="Lanes in this process (capped by max_parallel).")
@click.option(
    "--progress-interval",
    type=float,
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    callback=lambda ctx, param, value: _interval(value),
    help="Without a terminal (CI, Kubernetes): log one progress line per migration this often (0.1 to 86400).",
)
@click.option(
    "--once",
    is_flag=True,
    help="One round (a coordinator step and one slice's time per lane, slice_ms), then exit: 0 when nothing is left, 31 when work remains.",
)
@tenant_options
@global_options
def run_(names: tuple[str, ...], all_: bool, concurrency: int, progress_interval: float, once: bool) -> int:
    """Run background migrations in this process until they end; Ctrl-C stops at the next batch.

    With --once, one bounded round for a cron job or a Kubernetes Job. On a terminal a live bar
    shows the progress; otherwise one plain line per migration goes to stderr every
    --progress-interval seconds (none with -q)."""
    if names and all_:
        raise ConfigInvalidError("NAMES and --all exclude each other: name the background migrations to run, or pass --all alone")
    if not names and not all_:
        raise ConfigInvalidError("name the background migrations to run, or pass --all")
    from ..api.session import connect  # start-up time: the engine loads only when a background command runs
    from .progress import log_progress, show_progress  # start-up time: as above, with rich's progress bar

    s = settings()
    out = output()
    if (tenants := requested()) is not None:
        return _run_across(s, tenants, None if all_ else list(names), concurrency, once, progress_interval)

    interrupted = False

    async def go(cancel: CancelSignal) -> list[BackgroundReport]:
        nonlocal interrupted
        async with connect(s, cancel=cancel) as ms:  # the run and its progress readings share one connection
            task = asyncio.create_task(ms.background.run(None if all_ else list(names), concurrency=concurrency, once=once))
            if out.quiet:
                pass
            elif out.out.is_terminal and not out.json_mode:
                await show_progress(ms.background.status, task, output().out, list(names) or None)
            else:
                await log_progress(ms.background.status, task, progress_interval, list(names) or None)
            reports = await task
            if all_ and reports and not cancel.is_set():
                _left_out(reports, await ms.background.status())
        interrupted = cancel.is_set()
        return reports

    reports = run_async(go, stopping=RUN_STOPPING, left_behind=RUN_LEFT_BEHIND)
    if all_ and not reports:
        _nothing_to_run(s)
        return 0
    verdict = run_verdict(reports, once=once and not interrupted, interrupted=interrupted)
    if verdict is None or not out.json_mode:
        _render(reports)
    if verdict is not None:
        raise verdict
    return 0


def _run_across(s: Settings, tenants: Tenants, names: list[str] | None, concurrency: int, once: bool, progress_interval: float) -> int:
    """``background run --all-tenants``: this process's ``--concurrency`` lanes shared between the tenants, one
    lane each, so ``--concurrency`` tenants run at once and a tenant with a huge collection never holds more
    than one lane; each tenant's migrations run to their end (``--once``: one round), then the next tenant starts.
    Each running tenant logs a progress line per migration every ``progress_interval`` seconds (none with -q),
    named by its tenant: a tenant's run may take hours, and the board only counts tenants."""
    from dataclasses import replace

    from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs
    from .progress import log_progress  # start-up time: as above

    if given("parallel"):
        raise TenantsInvalidError("background run shares its --concurrency lanes between tenants (one lane each): use --concurrency, not --parallel")

    async def call(ms: Mongoshift) -> _TenantRun:
        # --all runs what is pending, blocked or running: what waits for a person (failed, paused, cancelled) already
        # did before the run, and is named as one database's run --all names it
        before = await ms.background.status() if names is None else []
        task = asyncio.create_task(ms.background.run(names, concurrency=1, once=once))
        try:
            if not output().quiet:
                await log_progress(ms.background.status, task, progress_interval, names)
            reports = await task
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})
        return _TenantRun(reports, _waiting(reports, before))

    def judged(run: _TenantRun) -> Judged:
        verdict = run_verdict(run.reports, once=once)
        if verdict is not None:
            error = TenantError(verdict.kind, int(verdict.exit_code), verdict.message)
            # Ctrl-C stopped the tenant's lanes at a checkpoint: cancelled (a rerun goes on), not failed.
            return Judged("cancelled" if isinstance(verdict, RunAbortedError) else "failed", error=error, result=run)
        return Judged("done" if run.reports else "already at target", result=run)

    def not_runnable(report: RolloutReport) -> dict[str, Any]:
        if names is not None:
            return {}
        return {"not_runnable": {row.name: row.result.left_out for row in report.rows if isinstance(row.result, _TenantRun) and row.result.left_out}}

    return across(
        s, replace(tenants, parallel=concurrency), "background run", call,
        judge=judged, result_json=lambda run: [r.to_json() for r in run.reports], extra_json=not_runnable, left_behind=RUN_LEFT_BEHIND,
    )


@dataclass
class _TenantRun:
    """One tenant's ``background run``: its reports, and (``--all``) what it left out for a person, by name: status."""

    reports: list[BackgroundReport]
    left_out: dict[str, str]

    @property
    def warnings(self) -> list[str]:
        """What the table's tenant lines warn about, as one database's ``run --all`` does."""
        return [_left_out_words(self.left_out)] if self.left_out else []


def _nothing_to_run(s: Settings) -> None:
    """``run --all`` found nothing runnable: say so, and name what waits on a person (failed, paused...)."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs

    out = output()
    others = run_async(lambda cancel: per_call(s, cancel=cancel).background.status(), left_behind=READ_LEFT_BEHIND)
    if out.json_mode:
        out.json({"background": [], "not_runnable": {r.name: r.status for r in others}})
    else:
        out.say("nothing to run: no registered background migration is pending, blocked or running")
    _left_out([], others)  # on stderr with --json too, as when it ran others: a job's log names what waits for a person


def _left_out(reports: list[BackgroundReport], everything: list[BackgroundReport]) -> None:
    """``run --all`` names those it left out (failed, paused, cancelled: they wait for a person), whether it ran
    others (``reports``) or found nothing to run (docs/background.md)."""
    waiting = _waiting(reports, everything)
    if waiting:
        output().warn(_left_out_words(waiting))


def _waiting(reports: list[BackgroundReport], everything: list[BackgroundReport]) -> dict[str, str]:
    """The migrations of ``everything`` that ``run --all`` did not run (``reports``) and that wait for a person."""
    ran = {r.name for r in reports}
    return {r.name: r.status for r in everything if r.name not in ran and r.status in ("failed", "paused", "cancelled")}


def _left_out_words(waiting: dict[str, str]) -> str:
    listed = ", ".join(f"{name} ({status})" for name, status in waiting.items())
    return f"not run by --all: {listed}; see 'mongoshift background status NAME', then resume or retry"


def _each(command: str, names: list[str]) -> str:
    """The command that takes up the one migration named, or each of several (``NAME``, then, in their place)."""
    if len(names) == 1:
        return f"'mongoshift background {command} {names[0]}'"
    return f"for each, 'mongoshift background {command} NAME'"


def run_verdict(reports: list[BackgroundReport], *, once: bool = False, interrupted: bool = False) -> MongoshiftError | None:
    """How a ``background run`` ends, by the most serious outcome among its migrations.

    A failure (32) needs a person; a run stopped by a signal before the end (11) did not do
    what was asked; a cancelled migration (37) will not go on without ``retry``; a paused one
    (36) goes on after ``resume``; one still blocked at the end of a run that was not
    ``interrupted`` waits for a requirement that only a person moves on (24: failed, paused or
    cancelled); after a ``--once`` round (``once``, not interrupted), work left (31) only needs
    the next round. Every migration named still ran; the order of the names plays no part.
    ``details`` lists the migration names by outcome, and every report.
    """
    by: dict[str, list[str]] = {"failed": [], "stopped": [], "cancelled": [], "paused": []}
    unfinished = "stopped"
    if once:
        by["remaining"] = []
        unfinished = "remaining"
    if not once and not interrupted and any(r.status == "blocked" for r in reports):
        by["held"] = []  # a run ends on a blocked one only when its requirement waits for a person
    for r in reports:
        outcome = unfinished if r.status in ("pending", "running", "blocked") else r.status
        if r.status == "blocked" and "held" in by:
            outcome = "held"
        if outcome in by:
            by[outcome].append(r.name)
    details = {**by, "background": [r.to_json() for r in reports]}
    failed = [r for r in reports if r.status == "failed"]
    if failed:
        return BackgroundFailedError(f"failed: {', '.join(by['failed'])}: {failed[0].last_error}", **details)
    if by["stopped"]:
        return RunAbortedError("stopped before the end; run it again to continue from the checkpoints", **details)
    if by["cancelled"]:
        names = ", ".join(by["cancelled"])
        return BackgroundCancelledError(f"cancelled: {names}; {_each('retry', by['cancelled'])} takes it up again", **details)
    if by["paused"]:
        names = ", ".join(by["paused"])
        return BackgroundPausedError(f"paused: {names}; {_each('resume', by['paused'])} continues it", **details)
    if by.get("held"):
        held = [r for r in reports if r.name in by["held"]]
        waits = sorted({w for r in held for w in r.waits_for})
        return RequirementsPendingError(
            f"blocked: {', '.join(by['held'])}, on {', '.join(waits)}, which only a person moves on (failed, paused or "
            f"cancelled: see 'mongoshift background status NAME', then retry or resume {'it' if len(waits) == 1 else 'them'}; "
            "rolled back: 'mongoshift up' it again); "
            f"run this again once {'it' if len(waits) == 1 else 'they'} completed",
            **details, waits_for=waits,
        )
    if by.get("remaining"):
        left = ", ".join(
            f"{r.name} ({r.status}{', about ' + plural(r.remaining, 'document') + ' left' if r.remaining else ''})"
            for r in reports if r.name in by["remaining"]
        )
        return BackgroundPendingError(f"work remains after this round: {left}; run it again to continue", **details)
    return None


@background.command(name="status")
@click.argument("name", required=False)
@click.option("--partitions", "show_partitions", is_flag=True, help="List the partitions of NAME's current pass.")
@click.option("--check", is_flag=True, help="Exit 32 if any failed, 31 if any is not completed.")
@tenant_options
@global_options
def status_(name: str | None, show_partitions: bool, check: bool) -> int:
    """Status, pass, partitions, leases, totals, rate and ETA of background migrations."""
    from ..api import background as bg  # start-up time: the engine loads only when a background command runs
    from ..api.session import connect, per_call

    s = settings()
    out = output()
    if (tenants := requested(reading=True)) is not None:
        if show_partitions:
            raise ConfigInvalidError("--partitions shows one database's partitions: use --db TENANT")
        return _status_across(s, tenants, name, check)
    if show_partitions:
        if not name:
            raise ConfigInvalidError("--partitions needs a NAME")
        rows = run_async(lambda cancel: per_call(s, cancel=cancel).background.partitions(name), left_behind=READ_LEFT_BEHIND)
        shards = bg.per_shard(rows)
        if out.json_mode:
            out.json({"partitions": [r.__dict__ for r in rows], "shards": [p.__dict__ for p in shards]})
        else:
            out.table(
                ["seq", "status", "shard", "bracket", "estimate", "scanned", "migrated", "failed", "leased", "slot", "failures"],
                [(r.seq, r.status, r.shard or "", r.bracket, r.estimate, r.scanned, r.migrated, r.failed, "yes" if r.leased else "", r.slot,
                    r.failures) for r in rows],
            )
            if shards:
                out.table(
                    ["shard", "partitions", "done", "estimate", "scanned", "migrated", "failed", "leased"],
                    [(p.shard, p.partitions, p.done, p.estimate, p.scanned, p.migrated, p.failed, p.leased) for p in shards],
                )
        return 0
    async def both(cancel: CancelSignal) -> tuple[list[BackgroundReport], list[WatchRecord]]:
        async with connect(s, cancel=cancel) as ms:  # two reads, one connection
            return await ms.background.status(name), await ms.background.watch_status()

    reports, watchers = run_async(both, left_behind=READ_LEFT_BEHIND)
    if name is not None:
        watchers = [w for w in watchers if any(w.collection == r.collection for r in reports)]
    _render(reports, detail=name is not None, watchers=watchers)
    if check and (verdict := _check_verdict(reports)) is not None:
        code, said = verdict
        out.warn(said)
        return code
    return 0


def _check_verdict(reports: list[BackgroundReport]) -> tuple[int, str] | None:
    """What ``background status --check`` fails with, naming the migrations: a failed one (32), else one
    not completed (31, with its status); None when every one completed."""
    failed = [r.name for r in reports if r.status == "failed"]
    if failed:
        first = failed[0].removesuffix(".py")
        return int(ExitCode.BACKGROUND_FAILED), (
            f"background migrations failed: {', '.join(failed)} ('mongoshift background status {first}' says why)"
        )
    unfinished = [f"{r.name} ({r.status})" for r in reports if r.status != "completed"]
    if unfinished:
        return int(ExitCode.BACKGROUND_PENDING), f"background migrations not completed: {', '.join(unfinished)}"
    return None


def _status_across(s: Settings, tenants: Tenants, name: str | None, check: bool) -> int:
    """``background status`` of each tenant: per tenant, migration, state and progress; ``--check`` fails a tenant
    with a failed (32) or unfinished (31) migration."""
    from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs

    def judged(reports: list[BackgroundReport]) -> Judged:
        error = None
        if check and (verdict := _check_verdict(reports)) is not None:
            code, said = verdict
            kind = "background_failed" if code == int(ExitCode.BACKGROUND_FAILED) else "background_pending"
            error = TenantError(kind, code, said)
        return Judged("done", error=error, result=reports)

    def per_tenant(report: RolloutReport) -> None:
        rows = [
            (row.name, r.name, r.status, f"{r.partitions_done}/{r.partitions_total}", r.totals.get("migrated", 0), r.remaining)
            for row in report.rows for r in (row.result or [])
        ]
        if rows:
            output().table(["tenant", "migration", "state", "partitions done", "migrated", "remaining"], rows, title="background migrations")
        else:  # as for one database, not a table of headers alone
            output().say("no background migrations registered in the selected tenants")

    return across(
        s, tenants, "background status", lambda ms: ms.background.status(name), judge=judged, scan=False,
        result_json=lambda reports: [r.to_json() for r in reports], before_table=per_tenant,
    )


def _render_watchers(watchers: list[WatchRecord]) -> None:
    """One row per watched collection: its state, leader, counters (never its position)."""
    rows = [
        (
            w.collection,
            w.state,
            f"{(w.leader or {}).get('host', '-')}:{(w.leader or {}).get('pid', '-')}",
            ", ".join(w.guards) or "-",
            *(w.counters[k] for k in ("events", "upgraded", "skipped", "stranded", "failed", "restarts", "reopened")),
            w.updated_at.isoformat(timespec="seconds") if w.updated_at else "-",
        )
        for w in watchers
    ]
    output().table(
        ["collection", "state", "leader", "guards", "events", "upgraded", "skipped", "stranded", "failed", "restarts", "reopened", "saved"],
        rows,
        title="live watchers",
    )


@background.command(name="watch")
@click.option("--collections", metavar="A,B", help="Only these collections (default: every collection with a completed migration).")
@click.option("--save-interval", type=FloatRange(0.1, 3600), default=5.0, show_default=True, metavar="SECONDS",
    help="How often the leader saves its position.")
@click.option("--max-lag", type=FloatRange(1, 86_400), default=60.0, show_default=True, metavar="SECONDS",
    help="Behind by more than this, it reopens the migrations instead.")
@tenant_options
@global_options
def watch_(collections: str | None, save_interval: float, max_lag: float) -> int:
    """Upgrade old-shape documents written after their migration completed, as they land.

    One process leads each collection, the others wait to take over. Runs until Ctrl-C or
    SIGTERM, then saves its position, lets go of its leases and exits 0 (a second signal: 130/143).
    With tenants, one process watches every selected tenant at once."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs
    from ..background.watch.watcher import WatchOptions

    names: tuple[str, ...] | None = None
    if collections is not None:
        names = tuple(c.strip() for c in collections.split(","))
        if not all(names):
            raise ConfigInvalidError(f"--collections takes collection names separated by commas, not {collections!r}")
        from ..schema.validation import refused_collection_name  # start-up time: only when this command runs

        for name in names:
            if (why := refused_collection_name(name)) is not None:
                raise ConfigInvalidError(f"--collections {name!r}: {why}")
    options = WatchOptions(collections=names, save_seconds=save_interval, max_lag_seconds=max_lag)
    s = settings()
    if (tenants := requested()) is not None:
        return _watch_across(s, tenants, options)
    records = run_async(lambda cancel: per_call(s, cancel=cancel).background.watch(options), stopping=WATCH_STOPPING, left_behind=WATCH_LEFT_BEHIND)
    out = output()
    if out.json_mode:
        out.json({"watch": [r.to_json() for r in records]})
    elif records:
        _render_watchers(records)
    return 0


def _watch_across(s: Settings, tenants: Tenants, options: WatchOptions) -> int:
    """``background watch --all-tenants``: every selected tenant's watcher at once in this process, until the
    signal; a tenant whose watcher fails stops the process (exit 47) unless ``--continue-on-error``."""
    from dataclasses import replace

    from ..api.tenants import select_tenants  # start-up time: loaded only when this command runs
    from ..tenants.rollout import MAX_PARALLEL

    for flag in ("parallel", "canary"):
        if given(flag):
            raise TenantsInvalidError(f"background watch runs every selected tenant's watcher at once: --{flag} does not apply")
    count = len(run_async(lambda cancel: select_tenants(s, tenants, cancel=cancel)))  # a Ctrl-C meanwhile is the end, not lost
    if count > MAX_PARALLEL:
        raise TenantsInvalidError(
            f"background watch would hold {count} tenants' change streams in one process (at most {MAX_PARALLEL}): "
            "split them between processes with --tenants PATTERN or --tenant NAME",
            selected=count,
        )
    return across(
        s, replace(tenants, parallel=count, canary=0), "background watch", lambda ms: ms.background.watch(options),
        scan=False, until_signal=True, stopping=WATCH_STOPPING, left_behind=WATCH_LEFT_BEHIND, result_json=lambda records: [r.to_json() for r in records],
    )


def _registered_before_asking(s: Settings, name: str, yes: bool, tenants: object) -> None:
    """Refuse (exit 9) a NAME no background migration is registered under before asking about it: a
    prompt, or exit 42 without a terminal, about a typo helps nobody. Across tenants each tenant's row
    answers for itself."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs

    if not yes and tenants is None:
        run_async(lambda cancel: per_call(s, cancel=cancel).background.status(name), left_behind=READ_LEFT_BEHIND)


def _question(action: Action, name: str, from_start: bool, tenants: bool) -> str:
    """What a control that asks first asks: the question, then what a yes does."""
    where = " in every selected tenant" if tenants else ""
    if from_start:
        return (f"Retry {name} from the start{where}? Its checkpoints, passes and failed documents are forgotten "
                "and the pass is planned anew.")
    if action == "cancel":
        return f"Cancel {name}{where}? Its lanes stop at their next batch, and it stays cancelled until 'background retry'."
    return f"Unlock {name}{where}? Its leases and coordinator lock are cleared: do it only when their runner is gone."


def _control(action: Action, name: str, reason: str | None, yes: bool, from_start: bool = False, repin: bool = False) -> None:
    """One control of NAME (here or in each selected tenant); ``repin`` (retry --repin) pins the file
    first, after the confirmation, so that a refused confirmation changes nothing."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs
    from ..background.state.events import shown_by_caller

    s = settings()
    tenants = requested()
    if action in ("cancel", "unlock") or from_start:
        _registered_before_asking(s, name, yes, tenants)
        confirm(_question(action, name, from_start, tenants is not None), yes)

    async def act(ms: Mongoshift) -> tuple[Any, Any]:
        pinned = await ms.background.repin(name, reason=reason) if repin else None
        return pinned, await ms.background.control(name, action, reason=reason, from_start=from_start)

    def as_json(done: tuple[Any, Any]) -> dict[str, Any]:
        pinned, r = done
        return {"name": r.name, "action": r.action, "applied": r.applied, "status": r.status} | ({"repin": _pinned_json(pinned)} if pinned else {})

    if tenants is not None:
        from ..tenants.report import Judged  # start-up time: loaded only when this command runs

        code = across(
            s, tenants, f"background {action}", act,
            judge=lambda done: Judged("done" if done[1].applied == "applied" else "already at target", result=done), scan=False,
            result_json=as_json, left_behind=control_left_behind(name),
        )
        if code:
            raise click.exceptions.Exit(code)
        return
    with shown_by_caller("control"):  # the line below says it
        pinned, result = run_async(lambda cancel: act(per_call(s, cancel=cancel)), left_behind=control_left_behind(name))
    out = output()
    if out.json_mode:
        out.json(as_json((pinned, result)))
    else:
        first = f"{_pinned_text(pinned)}; " if pinned else ""
        out.say(f"{result.name}: {first}{action} {'done' if result.applied == 'applied' else 'unchanged (nothing to do)'}; now {result.status}")


@background.command(name="dry-run")
@click.argument("file")
@click.option("--sample", type=IntRange(1, 1000), metavar="N", help="N documents of the old shape at random (the default, 5).")
@click.option("--first", type=IntRange(1, 1000), metavar="N", help="The first N documents of the old shape by _id.")
@click.option("--revert", is_flag=True, help="Preview the declared revert instead (documents at to_version).")
@click.option("--validate", is_flag=True,
    help="Write each document in a transaction that is always aborted: the server's verdict per document; the transform runs in a sandbox.")
@click.option("--steps", type=IntRange(1, 100), metavar="K", help="With --validate, a step migration: up to K step calls (default 1).")
@tenant_options
@global_options
def dry_run(file: str, sample: int | None, first: int | None, revert: bool, validate: bool, steps: int | None) -> int | None:
    """Preview FILE on a few documents: before, the exact update the engine would send, after.

    FILE need not be registered. Reads only: no lock, no write, any server. Shows document
    values and _ids (only here); --json prints them as relaxed Extended JSON. --validate needs
    transactions (exit 15 without) and exits 34 when the sandbox refused an operation.
    With tenants, a preview per tenant (a tenant the sandbox refused fails with 34)."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs

    s = settings()

    def preview(ms: Mongoshift) -> Awaitable[Preview]:
        return ms.background.preview(file, sample=sample, first=first, revert=revert, validate=validate, steps=steps)

    if (tenants := requested(reading=True)) is not None:
        return _dry_run_across(s, tenants, preview)
    result = run_async(lambda cancel: preview(per_call(s, cancel=cancel)), left_behind=READ_LEFT_BEHIND)
    out = output()
    if out.json_mode:
        out.json({"preview": result.to_json()})
    elif not out.quiet:
        _show_preview(result)
    if result.refusals:
        return int(ExitCode.SANDBOX_REFUSED)
    # A step migration's calls stopped by Ctrl-C are shown (stopped: cancelled), and the exit says it, as any stop's.
    return int(ExitCode.ABORTED) if result.stopped == "cancelled" else None


def _show_preview(result: Preview) -> None:
    from . import preview_view as view  # start-up time: rich loads only when a preview is shown

    out = output()
    if out.out.is_terminal:
        view.render(out.out, result)
    else:
        view.plain(result)


def _dry_run_across(s: Settings, tenants: Tenants, preview: Callable[[Mongoshift], Awaitable[Preview]]) -> int:
    """``background dry-run --all-tenants``: each tenant's preview, under its name, then the per-tenant table."""
    from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs

    def judged(result: Preview) -> Judged:
        if result.refusals:
            refused = TenantError("sandbox_refused", int(ExitCode.SANDBOX_REFUSED), f"the sandbox refused {plural(len(result.refusals), 'operation')}")
            return Judged(error=refused, result=result)
        return Judged("done", result=result)

    def each(report: RolloutReport) -> None:
        out = output()
        for row in report.rows:
            if row.result is not None and not out.quiet:
                out.say(f"tenant {row.name}:")
                _show_preview(row.result)

    return across(
        s, tenants, "background dry-run", preview, judge=judged, scan=False,
        result_json=lambda result: result.to_json(), before_table=each,
    )


REASON = click.option("--reason", help="Why: recorded in the migration's history.")
YES = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


@background.command()
@click.argument("name")
@REASON
@tenant_options
@global_options
def pause(name: str, reason: str | None) -> None:
    """Pause NAME: lanes stop at their next batch."""
    _control("pause", name, reason, True)


@background.command()
@click.argument("name")
@REASON
@tenant_options
@global_options
def resume(name: str, reason: str | None) -> None:
    """Resume a paused NAME from its checkpoints."""
    _control("resume", name, reason, True)


@background.command()
@click.argument("name")
@REASON
@YES
@tenant_options
@global_options
def cancel(name: str, reason: str | None, yes: bool) -> None:
    """Cancel NAME (retry brings it back)."""
    _control("cancel", name, reason, yes)


@background.command()
@click.argument("name")
@click.option("--from-start", is_flag=True, help="Forget checkpoints, passes and failed documents and plan anew (the other totals keep counting).")
@click.option("--repin", "repin_", is_flag=True, help="Pin the file as it is on disk first (after fixing the code).")
@REASON
@YES
@tenant_options
@global_options
def retry(name: str, from_start: bool, repin_: bool, reason: str | None, yes: bool) -> None:
    """Retry a failed or cancelled NAME (or reopen a completed one)."""
    _control("retry", name, reason, yes, from_start=from_start, repin=repin_)


def _repin(name: str, reason: str | None) -> None:
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs
    from ..background.state.events import shown_by_caller

    s = settings()
    with shown_by_caller("control"):  # the line below says it
        result = run_async(lambda cancel: per_call(s, cancel=cancel).background.repin(name, reason=reason), left_behind=control_left_behind(name))
    out = output()
    if out.json_mode:
        out.json(_pinned_json(result))
    else:
        out.say(f"{result.name}: {_pinned_text(result)}")


def _pinned_json(result: Any) -> dict[str, Any]:
    return {"name": result.name, "applied": result.applied, "checksum": result.checksum, "replan": result.replan}


def _pinned_text(result: Any) -> str:
    note = "; the pass is re-cut" if result.replan else ""
    return f"{'pinned ' + result.checksum[:12] if result.applied == 'applied' else 'already pinned'}{note}"


@background.command()
@click.argument("name")
@REASON
@YES
@tenant_options
@global_options
def repin(name: str, reason: str | None, yes: bool) -> None:
    """Pin NAME's file as it is on disk now, so lanes run this version (after a deploy changed it)."""
    tenants = requested()
    _registered_before_asking(settings(), name, yes, tenants)
    confirm(f"Pin the current file of {name}{' in every selected tenant' if tenants else ''}? Lanes running the old code will wait.", yes)
    if tenants is not None:
        from ..tenants.report import Judged  # start-up time: loaded only when this command runs

        code = across(
            settings(), tenants, "background repin", lambda ms: ms.background.repin(name, reason=reason),
            judge=lambda r: Judged("done" if r.applied == "applied" else "already at target", result=r), scan=False,
            result_json=lambda r: {"name": r.name, "applied": r.applied, "checksum": r.checksum, "replan": r.replan},
            left_behind=control_left_behind(name),
        )
        if code:
            raise click.exceptions.Exit(code)
        return
    _repin(name, reason)


@background.command()
@click.argument("name")
@click.option("--batch-size", type=int, default=None, help="Documents per batch, 1 to 10,000 (wins over the adaptive controller).")
@click.option("--pause-ms", type=int, default=None, help="Pause between batches in milliseconds, 0 to 3,600,000.")
@click.option("--clear", is_flag=True, help="Go back to the pace the file declares.")
@REASON
@tenant_options
@global_options
def throttle(name: str, batch_size: int | None, pause_ms: int | None, clear: bool, reason: str | None) -> None:
    """Change NAME's pace while it runs: lanes take it before their next batch (exit 53 for a bad value)."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs
    from ..background.state.controls import PACE_FLAGS, checked_pace
    from ..background.state.events import shown_by_caller

    checked_pace(batch_size, pause_ms, clear=clear, names=PACE_FLAGS)  # refused before any connection, naming the flags
    s = settings()
    tenants = requested()

    def change(ms: Any) -> Any:
        return ms.background.throttle(name, batch_size=batch_size, pause_ms=pause_ms, clear=clear, reason=reason)

    def as_json(r: Any) -> dict[str, Any]:
        return {"name": r.name, "action": "throttle", "applied": r.applied, "status": r.status, "throttle": r.throttle}

    if tenants is not None:
        from ..tenants.report import Judged  # start-up time: loaded only when this command runs

        code = across(
            s, tenants, "background throttle", change,
            judge=lambda r: Judged("done" if r.applied == "applied" else "already at target", result=r), scan=False, result_json=as_json,
            left_behind=control_left_behind(name),
        )
        if code:
            raise click.exceptions.Exit(code)
        return
    with shown_by_caller("control"):  # the line below says it
        result = run_async(lambda cancel: change(per_call(s, cancel=cancel)), left_behind=control_left_behind(name))
    out = output()
    if out.json_mode:
        out.json(as_json(result))
    else:
        out.say(f"{result.name}: throttle {'done' if result.applied == 'applied' else 'unchanged (nothing to do)'}; pace now {result.pace}")


@background.command()
@click.argument("name")
@REASON
@YES
@tenant_options
@global_options
def unlock(name: str, reason: str | None, yes: bool) -> None:
    """Clear NAME's leases and coordinator lock (after lanes were killed and you cannot wait for the TTL)."""
    _control("unlock", name, reason, yes)


@background.command()
@click.argument("names", nargs=-1)
@click.option("--reopen", is_flag=True, help="Give each migration where old shapes are found one more pass (then 'background run' does it).")
@click.option("--report", is_flag=True, help="Only report what is found (the default).")
@tenant_options
@global_options
def verify(names: tuple[str, ...], reopen: bool, report: bool) -> int:
    """Look once for old-shape documents written after each completed migration (NAMEs, or all).

    Exit 31 when some are found (reported or reopened), 0 otherwise; never shows a document id."""
    from ..api.session import per_call  # start-up time: the engine loads only when a background command runs

    if reopen and report:
        raise ConfigInvalidError("--reopen and --report exclude each other: pick one (--report is the default)")
    from ..background.state.events import shown_by_caller

    s = settings()
    if (tenants := requested(reading=True)) is not None:
        from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs

        def judged(results: list[Verified]) -> Judged:
            # What was found, each in its words (as the table's labels): stranded documents alone are no old shapes.
            drifted = [r.migration for r in results if r.found]
            stranded = [r.migration for r in results if r.stranded]
            found = [f"old shapes found: {', '.join(drifted)}"] if drifted else []
            found += [f"documents at a version no migration upgrades: {', '.join(stranded)}"] if stranded else []
            error = TenantError("background_pending", int(ExitCode.BACKGROUND_PENDING), "; ".join(found)) if found else None
            return Judged("done", error=error, result=results)

        with shown_by_caller("drift"):
            return across(
                s, tenants, "background verify", lambda ms: ms.background.verify(list(names) or None, reopen=reopen),
                judge=judged, scan=False, result_json=lambda results: [r.to_json() for r in results],
            )
    with shown_by_caller("drift"):  # the table (or the JSON document) and the warning below say it
        results = run_async(lambda cancel: per_call(s, cancel=cancel).background.verify(list(names) or None, reopen=reopen), left_behind=VERIFY_LEFT_BEHIND)
    out = output()
    drifted = [r.migration for r in results if r.found]
    stranded = [r.migration for r in results if r.stranded]
    if out.json_mode:
        out.json({"verify": [r.to_json() for r in results], "drift": drifted, "stranded": stranded})
    elif not results:
        out.say("no background migrations registered")
    else:
        out.table(["migration", "collection", "result", "why"], [(r.migration, r.collection, *_verdict(r)) for r in results])
    if drifted:
        which = " ".join(name.removesuffix(".py") for name in drifted) if len(drifted) <= 3 else "--all"
        action = f"reopened for another pass ('mongoshift background run {which}' does it)" if reopen else "reported (--reopen gives it another pass)"
        out.warn(f"old-shape documents written after completion: {', '.join(drifted)}; {action}")
    if stranded:
        out.warn(
            f"documents below the version of {', '.join(stranded)} at a version no migration upgrades, or whose version "
            "is not a number: no pass can rewrite them (a migration from their version can; a version that is not a "
            "number, such as text, cannot be migrated from: store it as a number)"
        )
    if drifted or stranded:
        return int(ExitCode.BACKGROUND_PENDING)
    return 0


def _verdict(r: Verified) -> tuple[str, str]:
    """The ``result`` and ``why`` cells of a verify row."""
    from ..background.inspect.drift import SKIP_REASONS

    if r.action == "skipped":
        why = SKIP_REASONS.get(r.reason or "", r.reason or "")
        return f"skipped ({r.reason})", f"{why} ({r.detail})" if r.detail else why
    if r.action == "clean":
        return "clean", ""
    # What was found decides the label: stranded documents alone are no drift (no pass can rewrite them).
    labels = [f"drift: {r.action}"] if r.found else []
    labels += ["stranded: reported"] if r.stranded else []
    found = ["old-shape documents found"] if r.found else []
    found += ["documents at a version no migration upgrades"] if r.stranded else []
    return "; ".join(labels), "; ".join(found)
