"""The shard-key guard of a ``pipeline`` migration: stages the server runs around the user's own.

A ``migrate`` transform runs in Python, so the engine compares the shard key before and after
(:func:`.batch.shard_key_change`). A pipeline runs on the server, on the document as it is at
that moment, so the comparison has to run there too. Before the user's stages, one stage keeps
the key's values (a missing field as null, as the shard key sees it) in a reserved field; after
them, one stage compares them by value with ``$eq`` (``1``, ``1.0`` and ``Int64(1)`` are the
same key) and, when a field changed, sets ``_id`` to a value it cannot have had. The server
then refuses that one document's write as ``ImmutableField`` (66), before it could move the
document to another chunk, and stores nothing of it; a user stage may never write ``_id``
(:mod:`mongoshift.schema.background`), so on a guarded pipeline that code always means the
guard. The failed ``update_many`` falls back to one write per document (:mod:`.batch`), where
the refused document becomes the document error ``shard-key-changed``.

A document that already holds the reserved field fails the same way instead of losing it.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...project.server_errors import IMMUTABLE_FIELD

#: The top-level field the key's values are kept in while the user's stages run; removed by the guard.
KEY_STASH = "__mongoshift_shard_key"

#: What the guard sets ``_id`` to when a key field changed (the second one if the first is the document's own).
_MOVED = ({"mongoshift": "shard-key-changed"}, {"mongoshift": "shard-key-changed", "again": True})


def _value(field: str) -> dict[str, Any]:
    """The field's value, missing as null (``$ifNull`` turns both into null)."""
    return {"$ifNull": [f"${field}", None]}


def guarded(stages: Sequence[dict[str, Any]], fields: Sequence[str]) -> list[dict[str, Any]]:
    """``stages`` between the stash of the shard key's values and the check that refuses a change."""
    if not fields:
        return list(stages)
    stash: dict[str, Any] = {
        "$set": {KEY_STASH: {"$cond": [{"$eq": [{"$type": f"${KEY_STASH}"}, "missing"]}, [_value(f) for f in fields], None]}}
    }
    unchanged = {
        "$and": [
            {"$isArray": f"${KEY_STASH}"},
            *({"$eq": [_value(f), {"$arrayElemAt": [f"${KEY_STASH}", i]}]} for i, f in enumerate(fields)),
        ]
    }
    other = {"$cond": [{"$eq": ["$_id", {"$literal": _MOVED[0]}]}, {"$literal": _MOVED[1]}, {"$literal": _MOVED[0]}]}
    check = {"$set": {"_id": {"$cond": [unchanged, "$_id", other]}}}
    return [stash, *stages, check, {"$unset": KEY_STASH}]


def refused_by_guard(error: Mapping[str, Any], fields: Sequence[str]) -> bool:
    """Whether a write error of a guarded pipeline's write is the guard's (the key changed)."""
    return bool(fields) and error.get("code") == IMMUTABLE_FIELD


def key_changed_message(fields: Sequence[str]) -> str:
    """The document error's text: the fields, never their values."""
    return (
        f"the pipeline changed the shard key ({', '.join(fields)}), or the document holds the "
        f"reserved field {KEY_STASH}: a background migration cannot move documents between chunks"
    )
