"""What the server has for a declared collection, read from the primary and normalised.

Everything the planner needs is read here, so that the planner stays a pure
function: the collection's kind and options (``listCollections``, one for every
declared collection of a run), its indexes
(``listIndexes``), its shard key (``config.collections``, when readable) and,
when a versioning ``min`` is being raised, whether any document is still below
it or holds no valid version or revision at all; when a plan is made, whether a document fails a strict validator
about to be set. Those probes are bounded in time and return a yes/no, never a document or an ``_id``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bson.regex import Regex
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import ExecutionTimeout, OperationFailure, PyMongoError

from ..schema.collections import CollectionDeclaration
from ..schema.index_specs import (
    IndexSpec,
    ValidatorSpec,
    normalize_collation,
    versioning_minimum,
)

Kind = Literal["missing", "collection", "view", "timeseries"]

#: How long the "is any document below the new min?" probe may run.
PROBE_MAX_TIME_MS = 60_000
#: How long the "does a document fail the new validator?" check may run: it only warns, so it is kept short.
VIOLATION_MAX_TIME_MS = 10_000


@dataclass(frozen=True)
class MinProbe:
    """The answer to "is a document below ``minimum``?": found, none, or unknown (``error``)."""

    minimum: int
    found: bool | None
    error: str | None = None
    #: The field the document found fails on: the version, or the revision (the rule requires both).
    field: str | None = None


@dataclass(frozen=True)
class ViolationProbe:
    """Whether a document fails the validator about to be set: found, none, or unknown (``error``)."""

    found: bool | None
    error: str | None = None


@dataclass(frozen=True)
class CollectionState:
    """One collection as the server reports it, in the comparable form."""

    name: str
    kind: Kind
    validator: ValidatorSpec = field(default_factory=lambda: ValidatorSpec({}))
    default_collation: Mapping[str, Any] | None = None
    indexes: tuple[IndexSpec, ...] = ()
    shard_key: tuple[str, ...] | None = None
    #: The shard key with its directions (1 or "hashed"), when sharded and readable.
    shard_key_spec: tuple[tuple[str, Any], ...] = ()
    #: The minimum version the server's validator enforces now (0: none).
    version_minimum: int = 0
    probe: MinProbe | None = None
    #: Set when the declared validator would refuse existing documents' next updates (strict, not warn).
    violations: ViolationProbe | None = None
    #: Other collections whose names differ from this one's in case only (to the server, other collections).
    case_twins: tuple[str, ...] = ()

    @property
    def exists(self) -> bool:
        return self.kind != "missing"


def _kind(info: Mapping[str, Any]) -> Kind:
    # Some servers (mongoeco) report every namespace as type "collection"; the options tell.
    options = info.get("options") or {}
    if info.get("type") == "view" or "viewOn" in options:
        return "view"
    if info.get("type") == "timeseries" or "timeseries" in options:
        return "timeseries"
    return "collection"


async def _shard_key(db: AsyncDatabase[Any], name: str) -> tuple[tuple[str, Any], ...] | None:
    """The shard key's fields and directions, or None when not sharded or not readable (the server still guards it)."""
    try:
        doc = await db.client["config"]["collections"].find_one({"_id": f"{db.name}.{name}", "dropped": {"$ne": True}})
    except PyMongoError:
        return None
    if not doc or doc.get("unsplittable") or not isinstance(doc.get("key"), Mapping):
        return None
    return tuple(doc["key"].items())


async def probe_below(
    db: AsyncDatabase[Any],
    name: str,
    field_name: str,
    minimum: int,
    *,
    revision_field: str | None = None,
    max_time_ms: int = PROBE_MAX_TIME_MS,
) -> MinProbe:
    """Whether one document has ``field < minimum``, no valid version or (with ``revision_field``) no valid
    revision; ids are never read.

    Valid is what the validator about to be set accepts, which requires both fields: a version is a 32-bit
    int, so missing or null counts as 0 and a wrong type (``"2"``, ``2.0``, a long, a bool) counts as below
    too, since the new rule would refuse that document's next write just the same; a revision is an int or
    a long, at least 0. An array is asked for by itself: ``$type`` and ``$lt`` match an array by its elements."""
    conditions: list[dict[str, Any]] = [{field_name: {"$lt": minimum}}, {field_name: {"$not": {"$type": "int"}}}, {field_name: {"$type": "array"}}]
    projection = {"_id": 0, field_name: 1}
    if revision_field is not None:
        conditions += [
            {revision_field: {"$not": {"$type": ["int", "long"]}}},
            {revision_field: {"$lt": 0}},
            {revision_field: {"$type": "array"}},
        ]
        projection[revision_field] = 1
    try:
        doc = await db[name].find_one({"$or": conditions}, projection=projection, max_time_ms=max_time_ms)
    except ExecutionTimeout:
        return MinProbe(minimum, None, f"the check did not finish within {max_time_ms / 1000:g}s")
    except OperationFailure as exc:
        return MinProbe(minimum, None, f"the check failed: {exc.code} {type(exc).__name__}")
    if doc is None:
        return MinProbe(minimum, False)
    version = doc.get(field_name)
    valid_version = type(version) is int and version >= minimum  # an Int64 is decoded as its own type: a long
    return MinProbe(minimum, True, field=field_name if not valid_version or revision_field is None else revision_field)


