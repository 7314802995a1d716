"""Other migration tools' changelogs, read as "which file was applied, and when".

``mongoshift import`` adopts another tool's history without touching it. Each
tool keeps its own record shape (from its published source):

* migrate-mongo: ``changelog``, one ``{fileName, appliedAt, migrationBlock[, fileHash]}``
  per applied file (``down`` deletes it);
* Beanie: ``migrations_log``, one ``{name, ts, is_current}`` each time a migration became
  the current one; the files up to the current one (in name order) are applied;
* pymongo-migrate: ``pymongo_migrate``, one ``{name, applied}`` per file, ``applied`` null
  once downgraded;
* mongodb-migrations: ``database_migrations``, one ``{migration_datetime, created_at}``
  per applied file, named by the file's leading digits only.

The file-name rule (docs/adoption.md): a source name matches the mongoshift file whose
name, without ``.py``, equals the source name with its folder and extension dropped,
lowercased, and every run of other characters than letters and digits turned into one
``_`` (``20240101000000-add-users.js`` → ``20240101000000_add_users.py``). A
mongodb-migrations record (digits only) matches the one file starting with those digits
and ``_``. A ``--map`` file overrides the rule for the names it lists.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..errors import ConfigInvalidError, FileNotFoundMigrationError, IOFailedError
from ..schema.validation import refused_collection_name
from .loader import MigrationFile
from .wording import plural

_EXTENSIONS = (".js", ".cjs", ".mjs", ".ts", ".py")


@dataclass(frozen=True)
class ForeignEntry:
    """One file the other tool applied: its name there and when it ran (None: the tool keeps no time)."""

    source_name: str
    applied_at: datetime | None


@dataclass(frozen=True)
class ForeignTool:
    name: str
    collection: str
    #: The source name is only the digits that start a file name (mongodb-migrations).
    prefix_only: bool = False

    def applied(self, documents: Iterable[dict[str, Any]]) -> list[ForeignEntry]:
        """The files this tool's records say are applied, each once, with its latest time."""
        docs = list(documents)
        if self.name == "beanie":
            entries = _beanie(docs)
        else:
            name_key, time_key = _KEYS[self.name]
            entries = [
                ForeignEntry(str(doc[name_key]), _time(doc.get(time_key)))
                for doc in docs
                if self._names_a_file(doc.get(name_key))
                and (self.name != "pymongo-migrate" or doc.get(time_key) is not None)
            ]
        latest: dict[str, ForeignEntry] = {}
        for entry in entries:
            seen = latest.get(entry.source_name)
            if seen is None or (entry.applied_at and (seen.applied_at is None or entry.applied_at > seen.applied_at)):
                latest[entry.source_name] = entry
        return sorted(latest.values(), key=lambda e: e.source_name)

    def unnamed(self, documents: Iterable[dict[str, Any]]) -> int:
        """How many records name no file: no rule can match them, so ``import`` leaves them out and says so."""
        key = "name" if self.name == "beanie" else _KEYS[self.name][0]
        return sum(1 for doc in documents if not self._names_a_file(doc.get(key)))

    def _names_a_file(self, value: object) -> bool:
        """A record's name field as this tool writes it: text, or for mongodb-migrations (which names a file by the
        digits of its time) a whole number; anything else (null, a boolean, a number where the tool writes text) was
        not written by the tool as a file name, so it is counted as naming none rather than matched as its digits; so is
        text with no letter or digit (an empty name)."""
        if isinstance(value, str):
            return _text_name(value)
        return self.prefix_only and isinstance(value, int) and not isinstance(value, bool)


_KEYS = {
    "migrate-mongo": ("fileName", "appliedAt"),
    "pymongo-migrate": ("name", "applied"),
    "mongodb-migrations": ("migration_datetime", "created_at"),
}

TOOLS: dict[str, ForeignTool] = {
    "migrate-mongo": ForeignTool("migrate-mongo", "changelog"),
    "beanie": ForeignTool("beanie", "migrations_log"),
    "pymongo-migrate": ForeignTool("pymongo-migrate", "pymongo_migrate"),
    "mongodb-migrations": ForeignTool("mongodb-migrations", "database_migrations", prefix_only=True),
}


def _text_name(value: object) -> bool:
    """Text that can name a file: ``""`` or ``"-.js"`` has no letter or digit, so no rule or file name matches it."""
    return isinstance(value, str) and normalised(value) != ""


def _time(value: Any) -> datetime | None:
    return value if isinstance(value, datetime) else None


#: The name Beanie logs current once a rollback (``--backward -d N``) passed its first migration: its root node,
#: before every migration (a migration's name is its file's, with ``.py``, so no file is named so).
BEANIE_ROOT = "root"


def beanie_at_root(docs: Iterable[dict[str, Any]]) -> bool:
    """Whether Beanie's current record is its root node: every migration rolled back."""
    return any(d.get("is_current") is True and d.get("name") == BEANIE_ROOT for d in docs)


def _beanie(docs: list[dict[str, Any]]) -> list[ForeignEntry]:
    """Beanie logs each migration as it becomes current; what sorts after the current one was rolled back, and
    nothing is applied when the current one is its root node (or none is current)."""
    current = [d["name"] for d in docs if d.get("is_current") is True and _text_name(d.get("name"))]
    if not current or beanie_at_root(docs):
        return []
    last = max(current)
    return [
        ForeignEntry(d["name"], _time(d.get("ts")))
        for d in docs
        if _text_name(d.get("name")) and d["name"] != BEANIE_ROOT and d["name"] <= last
    ]


def tool(name: str) -> ForeignTool:
    try:
        return TOOLS[name]
    except KeyError:
        raise ConfigInvalidError(f"--from {name!r}: not a known tool (one of {', '.join(sorted(TOOLS))})") from None


