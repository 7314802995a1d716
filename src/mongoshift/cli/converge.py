"""``mongoshift converge``: make the server's indexes and validators match the declared collections."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from ..errors import ConfigInvalidError, ExitCode, MongoshiftError
from ..project.wording import plural
from .app import CONVERGE_LEFT_BEHIND, WAIT_HELP, FloatRange, can_ask, global_options, output, run_async, settings
from .tenants import across, requested, tenant_options

if TYPE_CHECKING:
    from ..api.options import Confirmation
    from ..converge.planner import Action
    from ..converge.report import ConvergeReport
    from ..project.run import CancelSignal


def _rows(actions: list[tuple[Action, str, str | None]]) -> list[tuple[str, ...]]:
    """Table rows: the status alone in its column, and why in the note (the error of a failed action, else the plan's reason)."""
    return [
        (a.collection, a.target, a.name or "", a.action, status, error or a.reason or "")
        for a, status, error in actions
    ]


def render(report: ConvergeReport, *, title: str | None = None) -> None:
    """The plan or outcome as a table: rows that change something, conflicts, and kept indexes."""
    out = output()
    for warning in report.warnings:
        out.warn(warning)
    # report.unstable: converge logged each line as a warning already (for `up --converge` and the API too)
    if out.json_mode:
        out.json(report.to_json())
        return
    shown: list[tuple[Action, str, str | None]] = [(r.action, r.status, r.error) for r in report.results if r.action.action != "unchanged"]
    if shown:
        out.table(["collection", "target", "name", "action", "status", "note"], _rows(shown), title=title)
    unchanged = sum(1 for a in report.actions if a.action == "unchanged")
    collections = max(report.declared, len({a.collection for a in report.actions}))
    if not report.drift:
        out.say(f"in sync: {plural(collections, 'collection')}, {plural(unchanged, 'item')} as declared")
    elif unchanged:
        out.say(f"{plural(unchanged, 'item')} already as declared")


def question(actions: list[Action]) -> str:
    """What the prompt asks before destructive steps: it names what they do (a drop leaves no gap to mention)."""
    rebuilds = sum(1 for a in actions if a.action == "rebuild")
    count = plural(len(actions), "index", "indexes")
    if not rebuilds:
        return f"Drop {count}?"
    gap = "An index is missing while it rebuilds." if len(actions) > 1 else "It is missing while it rebuilds."
    return f"{'Rebuild' if rebuilds == len(actions) else 'Drop or rebuild'} {count}? {gap}"


def interactive_confirm(yes: bool) -> Callable[[CancelSignal], Confirmation]:
    """``--yes`` and the terminal as the API's one confirmation, given the run's stop signal: True with ``--yes``,
    else a callback that asks before destructive steps on a terminal, else False (they are refused).

    Called before the run (it reads the command line's options); the run's ``cancel`` is given to what it returns.
    The question waits in a thread of its own, so the lock's heartbeat keeps running while the user reads, and a
    Ctrl-C (``cancel``) at the prompt is the answer "no" at once (exit 11, nothing changed): the run does not wait
    for a line that may never come, nor leave its lock behind for a second Ctrl-C."""
    out = output()
    if yes or not can_ask():
        return lambda _cancel: yes

    def bound(cancel: CancelSignal) -> Confirmation:
        async def ask(actions: list[Action]) -> bool:
            rows = [(a.collection, a.name or "", a.action, a.reason or "") for a in actions]
            out.table(["collection", "name", "action", "why"], rows, title="destructive steps")
            asked = question(actions)
            loop = asyncio.get_running_loop()
            answer: asyncio.Future[bool] = loop.create_future()

            def prompt() -> None:
                try:
                    said = bool(click.confirm(asked, default=False))
                except (click.Abort, EOFError, OSError):  # end of input, a closed terminal: no consent
                    said = False

                def settle() -> None:
                    if not answer.done():
                        answer.set_result(said)

                try:
                    loop.call_soon_threadsafe(settle)
                except RuntimeError:  # answered after the run ended (stopped at the prompt): nobody waits any more
                    pass

            # a daemon thread: one left reading the terminal after a Ctrl-C must not hold the process open
            threading.Thread(target=prompt, name="mongoshift-prompt", daemon=True).start()
            while not answer.done():
                if cancel.is_set():
                    return False
                await asyncio.wait({answer}, timeout=0.1)
            return answer.result()

        return ask

    return bound


@click.command(name="converge")
@click.option("--dry-run", is_flag=True, help="Print the plan; write nothing (no lock).")
@click.option("--check", is_flag=True, help="Exit 28 when the server differs from the declarations (for CI); write nothing.")
@click.option("--prune", is_flag=True, help="Drop indexes that are not declared (never _id_ or a shard-key index).")
@click.option("--yes", "-y", is_flag=True, help="Allow rebuilds and drops without asking.")
@click.option("--no-lock", is_flag=True, help="Do not take the migration lock (local work only).")
@click.option("--wait", type=FloatRange(min=0), is_flag=False, flag_value=600.0, default=None, metavar="[SECONDS]", help=WAIT_HELP)
@click.option("--reason", metavar="TEXT", help="Why: recorded in the converge log (at most 512 characters).")
@tenant_options
@global_options
def converge_command(dry_run: bool, check: bool, prune: bool, yes: bool, no_lock: bool, wait: float | None, reason: str | None) -> int:
    """Create, modify, rebuild or (with --prune) drop indexes and validators to match the declared collections."""
    from ..api.options import Lock  # start-up time: converge loads only when this command runs
    from ..api.session import per_call

    if dry_run and check:
        raise ConfigInvalidError("--dry-run and --check cannot be combined: both write nothing; --check also exits 28 when the server differs")
    from ..converge.orchestrator import REASON_LIMIT  # start-up time: as above
    from ..project.redaction import recorded_text

    recorded_text("--reason", reason, REASON_LIMIT)  # refused the same with --dry-run and --check, where it is not recorded
    s = settings()
    out = output()
    if (tenants := requested(reading=dry_run or check)) is not None:
        return _converge_across(s, tenants, dry_run=dry_run, check=check, prune=prune, yes=yes, lock=Lock(not no_lock, wait), reason=reason)
    if dry_run or check:
        report = run_async(lambda cancel: per_call(s, cancel=cancel).collections.plan(prune=prune, check=check))
        render(report, title="check: nothing was written" if check else "dry run: nothing was written")
        if report.conflicts:
            out.warn(f"{plural(len(report.conflicts), 'conflict')}: converge would refuse to run")
        if check and not report.in_sync:
            out.warn(f"{plural(len(report.drift), 'difference')} from the declared collections")
            return int(ExitCode.COLLECTIONS_DRIFT)
        if report.conflicts:
            return int(ExitCode.CONVERGE_FAILED)
        return 0
    confirm = interactive_confirm(yes)
    try:
        report = run_async(
            lambda cancel: per_call(s, cancel=cancel).collections.converge(
                prune=prune, confirm=confirm(cancel), lock=Lock(not no_lock, wait), reason=reason
            ),
            left_behind=CONVERGE_LEFT_BEHIND,
        )
    except MongoshiftError as exc:  # refused, failed, stopped by Ctrl-C or awaiting --yes: the steps and what became of them
        if not out.json_mode and "converge" in exc.details:
            render_failed(exc.details["converge"])
        raise
    render(report)
    return 0


def render_failed(body: dict[str, Any]) -> None:
    """A refused or failed run's warnings and rows, from the report in the error's details (the warnings of a plan
    refused for want of --yes say what it would have dropped: ``indexes = []`` with prune)."""
    for warning in body.get("warnings", []):
        output().warn(warning)
    rows = [
        (r["collection"], r["target"], r["name"] or "", r["action"], r["status"], r.get("error") or r["reason"] or "")
        for r in body.get("actions", [])
        if r["action"] != "unchanged"
    ]
    if rows:
        output().table(["collection", "target", "name", "action", "status", "note"], rows)


def _converge_across(s: Any, tenants: Any, *, dry_run: bool, check: bool, prune: bool, yes: bool, lock: Any, reason: str | None) -> int:
    """``converge`` in each selected tenant: ``--dry-run`` / ``--check`` read every tenant (a tenant that differs
    fails the check with 28, one whose plan has a conflict with 27); a real converge asks nothing: ``--yes``
    allows its destructive steps, else they are refused in each tenant."""
    from ..tenants.report import Judged, TenantError  # start-up time: loaded only when this command runs

    def judged(report: ConvergeReport) -> Judged:
        if check and not report.in_sync:
            return Judged(error=TenantError("collections_drift", int(ExitCode.COLLECTIONS_DRIFT), plural(len(report.drift), "difference")), result=report)
        if report.conflicts:
            return Judged(error=TenantError("converge_failed", int(ExitCode.CONVERGE_FAILED), plural(len(report.conflicts), "conflict")), result=report)
        if dry_run or check:  # would it change something (an undeclared index kept is no change)
            return Judged("done" if report.drift else "already at target", applied=0, result=report)
        applied = sum(1 for r in report.results if r.status == "applied")
        return Judged("done" if applied else "already at target", applied=applied, result=report)

    if dry_run or check:
        return across(s, tenants, "converge --check" if check else "converge --dry-run",
                      lambda ms: ms.collections.plan(prune=prune, check=check), judge=judged, scan=False, result_json=lambda r: r.to_json())
    return across(s, tenants, "converge", lambda ms: ms.collections.converge(prune=prune, confirm=yes, lock=lock, reason=reason),
                  judge=judged, scan=False, result_json=lambda r: r.to_json())
