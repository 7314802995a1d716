"""Settings and where they come from.

Precedence, highest first: command-line flags, ``MONGOSHIFT_*`` environment
variables, the ``MONGOSHIFT_*`` lines of a ``.env`` file next to the project file
(:mod:`.env_file`), the project file (``mongoshift.toml`` or ``[tool.mongoshift]`` in
``pyproject.toml``, found in the working directory or named by ``--config``),
then the defaults below. ``uri``, ``uri_command`` and ``uri_factory`` are one
setting given three ways: the highest source that gives one of them wins. Every
value is validated; an error names the key and the source it came from, so a bad
environment value fails closed instead of silently falling back to a default.
"""

from __future__ import annotations

import difflib
import functools
import os
import shlex
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from ..errors import ConfigInvalidError, IOFailedError
from ..schema.collections import CollectionDeclaration
from ..schema.tenants import TenantsDeclaration
from ..schema.validation import COLLECTION_NAME, IMPORT_PATH, declared_name, loc_path, message_of, own_errors, refused_database_name
from .env_file import read_env_file
from .redaction import redact

_COLLECTION_NAME = COLLECTION_NAME


#: The settings that name a collection mongoshift keeps its own records in (in field order).
OWN_COLLECTION_SETTINGS = ("changelog_collection", "lock_collection", "background_collection", "converge_collection", "run_log_collection")

#: Environment variables whose names are not simply MONGOSHIFT_<KEY>.
ENV_ALIASES: dict[str, str] = {
    "MONGOSHIFT_URI": "uri",
    "MONGOSHIFT_DB": "db",
    "MONGOSHIFT_MIGRATIONS_DIR": "migrations_dir",
}


#: The ways to give the connection string; one source gives at most one of them.
URI_SOURCES = ("uri", "uri_command", "uri_factory")


