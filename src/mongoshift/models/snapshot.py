"""The models' snapshot: a small JSON file in the collections folder, kept under version control.

It holds, per collection, what the models gave at the last ``collections generate`` (the base
that lets a regeneration tell a hand edit from a model change) and the shape the data had at
the last ``create --from-models`` (the "before" of the next data migration) with its version.
Its name starts with ``_``, so the declarations loader skips it. It is written whole through a
temporary file and a rename: a failed write leaves the previous snapshot.

``create --from-models`` writes its migrations first and the snapshot last; a process killed
between the two would leave shapes the snapshot does not record, and the next run would write
the same change again. So each such migration ends with a marker line holding the shape it
records, and every run that reads the snapshot first folds in the shapes of migrations newer
than it (:func:`heal`): the rerun completes the interrupted one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import IOFailedError, ModelsInvalidError

FILE_NAME = "_models.json"
FORMAT = 1


@dataclass
class Shape:
    """A collection's data shape: its version (0 = documents carry no version) and top-level fields."""

    version: int
    model: str
    fields: dict[str, dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "model": self.model, "fields": self.fields}


@dataclass
class Snapshot:
    models: str | None = None
    #: collection → the declaration the models gave last time
    declarations: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: collection → the data shape at the last migration written from the models
    shapes: dict[str, Shape] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "models": self.models,
            "declarations": dict(sorted(self.declarations.items())),
            "shapes": {name: shape.to_json() for name, shape in sorted(self.shapes.items())},
        }


#: The last line of a migration written by ``create --from-models``, before the shape it records (JSON).
MARKER = "# mongoshift models shape: "


def marker(collection: str, shape: Shape) -> str:
    """The marker line of a generated migration: one line of JSON, ASCII only."""
    data = {"collection": collection, **shape.to_json()}
    return MARKER + json.dumps(data, ensure_ascii=True, sort_keys=True, separators=(",", ":")) + "\n"


def recorded(directory: Path) -> dict[str, Shape]:
    """The shapes the migrations of ``directory`` record in their marker line, the newest version per collection.

    A file without a readable marker is no generated migration (or one edited by hand): it records nothing."""
    found: dict[str, Shape] = {}
    for path in sorted(directory.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue  # the loader names an unreadable migration file; it records no shape
        last = text.rstrip("\n").rsplit("\n", 1)[-1]
        if not last.startswith(MARKER):
            continue
        try:
            data = json.loads(last[len(MARKER):])
            name, shape = str(data["collection"]), Shape(int(data["version"]), str(data["model"]), dict(data["fields"]))
        except (ValueError, KeyError, TypeError):
            continue
        if name not in found or shape.version > found[name].version:
            found[name] = shape
    return found


def heal(snapshot: Snapshot, directory: Path) -> list[str]:
    """Fold into ``snapshot`` the shapes of generated migrations newer than it records (a run killed after writing
    them, before the snapshot); the collections so completed, in order. Written with the snapshot's next write."""
    healed: list[str] = []
    for name, shape in sorted(recorded(directory).items()):
        before = snapshot.shapes.get(name)
        if before is None or shape.version > before.version:
            snapshot.shapes[name] = shape
            healed.append(name)
    return healed


def path_in(folder: Path) -> Path:
    return folder / FILE_NAME


def read(folder: Path) -> Snapshot | None:
    """The snapshot of ``folder``, or None when there is none yet; a broken one is an error naming the file."""
    path = path_in(folder)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise _unreadable(path, "not UTF-8 text") from None
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the models snapshot", path) from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format must be {FORMAT}")
        shapes = {str(name): _shape(f"shapes.{name}", s) for name, s in _object(data.get("shapes") or {}, "shapes").items()}
        declarations = {str(name): _object(d, f"declarations.{name}") for name, d in _object(data.get("declarations") or {}, "declarations").items()}
        models = data.get("models")
        if models is not None and not (isinstance(models, str) and models):
            raise ValueError("models must be the models package's name")  # else: "name the models package" after a hand edit
        return Snapshot(models, declarations, shapes)
    except (ValueError, TypeError) as exc:  # what a hand edit or a bad merge leaves: said, as nothing else reads it
        raise _unreadable(path, str(exc)) from None


def _unreadable(path: Path, why: str) -> ModelsInvalidError:
    return ModelsInvalidError(f"{path}: not a models snapshot mongoshift can read ({why}); restore it from version control", file=str(path))


def _object(value: object, where: str) -> dict[str, Any]:
    """``value`` when it is a JSON object: a declaration or a field's shape that is not one failed deep in a merge
    (exit 1, "please report it") instead of naming the snapshot."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    return value


def _shape(where: str, value: object) -> Shape:
    """One collection's recorded shape, each part checked (a field's ``types`` given as text was read as its letters)."""
    spec = _object(value, where)
    for key in ("version", "model", "fields"):
        if key not in spec:
            raise ValueError(f"{where}: {key!r} is missing")
    version = spec["version"]
    # set by hand for documents that already carry a version (docs/models.md): 2.7 was read as 2, "3" and true as
    # numbers, and a word failed with Python's own message; a background migration's versions are BSON int64s
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 2**62:
        raise ValueError(f"{where}.version must be a whole number from 0")
    fields = _object(spec["fields"], f"{where}.fields")
    for name, field_spec in fields.items():
        types = _object(field_spec, f"{where}.fields.{name}").get("types", [])
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise ValueError(f"{where}.fields.{name}.types must be a list of BSON type names")
    return Shape(version, str(spec["model"]), dict(fields))


def write(folder: Path, snapshot: Snapshot) -> Path:
    """The snapshot's file, unless it already holds exactly this text: a run that changed nothing writes nothing
    (its bytes and modification time stay, and a read-only checkout is no error)."""
    path = path_in(folder)
    text = json.dumps(snapshot.to_json(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"
    try:
        if path.read_text(encoding="utf-8") == text:
            return path
    except (OSError, UnicodeDecodeError):
        pass  # none yet, or unreadable: written whole below
    write_text(path, text, "write the models snapshot")
    return path


def write_text(path: Path, text: str, doing: str) -> None:
    """Whole or not at all: a temporary file beside it, then a rename."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        try:
            temporary.unlink(missing_ok=True)
        except OSError:
            pass
        raise IOFailedError.from_os(exc, doing, path) from None
