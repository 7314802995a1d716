"""Drift: documents of the old shape written after a background migration completed.

An application version that was never redeployed (a forgotten pod, a cron script) can
write the old shape again once the rewrite is done. One probe per completed forward
migration finds out: bounded (one ``_id``, ``maxTimeMS``), hinted on the version index,
and over the engine's own definition of the old shape (:func:`.job.stored_old_shape`),
so it finds exactly what another pass would rewrite. The answer is a yes or no, never an
id. ``requires`` asks the same probe before it lets a contract step run.

A document below the newest completed version whose version is no migration's
``from_version`` (say ``__v: 0`` or none, after ``1 -> 2``) is *stranded*: no pass can
upgrade it, so a reopen would not help. The newest completed migration of the collection
probes for it the same bounded way (:func:`stranded_match`), and verify, audit and the live
watcher report it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure

from ...errors import BackgroundConflictError
from ...project.declarations import Declarations
from ...project.server_errors import bad_hint, max_time_expired
from ..plan.key_filter import version_index_key
from ..plan.shard_pass import has_index
from ..state.controls import control
from ..state.events import Events
from ..state.model import State
from ..state.store import BackgroundStore
from ..write.document import not_a_version
from ..write.job import stored_old_shape

#: The probe's time bound (``maxTimeMS``): with the version index it needs one key.
PROBE_MS = 5_000

#: A migration of the same collection in one of these is at work (or will be): its passes
#: move documents on, so a probe of an earlier step would race them.
ACTIVE = ("blocked", "pending", "running", "paused")

Action = Literal["clean", "reported", "reopened", "skipped"]

#: Why a migration was not probed: a stable token (``--json``) and what it means.
SKIP_REASONS: dict[str, str] = {
    "not_completed": "not completed: its own passes still look for the old shape",
    "revert": "a revert: drift is only looked for after a forward rewrite",
    "step": "a step migration: it has no version field to probe",
    "busy": "another migration of the collection is at work",
    "min_guard": "the declared versioning min refuses the old shape",
    "no_index": "no version index to probe through",
    "probe_timeout": "the probe ran past its time bound",
}


@dataclass(frozen=True)
class Verified:
    """What ``background verify`` found for one migration; counts and names only, never an id."""

    migration: str
    collection: str
    #: A document of the old shape exists (what a new pass would rewrite).
    found: bool
    action: Action
    #: When ``skipped``: a token of :data:`SKIP_REASONS`.
    reason: str | None = None
    #: The reason in words (``busy``: which migration).
    detail: str | None = None
    #: Documents below this migration's ``to_version`` (the newest completed one of its collection)
    #: at a version no migration upgrades: no pass can rewrite them, a person must look.
    stranded: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def old_shape_left(db: AsyncDatabase[dict[str, Any]], state: State, *, unindexed: Literal["scan", "skip"]) -> bool | None:
    """Whether a document of ``state``'s old shape exists (a forward, document-mode migration).

    ``unindexed="skip"`` answers None when the version index is missing; ``"scan"`` probes
    without the hint then. A probe past :data:`PROBE_MS` raises (``max_time_expired``)."""
    return await _probe(db, state, stored_old_shape(state), unindexed=unindexed)


def stranded_match(state: State, states: Sequence[State]) -> dict[str, Any] | None:
    """The documents no migration can upgrade, when ``state`` is the newest completed forward
    document migration of its collection (None otherwise): below its ``to_version`` (or without
    a version), at a version that is no registered migration's ``from_version``, or with a version
    that is not a number at all."""
    if not _forward_documents(state) or state.status != "completed":
        return None
    field, collection = state.spec["version_field"], state.collection
    same = [s for s in states if s.collection == collection and s.mode != "step" and s.spec.get("version_field") == field]
    newest = max((s for s in same if _forward_documents(s) and s.status == "completed"), key=lambda s: (int(s.spec["to_version"]), s.name))
    if newest.name != state.name:
        return None
    sources = sorted({int(s.spec["from_version"]) for s in same})
    below: list[dict[str, Any]] = [{field: {"$lt": int(state.spec["to_version"]), "$nin": sources}}]
    if 0 not in sources:  # a missing or null version counts as 0
        below.append({field: None})
    # a version that is not a number ("1", true) is no valid version: no migration's equality match takes it
    below.append(not_a_version(field))
    return {"$or": below}


def _forward_documents(state: State) -> bool:
    return state.direction == "forward" and state.mode != "step"


async def _probe(db: AsyncDatabase[dict[str, Any]], state: State, match: dict[str, Any], *, unindexed: Literal["scan", "skip"]) -> bool | None:
    """One bounded look for a document of ``match``, hinted on ``state``'s version index (see :func:`old_shape_left`)."""
    spec = state.spec
    collection = db[spec["collection"]]
    try:
        found = await collection.find_one(match, {"_id": 1}, hint=[(spec["version_field"], 1), ("_id", 1)], max_time_ms=PROBE_MS)
    except OperationFailure as exc:
        if not bad_hint(exc):
            raise
        if unindexed == "skip":
            return None
        found = await collection.find_one(match, {"_id": 1}, max_time_ms=PROBE_MS)
    return found is not None