class Settings(BaseModel):
    """Resolved, validated settings of one project."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)  # "nan" was refused as "not <= 600"

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        """The URI without its secrets: settings end up in tracebacks (pytest shows arguments), logs and prints."""
        for name, value in super().__repr_args__():
            yield name, redact(value, None) if name == "uri" and isinstance(value, str) else value

    uri: str | None = None
    #: A program (an argument list, no shell) whose stdout is the URI, run when a command connects.
    uri_command: list[str] | None = Field(default=None, min_length=1)
    #: ``"package.module:function"`` returning the URI (sync or async), called when a command connects.
    uri_factory: str | None = Field(default=None, pattern=IMPORT_PATH)
    uri_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    #: The project's database: a name MongoDB takes, never admin, local or config (:func:`refused_database_name`).
    db: str | None = None
    migrations_dir: Path = Path("migrations")
    changelog_collection: str = Field(default="_mongoshift_migrations", pattern=_COLLECTION_NAME, validate_default=True)
    lock_collection: str = Field(default="_mongoshift_locks", pattern=_COLLECTION_NAME, validate_default=True)
    lock_ttl_seconds: int = Field(default=60, ge=1, le=86_400)
    strict: bool = False
    use_transaction: bool = False
    connect_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    migration_timeout_seconds: float | None = Field(default=None, gt=0, le=86_400)  # a file's timeout_seconds' bound too
    out_of_order: Literal["warn", "error", "allow"] = "warn"
    on_lock_lost: Literal["abort", "warn"] = "abort"
    sequential: bool = False
    template_path: Path | None = None
    hooks: str | None = None
    environment: str = Field(default="production", min_length=1, max_length=64)
    executed_by: str | None = Field(default=None, max_length=128)
    ensure_indexes: bool = True
    background_collection: str = Field(default="_mongoshift_background", pattern=_COLLECTION_NAME, validate_default=True)
    background_lease_ttl_seconds: float = Field(default=30.0, ge=1, le=3600)
    background_poll_seconds: float = Field(default=2.0, gt=0, le=300)
    background_checksum_wait_seconds: float = Field(default=300.0, ge=0, le=86_400)
    background_reconnect_seconds: float = Field(default=300.0, ge=0, le=86_400)
    background_inline: bool = False
    #: Background migrations on sharded clusters (docs/background.md, "Sharded clusters").
    shard_aware: Literal["auto", "on", "off"] = "auto"
    #: A shard key per collection, used when none can be read from config (no privilege, or not sharded).
    shard_keys: dict[str, dict[str, Literal[1, "hashed"]]] = Field(default_factory=dict)
    on_requires_pending: Literal["error", "stop"] = "error"
    #: Declared collections (``[[collections]]``); more come from ``collections_dir`` at converge time.
    collections: tuple[CollectionDeclaration, ...] = ()
    collections_dir: Path = Path("collections")
    converge_collection: str = Field(default="_mongoshift_converge", pattern=_COLLECTION_NAME, validate_default=True)
    #: The ``ctx.log`` lines of the line's runs, per run id (bounded per run, expired after ``RUN_LOG_DAYS``).
    run_log_collection: str = Field(default="_mongoshift_run_log", pattern=_COLLECTION_NAME, validate_default=True)
    converge_after_up: bool = False
    #: Which databases are the project's tenants (``[tenants]``; docs/tenants.md); None: a single-database project.
    tenants: TenantsDeclaration | None = None

    @field_validator(*OWN_COLLECTION_SETTINGS)
    @classmethod
    def _own_collection(cls, value: str, info: ValidationInfo) -> str:
        """Not the server's, and not a collection another of these settings already names.

        Each setting is compared with the ones validated before it (field order), so the
        error lands on the later key; the background setting owns ``<name>_partitions`` too.
        """
        if value.startswith("system."):
            raise ValueError("collections named system.* belong to the server")
        mine = [value, f"{value}_partitions"] if info.field_name == "background_collection" else [value]
        for other in OWN_COLLECTION_SETTINGS:
            if other == info.field_name:
                break
            earlier = info.data.get(other)
            if not isinstance(earlier, str):
                continue
            theirs = [earlier, f"{earlier}_partitions"] if other == "background_collection" else [earlier]
            for name in mine:
                if name in theirs:
                    raise ValueError(f"{other} already uses the collection {name!r}: each needs its own")
        return value

    @field_validator("db")
    @classmethod
    def _database(cls, value: str | None) -> str | None:
        """The one rule of every database name a user gives (tenants' too); the value is never echoed."""
        why = None if value is None else refused_database_name(value)
        if why is not None:
            raise ValueError(f"not a database mongoshift can use: {why}")
        return value

    @field_validator("migrations_dir", "collections_dir", "template_path", mode="before")
    @classmethod
    def _named_path(cls, value: object) -> object:
        """Empty text is no folder: as a path it would be the current one (every applied file then "missing")."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("must name a path, not be empty ('.' names the current folder)")
        return value

    @field_validator("uri_command", mode="before")
    @classmethod
    def _command_words(cls, value: object) -> object:
        """From the environment (text), the program and its arguments split as a shell would, without running one."""
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as exc:
                raise ValueError(f"not a valid list of words ({exc})") from None
        return value

    @field_validator("uri_command")
    @classmethod
    def _command_program(cls, value: list[str] | None) -> list[str] | None:
        """An empty first word names no program: run, it failed as "cannot be run: Permission denied" (exit 41)."""
        if value and not value[0].strip():
            raise ValueError("its first word, the program to run, is empty")
        return value

    @field_validator("uri")
    @classmethod
    def _uri_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("mongodb://", "mongodb+srv://")):
            raise ValueError("must start with mongodb:// or mongodb+srv://")
        if value is not None:
            # Bytes that are not UTF-8 (kept as surrogates) and control characters are in no host, option or
            # escaped password: left to the driver, a host of them waited the whole timeout out as a network
            # failure. Named by code point, never shown (the URI may hold a password).
            if undecodable := sorted({f"0x{ord(c) - 0xDC00:02X}" for c in value if "\udc80" <= c <= "\udcff"}):
                raise ValueError(f"not UTF-8 text (bytes {', '.join(undecodable)}): percent-encode them")
            if controls := sorted({f"U+{ord(c):04X}" for c in value if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F}):
                raise ValueError(f"holds control characters ({', '.join(controls)}): percent-encode them")
        return value

    @field_validator("shard_keys")
    @classmethod
    def _shard_keys(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for name, key in value.items():
            if not key:
                raise ValueError(f"{name}: a shard key needs at least one field")
            if sum(1 for d in key.values() if d == "hashed") > 1:
                raise ValueError(f"{name}: a shard key has at most one hashed field")
        return value

    def require_db(self) -> str:
        """The database, for a run on a client the caller opened (no URI needed)."""
        if not self.db:
            raise ConfigInvalidError(self._no_db())
        return self.db

    def _no_db(self) -> str:
        """Why there is no database, and how to name one: in a project of tenants, first the tenant flags."""
        if self.tenants is not None:  # its databases are the tenants: a bare command acts on none of them
            return (
                "no database given: this project's databases are its tenants ([tenants]): pass --tenant NAME, --tenants PATTERN "
                "or --all-tenants, or --db for one database (in Python: a *_across call with api.Tenants(...), or load_settings({'db': ...}))"
            )
        return "no database given: pass --db, set MONGOSHIFT_DB, or put db in mongoshift.toml (in Python: load_settings({'db': ...}))"

    def require_connection(self) -> tuple[str, str]:
        """The URI and database, or a clear error for commands that connect."""
        if not self.uri:
            raise ConfigInvalidError(
                "no server given: pass --uri, set MONGOSHIFT_URI, or put uri (or uri_command, uri_factory) in mongoshift.toml"
            )
        if not self.db:
            raise ConfigInvalidError(self._no_db())
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
        # A broken pyproject.toml is an error, not "no configuration": skipping it would run
        # against the defaults (or another server) while the project meant its own settings.
        if _has_tool_section(_read_toml(pyproject)):
            return pyproject
    return None


def _has_tool_section(data: Mapping[str, Any]) -> bool:
    return isinstance(data.get("tool"), dict) and "mongoshift" in data["tool"]


def hidden_pyproject(cwd: Path) -> Path | None:
    """The pyproject.toml of ``cwd`` when it has a ``[tool.mongoshift]`` section: a mongoshift.toml beside it (there
    already, or the one ``init`` would write) comes first, and the section would then be dropped without a word.
    A pyproject.toml that cannot be read tells nothing."""
    pyproject = cwd / "pyproject.toml"
    if not pyproject.is_file():
        return None
    try:
        return pyproject if _has_tool_section(_read_toml(pyproject)) else None
    except (ConfigInvalidError, IOFailedError):
        return None


#: The largest project file read: ``--config /dev/zero`` must not fill the memory (a pipe, ``<(...)``, is read).
MAX_PROJECT_FILE_BYTES = 1_000_000


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as source:
            data = source.read(MAX_PROJECT_FILE_BYTES + 1)
        if len(data) > MAX_PROJECT_FILE_BYTES:
            raise ConfigInvalidError(f"config file {path} is larger than 1 MB: not a project file", file=str(path))
        return tomllib.loads(data.decode("utf-8-sig"))  # a byte order mark (Windows editors) is no content, as in .env
    except FileNotFoundError:
        raise ConfigInvalidError(f"config file not found: {path}", file=str(path)) from None
    except UnicodeDecodeError as exc:  # the codec's words ("position 22", "invalid continuation byte") name no line
        line = exc.object[: exc.start].count(b"\n") + 1
        raise ConfigInvalidError(
            f"config file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02X} on line {line}): save it as UTF-8",
            file=str(path), line=line,
        ) from None
    except tomllib.TOMLDecodeError as exc:
        # TOMLDecodeError names the line and column: "Invalid value (at line 5, column 10)".
        raise ConfigInvalidError(f"config file {path} is not valid TOML: {exc}", file=str(path)) from None
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the config file", path) from None


def read_project_file(path: Path) -> dict[str, Any]:
    """The settings of a project file; any unknown or misplaced key is an error (all of them in one)."""
    values, problems = read_project_section(path)
    if problems:
        raise ConfigInvalidError("; ".join(problems), file=str(path), problems=problems)
    return values


def _inside(key: str, value: object) -> str:
    """How ``key`` is written inside the ``[mongoshift]`` table, in the shape it has: ``[mongoshift.tenants]`` for a
    table, ``[[mongoshift.collections]]`` for an array of tables, else the line under ``[mongoshift]``."""
    if isinstance(value, dict):
        return f"[mongoshift.{key}]"
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return f"[[mongoshift.{key}]]"
    return f"{key} = ... under [mongoshift]"


def read_project_section(path: Path) -> tuple[dict[str, Any], list[str]]:
    """The known settings of a project file, and a problem for each key that is unknown or outside
    the ``[mongoshift]`` table: :func:`load_settings` reports them with the wrong values, at once."""
    data = _read_toml(path)
    problems: list[str] = []
    if path.name == "pyproject.toml":
        if not _has_tool_section(data):  # named by --config (a found one has it): read as empty, its settings were lost
            raise ConfigInvalidError(
                f"config file {path}: no [tool.mongoshift] table, where a pyproject.toml holds mongoshift's settings; "
                "add the table, or name the project's mongoshift.toml"
            )
        section = data["tool"]["mongoshift"]
    elif "mongoshift" not in data and isinstance(data.get("tool"), dict) and "mongoshift" in data["tool"]:
        # pyproject.toml's way of naming the table: read as top-level keys, 'tool' was an unknown setting
        raise ConfigInvalidError(
            f"config file {path}: [tool.mongoshift] is how a pyproject.toml names mongoshift's table; in {path.name} "
            "write it [mongoshift]",
            file=str(path),
        )
    else:
        section = data.get("mongoshift", data)
        stray = [key for key in data if key != "mongoshift"] if "mongoshift" in data else []
        problems += [
            f"{path}: {key!r} is outside the [mongoshift] table, so it would be ignored; write it as {_inside(key, data[key])}"
            for key in stray
        ]
    if not isinstance(section, dict):
        raise ConfigInvalidError(f"config file {path}: the mongoshift section must be a table")
    unknown = [key for key in section if key not in FIELDS]
    problems += [f"setting {key!r} from {path}: unknown setting{_suggestion(key)}" for key in unknown]
    values = {key: value for key, value in section.items() if key not in unknown}
    # Relative paths in a file are relative to that file, not to where the command runs.
    for key in ("migrations_dir", "template_path", "collections_dir"):
        if isinstance(values.get(key), str) and values[key].strip():  # empty: refused as it is, not as the file's folder
            values[key] = str(path.parent / values[key])
    if isinstance(values.get("hooks"), str) and values["hooks"].endswith(".py"):
        values["hooks"] = str(path.parent / values["hooks"])
    return values, problems


#: The command-line flag of a setting whose flag is not its name (``--dir``), for messages.
#: The settings the command line gives as flags, by flag; any other key of ``load_settings(flags)`` came from
#: Python, and is named so: "from --lock-ttl-seconds" sent its caller to a flag that does not exist.
_FLAGS = {"migrations_dir": "--dir", "uri": "--uri", "db": "--db"}


def _suggestion(key: str) -> str:
    """`` (did you mean 'strict'?)`` for a near miss, else the list of known settings."""
    close = difflib.get_close_matches(key, FIELDS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(FIELDS)})"


#: Settings whose file value is not type-checked here: paths (a file gives text, made
#: relative to the file) and declarations and ``[tenants]`` (their models are strict themselves).
_NOT_SCALAR = frozenset({"migrations_dir", "template_path", "collections_dir", "collections", "tenants"})


@functools.cache
def _strict_type(key: str) -> TypeAdapter[Any]:
    annotation = Settings.model_fields[key].annotation
    assert annotation is not None  # every field of Settings is annotated
    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def file_type_problems(values: Mapping[str, Any]) -> dict[str, str]:
    """Values of a project file whose TOML type is wrong (``strict = "yes"``, ``lock_ttl_seconds = "60"``).

    TOML has booleans and numbers, so a file gets no string coercion: a quoted value is
    most likely a mistake. Only the environment, which has nothing but text, is parsed.
    """
    problems: dict[str, str] = {}
    for key, value in values.items():
        if key in _NOT_SCALAR or key not in Settings.model_fields:
            continue
        try:
            _strict_type(key).validate_python(value)
        except ValidationError as exc:
            error = exc.errors()[0]
            # A word that is none of the choices has the right type: saying "not str" would point at the wrong thing.
            problems[key] = message_of(error) + ("" if error["type"] == "literal_error" else f", not {type(value).__name__}")
    return problems


#: Settings that are tables (or arrays of tables): only a project file can give them; an environment variable
#: of that name was read as text and refused as "should be a table", which no variable can be.
FILE_ONLY = {"shard_keys": "[mongoshift.shard_keys]", "collections": "[[mongoshift.collections]]", "tenants": "[mongoshift.tenants]"}


def _file_only(values: dict[str, Any], where: Callable[[str], str]) -> list[str]:
    """A problem for each table setting a variable tried to give, which is left out of ``values``."""
    given = [key for key in FILE_ONLY if key in values]
    for key in given:
        del values[key]
    return [
        f"setting {key!r} from {where(key)}: a table, which only the project file gives ({FILE_ONLY[key]}); "
        "no environment variable sets it"
        for key in given
    ]


def read_environment(environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for key in FIELDS:
        name = env_name(key)
        if name in environ and environ[name] != "":
            values[key] = environ[name]
    return values


def env_file_path(project_file: Path | None, cwd: Path, env_file: Path | Literal[False] | None) -> Path | None:
    """The ``.env`` to read: ``env_file`` when named (it must exist), none when ``False``, else
    ``.env`` next to the project file (the working directory without one) if it is there."""
    if env_file is False:
        return None
    if env_file is not None:
        return env_file
    default = (project_file.parent if project_file is not None else cwd) / ".env"
    return default if default.exists() else None


def read_env_settings(path: Path) -> tuple[dict[str, str], list[str]]:
    """The settings a ``.env`` file gives: its ``MONGOSHIFT_*`` lines (other names are the
    application's own), and a problem for each ``MONGOSHIFT_*`` name that is no setting (a typo,
    refused as an unknown key of the project file is, and reported with the other problems)."""
    known = {env_name(key) for key in FIELDS}

    def unknown_names(values: dict[str, str]) -> list[str]:
        unknown = sorted(n for n in values if n.startswith("MONGOSHIFT_") and n not in known)
        # a near miss is named, as an unknown key of the project file is ("MONGOSHIFT_STRIKT": MONGOSHIFT_STRICT)
        # (compared without the prefix they all share, which alone made any name "close")
        close = {n: f"MONGOSHIFT_{m[0]}" for n in unknown if n != "MONGOSHIFT_CONFIG"
                 and (m := difflib.get_close_matches(n.removeprefix("MONGOSHIFT_"), [k.removeprefix("MONGOSHIFT_") for k in known], n=1))}
        meant = "; ".join(close[n] if len(unknown) == 1 else f"{close[n]} for {n}" for n in close)
        return [
            f"{', '.join(unknown)} {'is not a mongoshift setting' if len(unknown) == 1 else 'are not mongoshift settings'}"
            + (f" (did you mean {meant}?)" if meant else "")
            + (" (the project file is chosen before the .env is read: use --config)" if "MONGOSHIFT_CONFIG" in unknown else "")
        ] if unknown else []

    values = read_env_file(path, also=unknown_names)  # a refused line lists the unknown names too
    return read_environment(values), [f"env file {path}: {problem}" for problem in unknown_names(values)]


def _layer(merged: dict[str, Any], sources: dict[str, str], values: Mapping[str, Any], source: Callable[[str], str]) -> None:
    """Put one source's values over the lower ones; a URI given here replaces any way a lower source gave it."""
    given = [key for key in URI_SOURCES if values.get(key) is not None]
    if len(given) > 1:
        where = ", ".join(dict.fromkeys(source(k) for k in given))
        raise ConfigInvalidError(f"{where}: set only one of {', '.join(given)} (the connection string, given one way)")
    if given:
        for key in URI_SOURCES:
            merged.pop(key, None)
            sources.pop(key, None)
    for key, value in values.items():
        if value is not None:
            merged[key], sources[key] = value, source(key)


def _as_path(option: str, value: object) -> Path | None:
    """A path argument of :func:`load_settings`: a ``Path``, text, or None."""
    if value is None or isinstance(value, Path):
        return value
    if isinstance(value, str):
        return Path(value)
    raise ConfigInvalidError(f"{option} must be a path (a Path or text), not {type(value).__name__}")


def load_settings(
    flags: Mapping[str, Any] | None = None,
    *,
    config_path: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    env_file: Path | str | Literal[False] | None = None,
) -> Settings:
    """Merge defaults, project file, ``.env``, environment and flags, then validate once.

    ``env_file``: the ``.env`` to read (it must exist); ``False`` reads none; by default the
    ``.env`` next to the project file, when there is one. Only its ``MONGOSHIFT_*`` lines are
    used here, and nothing is written to ``os.environ`` (the CLI exports the rest itself).
    The paths may be given as text."""
    if flags is not None and not isinstance(flags, Mapping):
        raise ConfigInvalidError(f"flags must be a mapping of setting names to values, not {type(flags).__name__}")
    config_path = _as_path("config_path", config_path)
    cwd = _as_path("cwd", cwd)
    env_file = env_file if env_file is False else _as_path("env_file", env_file)
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}

    if config_path is not None:
        path: Path | None = config_path
    elif environ.get("MONGOSHIFT_CONFIG"):
        path = Path(environ["MONGOSHIFT_CONFIG"])
    else:  # only now is the working directory searched (and a broken pyproject.toml there an error)
        path = find_project_file(cwd)
    # Every problem of every source is collected and reported in one error, so that one edit
    # fixes them all; a value that is wrong is left out and the rest is still validated.
    problems: list[str] = []
    if path is not None:
        try:
            values, unknown = read_project_section(path)
        except ConfigInvalidError as exc:  # "config file not found: x.toml" sent no one to the variable that named it
            if config_path is not None or not environ.get("MONGOSHIFT_CONFIG"):
                raise
            raise ConfigInvalidError(f"{exc.message} (named by MONGOSHIFT_CONFIG)", **exc.details) from None
        wrong = file_type_problems(values)
        problems += unknown + [f"setting {key!r} from {path}: {message}" for key, message in wrong.items()]
        _collect(problems, _layer, merged, sources, {k: v for k, v in values.items() if k not in wrong}, lambda key: str(path))
    dotenv = env_file_path(path, cwd, env_file)
    if dotenv is not None:
        env_values, unknown = _collect(problems, read_env_settings, dotenv) or ({}, [])
        problems += unknown
        problems += _file_only(env_values, lambda key: f"{env_name(key)} in {dotenv}")
        _collect(problems, _layer, merged, sources, env_values, lambda key: f"{env_name(key)} in {dotenv}")
    environment = read_environment(environ)
    problems += _file_only(environment, env_name)
    _collect(problems, _layer, merged, sources, environment, env_name)
    _collect(problems, _layer, merged, sources, flags or {}, lambda key: _FLAGS.get(key, "load_settings(flags)"))

    # The default migrations folder sits next to the project file too: with --config (or
    # load_settings(cwd=...)) naming another folder's file, "migrations" was looked for where the
    # command ran, and a folder of that name there would have been run instead.
    if path is not None and "migrations_dir" not in merged:
        merged["migrations_dir"] = str(path.parent / "migrations")
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
        if problems:
            raise ConfigInvalidError("; ".join(problems), problems=problems)
        return settings
    except ValidationError as exc:
        for err in own_errors(exc):
            key = str(err["loc"][0]) if err["loc"] else "?"
            where = loc_path(err["loc"]) or "?"
            message = "unknown key" if err["type"] == "extra_forbidden" else message_of(err)
            for other in OWN_COLLECTION_SETTINGS:  # a clash names where the other setting came from
                message = message.replace(f"{other} already", f"{other} (from {sources.get(other, 'defaults')}) already")
            if name := declared_name(err["loc"], merged):
                message += f" (collection {name!r})"
            problems.append(f"setting {where!r} from {sources.get(key, 'defaults')}: {message}")
        raise ConfigInvalidError("; ".join(problems), problems=problems) from None


def _collect[R](problems: list[str], step: Callable[..., R], *args: Any) -> R | None:
    """``step(*args)``, or None with its refusal added to ``problems`` (reported with the others)."""
    try:
        return step(*args)
    except ConfigInvalidError as exc:
        problems.append(exc.message)
        return None
