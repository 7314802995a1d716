"""``collections generate``: the declared-collections files the models give, merged with hand edits.

Everything is computed before anything is written: a model that cannot be read, a merged
declaration converge would refuse, or a collection declared where generate cannot write (the
project file, a ``.py`` file) stops the run with nothing changed. Each file is then replaced
whole (a temporary file and a rename), and the snapshot last.

An existing file is edited, not rewritten: only the parts whose value changed are touched, so
its comments and layout stay (``toml_text``); a file whose declaration did not change is not
written at all. The edited text is read back before anything is written: it must declare
exactly the merged declaration.
"""

from __future__ import annotations

import difflib
import logging
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..errors import ConfigInvalidError, IOFailedError, ModelsInvalidError
from ..project.declarations import load_folder
from ..project.settings import Settings
from ..schema.collections import CollectionDeclaration
from ..schema.validation import describe_errors
from . import snapshot as snapshots
from .merge import canonical, merge_declaration
from .readers import ModelShape, check_package_name, find_models, index_form
from .toml_text import document, edit

log = logging.getLogger("mongoshift.models")


@dataclass
class CollectionResult:
    """One collection: what generate did (or, with ``check``, would do) to its file."""

    collection: str
    model: str
    file: str
    #: ``created``, ``updated`` or ``unchanged``
    action: str
    diff: str = ""
    #: hand edits kept against a change of the models
    kept: list[str] = field(default_factory=list)
    #: constructs of the model no rule expresses (listed, never dropped silently)
    unsupported: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection, "model": self.model, "file": self.file, "action": self.action,
            "diff": self.diff, "kept": self.kept, "unsupported": self.unsupported,
        }


@dataclass
class GenerateReport:
    models: str
    check: bool
    collections: list[CollectionResult]
    #: collections declared in the folder by an earlier generate whose model is gone (their files are left)
    orphaned: list[str]
    #: whether the snapshot differs from what the models give now (a model changed since the last generate)
    snapshot_stale: bool
    snapshot: str

    @property
    def in_sync(self) -> bool:
        return not self.snapshot_stale and all(c.action == "unchanged" for c in self.collections)

    def to_json(self) -> dict[str, Any]:
        return {
            "models": self.models, "check": self.check, "in_sync": self.in_sync, "snapshot": self.snapshot,
            "snapshot_stale": self.snapshot_stale, "collections": [c.to_json() for c in self.collections],
            "orphaned": self.orphaned,
        }


def header(shape: ModelShape, package: str) -> str:
    return (
        f"Collection {shape.collection}, generated from {shape.model} ({shape.odm}) by\n"
        f"'mongoshift collections generate --models {package}'. Edit freely: a regeneration keeps\n"
        "your values and comments, and changes only what the models changed."
    )


def _existing(settings: Settings) -> dict[str, Path]:
    """Where each collection of the folder is declared (the loader's rules: a bad file fails here, exit 6)."""
    return {d.name: Path(d.source) for d in load_folder(settings.collections_dir)}


def _read_mine(path: Path) -> tuple[dict[str, Any], str]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}, ""
    except OSError as exc:
        raise IOFailedError.from_os(exc, "read the declaration file", path) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        raise ConfigInvalidError(f"{path} is not valid TOML: {exc}", file=str(path)) from None


def _normalized(mine: dict[str, Any]) -> dict[str, Any]:
    """The file's indexes in the generated form (named, keys as a table), so that ``{keys = {email = 1}}``
    written by hand and the models' ``email_1`` are one index, not an edit against the models."""
    indexes = mine.get("indexes")
    if not isinstance(indexes, list):
        return mine
    out = []
    for index in indexes:
        try:
            out.append(index_form(index))
        except ValidationError:
            out.append(index)  # the loader has reported it already (exit 6); merged as written
    return {**mine, "indexes": out}


def _edited(path: Path, text: str, mine: dict[str, Any], merged: dict[str, Any]) -> str:
    """The file's text changed in place to declare ``merged``, checked by reading it back."""
    try:
        new_text = edit(text, mine, merged)
    except ModelsInvalidError as exc:
        raise ModelsInvalidError(f"{path}: {exc.message}", file=str(path)) from None
    try:
        faithful = canonical(_normalized(tomllib.loads(new_text))) == canonical(merged)
    except tomllib.TOMLDecodeError:
        faithful = False
    if not faithful:
        raise ModelsInvalidError(f"{path}: the file could not be updated in place faithfully; nothing was written", file=str(path))
    return new_text


