"""Pause, resume, cancel, retry, reopen and unlock: each a checked move, recorded with who and why.

A control that does not fit the status fails (exit code 33); one whose result
is already in place answers ``unchanged``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ...errors import BackgroundConflictError, NotAppliedError, ThrottleInvalidError
from ...project.redaction import recorded_text
from ...schema.background import Background
from .model import State, pace_override
from .store import BackgroundStore

Action = Literal["pause", "resume", "cancel", "retry", "reopen", "unlock"]


@dataclass(frozen=True)
class Rule:
    """Where one action takes a migration: ``moves`` lead to ``to``, ``done`` are already there."""

    moves: tuple[str, ...]
    to: str
    done: tuple[str, ...]
    #: What to do instead, for the statuses the action does not fit.
    hint: str = ""


#: The transition table (docs/background.md, "Controls"). A status in neither ``moves`` nor
#: ``done`` is a conflict (exit code 33). ``pending`` means ``blocked`` while a requirement is
#: unmet, so that neither ``resume`` nor ``retry`` can step over a ``requires``.
TRANSITIONS: dict[str, Rule] = {
    "pause": Rule(("blocked", "pending", "running"), "paused", ("paused",), "it has stopped already"),
    "resume": Rule(("paused",), "pending", ("blocked", "pending", "running"), "use 'retry' for a failed, cancelled or completed one"),
    "cancel": Rule(("blocked", "pending", "running", "paused"), "cancelled", ("cancelled",), "it has stopped already; 'retry' takes it up again"),
    "retry": Rule(("failed", "cancelled", "completed"), "pending", ("blocked", "pending", "running"), "use 'resume' for a paused one"),
    # Old shapes found after completion (``background verify --reopen``, ``requires``): one more pass.
    "reopen": Rule(("completed",), "pending", ("blocked", "pending", "running"),
        "only a completed migration is reopened; 'retry' takes up a failed or cancelled one"),
    # Forgetting checkpoints under working lanes would lose track of their writes: never "already done".
    "retry --from-start": Rule(("failed", "cancelled", "completed"), "pending", (), "cancel it first, then retry it from the start"),
}


#: The longest ``reason`` of a control, as converge's ``--reason``: it is kept in the migration's history.
REASON_LIMIT = 512


def checked_reason(reason: object) -> str | None:
    """A control's ``reason`` as recorded (:func:`~mongoshift.project.redaction.recorded_text`)."""
    return recorded_text("--reason (reason)", reason, REASON_LIMIT)


def decide(name: str, status: str, action: str, *, waits_for: bool = False) -> str | None:
    """The status ``action`` leads to from ``status``; None when it is already in effect.

    Pure, so that the whole table can be checked case by case (and documented as one)."""
    rule = TRANSITIONS[action]
    if status in rule.done:
        return None
    if status not in rule.moves:
        raise BackgroundConflictError(
            f"cannot {action} {name}: it is {status} (allowed from: {', '.join(rule.moves)}); {rule.hint}",
            status=status,
            action=action,
        )
    return "blocked" if rule.to == "pending" and waits_for else rule.to


@dataclass
class ControlResult:
    name: str
    action: str
    applied: Literal["applied", "unchanged"]
    status: str


async def control(
    store: BackgroundStore,
    name: str,
    action: Action,
    *,
    by: str,
    reason: str | None = None,
    from_start: bool = False,
    lock_collection: str | None = None,
) -> ControlResult:
    reason = checked_reason(reason)
    state = await store.state(name)
    if state is None:
        raise NotAppliedError(f"{name} is not a registered background migration", file=name)
    if action == "unlock":
        freed = await store.unlock(name, lock_collection)
        await store.transition(name, allowed=(state.status,), to=state.status, action="unlock", by=by, reason=reason)
        return ControlResult(name, action, "applied" if freed else "unchanged", state.status)
    rule = "retry --from-start" if action == "retry" and from_start else action
    target = decide(name, state.status, rule, waits_for=bool(state.waits_for))
    if target is None:
        return ControlResult(name, action, "unchanged", state.status)
    set_: dict[str, object] = {"last_error": None}
    old_plans: list[Any] = []
    if action in ("retry", "reopen"):
        live = await store.live_counters(state)
        # The rate of the retried run is measured from its own start, over what it scans itself.
        set_.update(started_at=None, rate_base=live["scanned"])
        if from_start:
            old_plans = await store.plan_tokens(name)
            set_.update(_from_start(state, live))
        elif state.rolled_generation < state.generation:
            # The generation's counters are not in the totals yet: its failed partitions go on in place.
            await store.reopen_failed_partitions(state)
        # Otherwise the generation was rolled up (once, for good): reopening its partitions would
        # count their new work nowhere. Left failed, they let the coordinator plan a new generation
        # over what is still in the old shape, whose counters roll up on top of the totals.
    if not await store.transition(name, allowed=(state.status,), to=target, action=action, by=by, reason=reason, set_=set_):
        fresh = await store.state(name)
        raise BackgroundConflictError(f"{name} changed while {action} was applied; try again", status=fresh.status if fresh else None)
    if action == "retry" and from_start:
        # Only once the state no longer points at them (a failed transition leaves everything as it
        # was), and only the old plans' (a coordinator may already have adopted a new one).
        await store.delete_plans(name, old_plans)
    return ControlResult(name, action, "applied", target)


