"""The ``[tenants]`` section: which databases of one project are its tenants (no I/O).

A project whose customers each have a database of the same schema names them one of three
ways: ``databases`` (a list), ``match`` (a glob over the server's databases) or ``provider``
(``"package.module:function"``, called when a command needs the selection). The names a
provider returns, and every name given on the command line, are checked by
:func:`refused_database_name` before anything is written (docs/tenants.md).
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .validation import IMPORT_PATH

#: Databases of the server itself: never a tenant, whatever a pattern or a provider says.
SERVER_DATABASES = frozenset({"admin", "local", "config"})

#: Characters MongoDB refuses in a database name (any platform), and its length bound in bytes.
_REFUSED_CHARACTERS = frozenset('/\\. "$*<>:|?\x00')
_MAX_NAME_BYTES = 63

PROVIDER_PATTERN = IMPORT_PATH


def refused_database_name(name: object) -> str | None:
    """Why ``name`` cannot be a tenant database (None: it can). Names the rule, never echoes a long value."""
    if not isinstance(name, str):
        return f"a tenant name must be text, not {type(name).__name__}"
    if not name:
        return "a tenant name cannot be empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:  # a command-line argument that was not UTF-8 (its bytes kept as surrogates)
        return "a database name must be valid UTF-8"
    if size > _MAX_NAME_BYTES:
        return f"a database name has at most {_MAX_NAME_BYTES} bytes"
    bad = sorted({c for c in name if c in _REFUSED_CHARACTERS})
    if bad:
        shown = ", ".join(repr(c) for c in bad)
        return f"MongoDB refuses {shown} in a database name"
    if name in SERVER_DATABASES:
        return f"{name} is the server's own database, never a tenant"
    return None


class TenantsDeclaration(BaseModel):
    """``[tenants]`` (``[mongoshift.tenants]``, ``[tool.mongoshift.tenants]``): exactly one way to name the tenants."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: The tenant databases, listed (run in sorted order).
    databases: tuple[str, ...] | None = Field(default=None, min_length=1)
    #: A glob (``tenant_*``) over the server's databases, never admin, local or config.
    match: str | None = Field(default=None, min_length=1, max_length=200)
    #: ``"package.module:function"``, sync or async, called with the project's settings; returns names,
    #: or ``(name, uri)`` pairs for tenants on another cluster (run in the order returned).
    provider: str | None = Field(default=None, pattern=PROVIDER_PATTERN)

    @field_validator("databases")
    @classmethod
    def _names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return value
        for name in value:
            why = refused_database_name(name)
            if why is not None:
                raise ValueError(f"{name!r}: {why}" if len(name) <= 80 else why)
        seen = [n for i, n in enumerate(value) if n in value[:i]]
        if seen:
            raise ValueError(f"listed twice: {', '.join(sorted(set(seen)))}")
        return value

    @model_validator(mode="after")
    def _one_way(self) -> Self:
        given = [key for key in ("databases", "match", "provider") if getattr(self, key) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of databases, match or provider"
                + (f" (found {', '.join(given)})" if given else "")
            )
        return self
