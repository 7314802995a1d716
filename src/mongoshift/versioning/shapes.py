"""Shape versions on the application side: stamp new documents, read old ones.

Old documents are never upgraded on read behind your back: a read returns what
is stored, and :meth:`Shapes.upcast` lifts a copy in memory when the code asks
for it. The same pure steps feed a background migration
(:meth:`Shapes.migrate_from`), so the in-memory lift and the stored rewrite can
never disagree.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from .errors import ShapeProblem, ShapeVersionError
from .fields import (
    REVISION_FIELD,
    VERSION_FIELD,
    check_fields,
    check_number,
    corrupt,
    number_match,
    stored_number,
)

Document = dict[str, Any]
Step = Callable[[Document], Document]
"""Lifts a document from version ``v`` to ``v + 1``: gets a private copy, returns the new document."""


def _versions(missing: list[int]) -> str:
    """``version 2``, ``versions 0, 2``: this package stands alone (pymongo and bson only), so it words its one
    count here rather than through ``mongoshift.project.wording``."""
    return f"{'version' if len(missing) == 1 else 'versions'} {', '.join(map(str, missing))}"


def define_shapes(
    current: int,
    steps: Mapping[int, Step] | None = None,
    *,
    minimum: int | None = None,
    version_field: str = VERSION_FIELD,
    revision_field: str = REVISION_FIELD,
) -> Shapes:
    """Declare a collection's shapes: ``current`` is the version this code writes,
    ``steps[v]`` lifts version ``v`` to ``v + 1``, ``minimum`` is the oldest version
    it still reads (default: the lowest step, or ``current`` without steps).

    Every version from ``minimum`` to ``current - 1`` needs a step. Steps below
    ``minimum`` are allowed: background migration files that reuse them keep
    importing after the contract phase raised ``minimum``.
    """
    check_number(current, "current")
    if current < 1:
        raise ValueError("current must be at least 1")
    check_fields(version_field, revision_field)
    table = dict(steps or {})
    for v, fn in table.items():
        check_number(v, "a step's version")
        if v >= current:
            raise ValueError(f"step {v} lifts to {v + 1}, past current version {current}")
        if not callable(fn):
            raise ValueError(f"step {v} is not callable")
        if inspect.iscoroutinefunction(fn):
            # upcast is called on a read, in sync and async code alike: a coroutine would only surface per document
            raise ValueError(f"step {v} is async: a step is a plain function (doc) -> doc")
    low = minimum if minimum is not None else min(table, default=current)
    check_number(low, "minimum")
    if low > current:
        raise ValueError(f"minimum {low} is above current version {current}")
    missing = [v for v in range(low, current) if v not in table]
    if missing:
        raise ValueError(f"no step from {_versions(missing)}: every version from minimum to current - 1 needs one")
    return Shapes(current, low, MappingProxyType(dict(sorted(table.items()))), version_field, revision_field)


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: steps are functions
class Shapes:
    """One collection's shape versions. Build it with :func:`define_shapes`."""

    current: int
    minimum: int
    steps: Mapping[int, Step] = field(repr=False)
    version_field: str = VERSION_FIELD
    revision_field: str = REVISION_FIELD

    def version_of(self, doc: Mapping[str, Any]) -> int:
        """The stored shape version (missing or null: 0); ``ShapeVersionError("invalid")`` when it is not one."""
        version = stored_number(doc, self.version_field)
        if version is None:
            raise ShapeVersionError("invalid", corrupt(doc, self.version_field))
        return version

    def is_version(self, doc: Mapping[str, Any], version: int) -> bool:
        """Whether ``doc`` is stored at ``version``; never raises for the document (corrupt: False)."""
        return stored_number(doc, self.version_field) == check_number(version, "version")

    def is_current(self, doc: Mapping[str, Any]) -> bool:
        return self.is_version(doc, self.current)

    def match(self, version: int) -> dict[str, Any]:
        """A filter for the documents at ``version`` (0 matches a missing or null field)."""
        return number_match(self.version_field, check_number(version, "version"))

    def stamp(self, doc: Mapping[str, Any]) -> Document:
        """A new dict for ``insert_one``: the document at the current version, revision 1.

        A copy rather than in place, so a template or a read document reused
        for several inserts is never altered; insert the returned dict
        (``insert_one`` adds its ``_id`` to that one).
        """
        return {**doc, self.version_field: self.current, self.revision_field: 1}

    def upcast(self, doc: Mapping[str, Any]) -> Document:
        """A deep copy of ``doc`` lifted to the current version through the steps.

        Always a new dict (the caller's document is never touched, even when it
        is already current). Raises ``ShapeVersionError`` for a document newer than
        ``current``, older than ``minimum``, or with an invalid version.
        """
        version = self.version_of(doc)
        if version > self.current:
            raise ShapeVersionError("newer", f"document version {version} is newer than this code's version {self.current}", version=version)
        if version < self.minimum:
            raise ShapeVersionError("below_minimum", f"document version {version} is below the oldest readable version {self.minimum}", version=version)
        return self._lift(doc, version, self.current)

    def migrate_from(self, from_version: int, to_version: int | None = None) -> StepMigration:
        """The ``migrate`` function of a background migration from ``from_version``
        to ``to_version`` (default: the next version).

        The target is fixed here, never "current": a migration file must keep
        meaning the same thing after ``current`` moves on.
        """
        start = check_number(from_version, "from_version")
        end = start + 1 if to_version is None else check_number(to_version, "to_version")
        if not start < end <= self.current:
            raise ValueError(f"cannot migrate from {start} to {end}: need from < to <= current ({self.current})")
        missing = [v for v in range(start, end) if v not in self.steps]
        if missing:
            raise ValueError(f"no step from {_versions(missing)}")
        return StepMigration(self, start, end)

    def _lift(self, doc: Mapping[str, Any], start: int, end: int) -> Document:
        out: Document = copy.deepcopy(dict(doc))  # deepcopy keeps tz-aware datetimes and custom types as they are
        for v in range(start, end):
            step = self.steps[v]
            out = step(out)
            if not isinstance(out, dict):
                raise TypeError(f"step {v} ({getattr(step, '__name__', step)!r}) returned {type(out).__name__}, not a dict")
            out[self.version_field] = v + 1
        return out


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: steps are functions
class StepMigration:
    """``migrate(doc, ctx)`` for a background migration, built from the shape steps.

    Refuses (as a document error) a document that is not at ``from_version``.
    The version it sets in the result is informative only: the engine writes
    the target version and the revision itself. A version stored as a whole
    double (``1.0``, a legacy writer's) is taken as that number here, as the
    engine's ``{__v: 1}`` filter selects it: the rewrite stores it as an int.
    """

    shapes: Shapes = field(repr=False)
    from_version: int
    to_version: int

    def __call__(self, doc: Mapping[str, Any], ctx: Any = None) -> Document:
        stored = doc.get(self.shapes.version_field)
        if type(stored) is float and stored == self.from_version:  # what the engine read as this version
            return self.shapes._lift(doc, self.from_version, self.to_version)
        version = self.shapes.version_of(doc)
        if version != self.from_version:
            reason: ShapeProblem = "newer" if version > self.from_version else "below_minimum"
            raise ShapeVersionError(reason, f"expected a document at version {self.from_version}, got version {version}", version=version)
        return self.shapes._lift(doc, self.from_version, self.to_version)
