"""Whether a collection is sharded, and how: reads ``config.collections`` and ``config.chunks``.

The answer is one of three (:class:`Detection`): a layout (sharded, or a key configured in
``shard_keys``), "not sharded" (a replica set or standalone: quietly off), or "unknown"
(the user may not read ``config``: the engine falls back to untargeted ``_id`` ranges and
warns once per collection). Bounds are decoded as they are stored (``Int64`` stays
``Int64``, ``MinKey``/``MaxKey`` stay themselves); the planning is :mod:`.shard_plan`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import OperationFailure, PyMongoError

from ...project.server_errors import unauthorized
from .shard_plan import ShardKey, ShardLayout, configured_layout, layout_from_documents

log = logging.getLogger("mongoshift.background")

ShardAware = Literal["auto", "on", "off"]


@dataclass(frozen=True)
class Detection:
    layout: ShardLayout | None
    #: "sharded", "configured", "unsharded", "unknown" (no privilege to read config), "off".
    status: str


async def _is_mongos(db: AsyncDatabase[Any]) -> bool:
    try:
        hello = await db.client.admin.command("hello")
    except PyMongoError:
        return False
    return hello.get("msg") == "isdbgrid"


async def read_layout(db: AsyncDatabase[Any], collection: str) -> ShardLayout | None:
    """The sharded layout from the config database; raises ``OperationFailure`` when it may not be read."""
    namespace = f"{db.name}.{collection}"
    config = db.client["config"]
    doc = await config["collections"].find_one({"_id": namespace})
    layout = layout_from_documents(doc, [], namespace)
    if layout is None or doc is None:
        return None
    # Since 5.0 chunks name their collection by UUID; older metadata (and some tools) by namespace.
    query: dict[str, Any] = {"uuid": doc["uuid"]} if doc.get("uuid") is not None else {"ns": namespace}
    chunks = [c async for c in config["chunks"].find(query, sort=[("min", 1)])]
    if not chunks and "uuid" in query:
        chunks = [c async for c in config["chunks"].find({"ns": namespace}, sort=[("min", 1)])]
    return layout_from_documents(doc, chunks, namespace)


async def read_identity(db: AsyncDatabase[Any], collection: str) -> dict[str, Any] | None:
    """The collection's UUID and epoch as ``config.collections`` has them now (one small read, no chunks);
    None when not sharded or unreadable (then nothing is re-split)."""
    try:
        doc = await db.client["config"]["collections"].find_one({"_id": f"{db.name}.{collection}"}, {"uuid": 1, "lastmodEpoch": 1, "key": 1, "dropped": 1,
            "unsplittable": 1})
    except PyMongoError:
        return None
    layout = layout_from_documents(doc, [], f"{db.name}.{collection}")
    return layout.identity() if layout is not None else None


async def detect(
    db: AsyncDatabase[Any],
    collection: str,
    *,
    mode: ShardAware,
    configured: Mapping[str, Mapping[str, Any]],
    warned: set[str],
) -> Detection:
    """The collection's layout under the ``shard_aware`` setting; ``warned`` keeps the warn-once set."""
    if mode == "off":
        return Detection(None, "off")
    key = configured.get(collection)
    try:
        if mode == "on" or await _is_mongos(db):
            layout = await read_layout(db, collection)
            if layout is not None:
                return Detection(layout, "sharded")
    except OperationFailure as exc:
        if not unauthorized(exc):
            raise
        if key is None:
            if collection not in warned:
                warned.add(collection)
                log.warning(
                    "%s: cannot read config.collections/config.chunks (needs clusterMonitor or read on config): "
                    "batches are not targeted to shards; set shard_keys to target the writes",
                    collection,
                )
            return Detection(None, "unknown")
    if key is not None:
        return Detection(configured_layout(f"{db.name}.{collection}", ShardKey.from_document(key)), "configured")
    return Detection(None, "unsharded")
