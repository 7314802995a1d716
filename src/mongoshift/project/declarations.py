"""Reading the project's collection declarations: ``[[collections]]`` and ``collections_dir``.

A ``.py`` declaration file is user code, so it is executed once per connected
run (:meth:`mongoshift.project.session.Session.declarations`) and handed out
as a mapping by collection name; nothing re-reads the folder per background
file or per poll.
"""

from __future__ import annotations

import sys
import tomllib
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigInvalidError, IOFailedError
from ..schema.collections import CollectionDeclaration
from ..schema.validation import describe_errors
from .own_collections import refuse_declared
from .redaction import describe_error
from .settings import Settings
from .user_code import own_failure, run_source, source_module

UNREADABLE = (".json", ".yaml", ".yml", ".js", ".ts")
READ = (".toml", ".py")

#: Declared collections by name, in declaration order.
Declarations = Mapping[str, CollectionDeclaration]


def _validated(data: Any, path: Path) -> CollectionDeclaration:
    if isinstance(data, CollectionDeclaration):
        declaration = data
    else:
        if not isinstance(data, Mapping):
            raise ConfigInvalidError(f"{path}: the declaration must be a table/dict, not {type(data).__name__}", file=str(path))
        values = dict(data)
        values.setdefault("name", path.stem)
        try:
            declaration = CollectionDeclaration.model_validate(values)
        except ValidationError as exc:
            raise ConfigInvalidError(f"{path}: {describe_errors(exc)}", file=str(path)) from None
    declaration._source = str(path)
    return declaration


def _read_toml(path: Path) -> Any:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte order mark (Windows editors) is no content, as in .env
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigInvalidError(f"{path} is not valid TOML: {exc}", file=str(path)) from None
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the declaration file", path) from None


def _read_python(path: Path) -> Any:
    module_name = f"mongoshift_collections.{path.stem}"
    try:
        module = source_module(module_name, path)
    except ImportError:
        raise ConfigInvalidError(f"{path}: cannot be imported as a Python module", file=str(path)) from None
    try:
        run_source(module, path)
    except BaseException as exc:  # a declaration file may raise anything while importing, even SystemExit
        if not own_failure(exc):  # a KeyboardInterrupt is its own too, as a migration file's (user_code.own_failure)
            raise
        line = exc.lineno if isinstance(exc, SyntaxError) else next(
            (f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if Path(f.filename) == path), None
        )
        where = f" (line {line})" if line else ""
        raise ConfigInvalidError(f"{path}: failed to import{where}: {describe_error(exc)}", file=str(path)) from None
    finally:
        sys.modules.pop(module_name, None)
    if not hasattr(module, "collection"):
        raise ConfigInvalidError(f"{path}: must define collection = {{...}}", file=str(path))
    value = module.collection
    if callable(value) and not isinstance(value, (Mapping, CollectionDeclaration)):
        raise ConfigInvalidError(f"{path}: collection must be a dict, not a function", file=str(path))
    return value


def _unreadable_entry(path: Path) -> str | None:
    """Why a folder entry named like a declaration (``.toml`` / ``.py`` in any case) would never be read, or None.

    Skipping it would leave the collection undeclared while converge reports the rest in sync."""
    if path.suffix not in READ:  # users.TOML: meant as a declaration, never read on a file system that tells case apart
        return (
            f"{path} ends in {path.suffix!r}, not {path.suffix.lower()!r}: it would never be read; "
            "rename it, or prefix it with '_' if it is not a declaration"
        )
    if path.is_symlink() and not path.exists():
        return f"{path} is a symbolic link to a file that does not exist; restore its target or remove the link"
    if not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        return f"{path} is {kind}: a declaration is one .toml or .py file (move it out, or prefix it with '_')"
    return None


def load_folder(directory: Path, *, required: bool = False) -> list[CollectionDeclaration]:
    """One declaration per ``.toml`` / ``.py`` file, in name order; ``_`` and ``.`` files are helpers."""
    if directory.exists() and not directory.is_dir():  # a file where the folder should be: 44, as for every path
        raise IOFailedError(f"cannot read the collections folder {directory}: it is a file, not a folder", path=str(directory), reason="not a folder")
    if not directory.is_dir():
        if required:
            raise ConfigInvalidError(f"collections folder not found: {directory} (setting collections_dir)")
        return []
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise IOFailedError.from_os(exc, "list the collections folder", directory) from None
    declarations = []
    failures: list[ConfigInvalidError] = []  # every broken file is reported at once, not one per try
    for path in entries:
        suffix = path.suffix.lower()
        if path.name.startswith(("_", ".")) or (suffix not in READ and not path.is_file()):
            continue
        try:
            if suffix in READ and (problem := _unreadable_entry(path)) is not None:
                raise ConfigInvalidError(problem, file=str(path))
            if suffix == ".toml":
                declarations.append(_validated(_read_toml(path), path))
            elif suffix == ".py":
                declarations.append(_validated(_read_python(path), path))
            elif suffix in UNREADABLE:
                raise ConfigInvalidError(f"{path}: collection declarations are .toml or .py files", file=str(path))
        except ConfigInvalidError as exc:
            failures.append(exc)
    files = [str(f.details.get("file")) for f in failures]
    if len(failures) == 1:
        failures[0].details["files"] = files
        raise failures[0]
    if failures:
        raise ConfigInvalidError(
            f"{len(failures)} invalid collection declaration files:\n" + "\n".join(f"  - {f.message}" for f in failures),
            files=files,
        )
    return declarations


def load_declarations(settings: Settings) -> list[CollectionDeclaration]:
    """Every declared collection: the project config first, then the folder. Duplicates are an error."""
    declarations = list(settings.collections) + load_folder(
        settings.collections_dir, required="collections_dir" in settings.model_fields_set
    )
    places: dict[str, list[str]] = {}
    for index, declaration in enumerate(declarations):
        inline = index < len(settings.collections)  # the config's entries come first, each named by its position
        where = f"[[collections]] entry {index + 1} in the project config" if inline else declaration.source
        places.setdefault(declaration.name, []).append(where)
    twice = {name: where for name, where in places.items() if len(where) > 1}
    if twice:
        raise ConfigInvalidError(
            f"{len(twice)} collection{'s are' if len(twice) > 1 else ' is'} declared more than once (one declaration each): "
            + "; ".join(f"{name!r} in {' and in '.join(where)}" for name, where in twice.items()),
            collections=sorted(twice),
        )
    refuse_declared(settings, {name: where[0] for name, where in places.items()})
    return declarations


def declarations_by_name(settings: Settings) -> dict[str, CollectionDeclaration]:
    """:func:`load_declarations` keyed by collection name (the form a session hands out)."""
    return {declaration.name: declaration for declaration in load_declarations(settings)}
