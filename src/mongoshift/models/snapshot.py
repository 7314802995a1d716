"""The models' snapshot: a small JSON file in the collections folder, kept under version control.

It holds, per collection, what the models gave at the last ``collections generate`` (the base
that lets a regeneration tell a hand edit from a model change) and the shape the data had at
the last ``create --from-models`` (the "before" of the next data migration) with its version.
Its name starts with ``_``, so the declarations loader skips it. It is written whole through a
temporary file and a rename: a failed write leaves the previous snapshot.
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


def path_in(folder: Path) -> Path:
    return folder / FILE_NAME


def read(folder: Path) -> Snapshot | None:
    """The snapshot of ``folder``, or None when there is none yet; a broken one is an error naming the file."""
    path = path_in(folder)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the models snapshot", path) from None
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"format must be {FORMAT}")
        shapes = {
            str(name): Shape(int(s["version"]), str(s["model"]), dict(s["fields"]))
            for name, s in (data.get("shapes") or {}).items()
        }
        if any(s.version < 0 for s in shapes.values()):
            raise ValueError("a shape version is below 0")
        models = data.get("models")
        return Snapshot(models if isinstance(models, str) else None, dict(data.get("declarations") or {}), shapes)
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelsInvalidError(f"{path}: not a models snapshot mongoshift can read ({exc}); restore it from version control", file=str(path)) from None


def write(folder: Path, snapshot: Snapshot) -> Path:
    path = path_in(folder)
    text = json.dumps(snapshot.to_json(), indent=2, ensure_ascii=False, sort_keys=False) + "\n"
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
