"""What a converge run planned or did, action by action (the API's result and the converge log's input)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import CollectionsDriftError
from .applier import ActionResult
from .planner import Action

Mode = Literal["apply", "dry-run", "check"]
Trigger = Literal["converge", "up"]


@dataclass
class ConvergeReport:
    """What a converge run planned or did, action by action."""

    run_id: str
    mode: Mode
    trigger: Trigger = "converge"
    #: Who asked for the run (default: who ran it) and why, as recorded in the converge log.
    requested_by: str | None = None
    reason: str | None = None
    results: list[ActionResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Differences still planned after applying (the server stores something the comparison did not expect).
    unstable: list[str] = field(default_factory=list)
    success: bool = False
    error: str | None = None
    duration_ms: int = 0
    #: The collections declared (one with nothing to manage, ``indexes = []``, has no action row).
    declared: int = 0

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
            "requested_by": self.requested_by,
            "reason": self.reason,
            "success": self.success,
            "error": self.error,
            "in_sync": self.in_sync,
            "changed": self.changed,
            "duration_ms": self.duration_ms,
            "declared": self.declared,
            "summary": self.summary(),
            "actions": [r.to_json() for r in self.results],
            "warnings": self.warnings,
            "unstable": self.unstable,
        }

    def raise_for_drift(self) -> None:
        """For callers of :func:`plan_converge`: raise :class:`CollectionsDriftError` unless in sync."""
        if not self.in_sync:
            raise CollectionsDriftError(
                f"the server differs from the declared collections: {listing(self.drift)}", converge=self.to_json()
            )


def listing(actions: list[Action], limit: int = 5) -> str:
    text = "; ".join(a.describe() for a in actions[:limit])
    return text + (f"; and {len(actions) - limit} more" if len(actions) > limit else "")
