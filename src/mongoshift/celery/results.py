"""What the tasks return: plain JSON through any result backend, typed again by :func:`LineResult.of`.

Messages are redacted before they leave the worker (no password, secret URI option or
document value), like every message mongoshift prints or stores.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

#: ``applied``: run now (``redo``: re-applied); ``reverted``: rolled back now (``down``);
#: ``skipped``: already applied, or already rolled back (another task, or the CLI, did it);
#: ``failed``: it ran and raised, or could not be run: the lock stayed held, the file changed
#: since it was queued (``code`` / ``kind`` say why);
#: ``blocked``: not run, because one ahead of it in the line failed or never came;
#: ``dropped``: not run, because another task holds this migration (a duplicate).
Outcome = Literal["applied", "reverted", "skipped", "failed", "blocked", "dropped"]


@dataclass(frozen=True)
class LineResult:
    """One migration task of the line, as its worker saw it."""

    name: str
    outcome: Outcome
    group: str
    batch: int | None = None
    #: The run id of the ``up`` that ran (or refused) it, as in its events and changelog record.
    run_id: str | None = None
    duration_ms: int = 0
    code: int = 0
    kind: str = "ok"
    error: str | None = None
    #: For ``blocked``: the migrations it waited for.
    blocked_by: list[str] = field(default_factory=list)
    #: What the task ran: ``up``, ``down`` or ``redo``.
    direction: str = "up"

    @property
    def ok(self) -> bool:
        return self.outcome in ("applied", "reverted", "skipped")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> LineResult:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class BackgroundResult:
    """A background chain's last word: the migration's status when its coordinator stopped, and why."""

    name: str
    status: str | None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
