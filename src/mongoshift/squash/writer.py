"""Writing a squash: the replaced files into the archive folder, then the squash file, all or nothing.

The squash file is written under a hidden temporary name first and renamed last, so the
folder never holds a squash file whose archive is incomplete, nor an archive without its
squash file: a failure moves the files back and names the path and the system's reason.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import IOFailedError, SquashRefusedError
from ..project.squashes import ABSORBS, ARCHIVE, MANIFEST, archive_of, unnamed_archives
from ..project.wording import plural
from .planner import SquashPlan


def render(plan: SquashPlan) -> str:
    """The squash file: plain data (a description and the manifest), readable in review."""
    first, last = plan.parts[0][0].name, plan.parts[-1][0].name
    lines = [
        f'"""Squash of {len(plan.parts)} migration files, {first} to {last} (written by mongoshift squash).',
        "",
        f"The files it replaced are kept unchanged in {ARCHIVE}/{Path(plan.name).stem}/: a database that has none of them",
        "applied runs them in order through this file; one that has them all applied counts this file as applied",
        "and never runs it; one in between is refused. Do not edit the archived files: their checksums are below.",
        '"""',
        "",
        f"description = {f'squash of {first} to {last}'!r}",
        "",
        f"{MANIFEST} = {{",
        *(f"    {part.name!r}: {checksum!r}," for part, checksum in plan.parts),
        "}",
        "",
    ]
    if plan.absorbs:
        lines[-1:-1] = ["", f"{ABSORBS} = {plan.absorbs!r}  # earlier squash files this one stands for"]
    return "\n".join(lines)


def refuse_unfinished(directory: Path) -> None:
    """Refuse a squash (50) while an archive folder holds migration files that no squash file stands for.

    That is what a squash killed while it moved the files leaves (kill -9, a power cut: no rollback runs), or a squash
    file deleted by hand. Those files are applied migrations out of the line and the folder holds their only copy:
    a squash of the files left would strand them (a new database would never run them), so they go back first.
    """
    for folder, held in unnamed_archives(directory).items():
        shown = ", ".join(held[:5]) + (f", ... ({len(held) - 5} more)" if len(held) > 5 else "")
        raise SquashRefusedError(
            f"{folder} holds {plural(len(held), 'migration file')} ({shown}) and no squash file names it: "
            "a squash that did not finish (its process killed?) or a squash file deleted by hand; move them back into "
            "the migrations folder, remove the empty folder, and run the squash again",
            archive=folder.rstrip("/"), files=held,
        )


def write_squash(plan: SquashPlan, directory: Path) -> Path:
    """Archive the replaced files and write the squash file; returns its path."""
    target = directory / plan.name
    archive = archive_of(directory, plan.name)
    if archive.exists():
        raise SquashRefusedError(f"{ARCHIVE}/{archive.name}/ exists already: remove it (it belongs to no squash file) and try again", to=plan.to)
    temporary = directory / f".{plan.name}.tmp"
    root_existed = archive.parent.is_dir()
    moved: list[tuple[Path, Path]] = []
    try:
        temporary.write_text(render(plan), encoding="utf-8")
        archive.mkdir(parents=True)
        for item in plan.files:
            for part in item.parts:  # an earlier squash's files join this archive, unchanged
                destination = archive / part.name
                os.replace(part.path, destination)
                moved.append((destination, part.path))
            destination = archive / item.name  # an earlier squash file is kept beside them, for the record
            os.replace(item.path, destination)
            moved.append((destination, item.path))
        os.replace(temporary, target)
        for item in plan.files:
            if item.is_squash:
                emptied = archive_of(directory, item.name)
                if not any(emptied.iterdir()):
                    emptied.rmdir()
    except OSError as exc:
        for destination, origin in reversed(moved):
            os.replace(destination, origin)
        temporary.unlink(missing_ok=True)
        for made in (archive, None if root_existed else archive.parent):
            if made is not None and made.is_dir() and not any(made.iterdir()):
                made.rmdir()
        raise IOFailedError.from_os(exc, "write the squash") from None
    return target
