"""Converge on an open session: plan from what the server has, then apply collection by collection.

A run always plans first: it reads every declared collection and computes
every action before writing anything, so a conflict (or a destructive step
nobody approved) refuses the whole run with nothing changed. Applying happens
under the session's lock, collection by collection; a failure stops the run
after the collection it happened in, and the rest is reported as skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from ..errors import (
    ConfirmationRequiredError,
    ConvergeFailedError,
    MongoshiftError,
    RunAbortedError,
)
from ..project.events import end_fields
from ..project.redaction import describe_error, recorded_text
from ..project.session import Session
from ..project.wording import plural
from ..schema.collections import CollectionDeclaration
from .applier import ActionResult, Applier, ApplyFailed, ApplyStopped, Confirm, Status
from .inspection import CollectionState, inspect_all
from .journal import ConvergeJournal
from .planner import DROPS_OWN_RULES, Plan, plan
from .report import ConvergeReport, Trigger, listing

log = logging.getLogger("mongoshift.converge")


def _planned(p: Plan) -> list[ActionResult]:
    status: dict[str, Status] = {"conflict": "refused"}
    return [ActionResult(a, status.get(a.action, "planned" if a.changing else "ok")) for a in p.actions]


def _warnings(p: Plan, declarations: list[CollectionDeclaration]) -> list[str]:
    """Notes on the plan: undeclared twins accepted, stored documents that fail a new validator, and an empty index
    list that prunes everything."""
    warnings = [a.describe() for a in p.actions if (a.action == "unchanged" and a.reason) or a.reason == DROPS_OWN_RULES]
    warnings += [f"{a.collection}: {a.warning}" for a in p.actions if a.warning]
    for declaration in declarations:
        if declaration.indexes != () or declaration.index_specs():
            continue
        drops = [a.name or "" for a in p.actions if a.collection == declaration.name and a.target == "index" and a.action == "drop"]
        if drops:
            warnings.append(
                f"{declaration.name}: indexes = [] with prune drops every index but _id_ "
                f"({len(drops)}: {', '.join(drops[:5])}{', …' if len(drops) > 5 else ''})"
            )
    return warnings


def _failure(failed: list[ActionResult]) -> str:
    """What failed first; a failed ``createIndexes`` names every index of its batch (any one may be the cause)."""
    first = failed[0].action
    what = first.describe()
    if (first.target, first.action) == ("index", "create"):
        batch = [r.action.name or "" for r in failed if r.action.key[:2] == (first.collection, "index") and r.action.action == "create"]
        if len(batch) > 1:
            what = f"{first.collection}: createIndexes of {', '.join(batch)}"
    return f"converge failed at {what}: {failed[0].error}; later actions were skipped"


REQUESTED_BY_LIMIT = 128
REASON_LIMIT = 512


def _reading_stop(session: Session) -> Callable[[], None]:
    """Raises when the run must stop while the declared collections are read (before anything is written)."""
    return lambda: session.check_stop(lambda reason: f"converge stopped ({reason}) while reading the declared collections; nothing was written")


async def _inspect_all(session: Session, declarations: list[CollectionDeclaration]) -> dict[str, CollectionState]:
    try:
        return await inspect_all(session.db, declarations, check_stop=_reading_stop(session), violations=True)
    except PyMongoError as exc:
        raise ConvergeFailedError(f"could not read the declared collections: {describe_error(exc)}", phase="plan") from None


async def plan_in_session(session: Session, *, prune: bool = False, check: bool = False) -> ConvergeReport:
    """Plan without writing anything (``--dry-run`` and ``--check``); no lock is needed."""
    began = time.monotonic()
    declarations = list(session.declarations().values())
    p = plan(declarations, await _inspect_all(session, declarations), prune=prune)
    report = ConvergeReport(
        session.run.run_id, "check" if check else "dry-run", results=_planned(p), warnings=_warnings(p, declarations), declared=len(declarations)
    )
    report.success = not p.conflicts
    if p.conflicts:  # what a converge would answer, so that --json says why success is false
        report.error = f"converge would refuse to run: {plural(len(p.conflicts), 'conflict')}: {listing(p.conflicts)}"
    report.duration_ms = _since(began)
    return report


async def converge_in_session(
    session: Session,
    *,
    prune: bool = False,
    yes: bool = False,
    confirm: Confirm | None = None,
    trigger: Trigger = "converge",
    requested_by: str | None = None,
    reason: str | None = None,
) -> ConvergeReport:
    """Make the server match the session's declarations, under its lock (``converge``, or a bulk ``up`` that ends with one).

    ``requested_by`` (default: who runs it) and ``reason`` go into the converge log, checked
    with :func:`~mongoshift.project.redaction.recorded_text`. Raises :class:`ConvergeFailedError` on a conflict or a failed
    action (the report is in ``details["converge"]``). Bracketed by ``converge_start`` /
    ``converge_end`` events.
    """
    report = ConvergeReport(
        session.run.run_id,
        "apply",
        trigger,
        requested_by=recorded_text("requested_by", requested_by, REQUESTED_BY_LIMIT) or session.run.executed_by,
        reason=recorded_text("reason", reason, REASON_LIMIT),
    )
    events = session.events
    events.emit("converge_start", None, trigger=trigger, prune=prune)
    started = time.monotonic()
    try:
        report = await _converge(session, report, prune=prune, yes=yes, confirm=confirm)
    except BaseException as exc:
        events.emit("converge_end", None, trigger=trigger, **end_fields(started, exc))
        raise
    events.emit("converge_end", None, trigger=trigger, actions=len(report.results), **end_fields(started, None))
    return report


async def _converge(session: Session, report: ConvergeReport, *, prune: bool, yes: bool, confirm: Confirm | None) -> ConvergeReport:
    db = session.db
    declarations = list(session.declarations().values())
    journal = ConvergeJournal(db[session.settings.converge_collection], create_index=session.settings.ensure_indexes)
    began = time.monotonic()

    def check_stop() -> None:
        session.check_stop(lambda reason: f"converge stopped ({reason}); the steps after it were skipped")

    try:
        p = plan(declarations, await _inspect_all(session, declarations), prune=prune)
        report.results, report.warnings, report.declared = _planned(p), _warnings(p, declarations), len(declarations)
        if p.conflicts:
            raise ConvergeFailedError(
                f"converge refused, nothing was changed: {plural(len(p.conflicts), 'conflict')}: {listing(p.conflicts)}", phase="plan"
            )
        if not p.changes:
            report.success = True
            return report
        if p.destructive and not yes:
            if confirm is None:
                raise ConfirmationRequiredError(
                    f"converge would drop or rebuild indexes ({listing(p.destructive)}); nothing was changed. "
                    "Allow it with --yes (confirm=True in the Python API; converge never asks with --json or without a terminal)."
                )
            if not await confirm(p.destructive):
                raise RunAbortedError("cancelled at the prompt: nothing was changed")
        if warning := await journal.start(session.run, report):
            report.warnings.append(warning)
        await _apply(db, declarations, p, report, prune=prune, yes=yes, confirm=confirm, check_stop=check_stop)
        failed = [r for r in report.results if r.status in ("failed", "refused")]
        if failed:
            raise ConvergeFailedError(_failure(failed), phase="apply")
        # a stop asked while the last step ran still ends the run as stopped (11, or 10 for a lost lock), as `up` does:
        # the step ran to its end and nothing was left to start, but a deploy script must see the Ctrl-C
        session.check_stop(lambda reason: f"converge stopped ({reason}) during its last step, which ran to its end; nothing was left to start")
        after = plan(declarations, await inspect_all(db, declarations, probe=False), prune=prune)
        report.unstable = [a.describe() for a in after.actions if a.changing or a.action == "conflict"]
        for line in report.unstable:
            log.warning("still differs after converge: %s", line)
        report.success = True
        return report
    except MongoshiftError as exc:
        report.error, report.duration_ms = exc.message, _since(began)  # timed before the error carries its copy
        exc.details["converge"] = report.to_json()
        raise
    except PyMongoError as exc:
        report.error, report.duration_ms = describe_error(exc), _since(began)
        raise ConvergeFailedError(f"converge failed: {report.error}", converge=report.to_json()) from None
    except BaseException as exc:
        report.error = describe_error(exc)
        raise
    finally:
        report.duration_ms = _since(began)
        if report.changed or not report.success:
            await journal.finish(session.run, report)


def _since(began: float) -> int:
    return int((time.monotonic() - began) * 1000)


async def _apply(
    db: AsyncDatabase[Any],
    declarations: list[CollectionDeclaration],
    p: Plan,
    report: ConvergeReport,
    *,
    prune: bool,
    yes: bool,
    confirm: Confirm | None,
    check_stop: Callable[[], None],
) -> None:
    """Apply collection by collection into ``report.results``; after a failure the rest is skipped."""
    applier = Applier(db, yes=yes, confirm=confirm, check_stop=check_stop)
    results: list[ActionResult] = []

    def rest(index: int, why: str) -> list[ActionResult]:
        names = {d.name for d in declarations[index:]}
        return [
            ActionResult(a, "skipped", why) if a.changing else ActionResult(a, "ok")
            for a in p.actions
            if a.collection in names
        ]

    for index, declaration in enumerate(declarations):
        approved = [a for a in p.actions if a.collection == declaration.name]
        if not any(a.changing for a in approved):
            results += [ActionResult(a, "ok") for a in approved]
            continue
        try:
            check_stop()
        except MongoshiftError:
            report.results = results + rest(index, "converge stopped before this collection")
            raise
        try:
            results += await applier.apply_collection(declaration, approved, prune=prune)
        except ApplyFailed as exc:
            report.results = results + exc.args[0] + rest(index + 1, "an earlier collection failed")
            return
        except ApplyStopped as exc:
            report.results = results + exc.results + rest(index + 1, "converge stopped before this collection")
            raise exc.error from None
        except PyMongoError as exc:
            failed = [ActionResult(a, "failed", describe_error(exc)) if a.changing else ActionResult(a, "ok") for a in approved]
            report.results = results + failed + rest(index + 1, "an earlier collection failed")
            return
    report.results = results
