"""``requires``: a migration that may only run once earlier background migrations are done.

Done means completed in the forward direction **and** an indexed probe finds
no document of the old shape (someone may have written old shapes since): if
it finds one, the background migration is reopened for another pass and the
requirement stays unmet. A step migration is judged by its status alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pymongo.errors import OperationFailure

from ..project.server_errors import bad_hint
from .document import version_match
from .store import BackgroundStore

PROBE_MS = 5_000


@dataclass(frozen=True)
class Waiting:
    """A requirement not met yet, and why."""

    name: str
    status: str
    reason: str

    def describe(self) -> str:
        return f"{self.name} ({self.reason})"


async def _old_shape_left(store: BackgroundStore, spec: dict[str, Any]) -> bool:
    collection = store.db[spec["collection"]]
    match = {**spec.get("filter", {}), **version_match(spec["version_field"], spec["from_version"])}
    hint = [(spec["version_field"], 1), ("_id", 1)]
    try:
        doc = await collection.find_one(match, {"_id": 1}, hint=hint, max_time_ms=PROBE_MS)
    except OperationFailure as exc:
        if not bad_hint(exc):  # no such index to hint: probe without it
            raise
        doc = await collection.find_one(match, {"_id": 1}, max_time_ms=PROBE_MS)
    return doc is not None


async def unmet(store: BackgroundStore, required: list[str], *, by: str = "mongoshift", reopen: bool = True) -> list[Waiting]:
    """The requirements not met; ``reopen=False`` (a dry run) reports old shapes without reopening anything."""
    waiting: list[Waiting] = []
    for name in required:
        state = await store.state(name)
        if state is None:
            waiting.append(Waiting(name, "unregistered", "not registered yet"))
        elif state.direction != "forward":
            waiting.append(Waiting(name, state.status, "its revert is registered"))
        elif state.status != "completed":
            waiting.append(Waiting(name, state.status, state.status))
        elif state.mode != "step" and await _old_shape_left(store, state.spec):
            if not reopen:
                waiting.append(Waiting(name, "completed", "old shapes found: it would be reopened for another pass"))
                continue
            await store.transition(name, allowed=("completed",), to="pending", action="reopen", by=by, reason="requires found old shapes")
            waiting.append(Waiting(name, "pending", "old shapes found: reopened for another pass"))
    return waiting
