"""The pure half of the revision helpers: validate a write and build its guarded form.

Everything here runs before any I/O, so a refused write never reaches the
server, and the async and sync wrappers share one implementation of the rules:

* the filter gets the expected revision (and, if given, the expected shape
  version; 0 also matches a missing or null field);
* the update bumps the revision, the replacement carries revision + 1;
* an upsert, an unacknowledged write concern, or an update that writes the
  revision itself is refused: each would make a miss or a success unreadable;
* after a miss, one read of the document says why (:meth:`GuardedWrite.miss`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .errors import RevisionConflictError, ShapeVersionError, UnguardedWriteError
from .fields import check_fields, check_number, corrupt, number_match, stored_number

Update = Mapping[str, Any] | Sequence[Mapping[str, Any]]
_PATH_STAGES = ("$set", "$addFields", "$project")


@dataclass(frozen=True)
class RevisionResult:
    """A guarded write that matched: the document now has ``revision``."""

    revision: int
    raw: Any  # the driver's UpdateResult


@dataclass(frozen=True)
class GuardedWrite:
    """A validated write: what to send, and how to explain a miss."""

    filter: dict[str, Any]
    document: Any  # the update document, the pipeline or the replacement
    lookup: dict[str, Any]  # the read that explains a miss: by _id when the filter has one
    expected_revision: int | None
    expected_version: int | None
    version_field: str
    revision_field: str

    @property
    def revision(self) -> int | None:
        """The revision after the write, when the guard pins it."""
        return None if self.expected_revision is None else self.expected_revision + 1

    @property
    def projection(self) -> dict[str, int]:
        return {self.version_field: 1, self.revision_field: 1}

    def miss(self, found: Mapping[str, Any] | None, collection: str | None = None) -> RevisionConflictError:
        """The error for a write that matched nothing, given what :attr:`lookup` found."""
        facts: dict[str, Any] = {"expected_revision": self.expected_revision, "expected_version": self.expected_version, "collection": collection}
        if found is None:
            return RevisionConflictError("not_found", **facts)
        revision = stored_number(found, self.revision_field)
        version = stored_number(found, self.version_field)
        facts.update(actual_revision=revision, actual_version=version)
        if revision is None or (self.expected_version is not None and version is None):
            return RevisionConflictError("unknown", **facts)
        moved = self.expected_revision is not None and revision != self.expected_revision
        reshaped = self.expected_version is not None and version != self.expected_version
        return RevisionConflictError("conflict" if moved or reshaped else "unknown", **facts)


def require_acknowledged(collection: Any) -> None:
    """Refuse a collection whose write concern is w: 0: a miss would look like a success."""
    if not collection.write_concern.acknowledged:
        raise UnguardedWriteError("revision helpers need an acknowledged write concern (w: 0 cannot report a conflict)")


def guard_update(
    filter: Mapping[str, Any],
    update: Update,
    *,
    expected_revision: int,
    expected_version: int | None = None,
    upsert: bool = False,
    version_field: str,
    revision_field: str,
) -> GuardedWrite:
    """An update (operators or a pipeline) that matches only at ``expected_revision`` and bumps it."""
    base = _guarded_filter(filter, expected_revision, expected_version, upsert, version_field, revision_field)
    if isinstance(update, Mapping):
        document: Any = _bump_operators(update, expected_revision, revision_field)
    elif isinstance(update, Sequence) and not isinstance(update, (str, bytes)):
        document = _bump_pipeline(update, expected_revision, version_field, revision_field)
    else:
        raise ValueError(f"an update is a document of $-operators or a pipeline (a list), not {type(update).__name__}")
    return _write(base, document, filter, expected_revision, expected_version, version_field, revision_field)


def guard_replacement(
    filter: Mapping[str, Any],
    replacement: Mapping[str, Any],
    *,
    expected_revision: int,
    expected_version: int | None = None,
    upsert: bool = False,
    version_field: str,
    revision_field: str,
) -> GuardedWrite:
    """A replacement that matches only at ``expected_revision`` and stores revision + 1.

    The replacement may carry the revision it was read with (a read document
    edited and written back); any other revision is refused. Its version field
    wins; without one the guarded ``expected_version`` is kept, and without
    either the write is refused, since it would silently drop the version.
    """
    base = _guarded_filter(filter, expected_revision, expected_version, upsert, version_field, revision_field)
    if not isinstance(replacement, Mapping):
        raise ValueError(f"a replacement is a document, not {type(replacement).__name__}")
    if any(isinstance(k, str) and k.startswith("$") for k in replacement):
        raise ValueError("a replacement cannot hold $-operators: use update_with_revision for an update")
    if revision_field in replacement and stored_number(replacement, revision_field) != expected_revision:
        raise UnguardedWriteError(f"the replacement sets {revision_field} itself: the helper writes it (leave it out or keep the value read)")
    document = dict(replacement)
    if version_field in document:
        if stored_number(document, version_field) is None:  # a read document written back as it was stored
            raise ShapeVersionError("invalid", f"the replacement's {corrupt(document, version_field)}")
    elif expected_version is None:
        raise ValueError(f"the replacement has no {version_field} and no expected_version is given: it would drop the shape version")
    elif expected_version > 0:
        document[version_field] = expected_version
    document[revision_field] = expected_revision + 1
    return _write(base, document, filter, expected_revision, expected_version, version_field, revision_field)


def guard_bump(
    filter: Mapping[str, Any],
    *,
    expected_revision: int | None = None,
    expected_version: int | None = None,
    version_field: str,
    revision_field: str,
) -> GuardedWrite:
    """Only the revision bump; unguarded when ``expected_revision`` is None (a missing or null revision becomes 1)."""
    if expected_revision is not None:
        return guard_update(filter, {}, expected_revision=expected_revision, expected_version=expected_version, version_field=version_field,
            revision_field=revision_field)
    base = _guarded_filter(filter, None, expected_version, False, version_field, revision_field)
    # Unguarded, but only over a revision it can count on: a stored 2.0 or "2" is refused unwritten (a miss, "unknown").
    countable = {"$or": [{revision_field: None}, {revision_field: {"$type": ["int", "long"], "$gte": 0}}]}
    base["$and"] = [*base.get("$and", []), countable]
    bump = [{"$set": {revision_field: {"$add": [{"$ifNull": [f"${revision_field}", 0]}, 1]}}}]
    return _write(base, bump, filter, None, expected_version, version_field, revision_field)


# -- the rules -------------------------------------------------------------


def _write(base: dict[str, Any], document: Any, filter: Mapping[str, Any], expected_revision: int | None, expected_version: int | None, version_field: str,
    revision_field: str) -> GuardedWrite:
    lookup = {"_id": filter["_id"]} if "_id" in filter else dict(filter)
    return GuardedWrite(base, document, lookup, expected_revision, expected_version, version_field, revision_field)


def _guarded_filter(
    filter: Mapping[str, Any],
    expected_revision: int | None,
    expected_version: int | None,
    upsert: bool,
    version_field: str,
    revision_field: str,
) -> dict[str, Any]:
    check_fields(version_field, revision_field)
    if upsert:
        raise UnguardedWriteError("upsert is refused: an insert cannot be guarded by a revision (stamp the document and insert it)")
    if not isinstance(filter, Mapping):
        raise ValueError(f"the filter is a document, not {type(filter).__name__}")
    if _mentions(filter, revision_field):
        raise UnguardedWriteError(f"the filter may not name {revision_field}: the guard sets it from expected_revision")
    guarded = dict(filter)
    if expected_revision is not None:
        guarded.update(number_match(revision_field, check_number(expected_revision, "expected_revision")))
    if expected_version is not None:
        if _mentions(filter, version_field):
            raise UnguardedWriteError(f"the filter may not name {version_field} together with expected_version")
        guarded.update(number_match(version_field, check_number(expected_version, "expected_version")))
    return guarded


def _touches(path: object, field: str) -> bool:
    return isinstance(path, str) and (path == field or path.startswith(field + "."))


def _mentions(value: Any, field: str) -> bool:
    """Whether a filter names ``field`` anywhere (also under $and/$or/$nor)."""
    if isinstance(value, Mapping):
        return any(_touches(k, field) or _mentions(v, field) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_mentions(v, field) for v in value)
    return False


def _refuse(revision_field: str) -> UnguardedWriteError:
    return UnguardedWriteError(f"the update writes {revision_field} itself: the helper bumps it")


def _bump_operators(update: Mapping[str, Any], expected_revision: int, revision_field: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for op, spec in update.items():
        if not isinstance(op, str) or not op.startswith("$"):
            raise ValueError("an update needs $-operators: use replace_with_revision to write a whole document")
        if not isinstance(spec, Mapping):
            raise ValueError(f"{op} takes a document of field paths")
        for path, value in spec.items():
            if _touches(path, revision_field) or (op == "$rename" and _touches(value, revision_field)):
                raise _refuse(revision_field)
        out[op] = dict(spec)
    # $inc keeps the stored integer type; a revision of 0 may be stored as null, which $inc refuses
    op, amount = ("$inc", 1) if expected_revision > 0 else ("$set", 1)
    out.setdefault(op, {})[revision_field] = amount
    return out


def _keeping_version(name: str, spec: Any, version_field: str) -> dict[str, Any] | None:
    """A ``$replaceWith`` / ``$replaceRoot`` stage whose new document keeps the stored shape version unless it
    sets one itself, as :func:`guard_replacement` does: a new root without it would drop it silently."""
    path = f"${version_field}"
    # {field: "$field"} alone would store null for a missing field on a server that does not omit it (the embedded one)
    stored = {"$cond": [{"$eq": [{"$type": path}, "missing"]}, {}, {version_field: path}]}
    if name == "$replaceWith":
        return {name: {"$mergeObjects": [stored, spec]}}
    if name == "$replaceRoot" and isinstance(spec, Mapping) and set(spec) == {"newRoot"}:
        return {name: {"newRoot": {"$mergeObjects": [stored, spec["newRoot"]]}}}
    if name == "$project" and isinstance(spec, Mapping) and _includes(spec) and not any(_touches(p, version_field) for p in spec):
        # an inclusion keeps only what it names; naming the field keeps it where stored, omits it where missing
        return {name: {**spec, version_field: 1}}
    return None


def _includes(projection: Mapping[str, Any]) -> bool:
    """Whether a ``$project`` spec is an inclusion (it keeps only the fields it names), as the server decides:
    any field other than ``_id`` kept or computed, or ``_id`` alone kept."""
    fields = {k: v for k, v in projection.items() if k != "_id"}
    if not fields:
        return projection.get("_id") not in (0, False)
    return any(not _excludes(v) for v in fields.values())


def _excludes(value: Any) -> bool:
    """A projection value that removes its field: ``0``/``False``, or a sub-document removing all of its own."""
    if isinstance(value, Mapping):
        return bool(value) and all(not str(k).startswith("$") and _excludes(v) for k, v in value.items())
    return value is False or (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)


def _bump_pipeline(pipeline: Sequence[Mapping[str, Any]], expected_revision: int, version_field: str, revision_field: str) -> list[dict[str, Any]]:
    stages: list[dict[str, Any]] = []
    for stage in pipeline:
        if not isinstance(stage, Mapping) or len(stage) != 1:
            raise ValueError("each pipeline stage is a document with one stage name")
        ((name, spec),) = stage.items()
        if name in _PATH_STAGES and isinstance(spec, Mapping):
            paths: Sequence[Any] = list(spec)
        elif name == "$unset":
            paths = [spec] if isinstance(spec, str) else list(spec)
        else:
            paths = []  # $replaceWith / $replaceRoot: the last stage sets the revision again
        if any(_touches(p, revision_field) for p in paths):
            raise _refuse(revision_field)
        stages.append(_keeping_version(name, spec, version_field) or dict(stage))
    # the guard pins the stored revision, so the new one is a constant even after a $replaceWith
    stages.append({"$set": {revision_field: {"$literal": expected_revision + 1}}})
    return stages
