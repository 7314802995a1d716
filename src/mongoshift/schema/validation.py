"""How a pydantic validation error is told to the user: one line per problem, naming its key.

Shared by the project file, collection declarations and ``Background`` specs,
so every refused value reads the same way wherever it was written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

#: ``package.module:function``: a provider, a ``uri_factory``.
IMPORT_PATH = r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$"
#: A database name MongoDB accepts (``db``).
DATABASE_NAME = r'^[^/\\. "$]{1,63}$'
#: A collection name for mongoshift's own records.
COLLECTION_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,119}$"


def refused_collection_name(name: object) -> str | None:
    """Why MongoDB would refuse ``name`` as a collection an application names (None: it would not);
    the words of every command that takes one (``import --collection``, ``watch --collections``)."""
    if not isinstance(name, str) or not name.strip():
        return "not a collection name (it is empty)"
    if "$" in name or "\x00" in name or ".." in name or name[0] == "." or name[-1] == ".":
        return "not a collection name: MongoDB refuses '$', '..', a NUL and a '.' at either end"
    if len(name.encode("utf-8", "replace")) > 255:
        return "not a collection name: at most 255 bytes"
    if name.startswith("system."):
        return "collections named system.* belong to the server"
    return None


#: What each pattern asks for, in words: the user reads this, not the regular expression.
_PATTERN_WORDS = {
    IMPORT_PATH: "must be an import path such as 'package.module:function'",
    DATABASE_NAME: "must be a database name: 1 to 63 characters, none of / \\ . space \" $",
    COLLECTION_NAME: "must be a collection name: 1 to 120 letters, digits, _ . or -, not starting with . or -",
}


def message_of(err: Mapping[str, Any]) -> str:
    """One pydantic error's message as a user reads it: no regular expression, no pydantic vocabulary."""
    kind, context = err["type"], err.get("ctx") or {}
    if kind == "string_pattern_mismatch":
        return _PATTERN_WORDS.get(str(context.get("pattern")), "does not have the form this setting takes")
    if kind == "too_short" and context.get("min_length") == 1:
        return "must not be empty"
    if kind == "string_too_short" and context.get("min_length") == 1:
        return "must not be empty text"
    if kind == "string_too_long":
        return f"must be at most {context.get('max_length')} characters long"
    return str(err["msg"]).removeprefix("Value error, ")


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
        message = unknown if err["type"] == "extra_forbidden" else message_of(err)
        parts.append(f"{where}: {message}" if where else message)
    return parts
