"""What a command across tenants did: one row per tenant, a summary, and the exit code.

Every selected tenant has a row, whatever happened to it: ``done``, ``already at target``
(nothing to do: a rerun's finished tenants), ``failed``, ``locked`` (another run holds its
lock), ``cancelled`` (stopped by Ctrl-C while it ran) or ``not reached`` (never started: the
rollout stopped first). A row carries the error's kind, exit code and message, cleaned by the
shared redaction: never a document value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ExitCode
from ..project.wording import plural

Outcome = Literal["done", "already at target", "failed", "locked", "cancelled", "not reached"]

#: Every outcome, in the order a summary lists them.
OUTCOMES: tuple[Outcome, ...] = ("done", "already at target", "failed", "locked", "cancelled", "not reached")

#: The outcomes of a tenant that is where the command was to take it.
OK_OUTCOMES: frozenset[str] = frozenset({"done", "already at target"})


@dataclass(frozen=True)
class TenantError:
    """Why a tenant did not succeed: the error's kind and exit code, and its cleaned message."""

    kind: str
    code: int
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "code": self.code, "message": self.message}


@dataclass
class Judged:
    """What one tenant's call came to, as the caller judges its result (a failure raised is judged by the rollout).

    ``error``: a verdict that is a failure without an exception (``status --check`` of a tenant behind);
    with ``outcome`` "cancelled", why a call that returned stopped early (Ctrl-C reached it).
    """

    outcome: Literal["done", "already at target", "failed", "cancelled"] = "done"
    applied: int = 0
    rolled_back: int = 0
    error: TenantError | None = None
    #: The call's own result (a ``RunReport``, status rows, ...), for the caller's rendering.
    result: Any = None


@dataclass
class TenantRow:
    name: str
    outcome: Outcome = "not reached"
    canary: bool = False
    applied: int = 0
    rolled_back: int = 0
    duration_ms: int | None = None
    error: TenantError | None = None
    result: Any = None

    @property
    def ok(self) -> bool:
        return self.outcome in OK_OUTCOMES

    @property
    def exit_code(self) -> int | None:
        """The code this tenant alone would have exited with (None: it never ran)."""
        if self.outcome == "not reached":
            return None
        return self.error.code if self.error is not None else 0

    def to_json(self, result: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": self.name,
            "outcome": self.outcome,
            "canary": self.canary,
            "applied": self.applied,
            "rolled_back": self.rolled_back,
            "duration_ms": self.duration_ms,
            "exit_code": self.exit_code,
            "error": self.error.to_json() if self.error is not None else None,
        }
        if result is not None and self.result is not None:
            body["result"] = result(self.result)
        return body


#: A dry run's row keys for what a run's row counts as done.
_WOULD = {"applied": "would_apply", "rolled_back": "would_roll_back"}


@dataclass
class RolloutReport:
    """Every selected tenant's row, in selection order, and why the rollout stopped early (if it did)."""

    command: str
    rows: list[TenantRow] = field(default_factory=list)
    #: Why tenants were left ``not reached`` (a canary failed, a failure, Ctrl-C); None: every tenant was tried.
    stopped: str | None = None
    #: Ctrl-C / SIGTERM (the cancel signal) stopped the rollout.
    interrupted: bool = False

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        for row in self.rows:
            counts[row.outcome] += 1
        return counts

    @property
    def ok(self) -> bool:
        return all(row.ok for row in self.rows)

    @property
    def exit_code(self) -> int:
        """0 when every tenant is ok; 11 when Ctrl-C stopped it; else 47 (some failed, locked, cancelled or not reached)."""
        if self.ok:
            return int(ExitCode.OK)
        if self.interrupted:
            return int(ExitCode.ABORTED)
        return int(ExitCode.TENANTS_FAILED)

    def summary(self) -> str:
        """``10 tenants: 7 done, 2 already at target, 1 failed`` (the outcomes that occurred)."""
        counts = self.counts()
        parts = [f"{n} {outcome}" for outcome, n in counts.items() if n]
        text = f"{plural(len(self.rows), 'tenant')}: " + ", ".join(parts)
        return text + (f" ({self.stopped})" if self.stopped else "")

    def to_json(self, result: Callable[[Any], Any] | None = None) -> dict[str, Any]:
        """One document: the rows (``result`` renders each call's own result), the counts, the verdict.

        A dry run's rows count ``would_apply`` and ``would_roll_back``: nothing was applied."""
        rows = [row.to_json(result) for row in self.rows]
        if self.command.startswith("dry-run"):
            rows = [{_WOULD.get(key, key): value for key, value in row.items()} for row in rows]
        return {
            "command": self.command,
            "tenants": rows,
            "summary": {"total": len(self.rows), **{k.replace(" ", "_"): v for k, v in self.counts().items()}},
            "stopped": self.stopped,
            "exit_code": self.exit_code,
        }
