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

from .validation import IMPORT_PATH, SERVER_DATABASES, refused_database_name, shown_name

__all__ = ["PROVIDER_PATTERN", "SERVER_DATABASES", "TenantsDeclaration", "refused_database_name"]

PROVIDER_PATTERN = IMPORT_PATH


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
                raise ValueError(f"'{shown_name(name)}': {why}" if len(name) <= 80 else why)
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
