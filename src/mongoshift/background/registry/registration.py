"""What ``up`` and ``down`` do with a background migration file: register, revert, withdraw.

``up`` never touches a document: it stores a pending state (a new
registration id each time, the previous one kept as ``previous``) and the
line goes on. ``down`` registers the revert direction when the spec has one;
a one-way migration can only be withdrawn while nothing has been rewritten.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection
from typing import Literal

from ...errors import IrreversibleMigrationError, OutOfOrderError
from ...project.changelog import Changelog
from ...project.wording import plural
from ...schema.background import Background
from ..inspect.input_probe import missing_collection_warning, not_a_version_warning, unversioned_warning
from ..inspect.requires import later_reverts, unmet
from ..state.events import Events
from ..state.model import State
from ..state.store import BackgroundStore

log = logging.getLogger("mongoshift.background")


async def register(
    store: BackgroundStore,
    name: str,
    spec: Background,
    *,
    checksum: str,
    direction: str,
    by: str,
    requires: list[str] | None = None,
    changelog: Changelog | None = None,
    events: Events | None = None,
) -> list[str]:
    """Register; with unmet ``requires`` (forward only) the state starts blocked until they complete
    (an ordinary migration among them is met once ``changelog`` has it applied). A revert starts blocked
    until the reverts of the later migrations of its collection completed (:func:`later_reverts`).

    Returns the warnings about the collection (it does not exist; documents the migration will never touch), also logged."""
    warnings: list[str] = []
    if direction == "forward":
        for found in (
            await missing_collection_warning(store.db, name, spec),
            await unversioned_warning(store.db, store, name, spec),
            await not_a_version_warning(store.db, name, spec),
        ):
            if found:
                log.warning("%s", found)
                warnings.append(found)
    reverting = direction == "revert"
    if reverting:  # after the reverts of the later migrations of its collection ("Rolling back", docs/background.md)
        required = await later_reverts(store, name, spec.collection, spec.version_field, spec.to_version)
    else:
        required = list(requires or [])
    waits = [w.name for w in await unmet(store, required, changelog=changelog, by=by, reverting=reverting)] if required else []
    state = await store.register(
        name, collection=spec.collection, spec=spec.settings(), checksum=checksum, direction=direction, by=by,
        requires=required, waits_for=waits,
    )
    (events or Events()).emit("registered", name, direction=direction, registration=state.registration, blocked_on=waits)
    return warnings


async def revert_or_withdraw(
    store: BackgroundStore, name: str, spec: Background, *, checksum: str, by: str, drain_seconds: float = 60.0
) -> Literal["revert", "withdrawn"]:
    """Register the revert, or withdraw a one-way migration that has not rewritten anything yet."""
    if spec.reversible:
        await register(store, name, spec, checksum=checksum, direction="revert", by=by)
        return "revert"
    state = await store.state(name)
    if state is None:
        return "withdrawn"
    was = state.status
    paused = await store.transition(name, allowed=("pending", "running"), to="paused", action="pause", by=by, reason="down: withdrawing")
    deadline = time.monotonic() + drain_seconds
    while paused and await store.live_leases(name) and time.monotonic() < deadline:
        await store.reap(name)
        await asyncio.sleep(0.2)
    fresh = await store.state(name)
    assert fresh is not None
    rewritten = await _rewritten(store, fresh)
    if rewritten:
        if paused:
            await store.transition(name, allowed=("paused",), to=was if was == "pending" else "running", action="resume", by=by, reason="down refused")
        raise _one_way(name, rewritten)
    await store.withdraw(name, fresh.registration)
    return "withdrawn"


async def refuse_one_way(store: BackgroundStore, name: str, spec: Background) -> None:
    """Refuse, reading only, the rollback of a one-way migration that already rewrote documents:
    ``down`` and ``dry-run down`` check every step with this before the first one runs (a rollback
    stopped halfway, an earlier step's revert registered, is what this prevents). Lanes still
    running may rewrite a first document after this check: :func:`revert_or_withdraw` decides again,
    once they are drained."""
    if spec.reversible:
        return
    state = await store.state(name)
    if state is not None and (rewritten := await _rewritten(store, state)):
        raise _one_way(name, rewritten)


async def refuse_stranding(store: BackgroundStore, name: str, spec: Background, leaving: Collection[str]) -> None:
    """Refuse, reading only, the rollback of ``name`` while a later forward migration of the same collection
    (and version field) starts at or past its ``to_version`` and stays registered (``leaving``: the migrations
    this rollback takes back too). Its documents are past this one's target: the revert would send only the
    rest back, and leave the collection in two shapes that no registered migration joins again."""
    later = sorted(
        state.name
        for state in await store.states_all()
        if state.name != name
        and state.name not in leaving
        and state.direction == "forward"
        and state.collection == spec.collection
        and state.spec.get("version_field") == spec.version_field
        and int(state.spec.get("from_version", -1)) >= spec.to_version
    )
    if later:
        first = " and ".join(f"'mongoshift down {n.removesuffix('.py')}'" for n in later)
        raise OutOfOrderError(
            f"{name} cannot be rolled back alone: {', '.join(later)} carr{'ies' if len(later) == 1 else 'y'} '{spec.collection}' "
            f"on from version {spec.to_version}, and this revert would take back only the documents still at "
            f"{spec.to_version}; roll {'it' if len(later) == 1 else 'them'} back first ({first}), or in the same run",
            file=name,
            blocked_by=later,
        )


async def _rewritten(store: BackgroundStore, state: State) -> int:
    """Documents the migration rewrote (a started step counts as one), this generation and the ones before; 0: none."""
    rewritten = (await store.live_counters(state))["migrated"]
    if state.mode == "step":
        rewritten += await store.started_partitions(state.name)
    before = int((state.previous or {}).get("totals", {}).get("migrated") or 0)
    return rewritten or before


def _one_way(name: str, rewritten: int) -> IrreversibleMigrationError:
    return IrreversibleMigrationError(
        f"{name} has no revert and has already rewritten {plural(rewritten, 'document')}: it cannot be rolled back", file=name
    )