async def reopen(store: BackgroundStore, name: str, *, by: str, reason: str) -> bool:
    """One more pass for a completed migration (the ``reopen`` control); False when it changed meanwhile."""
    try:
        await control(store, name, "reopen", by=by, reason=reason)
    except BackgroundConflictError:
        return False
    return True


def _skip_reason(state: State, states: Sequence[State], declarations: Declarations) -> tuple[str, str | None] | None:
    """Why ``state`` is not probed (a token and a detail), or None to probe it."""
    if state.direction != "forward":
        return "revert", None
    if state.mode == "step":
        return "step", None
    if state.status != "completed":
        return "not_completed", state.status
    busy = [s.name for s in states if s.name != state.name and s.collection == state.collection and s.status in ACTIVE]
    if busy:
        return "busy", ", ".join(busy)
    declaration = declarations.get(state.collection)
    versioning = declaration.versioning if declaration is not None else None
    if versioning is not None and versioning.min > int(state.spec["from_version"]):
        return "min_guard", f"min {versioning.min} > from_version {state.spec['from_version']}"
    return None


async def verify(
    db: AsyncDatabase[dict[str, Any]],
    store: BackgroundStore,
    names: Sequence[str] | None,
    declarations: Declarations,
    events: Events,
    *,
    reopen_found: bool,
    by: str,
) -> list[Verified]:
    """Probe each named (None: every registered) migration once; report drift or reopen it.

    Each answer is also a ``drift`` event (migration, collection, found, action, reason)."""
    states = await store.states_all()
    wanted = states if names is None else [s for s in states if s.name in names]
    results = [await _verify_one(db, store, state, states, declarations, reopen_found=reopen_found, by=by) for state in wanted]
    for r in results:
        events.emit("drift", r.migration, collection=r.collection, found=r.found, action=r.action, reason=r.reason, detail=r.detail, stranded=r.stranded)
    return results


async def look(db: AsyncDatabase[dict[str, Any]], states: Sequence[State], declarations: Declarations) -> list[Verified]:
    """Read-only: the probe of every migration in ``states``, nothing reopened and no event (``audit``)."""
    return [await _verify_one(db, None, state, states, declarations, reopen_found=False, by="") for state in states]


async def unindexed(db: AsyncDatabase[dict[str, Any]], state: State) -> str | None:
    """The version index (as ``{__v: 1, _id: 1}``) that the batches of ``state`` will read through, when its
    collection holds documents but lacks it: they then scan the collection. None when it is there, or when no batch is left
    to read (an ended migration), the migration reads none (``step``), or its pass is planned by shard
    (read through the shard key's own index, which the planner checks)."""
    if state.status not in ACTIVE or state.mode == "step" or (state.plan or {}).get("layout"):
        return None
    key = version_index_key(str(state.spec["version_field"]))
    collection = db[state.collection]
    if await has_index(collection, key) or await collection.find_one({}, {"_id": 1}) is None:
        return None  # indexed, or nothing to scan (no document, or no collection yet)
    return "{" + ", ".join(f"{field}: {direction}" for field, direction in key) + "}"


async def _verify_one(
    db: AsyncDatabase[dict[str, Any]],
    store: BackgroundStore | None,
    state: State,
    states: Sequence[State],
    declarations: Declarations,
    *,
    reopen_found: bool,
    by: str,
) -> Verified:
    skip = _skip_reason(state, states, declarations)
    if skip is not None:
        return Verified(state.name, state.collection, False, "skipped", *skip)
    try:
        found = await old_shape_left(db, state, unindexed="skip")
        match = stranded_match(state, states)
        stranded = bool(match is not None and found is not None and await _probe(db, state, match, unindexed="skip"))
    except OperationFailure as exc:
        if not max_time_expired(exc):
            raise
        return Verified(state.name, state.collection, False, "skipped", "probe_timeout", f"{PROBE_MS} ms")
    if found is None:
        index = f"{{{state.spec['version_field']}: 1, _id: 1}}"
        return Verified(state.name, state.collection, False, "skipped", "no_index", index)
    if not found:
        return Verified(state.name, state.collection, False, "reported" if stranded else "clean", stranded=stranded)
    if reopen_found and store is not None and await reopen(store, state.name, by=by, reason="verify found old shapes after completion"):
        return Verified(state.name, state.collection, True, "reopened", stranded=stranded)
    return Verified(state.name, state.collection, True, "reported", stranded=stranded)
