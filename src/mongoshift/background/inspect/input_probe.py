"""A look at the collection when a migration is registered: the documents it will never touch.

Real collections often have no version field, which counts as version 0. A
migration that starts at ``from_version=1`` skips those documents silently:
it completes with nothing migrated, and whatever ``requires`` it then runs.
So registration (and ``dry-run up``) counts them and warns, in counts only.
The count is bounded in documents and in time, since it runs on every ``up``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError

from ...project.server_errors import max_time_expired
from ...project.wording import plural
from ...schema.background import Background
from ..state.store import BackgroundStore
from ..write.document import not_a_version, version_match

log = logging.getLogger("mongoshift.background")

#: Counting stops here: "at least N" is as useful as the exact number.
COUNT_LIMIT = 10_000
#: And after this long (``maxTimeMS``), on a collection without the version index.
COUNT_TIME_MS = 2_000


async def _bounded_count(collection: Any, filter_: dict[str, Any]) -> tuple[int, str | None]:
    """The count up to :data:`COUNT_LIMIT`, and why it stopped early (None: it is exact)."""
    try:
        n = await collection.count_documents(filter_, limit=COUNT_LIMIT, maxTimeMS=COUNT_TIME_MS)
    except OperationFailure as exc:
        if not max_time_expired(exc):
            raise
        found = await collection.find_one(filter_, {"_id": 1}, max_time_ms=COUNT_TIME_MS)
        return (1, f"stopped counting after {COUNT_TIME_MS / 1000:g}s") if found is not None else (0, None)
    if n >= COUNT_LIMIT:
        return n, f"stopped counting at {COUNT_LIMIT}"
    return n, None


async def not_a_version_count(collection: Any, filter_: dict[str, Any], field: str) -> tuple[int, str | None]:
    """How many documents ``filter_`` matches whose ``field`` is not a number (:func:`not_a_version`), bounded
    as every count here; (0, None) when none. No pass of any migration takes them: verify later reports them
    stranded."""
    odd = not_a_version(field)
    return await _bounded_count(collection, {"$and": [filter_, odd]} if filter_ else odd)


def not_a_version_words(name: str, collection: str, field: str, n: int, stopped: str | None) -> str:
    """The warning for :func:`not_a_version_count`: counts, the field and the collection, never an id or a value."""
    amount = f"at least {n:,} documents" if stopped else plural(n, "document")
    one = n == 1 and not stopped
    them = "it" if one else "them"
    return (
        f"{name}: {amount} of {collection!r} matching its filter {'has' if one else 'have'} a {field} that is not a number "
        f"(text or another type: no valid version), so no pass will touch {them} and 'background verify' (through the version index) will report {them} "
        f'stranded; store the version as a number (docs/background.md, "Versions that are not numbers")' + (f" ({stopped})" if stopped else "")
    )


async def not_a_version_warning(db: AsyncDatabase[dict[str, Any]], name: str, spec: Background) -> str | None:
    """:func:`not_a_version_words` for a document migration, None when there is nothing to say.

    Advisory, as :func:`unversioned_warning`: a server error while looking is logged and the caller goes on."""
    if spec.mode != "documents":
        return None
    try:
        n, stopped = await not_a_version_count(db[spec.collection], dict(spec.filter), spec.version_field)
    except PyMongoError as exc:
        log.warning("%s: could not look for documents whose version is not a number (%s)", name, type(exc).__name__)
        return None
    return not_a_version_words(name, spec.collection, spec.version_field, n, stopped) if n else None


async def _taken_care_of(store: BackgroundStore, name: str, spec: Background, planned_before: Iterable[Background]) -> bool:
    """Another forward migration of the collection starts at version 0: the unversioned documents are its input."""
    for other in planned_before:
        if other.collection == spec.collection and other.from_version == 0 and other.mode == "documents":
            return True
    for state in await store.states_all():
        if (
            state.name != name
            and state.direction == "forward"
            and state.status != "cancelled"
            and state.collection == spec.collection
            and state.spec.get("from_version") == 0
        ):
            return True
    return False


async def missing_collection_warning(db: AsyncDatabase[dict[str, Any]], name: str, spec: Background) -> str | None:
    """A warning when the collection does not exist (yet): the migration will complete at once, having rewritten
    nothing, which a typo in ``collection=`` looks like too. Advisory, as :func:`unversioned_warning`.

    None for a step migration: ``step(ctx)`` does its own reads and writes (often creating the collection), and a run
    calls it until it says ``done``, whatever the collection holds."""
    if spec.mode != "documents":
        return None
    try:
        if await db.list_collection_names(filter={"name": spec.collection}):
            return None
    except PyMongoError as exc:
        log.warning("%s: could not look for its collection (%s)", name, type(exc).__name__)
        return None
    return (
        f"{name}: the collection {spec.collection!r} does not exist (yet) in this database: there is nothing to rewrite, "
        "and a run completes it at once; check collection= if documents were expected"
    )


async def unversioned_warning(
    db: AsyncDatabase[dict[str, Any]],
    store: BackgroundStore,
    name: str,
    spec: Background,
    *,
    planned_before: Iterable[Background] = (),
) -> str | None:
    """A warning when documents the filter matches have no version and ``spec`` starts above 0.

    Advisory: a server error while looking is logged and the registration goes on."""
    if spec.mode != "documents" or spec.from_version < 1:
        return None
    try:
        return await _look(db, store, name, spec, planned_before)
    except PyMongoError as exc:
        log.warning("%s: could not look for documents without a version field (%s)", name, type(exc).__name__)
        return None


async def _look(
    db: AsyncDatabase[dict[str, Any]], store: BackgroundStore, name: str, spec: Background, planned_before: Iterable[Background]
) -> str | None:
    if await _taken_care_of(store, name, spec, planned_before):
        return None
    collection = db[spec.collection]
    field = spec.version_field
    missing, stopped = await _bounded_count(collection, {**spec.filter, **version_match(field, 0)})
    if missing == 0:
        return None
    at_source, stopped_too = await _bounded_count(collection, {**spec.filter, **version_match(field, spec.from_version)})

    def amount(n: int, why: str | None) -> str:
        return f"at least {n:,} documents" if why else plural(n, "document")

    notes = sorted({why for why in (stopped, stopped_too) if why})
    return (
        f"{name}: {amount(missing, stopped)} of {spec.collection!r} matching its filter with no "
        f"{field} (missing, null or 0 count as version 0), but it starts at from_version={spec.from_version}, "
        f"so it will never touch such documents ({amount(at_source, stopped_too)} at version {spec.from_version}). "
        "If they are its input, start it at from_version=0."
        + (f" ({'; '.join(notes)})" if notes else "")
    )
