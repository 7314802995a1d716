"""The stored contract: two top-level integer fields, and how a stored value reads.

A missing or null value reads as 0, so collections written before versioning
need no backfill; anything that is not a non-negative integer is corrupt and
is reported rather than guessed at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import InvalidRevisionError

VERSION_FIELD = "__v"
REVISION_FIELD = "__rev"


def check_fields(version_field: str, revision_field: str) -> None:
    """Refuse field names the helpers could not filter or update safely."""
    for name in (version_field, revision_field):
        if not isinstance(name, str) or not name or "." in name or name.startswith("$") or "\x00" in name or name == "_id":
            raise ValueError(f"{name!r} must be a top-level field name (no dots, no leading $, not _id)")
    if version_field == revision_field:
        raise ValueError("the version and revision fields must differ")


def check_number(value: object, what: str) -> int:
    """An argument that must be an integer ≥ 0 (a bool is not one)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        # a negative int said "got int": name what is wrong with it (never the value: it may come from a document)
        got = "a negative integer" if isinstance(value, int) and not isinstance(value, bool) else type(value).__name__
        raise ValueError(f"{what} must be an integer >= 0, got {got}")
    return int(value)


def corrupt(doc: Mapping[str, Any], field: str) -> str:
    """What a stored value that is not an integer >= 0 is, in words that hold no document value."""
    stored = doc.get(field)
    what = "a negative integer" if isinstance(stored, int) and not isinstance(stored, bool) else f"a value of type {type(stored).__name__}"
    return f"{field} holds {what}, not an integer >= 0"


def stored_number(doc: Mapping[str, Any], field: str) -> int | None:
    """The field as a version or revision: 0 when missing or null, None when it is not a non-negative integer."""
    if not isinstance(doc, Mapping):  # None.get said "'NoneType' object has no attribute 'get'", from inside this package
        raise TypeError(f"a document is a mapping, not {type(doc).__name__} (a find that matches nothing returns None)")
    value = doc.get(field)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return int(value)


def number_match(field: str, value: int) -> dict[str, Any]:
    """The filter for ``field == value``, where 0 also matches a missing or null field."""
    return {field: {"$in": [None, 0]}} if value == 0 else {field: value}


def revision_of(doc: Mapping[str, Any], field: str = REVISION_FIELD) -> int:
    """The revision a read document carries, to pass back as ``expected_revision`` (0 when missing or null);
    :class:`InvalidRevisionError` (a ``ValueError``) when the stored value is not an integer >= 0."""
    number = stored_number(doc, field)
    if number is None:
        raise InvalidRevisionError(corrupt(doc, field))
    return number
