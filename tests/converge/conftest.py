"""Helpers for converge tests: settings with declarations, and what the server has."""

from __future__ import annotations

from typing import Any

from mongoshift.project.settings import Settings

from ..tenants.conftest import tenant_project  # noqa: F401  (a fixture: converge across tenants)


def settings_with(project, *declarations: dict[str, Any], **extra: Any) -> Settings:  # type: ignore[no-untyped-def]
    """The project's settings with these ``[[collections]]`` (validated as a project file would be)."""
    folder = project.root / "collections"
    folder.mkdir(exist_ok=True)
    base = project.settings().model_dump(exclude={"collections"})
    return Settings(**{**base, "collections_dir": folder, "collections": list(declarations), **extra})


async def server_indexes(db, collection: str) -> dict[str, dict[str, Any]]:  # type: ignore[no-untyped-def]
    return {doc["name"]: dict(doc) async for doc in await db[collection].list_indexes()}


async def journal(db) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    return [doc async for doc in db["_mongoshift_converge"].find({}, {"_id": 0}).sort("started_at", 1)]
