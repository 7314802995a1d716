"""Settings and where they come from.

Precedence, highest first: command-line flags, ``MONGOSHIFT_*`` environment
variables, the project file (``mongoshift.toml`` or ``[tool.mongoshift]`` in
``pyproject.toml``, found in the working directory or named by ``--config``),
then the defaults below. Every value is validated; an error names the key and
the source it came from, so a bad environment value fails closed instead of
silently falling back to a default.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .converge.declaration import CollectionDeclaration, declared_name, loc_path
from .errors import ConfigInvalidError

_COLLECTION_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,119}$"

#: Environment variables whose names are not simply MONGOSHIFT_<KEY>.
ENV_ALIASES: dict[str, str] = {
    "MONGOSHIFT_URI": "uri",
    "MONGOSHIFT_DB": "db",
    "MONGOSHIFT_MIGRATIONS_DIR": "migrations_dir",
}


class Settings(BaseModel):
    """Resolved, validated settings of one project."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str | None = None
    db: str | None = Field(default=None, pattern=r"^[^/\\. \"$]{1,63}$")
    migrations_dir: Path = Path("migrations")
    changelog_collection: str = Field(default="_mongoshift_migrations", pattern=_COLLECTION_NAME)
    lock_collection: str = Field(default="_mongoshift_locks", pattern=_COLLECTION_NAME)
    lock_ttl_seconds: int = Field(default=60, ge=1, le=86_400)
    strict: bool = False
    use_transaction: bool = False
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    migration_timeout_seconds: float | None = Field(default=None, gt=0)
    out_of_order: Literal["warn", "error", "allow"] = "warn"
    on_lock_lost: Literal["abort", "warn"] = "abort"
    sequential: bool = False
    template_path: Path | None = None
    hooks: str | None = None
    environment: str = Field(default="production", min_length=1, max_length=64)
    executed_by: str | None = Field(default=None, max_length=128)
    ensure_indexes: bool = True
    background_collection: str = Field(default="_mongoshift_background", pattern=_COLLECTION_NAME)
    background_lease_ttl_seconds: float = Field(default=30.0, ge=1, le=3600)
    background_poll_seconds: float = Field(default=2.0, gt=0, le=300)
    background_checksum_wait_seconds: float = Field(default=300.0, ge=0, le=86_400)
    background_inline: bool = False
    on_requires_pending: Literal["error", "stop"] = "error"
    #: Declared collections (``[[collections]]``); more come from ``collections_dir`` at converge time.
    collections: tuple[CollectionDeclaration, ...] = ()
    collections_dir: Path = Path("collections")
    converge_collection: str = Field(default="_mongoshift_converge", pattern=_COLLECTION_NAME)
    converge_after_up: bool = False

    @field_validator("changelog_collection", "lock_collection", "background_collection", "converge_collection")
    @classmethod
    def _not_system(cls, value: str) -> str:
        if value.startswith("system."):
            raise ValueError("collections named system.* belong to the server")
        return value

    @field_validator("uri")
    @classmethod
    def _uri_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must start with mongodb:// or mongodb+srv://")
        return value

    def require_connection(self) -> tuple[str, str]:
        """The URI and database, or a clear error for commands that connect."""
        if not self.uri:
            raise ConfigInvalidError(
                "no server given: pass --uri, set MONGOSHIFT_URI, or put uri in mongoshift.toml"
            )
        if not self.db:
            raise ConfigInvalidError(
                "no database given: pass --db, set MONGOSHIFT_DB, or put db in mongoshift.toml"
            )
        return self.uri, self.db


FIELDS = tuple(Settings.model_fields)


def env_name(key: str) -> str:
    for name, target in ENV_ALIASES.items():
        if target == key:
            return name
    return "MONGOSHIFT_" + key.upper()


def find_project_file(cwd: Path) -> Path | None:
    """The project file in ``cwd``: mongoshift.toml, else a pyproject.toml with [tool.mongoshift]."""
    candidate = cwd / "mongoshift.toml"
    if candidate.is_file():
        return candidate
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            return None
        if isinstance(data.get("tool"), dict) and "mongoshift" in data["tool"]:
            return pyproject
    return None


def read_project_file(path: Path) -> dict[str, Any]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigInvalidError(f"config file not found: {path}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigInvalidError(f"config file {path} is not valid TOML: {exc}") from None
    if path.name == "pyproject.toml":
        section = data.get("tool", {}).get("mongoshift", {})
    else:
        section = data.get("mongoshift", data)
        stray = [key for key in data if key != "mongoshift"] if "mongoshift" in data else []
        if stray:
            raise ConfigInvalidError(
                f"{path}: {stray[0]!r} is outside the [mongoshift] table, so it would be ignored; "
                f"write it as mongoshift.{stray[0]} (for example [[mongoshift.collections]])"
            )
    if not isinstance(section, dict):
        raise ConfigInvalidError(f"config file {path}: the mongoshift section must be a table")
    for key in section:
        if key not in FIELDS:
            raise ConfigInvalidError(f"unknown setting {key!r} in {path} (known: {', '.join(FIELDS)})")
    values = dict(section)
    # Relative paths in a file are relative to that file, not to where the command runs.
    for key in ("migrations_dir", "template_path", "collections_dir"):
        if isinstance(values.get(key), str):
            values[key] = str((path.parent / values[key]))
    if isinstance(values.get("hooks"), str) and values["hooks"].endswith(".py"):
        values["hooks"] = str(path.parent / values["hooks"])
    return values


def read_environment(environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in FIELDS:
        name = env_name(key)
        if name in environ and environ[name] != "":
            values[key] = environ[name]
    return values


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Merge defaults, project file, environment and flags, then validate once."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}

    path = config_path if config_path is not None else find_project_file(cwd)
    if config_path is None and environ.get("MONGOSHIFT_CONFIG"):
        path = Path(environ["MONGOSHIFT_CONFIG"])
    if path is not None:
        for key, value in read_project_file(path).items():
            merged[key], sources[key] = value, str(path)
    for key, value in read_environment(environ).items():
        merged[key], sources[key] = value, env_name(key)
    for key, value in (flags or {}).items():
        if value is not None:
            merged[key], sources[key] = value, "--" + key.replace("_", "-")

    # The default collections folder sits next to the project file, as the relative paths
    # written in it do; it stays "not set" so that its absence is not an error.
    default_folder = path is not None and "collections_dir" not in merged
    if default_folder:
        assert path is not None
        merged["collections_dir"] = str(path.parent / "collections")
    try:
        settings = Settings(**merged)
        if default_folder:
            settings.__pydantic_fields_set__.discard("collections_dir")
        return settings
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = str(err["loc"][0]) if err["loc"] else "?"
            where = loc_path(err["loc"]) or "?"
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown key"
            if name := declared_name(err["loc"], merged):
                message += f" (collection {name!r})"
            problems.append(f"setting {where!r} from {sources.get(key, 'defaults')}: {message}")
        raise ConfigInvalidError("; ".join(problems)) from None