def _from_start(state: State, live: dict[str, int]) -> dict[str, object]:
    """Forget checkpoints, passes and failed documents; keep the totals.

    The totals say what was rewritten, and those documents stay rewritten: forgetting the
    counters would make ``status`` disagree with the collection. The counters of the current
    generation that were not rolled up yet are added here, since its partitions go away. The
    failed documents are forgotten from them too, from ``scanned`` with ``failed``: they are read
    again and counted then, so ``scanned`` stays ``migrated + skipped + failed + conflicts``.
    """
    live = {**live, "scanned": max(0, live["scanned"] - live["failed"]), "failed": 0}
    return {
        "generation": 0,
        "rolled_generation": 0,
        "plan": None,
        "bad_ids": [],
        "doc_errors": [],
        "error_counts": {},
        "totals": live,
        "pass": 0,
        "completed_at": None,
        "previous": {"registration": state.registration, "status": state.status, "totals": state.totals},
    }


#: Settings whose change alters which documents a pass covers or how it is cut: a repin replans.
REPLAN_KEYS = ("collection", "from_version", "to_version", "filter", "version_field", "revision_field", "occ", "max_parallel", "partitions")


@dataclass
class RepinResult:
    name: str
    applied: Literal["applied", "unchanged"]
    checksum: str
    replan: bool


async def pin(store: BackgroundStore, name: str, spec: Background, checksum: str, *, by: str, reason: str | None = None) -> RepinResult:
    """Store the file's checksum and settings as the ones lanes must run."""
    reason = checked_reason(reason)
    state = await store.state(name)
    if state is None:
        raise NotAppliedError(f"{name} is not a registered background migration", file=name)
    settings = spec.settings()
    if state.checksum == checksum and state.spec == settings:
        return RepinResult(name, "unchanged", checksum, False)
    replan = state.generation > 0 and state.status not in ("completed", "failed", "cancelled") and any(
        state.spec.get(key) != settings.get(key) for key in REPLAN_KEYS
    )
    await store.transition(
        name,
        allowed=(state.status,),
        to=state.status,
        action="repin",
        by=by,
        reason=reason,
        set_={"checksum": checksum, "spec": settings, "collection": spec.collection, "replan": replan},
    )
    return RepinResult(name, "applied", checksum, replan)


#: The throttle control's limits: the ones a migration file may declare for ``batch_size`` and ``pause_ms``.
BATCH_SIZE_LIMITS = (1, 10_000)
PAUSE_MS_LIMITS = (0, 3_600_000)


@dataclass
class ThrottleResult:
    name: str
    applied: Literal["applied", "unchanged"]
    status: str
    #: The operator's pace now in force (``batch_size``, ``pause_ms``; either may be absent); None: the file's.
    throttle: dict[str, int] | None

    @property
    def pace(self) -> str:
        """The pace now in force in words, as the CLI and the dashboard say it: ``batch size 200, pause 50 ms``, or ``the file's``."""
        pace = self.throttle or {}
        said = [f"batch size {pace['batch_size']:,}" if "batch_size" in pace else "", f"pause {pace['pause_ms']:,} ms" if "pause_ms" in pace else ""]
        return ", ".join(w for w in said if w) or "the file's"


#: How a caller names the pace's two values in a refusal of :func:`checked_pace`: the Python API its
#: parameters (the default), the CLI its flags; the dashboard passes its form's fields through the API.
PACE_PARAMETERS: Mapping[str, str] = {"batch_size": "batch_size", "pause_ms": "pause_ms"}
PACE_FLAGS: Mapping[str, str] = {"batch_size": "--batch-size", "pause_ms": "--pause-ms"}


def checked_pace(
    batch_size: int | None, pause_ms: int | None, *, clear: bool, names: Mapping[str, str] = PACE_PARAMETERS
) -> dict[str, int] | None:
    """The override a throttle change asks for, refused (exit 53) when it asks for nothing or for a value out of bounds
    (the value named as the caller names it: ``names``, by ``batch_size`` and ``pause_ms``)."""
    if clear:
        if batch_size is not None or pause_ms is not None:
            raise ThrottleInvalidError("throttle: clearing goes back to the file's pace; ask for it alone, without a batch size or a pause")
        return None
    if batch_size is None and pause_ms is None:
        raise ThrottleInvalidError("throttle: give a batch size, a pause in milliseconds or both (or clear the pace to go back to the file's)")
    pace: dict[str, int] = {}
    for key, value, (low, high) in (("batch_size", batch_size, BATCH_SIZE_LIMITS), ("pause_ms", pause_ms, PAUSE_MS_LIMITS)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ThrottleInvalidError(f"throttle: {names[key]} must be a whole number from {low:,} to {high:,}, not {value!r}", field=key)
        pace[key] = value
    return pace


async def throttle(
    store: BackgroundStore,
    name: str,
    *,
    batch_size: int | None = None,
    pause_ms: int | None = None,
    clear: bool = False,
    by: str,
    reason: str | None = None,
) -> ThrottleResult:
    """Set (or ``clear``) the operator's pace of ``name``: recorded in its history with who and why, like every control.

    The change stamps the open partitions, so each lane takes the new pace before its next batch;
    a set ``batch_size`` wins over the adaptive controller until cleared. Any status is accepted:
    a paused or failed migration keeps the pace for when it is resumed or retried."""
    pace = checked_pace(batch_size, pause_ms, clear=clear)
    reason = checked_reason(reason)
    state = await store.state(name)
    if state is None:
        raise NotAppliedError(f"{name} is not a registered background migration", file=name)
    merged = None if clear else {**(state.throttle or {}), **(pace or {})}
    if pace_override(merged) == state.throttle:
        return ThrottleResult(name, "unchanged", state.status, state.throttle)
    if not await store.transition(
        name, allowed=(state.status,), to=state.status, action="throttle", by=by, reason=reason, set_={"throttle": merged}
    ):
        raise BackgroundConflictError(f"{name} changed while throttle was applied; try again", status=state.status)
    return ThrottleResult(name, "applied", state.status, pace_override(merged))