def resolve_package(settings: Settings, models: str | None, *, check: bool = False) -> tuple[str, snapshots.Snapshot | None, list[str]]:
    """The models package (the one given, else the one the snapshot recorded), the snapshot, and the collections
    whose shape a generated migration records and the snapshot did not (folded into it: the caller writes it)."""
    if models is not None and not models.strip():  # `--models ""` fell back to the snapshot's package, as if unsaid
        raise ModelsInvalidError("--models '' is not a module name (such as myapp.models); leave it out to use the snapshot's")
    if models is not None:
        check_package_name(models)  # before a hint quotes it back as a command to run
    snapshot = snapshots.read(settings.collections_dir)
    healed = snapshots.heal(snapshot, settings.migrations_dir) if snapshot is not None else []
    if healed:
        log.warning(
            "the models snapshot did not record the shape of %s that a migration written from the models does "
            "(a run stopped before the snapshot was written): %s", ", ".join(healed),
            "a run without --check records it" if check else "recorded now",
        )
    package = models or (snapshot.models if snapshot else None)
    if not package:
        raise ModelsInvalidError("name the models package: --models PKG (such as myapp.models); later runs take it from the snapshot")
    return package, snapshot, healed


def generate(settings: Settings, models: str | None = None, *, check: bool = False, stop: Callable[[], None] | None = None) -> GenerateReport:
    """Compute every file; unless ``check``, write those that change and the snapshot.

    ``stop`` raises when the run must stop (Ctrl-C while the models imported): called once everything is
    computed, before the first write, so a stopped run writes nothing."""
    package, snapshot, healed = resolve_package(settings, models, check=check)
    snapshot = snapshot or snapshots.Snapshot()
    shapes = find_models(package)
    folder = settings.collections_dir
    inline = {d.name for d in settings.collections}
    existing = _existing(settings)
    refused = [s.collection for s in shapes if s.collection in inline]
    if refused:
        raise ModelsInvalidError(
            f"declared in the project file, where generate does not write: {', '.join(refused)} "
            f"(move the declaration to {folder.name}/<name>.toml, or remove it)",
            collections=refused,
        )
    python_files = [f"{s.collection} ({existing[s.collection].name})" for s in shapes if existing.get(s.collection, Path()).suffix == ".py"]
    if python_files:
        raise ModelsInvalidError(f"declared in Python files, which generate does not rewrite: {', '.join(python_files)} (use .toml)")
    results: list[CollectionResult] = []
    writes: list[tuple[Path, str]] = []
    for shape in shapes:
        path = existing.get(shape.collection, folder / f"{shape.collection}.toml")
        mine, old_text = _read_mine(path)
        mine = _normalized(mine)
        base = snapshot.declarations.get(shape.collection, {}) if mine else {}
        merged, kept = merge_declaration(base, shape.declaration, {k: v for k, v in mine.items() if k != "name"})
        if "name" in mine:
            merged = {"name": mine["name"], **merged}
        try:
            CollectionDeclaration.model_validate({"name": shape.collection, **merged})
        except ValidationError as exc:
            raise ModelsInvalidError(
                f"{path}: merged with the models, the declaration would be invalid: {describe_errors(exc)} (edit the file or the model)",
                file=str(path),
            ) from None
        changed = not old_text or canonical(merged) != canonical(mine)
        action = "unchanged"
        diff = ""
        if changed:
            new_text = _edited(path, old_text, mine, merged) if old_text else document(merged, header(shape, package))
            action = "updated" if old_text else "created"
            shown = path.relative_to(folder.parent) if path.is_relative_to(folder.parent) else path
            diff = "".join(difflib.unified_diff(old_text.splitlines(True), new_text.splitlines(True), f"a/{shown}", f"b/{shown}"))
            writes.append((path, new_text))
        results.append(CollectionResult(shape.collection, shape.model, str(path), action, diff, kept, shape.unsupported))
    names = {s.collection for s in shapes}
    orphaned = sorted(n for n in snapshot.declarations if n not in names and n in existing)
    stale = (
        bool(healed)  # the shape a generated migration records is not in the file yet
        or snapshot.models != package
        or any(canonical(snapshot.declarations.get(s.collection)) != canonical(s.declaration) for s in shapes)
        or any(s.collection not in snapshot.shapes for s in shapes)
        or any(n not in names and n not in existing for n in snapshot.declarations)  # gone with its file too
    )
    report = GenerateReport(package, check, results, orphaned, stale, str(snapshots.path_in(folder)))
    if check:
        return report
    if stop is not None:
        stop()
    for path, text in writes:
        snapshots.write_text(path, text, "write the declaration file")
    if stale:
        snapshot.models = package
        # an orphan keeps its last generated declaration: the next run warns again, and a model that
        # comes back is merged against it (what nobody edited follows the model, not a "kept edit")
        snapshot.declarations = {**{n: snapshot.declarations[n] for n in orphaned}, **{s.collection: s.declaration for s in shapes}}
        for s in shapes:
            snapshot.shapes.setdefault(s.collection, snapshots.Shape(0, s.model, s.fields))
        snapshots.write(folder, snapshot)
    return report
