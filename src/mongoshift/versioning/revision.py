"""Revision-guarded writes on a pymongo ``AsyncCollection``.

Thin I/O around :mod:`.guard`: validate and build first (a refusal never
reaches the server), write, and on a miss read the document once to raise a
:class:`RevisionConflictError` that says why. ``revision_sync`` mirrors these
for a pymongo ``Collection``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pymongo import ReadPreference, ReturnDocument
from pymongo.asynchronous.client_session import AsyncClientSession
from pymongo.asynchronous.collection import AsyncCollection

from .fields import REVISION_FIELD, VERSION_FIELD, revision_of
from .guard import (
    GuardedWrite,
    RevisionResult,
    Update,
    guard_bump,
    guard_replacement,
    guard_update,
    require_acknowledged,
)


async def update_with_revision(
    collection: AsyncCollection[Any],
    filter: Mapping[str, Any],
    update: Update,
    *,
    expected_revision: int,
    expected_version: int | None = None,
    session: AsyncClientSession | None = None,
    upsert: bool = False,
    version_field: str = VERSION_FIELD,
    revision_field: str = REVISION_FIELD,
    **options: Any,
) -> RevisionResult:
    """``update_one`` that applies only while the document is at ``expected_revision`` (and
    ``expected_version``), and bumps the revision. ``options`` go to ``update_one``."""
    plan = guard_update(filter, update, expected_revision=expected_revision, expected_version=expected_version, upsert=upsert, version_field=version_field,
        revision_field=revision_field)
    require_acknowledged(collection)
    result = await collection.update_one(plan.filter, plan.document, session=session, **options)
    if result.matched_count == 0:
        raise await _explain(collection, plan, session)
    return RevisionResult(expected_revision + 1, result)


async def replace_with_revision(
    collection: AsyncCollection[Any],
    filter: Mapping[str, Any],
    replacement: Mapping[str, Any],
    *,
    expected_revision: int,
    expected_version: int | None = None,
    session: AsyncClientSession | None = None,
    upsert: bool = False,
    version_field: str = VERSION_FIELD,
    revision_field: str = REVISION_FIELD,
    **options: Any,
) -> RevisionResult:
    """``replace_one`` guarded like :func:`update_with_revision`; stores revision + 1 and
    keeps the version (the replacement's own, else ``expected_version``)."""
    plan = guard_replacement(filter, replacement, expected_revision=expected_revision, expected_version=expected_version, upsert=upsert,
        version_field=version_field, revision_field=revision_field)
    require_acknowledged(collection)
    result = await collection.replace_one(plan.filter, plan.document, session=session, **options)
    if result.matched_count == 0:
        raise await _explain(collection, plan, session)
    return RevisionResult(expected_revision + 1, result)


async def find_one_and_update_with_revision(
    collection: AsyncCollection[Any],
    filter: Mapping[str, Any],
    update: Update,
    *,
    expected_revision: int,
    expected_version: int | None = None,
    session: AsyncClientSession | None = None,
    upsert: bool = False,
    return_document: bool = ReturnDocument.AFTER,
    version_field: str = VERSION_FIELD,
    revision_field: str = REVISION_FIELD,
    **options: Any,
) -> dict[str, Any]:
    """``find_one_and_update`` guarded like :func:`update_with_revision`; returns the
    document after the write by default (so its new revision is at hand)."""
    plan = guard_update(filter, update, expected_revision=expected_revision, expected_version=expected_version, upsert=upsert, version_field=version_field,
        revision_field=revision_field)
    require_acknowledged(collection)
    doc: dict[str, Any] | None = await collection.find_one_and_update(plan.filter, plan.document, session=session, return_document=return_document, **options)
    if doc is None:
        raise await _explain(collection, plan, session)
    return doc


async def bump_revision(
    collection: AsyncCollection[Any],
    filter: Mapping[str, Any],
    *,
    expected_revision: int | None = None,
    expected_version: int | None = None,
    session: AsyncClientSession | None = None,
    version_field: str = VERSION_FIELD,
    revision_field: str = REVISION_FIELD,
) -> int:
    """Increment the revision and nothing else, so that writers holding the old one conflict
    (e.g. after a change stored elsewhere). Returns the new revision."""
    plan = guard_bump(filter, expected_revision=expected_revision, expected_version=expected_version, version_field=version_field,
        revision_field=revision_field)
    require_acknowledged(collection)
    doc = await collection.find_one_and_update(plan.filter, plan.document, projection={revision_field: 1, "_id": 0}, session=session,
        return_document=ReturnDocument.AFTER)
    if doc is None:
        raise await _explain(collection, plan, session)
    return revision_of(doc, revision_field)


async def _explain(collection: AsyncCollection[Any], plan: GuardedWrite, session: AsyncClientSession | None) -> Exception:
    """One primary read to tell a conflict from a vanished document."""
    primary = collection.with_options(read_preference=ReadPreference.PRIMARY)
    found = await primary.find_one(plan.lookup, projection=plan.projection, session=session)
    return plan.miss(found, collection.name)
