"""How a pydantic validation error is told to the user: one line per problem, naming its key.

Shared by the project file, collection declarations and ``Background`` specs,
so every refused value reads the same way wherever it was written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

#: ``package.module:function``: a provider, a ``uri_factory``.
IMPORT_PATH = r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$"
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


#: Databases of the server itself (its users, its sharding metadata, its oplog; ``local`` is not
#: even replicated): never a project's ``db`` nor a tenant, whatever a pattern or a provider says.
SERVER_DATABASES = frozenset({"admin", "local", "config"})

#: Characters MongoDB refuses in a database name (on any platform), and its length bound in bytes.
_REFUSED_IN_DATABASE_NAME = frozenset('/\\. "$*<>:|?')  # and NUL, a control character
MAX_DATABASE_NAME_BYTES = 63

#: Control characters (C0, DEL, C1), the line and paragraph separators and the bidirectional
#: controls (U+202E shows the rest of a line reversed): never part of a name a terminal shows.
_CONTROLS_IN_NAME = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def control_characters(name: str) -> str | None:
    """The control and bidirectional characters ``name`` holds, by code point (``U+001B, U+202E``), or None:
    a name a message or a table could not show as it is (a terminal drops or obeys them)."""
    controls = sorted(set(_CONTROLS_IN_NAME.findall(name)))
    return ", ".join(f"U+{ord(c):04X}" for c in controls[:5]) if controls else None


def refused_database_name(name: object) -> str | None:
    """Why ``name`` cannot be the project's database or a tenant's (None: it can): the one rule of
    ``db`` (file, environment, ``--db``, ``init --db``) and of every tenant name. The reason never
    holds the name's control characters (they are named by code point)."""
    if not isinstance(name, str):
        return f"a database name must be text, not {type(name).__name__}"
    if not name:
        return "a database name cannot be empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a command-line argument that was not UTF-8 (its bytes kept as surrogates)
        return "a database name must be valid UTF-8"
    if size > MAX_DATABASE_NAME_BYTES:
        return f"a database name has at most {MAX_DATABASE_NAME_BYTES} bytes"
    if (controls := control_characters(name)) is not None:
        return f"a database name cannot hold control or bidirectional characters (found {controls})"
    bad = sorted({c for c in name if c in _REFUSED_IN_DATABASE_NAME})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return f"MongoDB refuses {shown} in a database name"
    if name.lower() in SERVER_DATABASES:
        own = name.lower()
        case = "" if name == own else f" (MongoDB refuses a name that differs from another only in case: this is {own})"
        return (
            f"{name} is the server's own database{case}, never a project's or a tenant's "
            "(admin, config and local hold the server's users, cluster metadata and unreplicated data)"
        )
    return None


def shown_name(name: str, limit: int = 80) -> str:
    """A name for a message: its control and bidirectional characters escaped (``\\x1b``,
    ``\\u202e``), and by its length only when longer than ``limit``."""
    if len(name) > limit:
        return f"<{len(name)} characters>"
    return _CONTROLS_IN_NAME.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), name)


#: What each pattern asks for, in words: the user reads this, not the regular expression.
_PATTERN_WORDS = {
    IMPORT_PATH: "must be an import path such as 'package.module:function'",
    COLLECTION_NAME: "must be a collection name: 1 to 120 letters, digits, _ . or -, not starting with . or -",
}


def own_errors(exc: ValidationError) -> list[ErrorDetails]:
    """``exc``'s errors without a list's "too short" that follows from its items' own errors: pydantic counts a
    list's length after dropping the items it refused, so ``databases = [1]`` was also said to be empty."""
    errors = exc.errors()

    def counted_refused_items(err: ErrorDetails) -> bool:
        loc = err["loc"]
        return (
            err["type"] == "too_short"
            and isinstance(err.get("input"), (list, tuple))
            and len(err["input"]) > 0
            and any(len(other["loc"]) > len(loc) and other["loc"][: len(loc)] == loc for other in errors)
        )

    return [err for err in errors if not counted_refused_items(err)]


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
    if kind in ("tuple_type", "list_type"):  # "a valid tuple": a file's author writes an array
        return "Input should be a list (an array in TOML)"
    if kind == "path_type":  # "a valid path for <class 'pathlib._local.Path'>": a class the author never sees
        return f"Input should be a path (text), not {type(err.get('input')).__name__}"
    if kind in ("model_type", "dict_type"):  # "... or instance of IndexDeclaration": a class the author never sees
        return "Input should be a table ({...} in TOML, a dict in Python)"
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
    for err in own_errors(exc):
        where = loc_path(err["loc"])
        if prefix:
            where = f"{prefix}.{where}" if where and not where.startswith("[") else prefix + where
        message = unknown if err["type"] == "extra_forbidden" else message_of(err)
        parts.append(f"{where}: {message}" if where else message)
    return parts
