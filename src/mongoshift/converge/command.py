"""Converge as an async Python API; ``mongoshift converge`` and ``up --converge`` call it.

A run always plans first: it reads every declared collection and computes
every action before writing anything, so a conflict (or a destructive step
nobody approved) refuses the whole run with nothing changed. Applying happens
under the migration lock, collection by collection; a failure stops the run
after the collection it happened in, and the rest is reported as skipped.
Declarations are loaded before connecting, so a bad file costs no server
round trip.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from ..config import Settings
from ..errors import (
    CollectionsDriftError,
    ConfigInvalidError,
    ConvergeFailedError,
    LockLostError,
    MongoshiftError,
    RunAbortedError,
)
from ..runner.command import Session, open_session, warn_unlocked
from ..runner.context import CancelSignal
from ..redaction import describe_error
from .applier import ActionResult, Applier, ApplyFailed, ApplyStopped, Confirm
from .declaration import CollectionDeclaration, load_declarations
from .inspection import CollectionState, inspect
from .journal import ConvergeJournal
from .planner import Action, Plan, plan

log = logging.getLogger("mongoshift.converge")

Mode = Literal["apply", "dry-run", "check"]
Trigger = Literal["converge", "up"]


@dataclass
class ConvergeReport:
    """What a converge run planned or did, action by action."""

    run_id: str
    mode: Mode
    trigger: Trigger = "converge"
    results: list[ActionResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Differences still planned after applying (the server stores something the comparison did not expect).
    unstable: list[str] = field(default_factory=list)
    success: bool = False
    error: str | None = None
    duration_ms: int = 0

    @property
    def actions(self) -> list[Action]:
        return [r.action for r in self.results]

    @property
    def conflicts(self) -> list[Action]:
        return [a for a in self.actions if a.action == "conflict"]

    @property
    def drift(self) -> list[Action]:
        """Everything that differs from the declaration (what ``--check`` fails on)."""
        return [a for a in self.actions if a.changing or a.action == "conflict"]

    @property
    def in_sync(self) -> bool:
        return not self.drift

    @property
    def changed(self) -> bool:
        return any(r.status == "applied" for r in self.results)

    def summary(self) -> dict[str, int]:
        return dict(Counter(a.action for a in self.actions))

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "mode": self.mode,
            "trigger": self.trigger,
            "success": self.success,
            "error": self.error,
            "in_sync": self.in_sync,
            "changed": self.changed,
            "duration_ms": self.duration_ms,
            "summary": self.summary(),
            "actions": [r.to_json() for r in self.results],
            "warnings": self.warnings,
            "unstable": self.unstable,
        }

    def raise_for_drift(self) -> None:
        """For callers of :func:`plan_converge`: raise :class:`CollectionsDriftError` unless in sync."""
        if not self.in_sync:
            raise CollectionsDriftError(
                f"the server differs from the declared collections: {_listing(self.drift)}", converge=self.to_json()
            )


def _listing(actions: list[Action], limit: int = 5) -> str:
    text = "; ".join(a.describe() for a in actions[:limit])
    return text + (f"; and {len(actions) - limit} more" if len(actions) > limit else "")


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


async def plan_converge(
    settings: Settings, *, prune: bool = False, check: bool = False, declarations: list[CollectionDeclaration] | None = None
) -> ConvergeReport:
    """Plan without the lock and without writing anything (``--dry-run`` and ``--check``)."""
    declarations = load_declarations(settings) if declarations is None else declarations
    async with open_session(settings, take_lock=False, with_files=False) as session:
        began = time.monotonic()
        db = session.runtime.client[session.runtime.db_name]
        p = plan(declarations, await _inspect_all(db, declarations), prune=prune)
    report = ConvergeReport(session.runtime.run.run_id, "check" if check else "dry-run", results=_planned(p), warnings=_warnings(p))
    report.success = not p.conflicts
    report.duration_ms = int((time.monotonic() - began) * 1000)
    return report


async def converge(
    settings: Settings,
    *,
    prune: bool = False,
    yes: bool = False,
    confirm: Confirm | None = None,
    no_lock: bool = False,
    wait: float | None = None,
    cancel: CancelSignal | None = None,
) -> ConvergeReport:
    """Make the server match the declarations, under the migration lock.

    Destructive actions (rebuilds, drops) need ``yes=True`` or a ``confirm``
    callback that answers True; without either they are refused before
    anything is written. Raises :class:`ConvergeFailedError` on a conflict or
    a failed action (the report is in ``details["converge"]``).
    """
    declarations = load_declarations(settings)
    async with open_session(settings, take_lock=not no_lock, wait=wait, cancel=cancel, with_files=False) as session:
        warn_unlocked(no_lock)
        return await converge_in_session(session, declarations, prune=prune, yes=yes, confirm=confirm)


async def converge_in_session(
    session: Session,
    declarations: list[CollectionDeclaration],
    *,
    prune: bool = False,
    yes: bool = False,
    confirm: Confirm | None = None,
    trigger: Trigger = "converge",
) -> ConvergeReport:
    """The locked part, shared by ``converge`` and a bulk ``up`` that ends with a converge."""
    runtime, settings = session.runtime, session.settings
    db = runtime.client[runtime.db_name]
    journal = ConvergeJournal(db[settings.converge_collection])
    report = ConvergeReport(runtime.run.run_id, "apply", trigger)
    began = time.monotonic()

    def check_stop() -> None:
        if runtime.cancel.is_set():
            raise RunAbortedError(f"converge stopped ({runtime.cancel.reason}); the steps after it were skipped")
        lock = session.lock
        if lock is not None and lock.lost.is_set() and settings.on_lock_lost == "abort":
            raise LockLostError(f"the migration lock was lost: {lock.lost_reason}")

    try:
        p = plan(declarations, await _inspect_all(db, declarations), prune=prune)
        report.results, report.warnings = _planned(p), _warnings(p)
        if p.conflicts:
            raise ConvergeFailedError(
                f"converge refused, nothing was changed: {len(p.conflicts)} conflict(s): {_listing(p.conflicts)}", phase="plan"
            )
        if not p.changes:
            report.success = True
            return report
        if p.destructive and not yes:
            if confirm is None:
                raise ConfigInvalidError(
                    f"converge would drop or rebuild indexes ({_listing(p.destructive)}); nothing was changed. "
                    "Pass --yes to allow it (converge never asks with --json or without a terminal)."
                )
            if not await confirm(p.destructive):
                raise RunAbortedError("cancelled at the prompt: nothing was changed")
        await journal.start(runtime.run, trigger)
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
            await journal.finish(runtime.run, report)


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


async def converge_after_up(
    session: Session, declarations: list[CollectionDeclaration], *, yes: bool, confirm: Confirm | None
) -> ConvergeReport:
    """The converge that ends a bulk ``up`` (``converge_after_up`` / ``--converge``), under the same lock."""
    return await converge_in_session(session, declarations, yes=yes, confirm=confirm, trigger="up")

