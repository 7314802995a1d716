"""Declarations and migrations from the application's models, as the Python API (docs/models.md).

``generate_collections`` writes (or, with ``check``, compares) the declared-collections files
the models give; ``create_from_models`` writes a background migration for each collection
whose data shape changed since the snapshot. Neither connects to the server: both read the
models and the project's files. Importing the models runs the application's code, so it
happens in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigInvalidError, RunAbortedError
from ..line.scaffold import create_migration
from ..models import snapshot as snapshots
from ..models.changes import FromModelsPlan, plan, render
from ..models.generate import GenerateReport, generate, resolve_package
from ..models.readers import find_models
from ..project.loader import MAX_SLUG, slugify
from ..project.run import CancelSignal
from ..project.session import Project
from ..project.settings import Settings
from .options import checked_flags, one_shot


async def generate_collections(
    settings: Settings, models: str | None = None, *, check: bool = False, cancel: CancelSignal | None = None
) -> GenerateReport:
    """One-shot ``Mongoshift.collections.generate`` (:func:`generate_collections_in`)."""
    return await generate_collections_in(one_shot(settings), models, check=check, cancel=cancel)


async def generate_collections_in(
    project: Project, models: str | None = None, *, check: bool = False, cancel: CancelSignal | None = None
) -> GenerateReport:
    """Write the declaration files the models of package ``models`` give, keeping hand edits; ``check``: write nothing.

    ``models`` defaults to the package the snapshot recorded. The report's ``in_sync`` is False when
    a file would change or a model changed since the last generate (``--check`` exits 48 then).
    ``cancel`` set before the files are written (Ctrl-C while the models import): nothing is written, exit 11."""
    checked_flags(check=check)
    _checked_models(models)
    return await asyncio.to_thread(generate, project.settings, models, check=check, stop=_stop_before_writing(cancel, "collections generate"))


def _stop_before_writing(cancel: CancelSignal | None, command: str) -> Callable[[], None] | None:
    """What a models command calls before its first write: :class:`RunAbortedError` (11) once ``cancel`` is set."""
    if cancel is None:
        return None

    def stop() -> None:
        if cancel.is_set():
            raise RunAbortedError(f"{command} stopped ({cancel.reason}) before writing: nothing was written")

    return stop


@dataclass
class FromModelsReport:
    """What ``create --from-models`` found and wrote: the plan and one file per changed collection."""

    plan: FromModelsPlan
    files: list[Path]

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "files": [str(f) for f in self.files]}


async def create_from_models(settings: Settings, name: str, models: str | None = None, *, cancel: CancelSignal | None = None) -> FromModelsReport:
    """One-shot ``Mongoshift.create_from_models`` (:func:`create_from_models_in`)."""
    return await create_from_models_in(one_shot(settings), name, models, cancel=cancel)


async def create_from_models_in(project: Project, name: str, models: str | None = None, *, cancel: CancelSignal | None = None) -> FromModelsReport:
    """A background migration per collection whose shape changed since the snapshot, then the new shapes recorded.

    Refused with nothing written (exit 49) when there is no snapshot yet, or a change cannot be
    written faithfully (a required field without a default, a type change without a converter);
    ``cancel`` set before the files are written: nothing is written, exit 11."""
    if not isinstance(name, str):
        raise ConfigInvalidError(f"name must be the migration's name as text, not {type(name).__name__}")
    _checked_models(models)
    report = await asyncio.to_thread(_create, project.settings, name, models, _stop_before_writing(cancel, "create --from-models"))
    if report.files:  # a session's next call reads the folder again: the files written here are pending
        project.rescan()
    return report


def _checked_models(models: object) -> None:
    """``models``: a package's dotted name as text, or None for the snapshot's (a number was an ``AttributeError``)."""
    if models is not None and not isinstance(models, str):
        raise ConfigInvalidError(f"models must be a package's name as text (such as 'myapp.models') or None, not {type(models).__name__}")


def _with_collection(name: str, collection: str) -> str:
    """``NAME_<collection>`` as a migration name: a collection's name may hold what a file name may not (``orders.v2``,
    ``ünï cödé``: refused with exit 19 once the models were read), so only its ASCII letters and digits are kept, within
    the slug's length. The NAME itself is checked as for any ``create`` (exit 19)."""
    base = slugify(name)
    room = MAX_SLUG - len(base) - 1
    suffix = re.sub(r"[^a-z0-9]+", "_", collection.lower()).strip("_")[:room].strip("_") if room > 0 else ""
    return f"{base}_{suffix}" if suffix else base


def _create(settings: Settings, name: str, models: str | None, stop: Callable[[], None] | None = None) -> FromModelsReport:
    from ..errors import ModelsInvalidError

    slugify(name)  # a NAME no file can take is refused first (exit 19), not only once a change is found to write
    package, snapshot, _ = resolve_package(settings, models)
    if snapshot is None or not snapshot.shapes:
        raise ModelsInvalidError(
            f"no models snapshot in {settings.collections_dir}: run 'mongoshift collections generate --models {package}' first "
            "(it records the shapes the next change is compared with)"
        )
    found = plan(package, snapshot.shapes, find_models(package))
    written = [c for c in found.changes if c.changes]
    # each file ends with the shape it records: a run killed before the snapshot is completed by the next (snapshot.heal)
    sources = [
        (name if len(written) == 1 else _with_collection(name, c.collection), render(c, package) + snapshots.marker(c.collection, found.shapes[c.collection]))
        for c in written
    ]
    if stop is not None:
        stop()
    files: list[Path] = []
    try:
        for slug, source in sources:
            files.append(create_migration(settings.migrations_dir, slug, sequential=settings.sequential, source=source))
        snapshot.models = package
        snapshot.shapes.update(found.shapes)
        snapshots.write(settings.collections_dir, snapshot)
    except BaseException:
        # all or nothing: migrations without the snapshot that records them would be written again next time
        for path in files:
            path.unlink(missing_ok=True)
        raise
    return FromModelsReport(found, files)