def source_collection(source: ForeignTool, name: object, own: Iterable[str]) -> str:
    """The collection ``import`` reads: the tool's default, or ``--collection``, refused (exit 6) before
    connecting when the server cannot name it (the driver's InvalidName was exit 1, "a bug"), when it is
    the server's (``system.*``), or mongoshift's own (an empty name no longer stands for the default)."""
    if name is None:
        return source.collection
    if not isinstance(name, str):
        raise ConfigInvalidError(f"--collection must be a collection name, not {type(name).__name__}")
    if (why := refused_collection_name(name)) is not None:
        raise ConfigInvalidError(f"--collection {name!r}: {why}")
    if name in own:
        raise ConfigInvalidError(f"--collection {name!r} is one of mongoshift's own collections, not {source.name}'s changelog")
    return name


def normalised(source_name: str) -> str:
    """The file-name rule: folder and extension dropped, lowercased, other characters → one ``_``."""
    base = source_name.replace("\\", "/").rsplit("/", 1)[-1]
    for extension in _EXTENSIONS:
        if base.lower().endswith(extension):
            base = base[: -len(extension)]
            break
    return re.sub(r"[^a-z0-9]+", "_", base.lower()).strip("_")


def read_map(path: Path) -> dict[str, str | None]:
    """A ``--map`` TOML file: ``"source name" = "mongoshift_file"`` (or ``false``: not imported on purpose)."""
    if path.exists() and not path.is_file():  # a device (/dev/zero) would be read without end
        raise ConfigInvalidError(f"--map {path}: not a regular file")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte order mark (Windows editors) is no content, as in .env
    except FileNotFoundError:
        raise ConfigInvalidError(f"--map file not found: {path}", file=str(path)) from None
    except UnicodeDecodeError:
        raise ConfigInvalidError(f"--map {path} is not UTF-8 text", file=str(path)) from None
    except tomllib.TOMLDecodeError as exc:  # its line and column, never the file's text
        raise ConfigInvalidError(f"--map {path} is not valid TOML: {exc}", file=str(path)) from None
    except OSError as exc:  # a folder, no permission: the system's refusal, as for the project file
        raise IOFailedError.from_os(exc, "read the --map file", path) from None
    mapping: dict[str, str | None] = {}
    for key, value in data.items():
        if value is False:
            mapping[key] = None
        elif isinstance(value, str) and value:
            mapping[key] = value if value.endswith(".py") else value + ".py"
        else:
            raise ConfigInvalidError(f"--map {path}: {key!r} must map to a migration file name or false")
    return mapping


@dataclass(frozen=True)
class Matched:
    entry: ForeignEntry
    file: MigrationFile


def match(
    tool_: ForeignTool, entries: list[ForeignEntry], files: list[MigrationFile], mapping: dict[str, str | None]
) -> tuple[list[Matched], list[str]]:
    """Each entry with its mongoshift file, and the source names left out on purpose (``false`` in the map).

    An entry that matches no file is refused (exit 8): adopting only part of a history would
    let ``up`` run an applied migration a second time under its new name. So are entries that match
    one file (``-add-users.js`` and ``_add_users.ts``): which of the two that file ports is the user's to say.
    """
    by_name = {f.name: f for f in files}
    by_key = {normalised(f.name): f for f in files}
    matched: list[Matched] = []
    left_out: list[str] = []
    unmatched: list[str] = []
    #: source name → the file its --map line names, which the folder does not hold
    mapped_missing: dict[str, str] = {}
    for entry in entries:
        if entry.source_name in mapping:
            target = mapping[entry.source_name]
            if target is None:
                left_out.append(entry.source_name)
                continue
            found = by_name.get(target)
            if found is None:
                mapped_missing[entry.source_name] = target
        elif tool_.prefix_only:
            candidates = [f for f in files if f.name.startswith(f"{entry.source_name}_")]
            found = candidates[0] if len(candidates) == 1 else None
        else:
            found = by_key.get(normalised(entry.source_name))
        if found is None:
            unmatched.append(entry.source_name)
        else:
            matched.append(Matched(entry, found))
    if unmatched:
        # a record the --map file sends to a file that is not there: "list them in a --map file" would repeat what
        # the user did, so the file the map names is said instead
        unmapped = [n for n in unmatched if n not in mapped_missing]
        said = [
            *([f"{plural(len(unmapped), f'applied {tool_.name} migration')} without a file in the migrations folder: "
               f"{', '.join(unmapped)}; add the files, or list them in a --map file"] if unmapped else []),
            *([f"the --map file names {plural(len(mapped_missing), 'file')} the migrations folder does not hold: "
               + ", ".join(f"{source} → {target}" for source, target in mapped_missing.items())
               + "; add the files, or correct their names in the --map file"] if mapped_missing else []),
        ]
        raise FileNotFoundMigrationError(
            "; ".join(said) + " (docs/adoption.md)",
            unmatched=unmatched, **({"mapped_missing": mapped_missing} if mapped_missing else {}),
        )
    sources: dict[str, list[str]] = {}
    for m in matched:
        sources.setdefault(m.file.name, []).append(m.entry.source_name)
    shared = {name: names for name, names in sources.items() if len(names) > 1}
    if shared:
        raise FileNotFoundMigrationError(
            "; ".join(f"{plural(len(names), f'applied {tool_.name} migration')} match one file: {name} ({', '.join(names)})" for name, names in shared.items())
            + ": the other tool ran them as different migrations; in a --map file, name the file each one became, or false for "
            "one that needs no file of its own (docs/adoption.md)",
            shared=shared,
        )
    return matched, left_out
