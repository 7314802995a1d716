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
from ..project.redaction import describe_error
from ..project.session import Session
from ..schema.collections import CollectionDeclaration
from .applier import ActionResult, Applier, ApplyFailed, ApplyStopped, Confirm
from .inspection import CollectionState, inspect
from .journal import ConvergeJournal
from .planner import Plan, plan
from .report import ConvergeReport, Trigger, listing

log = logging.getLogger("mongoshift.converge")


def _planned(p: Plan) -> list[ActionResult]:
    status = {"conflict": "refused"}
    return [ActionResult(a, status.get(a.action, "planned" if a.changing else "ok")) for a in p.actions]  # type: ignore[arg-type]


def _warnings(p: Plan) -> list[str]:
    return [a.describe() for a in p.actions if a.action == "unchanged" and a.reason]


async def _inspect_all(db: AsyncDatabase[Any], declarations: list[CollectionDeclaration]) -> dict[str, CollectionState]:
    try:
        return {d.name: await inspect(db, d) for d in declarations}
    except PyMongoError as exc:
        raise ConvergeFailedError(f"could not read the declared collections: {describe_error(exc)}", phase="plan") from None


async def plan_in_session(session: Session, *, prune: bool = False, check: bool = False) -> ConvergeReport:
    """Plan without writing anything (``--dry-run`` and ``--check``); no lock is needed."""
    began = time.monotonic()
    declarations = list(session.declarations().values())
    p = plan(declarations, await _inspect_all(session.db, declarations), prune=prune)
    report = ConvergeReport(session.run.run_id, "check" if check else "dry-run", results=_planned(p), warnings=_warnings(p))
    report.success = not p.conflicts
    report.duration_ms = int((time.monotonic() - began) * 1000)
    return report


async def converge_in_session(
    session: Session,
    *,
    prune: bool = False,
    yes: bool = False,
    confirm: Confirm | None = None,
    trigger: Trigger = "converge",
) -> ConvergeReport:
    """Make the server match the session's declarations, under its lock (``converge``, or a bulk ``up`` that ends with one).

    Raises :class:`ConvergeFailedError` on a conflict or a failed action (the
    report is in ``details["converge"]``). Bracketed by ``converge_start`` / ``converge_end`` events.
    """
    events = session.events
    events.emit("converge_start", None, trigger=trigger, prune=prune)
    started = time.monotonic()
    try:
        report = await _converge(session, prune=prune, yes=yes, confirm=confirm, trigger=trigger)
    except BaseException as exc:
        events.emit("converge_end", None, trigger=trigger, **end_fields(started, exc))
        raise
    events.emit("converge_end", None, trigger=trigger, actions=len(report.results), **end_fields(started, None))
    return report


async def _converge(session: Session, *, prune: bool, yes: bool, confirm: Confirm | None, trigger: Trigger) -> ConvergeReport:
    db = session.db
    declarations = list(session.declarations().values())
    journal = ConvergeJournal(db[session.settings.converge_collection], create_index=session.settings.ensure_indexes)
    report = ConvergeReport(session.run.run_id, "apply", trigger)
    began = time.monotonic()

    def check_stop() -> None:
        session.check_stop(lambda reason: f"converge stopped ({reason}); the steps after it were skipped")

    try:
        p = plan(declarations, await _inspect_all(db, declarations), prune=prune)
        report.results, report.warnings = _planned(p), _warnings(p)
        if p.conflicts:
            raise ConvergeFailedError(
                f"converge refused, nothing was changed: {len(p.conflicts)} conflict(s): {listing(p.conflicts)}", phase="plan"
            )
        if not p.changes:
            report.success = True
            return report
        if p.destructive and not yes:
            if confirm is None:
                raise ConfirmationRequiredError(
                    f"converge would drop or rebuild indexes ({listing(p.destructive)}); nothing was changed. "
                    "Pass --yes to allow it (converge never asks with --json or without a terminal)."
                )
            if not await confirm(p.destructive):
                raise RunAbortedError("cancelled at the prompt: nothing was changed")
        await journal.start(session.run, trigger)
        await _apply(db, declarations, p, report, prune=prune, yes=yes, confirm=confirm, check_stop=check_stop)
        failed = [r for r in report.results if r.status in ("failed", "refused")]
        if failed:
            first = failed[0]
            raise ConvergeFailedError(
                f"converge failed at {first.action.describe()}: {first.error}; later actions were skipped", phase="apply"
            )
        after = plan(declarations, {d.name: await inspect(db, d, probe=False) for d in declarations}, prune=prune)
        report.unstable = [a.describe() for a in after.actions if a.changing or a.action == "conflict"]
        for line in report.unstable:
            log.warning("still differs after converge: %s", line)
        report.success = True
        return report
    except MongoshiftError as exc:
        report.error = exc.message
        exc.details["converge"] = report.to_json()
        raise
    except PyMongoError as exc:
        report.error = describe_error(exc)
        raise ConvergeFailedError(f"converge failed: {report.error}", converge=report.to_json()) from None
    except BaseException as exc:
        report.error = describe_error(exc)
        raise
    finally:
        report.duration_ms = int((time.monotonic() - began) * 1000)
        if report.changed or not report.success:
            await journal.finish(session.run, report)


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
