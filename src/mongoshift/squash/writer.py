"""Writing a squash: the replaced files into the archive folder, then the squash file, all or nothing.

The squash file is written under a hidden temporary name first and renamed last, so the
folder never holds a squash file whose archive is incomplete, nor an archive without its
squash file: a failure moves the files back and names the path and the system's reason.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import IOFailedError, SquashRefusedError
from ..project.squashes import ARCHIVE, MANIFEST, archive_of
from .planner import SquashPlan


def render(plan: SquashPlan) -> str:
    """The squash file: plain data (a description and the manifest), readable in review."""
    first, last = plan.files[0].name, plan.files[-1].name
    lines = [
        f'"""Squash of {len(plan.files)} migration files, {first} to {last} (written by mongoshift squash).',
        "",
        f"The files it replaced are kept unchanged in {ARCHIVE}/{Path(plan.name).stem}/: a database that has none of them",
        "applied runs them in order through this file; one that has them all applied counts this file as applied",
        "and never runs it; one in between is refused. Do not edit the archived files: their checksums are below.",
        '"""',
        "",
        f"description = {f'squash of {first} to {last}'!r}",
        "",
        f"{MANIFEST} = {{",
        *(f"    {f.name!r}: {f.checksum!r}," for f in plan.files),
        "}",
        "",
    ]
    return "\n".join(lines)


def write_squash(plan: SquashPlan, directory: Path) -> Path:
    """Archive the replaced files and write the squash file; returns its path."""
    target = directory / plan.name
    archive = archive_of(directory, plan.name)
    if archive.exists():
        raise SquashRefusedError(f"{ARCHIVE}/{archive.name}/ exists already: remove it (it belongs to no squash file) and try again", to=plan.to)
    temporary = directory / f".{plan.name}.tmp"
    moved: list[tuple[Path, Path]] = []
    try:
        temporary.write_text(render(plan), encoding="utf-8")
        archive.mkdir(parents=True)
        for item in plan.files:
            destination = archive / item.name
            os.replace(item.path, destination)
            moved.append((destination, item.path))
        os.replace(temporary, target)
    except OSError as exc:
        for destination, origin in reversed(moved):
            os.replace(destination, origin)
        temporary.unlink(missing_ok=True)
        if archive.is_dir() and not any(archive.iterdir()):
            archive.rmdir()
        raise IOFailedError.from_os(exc, "write the squash") from None
    return target
