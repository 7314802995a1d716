"""Checking that the collections mongoshift keeps its records in are really its own.

The changelog, lock, background-state (with its ``_partitions``), converge-log and
run-log collections are named by settings, so a typo such as ``changelog_collection =
"users"`` would make the next run create a unique index on ``users.name`` and
write records among the application's documents. Before anything is written,
each run reads a few documents of every one of these collections and refuses
(:class:`~mongoshift.errors.CollectionClashError`, exit 39) when one of them is
a view, holds a document that does not have the shape of mongoshift's records,
or is also a declared collection. A missing or empty collection is fine: it
becomes ours. Sampling keeps the check cheap on a large collection and catches
any application collection, whose documents do not look like these records.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import CollectionClashError

if TYPE_CHECKING:
    from pymongo.asynchronous.database import AsyncDatabase

    from .settings import Settings

#: Documents read per collection.
SAMPLE = 5

Shape = Callable[[Mapping[str, Any]], bool]


def _changelog(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("name"), str) and doc.get("status") in ("applied", "reverted", "failed")


def _lock(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("_id"), str) and "owner" in doc and "expires_at" in doc


def _background_state(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("_id"), str) and "registration" in doc and "status" in doc


def _background_partition(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("background"), str) and "generation" in doc and "seq" in doc


def _watch(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("_id"), str) and "fence" in doc and "state" in doc


def _converge_log(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("run_id"), str) and "started_at" in doc and "success" in doc


def _run_log(doc: Mapping[str, Any]) -> bool:
    return isinstance(doc.get("run_id"), str) and "seq" in doc and "level" in doc


#: The fields each shape looks at: a document that has them all is one of mongoshift's records with a type or
#: value it never writes (edited by hand), not an application's document, and is refused as such.
_FIELDS: dict[Shape, tuple[str, ...]] = {
    _changelog: ("name", "status"),
    _lock: ("_id", "owner", "expires_at"),
    _background_state: ("_id", "registration", "status"),
    _background_partition: ("background", "generation", "seq"),
    _watch: ("_id", "fence", "state"),
    _converge_log: ("run_id", "started_at", "success"),
    _run_log: ("run_id", "seq", "level"),
}


def own_collections(settings: Settings) -> dict[str, tuple[str, str, Shape]]:
    """Collection name → (the setting naming it, what it holds, the shape of its records)."""
    background = settings.background_collection
    return {
        settings.changelog_collection: ("changelog_collection", "changelog records", _changelog),
        settings.lock_collection: ("lock_collection", "locks", _lock),
        background: ("background_collection", "background migration states", _background_state),
        f"{background}_partitions": ("background_collection", "background migration partitions", _background_partition),
        f"{background}_watch": ("background_collection", "live watcher records", _watch),
        settings.converge_collection: ("converge_collection", "converge log entries", _converge_log),
        settings.run_log_collection: ("run_log_collection", "run log lines", _run_log),
    }


def refuse_declared(settings: Settings, declared: Mapping[str, str]) -> None:
    """Raise when a declared collection (name → where it was declared) is one of the own collections."""
    for name, (setting, _, _) in own_collections(settings).items():
        if name in declared:
            raise CollectionClashError(
                f"{declared[name]}: the declared collection {name!r} is the one {setting} names for mongoshift's own "
                "records: rename the declaration or change the setting",
                collection=name,
                setting=setting,
            )


async def check_own_collections(db: AsyncDatabase[Any], settings: Settings) -> None:
    """Refuse the run when an own collection is a view, holds foreign documents, or is declared."""
    refuse_declared(settings, {d.name: d.source for d in settings.collections})
    owned = own_collections(settings)
    async for info in await db.list_collections(filter={"name": {"$in": list(owned)}}):
        name = info["name"]
        setting, holds, shape = owned[name]
        if info.get("type", "collection") != "collection":
            raise CollectionClashError(
                f"{setting} names {name!r}, which is a {info.get('type')}, not a collection: "
                "mongoshift keeps its records there, so choose another name",
                collection=name,
                setting=setting,
            )
        sample = await db[name].find({}, limit=SAMPLE).to_list()
        foreign = [doc for doc in sample if not shape(doc)]
        if foreign and all(field in foreign[0] for field in _FIELDS[shape]):
            raise CollectionClashError(
                f"{setting} names the collection {name!r}, whose {holds} include one with their fields but a type or "
                "value mongoshift never writes (edited by hand?); nothing was written. Find it by its fields, then "
                "restore it, or delete that record (the rest of the collection is mongoshift's history: keep it)",
                collection=name,
                setting=setting,
            )
        if foreign:
            fields = ", ".join(sorted(str(k) for k in foreign[0] if k != "_id")[:8]) or "only _id"
            raise CollectionClashError(
                f"{setting} names the collection {name!r}, which holds documents that are not mongoshift's {holds} "
                f"(one has the fields: {fields}); nothing was written. Fix the setting (or empty the collection "
                "if it really is meant for mongoshift)",
                collection=name,
                setting=setting,
            )
