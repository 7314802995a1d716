"""How a pydantic validation error is told to the user: one line per problem, naming its key.

Shared by the project file, collection declarations and ``Background`` specs,
so every refused value reads the same way wherever it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError


def loc_path(loc: Sequence[Any]) -> str:
    """A pydantic error location as written in a file: ``collections[0].indexes[1].keys``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def declared_name(loc: Sequence[Any], values: Mapping[str, Any]) -> str | None:
    """The collection an error inside ``[[collections]]`` belongs to, for the message."""
    if len(loc) < 2 or loc[0] != "collections" or not isinstance(loc[1], int):
        return None
    items = values.get("collections")
    if isinstance(items, (list, tuple)) and 0 <= loc[1] < len(items) and isinstance(items[loc[1]], Mapping):
        name = items[loc[1]].get("name")
        return name if isinstance(name, str) else None
    return None


def describe_errors(exc: ValidationError, *, prefix: str = "", unknown: str = "unknown key") -> str:
    """Every problem of ``exc`` as ``where: what``; ``unknown`` names an extra key ("unknown setting")."""
    return "; ".join(list_errors(exc, prefix=prefix, unknown=unknown))


def list_errors(exc: ValidationError, *, prefix: str = "", unknown: str = "unknown key") -> list[str]:
    """The problems of ``exc``, one ``where: what`` each (never the value that was refused)."""
    parts = []
    for err in exc.errors():
        where = loc_path(err["loc"])
        if prefix:
            where = f"{prefix}.{where}" if where and not where.startswith("[") else prefix + where
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = unknown
        parts.append(f"{where}: {message}" if where else message)
    return parts
