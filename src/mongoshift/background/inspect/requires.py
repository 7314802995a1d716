"""``requires``: a migration that may only run once earlier migrations are done.

A requirement names an earlier migration file of either kind. A background
one is done when it completed in the forward direction **and** an indexed
probe finds no document of the old shape (someone may have written old
shapes since): if it finds one, the background migration is reopened for
another pass and the requirement stays unmet. A step migration is judged by
its status alone. An ordinary one is done when the changelog has it applied.
A name that nothing knows (no background state, no changelog record, no file)
is ``unknown``: ``up`` refuses it, since waiting would never end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ...project.changelog import Changelog
from ...project.loader import MigrationFile, load
from ..state.store import BackgroundStore
from .drift import old_shape_left, reopen as reopen_pass


@dataclass(frozen=True)
class Waiting:
    """A requirement not met yet, and why."""

    name: str
    status: str
    reason: str
    #: What the name turned out to be: ``unknown`` when nothing has it (a typo, a deleted file).
    kind: Literal["background", "migration", "unknown"] = "background"
    #: Only a person moves it on whatever its status: a requirement rolled back (its revert registered, run or
    #: not) is met again only by ``up``, and a revert's requirement registered forward again only by ``down``.
    held: bool = False

    def describe(self) -> str:
        return f"{self.name} ({self.reason})"


async def unmet(
    store: BackgroundStore,
    required: list[str],
    *,
    changelog: Changelog | None = None,
    files: list[MigrationFile] | None = None,
    by: str = "mongoshift",
    reopen: bool = True,
    reverting: bool = False,
) -> list[Waiting]:
    """The requirements not met; ``reopen=False`` (a dry run) reports old shapes without reopening anything.

    A name without a background state is looked up in ``changelog`` (an ordinary migration), then in
    ``files`` (one still to apply, or ``unknown``); without them it counts as a background migration
    not registered yet, which is all a coordinator needs: ``up`` refused the rest before registering.

    ``reverting``: the requirements of a revert, the reverts of the later migrations of its collection
    (:func:`later_reverts`); one is met once its revert completed (or it is withdrawn), never by a forward run.
    """
    waiting: list[Waiting] = []
    for name in required:
        state = await store.state(name)
        if reverting:
            if state is not None and not (state.direction == "revert" and state.status == "completed"):
                reason = f"its revert is {state.status}" if state.direction == "revert" else "registered forward again"
                waiting.append(Waiting(name, state.status, reason, held=state.direction != "revert"))
            continue
        if state is None:
            waiting.extend(await _unregistered(name, changelog, files))
        elif state.direction != "forward":
            waiting.append(Waiting(name, state.status, "its revert is registered", held=True))
        elif state.status != "completed":
            waiting.append(Waiting(name, state.status, state.status))
        elif state.mode != "step" and await old_shape_left(store.db, state, unindexed="scan"):
            if not reopen:
                waiting.append(Waiting(name, "completed", "old shapes found: it would be reopened for another pass"))
                continue
            await reopen_pass(store, name, by=by, reason="requires found old shapes")
            waiting.append(Waiting(name, "pending", "old shapes found: reopened for another pass"))
    return waiting


async def _unregistered(name: str, changelog: Changelog | None, files: list[MigrationFile] | None) -> list[Waiting]:
    """A name without a background state: an ordinary migration (met once applied), or one still to come."""
    record = await changelog.record(name) if changelog is not None else None
    if record is not None and record.kind != "background":
        return [] if record.status == "applied" else [Waiting(name, record.status, f"not applied ({record.status})", "migration")]
    if record is None and files is not None:
        item = next((f for f in files if f.name == name), None)
        if item is None:
            return [Waiting(name, "unknown", "no migration has this name", "unknown")]
        if load(item).background is None:
            return [Waiting(name, "pending", "not applied yet", "migration")]
    return [Waiting(name, "unregistered", "not registered yet")]


async def later_reverts(store: BackgroundStore, name: str, collection: str, version_field: str, to_version: int) -> list[str]:
    """The migrations a revert of ``name`` must wait for: the later ones of the same collection (and version
    field), starting at or past its ``to_version``, whose own revert is registered and not completed yet.
    Run first, this revert would find their documents still past its target, take back nothing of them,
    and complete: their revert would then leave them at this one's ``to_version`` for good."""
    return sorted(
        state.name
        for state in await store.states_all()
        if state.name != name
        and state.direction == "revert"
        and state.status != "completed"
        and state.collection == collection
        and state.spec.get("version_field") == version_field
        and int(state.spec.get("from_version", -1)) >= to_version
    )
