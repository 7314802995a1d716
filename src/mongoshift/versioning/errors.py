"""What the versioning helpers raise.

The messages carry numbers and field names only: a filter or a document can
hold personal data, and these errors end up in logs.
"""

from __future__ import annotations

from typing import Literal

ShapeProblem = Literal["newer", "below_minimum", "invalid"]
ConflictReason = Literal["conflict", "not_found", "unknown"]


class VersioningError(Exception):
    """Base class of every error raised by :mod:`mongoshift.versioning`."""


class ShapeVersionError(VersioningError, ValueError):
    """A document whose shape version this code cannot read.

    ``reason`` is ``"newer"`` (written by newer code: deploy it, do not guess),
    ``"below_minimum"`` (older than the oldest shape the steps still lift) or
    ``"invalid"`` (the stored version is not a non-negative integer).
    """

    def __init__(self, reason: ShapeProblem, message: str, *, version: int | None = None) -> None:
        super().__init__(message)
        self.reason: ShapeProblem = reason
        self.version = version


class InvalidRevisionError(VersioningError, ValueError):
    """A read document whose revision is not a non-negative integer (text, a float, a bool, a
    negative number): :func:`revision_of` cannot say which revision to guard a write with.
    The message names the value's type, never the value."""


class UnguardedWriteError(VersioningError, ValueError):
    """A write the revision helpers refuse before any I/O, because its outcome could not be checked:
    an upsert, an unacknowledged write concern, or an update that sets the revision itself."""


class RevisionConflictError(VersioningError):
    """A guarded write matched nothing.

    ``reason`` says why, from one read after the miss: ``"conflict"`` (the document
    is there with another revision or shape version: someone wrote it since you
    read it), ``"not_found"`` (nothing matches the filter any more) or ``"unknown"``
    (it looks unchanged, or its revision is not a number, so the cause is elsewhere
    in the filter). Only ``"conflict"`` is worth retrying.
    """

    def __init__(
        self,
        reason: ConflictReason,
        *,
        expected_revision: int | None,
        actual_revision: int | None = None,
        expected_version: int | None = None,
        actual_version: int | None = None,
        collection: str | None = None,
    ) -> None:
        self.reason: ConflictReason = reason
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision
        self.expected_version = expected_version
        self.actual_version = actual_version
        self.collection = collection
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = f" in {self.collection}" if self.collection else ""
        expected = "" if self.expected_revision is None else f"expected revision {self.expected_revision}"
        if self.reason == "not_found":
            return f"revision guard{where}: no document matches the filter" + (f" ({expected})" if expected else "")
        found = f"revision {self.actual_revision}" if self.actual_revision is not None else "no readable revision"
        if self.expected_version is not None and self.actual_version != self.expected_version:
            shown = "an unreadable version" if self.actual_version is None else f"version {self.actual_version}"
            found += f" at {shown} (expected version {self.expected_version})"
        detail = f"{expected}, found {found}" if expected else f"found {found}"
        if self.reason == "conflict":
            return f"revision conflict{where}: {detail}"
        return f"revision guard{where} matched nothing for an unknown reason: {detail}"