async def probe_violation(
    db: AsyncDatabase[Any], name: str, validator: Mapping[str, Any], *, max_time_ms: int = VIOLATION_MAX_TIME_MS
) -> ViolationProbe:
    """Whether one document fails ``validator``; counted on the server (at most one), so no document or id is read."""
    try:
        found = await db[name].count_documents({"$nor": [dict(validator)]}, limit=1, maxTimeMS=max_time_ms)
    except ExecutionTimeout:
        return ViolationProbe(None, f"the check did not finish within {max_time_ms / 1000:g}s")
    except OperationFailure as exc:
        return ViolationProbe(None, f"the check failed: {exc.code} {type(exc).__name__}")
    return ViolationProbe(found > 0)


def _refuses_updates(declaration: CollectionDeclaration, server: ValidatorSpec) -> ValidatorSpec | None:
    """The declared validator when it changes and would refuse an update of a document that fails it, else None.

    Only ``strict`` checks every update (``moderate`` lets a document that already fails it be updated), and only
    an action other than ``warn`` refuses the write."""
    wanted = declaration.validator_spec()
    if wanted is None or wanted.empty or wanted.same_as(server) or wanted.level != "strict" or wanted.action == "warn":
        return None
    return wanted


def _same_but_case(name: str, other: str) -> bool:
    return other != name and re.fullmatch(re.escape(name), other, re.IGNORECASE) is not None


async def _infos(db: AsyncDatabase[Any], names: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    """What ``listCollections`` reports for these collections, by name, and for those whose names differ from
    theirs in case only (a legacy ``Users`` beside a declared ``users``): one command, however many."""
    patterns = [Regex(f"^{re.escape(name)}$", "i") for name in names]
    return {info["name"]: info async for info in await db.list_collections(filter={"name": {"$in": patterns}})}


def _twins(name: str, infos: Mapping[str, Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(sorted(other for other in infos if _same_but_case(name, other)))


async def inspect(db: AsyncDatabase[Any], declaration: CollectionDeclaration, *, probe: bool = True) -> CollectionState:
    """Read one declared collection's state; probe for old documents only when ``min`` goes up."""
    infos = await _infos(db, [declaration.name])
    return await _state(db, declaration, infos.get(declaration.name), probe=probe, twins=_twins(declaration.name, infos))


async def inspect_all(
    db: AsyncDatabase[Any],
    declarations: Sequence[CollectionDeclaration],
    *,
    probe: bool = True,
    check_stop: Callable[[], None] | None = None,
    violations: bool = False,
) -> dict[str, CollectionState]:
    """Every declared collection's state, by name, from one ``listCollections`` (then per collection its indexes).

    ``check_stop`` is called before each collection is read, so that a Ctrl-C ends a long read of many collections.
    ``violations``: also ask whether a document fails a strict validator about to be set (the plan warns of it)."""
    infos = await _infos(db, [d.name for d in declarations]) if declarations else {}
    states: dict[str, CollectionState] = {}
    for d in declarations:
        if check_stop is not None:
            check_stop()
        states[d.name] = await _state(db, d, infos.get(d.name), probe=probe, violations=violations, twins=_twins(d.name, infos))
    return states


async def _state(
    db: AsyncDatabase[Any],
    declaration: CollectionDeclaration,
    info: Mapping[str, Any] | None,
    *,
    probe: bool,
    violations: bool = False,
    twins: tuple[str, ...] = (),
) -> CollectionState:
    name = declaration.name
    if info is None:
        return CollectionState(name, "missing", case_twins=twins)
    kind = _kind(info)
    options = info.get("options") or {}
    validator = ValidatorSpec.from_options(options)
    if kind != "collection":
        return CollectionState(name, kind, validator)
    # the _id index and a clustered collection's index (5.3+, any name) are the collection's own: never planned
    indexes = tuple(
        [
            IndexSpec.from_document(doc)
            async for doc in await db[name].list_indexes()
            if doc.get("name") != "_id_" and not doc.get("clustered")
        ]
    )
    minimum = 0
    result: MinProbe | None = None
    versioning = declaration.versioning
    if versioning is not None:
        minimum = versioning_minimum(validator.validator, versioning.field)
        if probe and versioning.min > minimum:
            result = await probe_below(db, name, versioning.field, versioning.min, revision_field=versioning.revision_field)
    violation: ViolationProbe | None = None
    if violations and (result is None or result.found is False) and (wanted := _refuses_updates(declaration, validator)) is not None:
        violation = await probe_violation(db, name, wanted.validator)
    key = await _shard_key(db, name)
    return CollectionState(
        name,
        kind,
        validator,
        default_collation=normalize_collation(options.get("collation")),
        indexes=indexes,
        shard_key=tuple(f for f, _ in key) if key else None,
        shard_key_spec=key or (),
        version_minimum=minimum,
        probe=result,
        violations=violation,
    )
