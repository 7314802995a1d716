"""Intents of a job system (``mongoshift.celery``): "this migration is queued, or running, in task X".

A job system's broker holds the intent to run something, MongoDB holds the truth; these records
let a runtime on top of a broker drop a duplicate while one is queued or running, and let a task
learn that the one ahead of it failed. Each is a lease in the lock collection (``_id``
``queue:<key>``), beside the migration lock and the ``background:<name>`` locks, judged by the
server's clock like them: a record whose task was lost with its broker message lapses at its
``expires_at`` instead of blocking the key for ever. ``*_in`` run on an open project (a session's
``ms.intents``: one connection and one check of the own collections for a task's many calls);
the flat functions are their one-shot wrappers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from pymongo import AsyncMongoClient
from pymongo.errors import DuplicateKeyError

from ..errors import ConfigInvalidError
from ..project.session import Project, Session, open_session
from ..project.settings import Settings
from .options import one_shot

#: ``queued`` and ``running`` hold the key while live; ``failed``, ``blocked`` and ``revoked`` (the
#: producer revoked its task: a running one stops, a queued one never runs) are kept for the
#: tasks behind them to read, and a new claim replaces them.
IntentState = Literal["queued", "running", "failed", "blocked", "revoked"]
LIVE: tuple[IntentState, ...] = ("queued", "running")
SETTLED: tuple[IntentState, ...] = ("failed", "blocked", "revoked")
PREFIX = "queue:"


@dataclass(frozen=True)
class Intent:
    """One key's record: who holds it, in what state, until when (the server's clock)."""

    key: str
    owner: str
    state: IntentState
    expires_at: datetime | None
    live: bool
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """Ask for ``key`` for ``owner`` (a task id) for ``ttl_seconds``; ``data`` is stored beside it (no secret, no value)."""

    key: str
    owner: str
    ttl_seconds: float
    data: Mapping[str, Any] = field(default_factory=dict)


def _checked_text(option: str, value: object) -> str:
    """A key or an owner: non-empty text (a list of keys given as one string would be read letter by letter)."""
    if not isinstance(value, str):
        raise ConfigInvalidError(f"an intent's {option} must be non-empty text, not {type(value).__name__}")
    if not value:
        raise ConfigInvalidError(f"an intent's {option} must not be empty")
    return value


def _checked_data(data: object) -> dict[str, Any]:
    """What is stored beside an intent: a mapping with text keys (a list was a bare ``TypeError`` from ``dict()``)."""
    if not isinstance(data, Mapping) or not all(isinstance(key, str) for key in data):
        raise ConfigInvalidError(f"an intent's data must be a mapping of text keys to values, not {type(data).__name__}")
    return dict(data)


def _checked_ttl(ttl_seconds: float) -> int:
    if isinstance(ttl_seconds, bool) or not isinstance(ttl_seconds, (int, float)) or not 0 < ttl_seconds <= 7 * 86_400:
        raise ConfigInvalidError(f"an intent's ttl_seconds must be above 0 and at most 604800, not {ttl_seconds!r}")
    return int(ttl_seconds * 1000)


def _expired_or_settled() -> dict[str, Any]:
    """The records a claim may replace: lapsed, or failed/blocked (a new attempt after a fix)."""
    return {"$or": [{"$lt": ["$expires_at", "$$NOW"]}, *({"$eq": ["$state", state]} for state in SETTLED)]}


def _reading(project: Project) -> AbstractAsyncContextManager[Session]:
    """A run of ``project`` for the intents: no lock, no files (a worker may have no migrations folder)."""
    return open_session(project.settings, take_lock=False, with_files=False, cancel=project.cancel, project=project)


async def claim_intents(settings: Settings, claims: Iterable[Claim], *, client: AsyncMongoClient[Any] | None = None) -> list[bool]:
    """One-shot ``Mongoshift.intents.claim`` (:func:`claim_intents_in`)."""
    return await claim_intents_in(one_shot(settings, client=client), claims)


async def claim_intents_in(project: Project, claims: Iterable[Claim]) -> list[bool]:
    """Take each key as ``queued``, in order; False where a live record (queued or running) holds it."""
    listed = list(claims)
    for claim in listed:
        if not isinstance(claim, Claim):
            raise ConfigInvalidError(f"claims are mongoshift Claim values, not {type(claim).__name__}")
        _checked_text("key", claim.key)
        _checked_text("owner", claim.owner)
        _checked_data(claim.data)
    ttls = [_checked_ttl(c.ttl_seconds) for c in listed]
    taken: list[bool] = []
    async with _reading(project) as session:
        collection = session.db[project.settings.lock_collection]
        for claim, ttl_ms in zip(listed, ttls, strict=True):
            fields = {
                "owner": {"$literal": claim.owner},
                "state": "queued",
                "data": {"$literal": _checked_data(claim.data)},
                "ttl_ms": ttl_ms,
                "locked_at": "$$NOW",
                "expires_at": {"$add": ["$$NOW", ttl_ms]},
            }
            try:
                result = await collection.update_one(
                    {"_id": PREFIX + claim.key, "$expr": _expired_or_settled()}, [{"$set": fields}], upsert=True
                )
            except DuplicateKeyError:
                taken.append(False)
                continue
            taken.append(result.upserted_id is not None or result.modified_count == 1)
    return taken


async def read_intents(settings: Settings, keys: Iterable[str], *, client: AsyncMongoClient[Any] | None = None) -> dict[str, Intent]:
    """One-shot ``Mongoshift.intents.read`` (:func:`read_intents_in`)."""
    return await read_intents_in(one_shot(settings, client=client), keys)


async def read_intents_in(project: Project, keys: Iterable[str]) -> dict[str, Intent]:
    """The records of ``keys`` that exist, by key; ``live`` says whether a queued or running one still holds its key."""
    if isinstance(keys, str):
        raise ConfigInvalidError("keys is a list of keys, not one string (read_intents(settings, [key]))")
    wanted = [PREFIX + _checked_text("key", key) for key in keys]
    found: dict[str, Intent] = {}
    async with _reading(project) as session:
        pipeline: list[dict[str, Any]] = [
            {"$match": {"_id": {"$in": wanted}}},
            {"$addFields": {"live": {"$and": [{"$gte": ["$expires_at", "$$NOW"]}, {"$or": [{"$eq": ["$state", s]} for s in LIVE]}]}}},
        ]
        async for doc in await session.db[project.settings.lock_collection].aggregate(pipeline):
            key = str(doc["_id"])[len(PREFIX):]
            found[key] = Intent(
                key=key,
                owner=str(doc.get("owner")),
                state=doc.get("state", "queued"),
                expires_at=doc.get("expires_at"),
                live=bool(doc.get("live")),
                data=dict(doc.get("data") or {}),
            )
    return found


async def settle_intent(
    settings: Settings,
    key: str,
    owner: str,
    state: IntentState | None,
    *,
    ttl_seconds: float,
    data: Mapping[str, Any] | None = None,
    client: AsyncMongoClient[Any] | None = None,
) -> bool:
    """One-shot ``Mongoshift.intents.settle`` (:func:`settle_intent_in`)."""
    return await settle_intent_in(one_shot(settings, client=client), key, owner, state, ttl_seconds=ttl_seconds, data=data)


async def settle_intent_in(
    project: Project, key: str, owner: str, state: IntentState | None, *, ttl_seconds: float, data: Mapping[str, Any] | None = None
) -> bool:
    """Move ``owner``'s record of ``key`` to ``state`` for ``ttl_seconds`` more (None: remove it).

    False when the record is not ``owner``'s any more (it lapsed and another task claimed the key),
    and when a ``revoked`` record would be made live again (``queued``, ``running``): a revoked task stays revoked."""
    ttl_ms = _checked_ttl(ttl_seconds)
    if state is not None and state not in get_args(IntentState):
        raise ConfigInvalidError(f"an intent's state is one of {', '.join(get_args(IntentState))} or None, not {state!r}")
    scope: dict[str, Any] = {"_id": PREFIX + _checked_text("key", key), "owner": _checked_text("owner", owner)}
    stored = None if data is None else _checked_data(data)
    async with _reading(project) as session:
        collection = session.db[project.settings.lock_collection]
        if state in LIVE:
            scope["state"] = {"$ne": "revoked"}
        if state is None:
            return (await collection.delete_one(scope)).deleted_count == 1
        fields: dict[str, Any] = {"state": state, "ttl_ms": ttl_ms, "renewed_at": "$$NOW", "expires_at": {"$add": ["$$NOW", ttl_ms]}}
        if stored is not None:
            fields["data"] = {"$literal": stored}
        return (await collection.update_one(scope, [{"$set": fields}])).matched_count == 1
