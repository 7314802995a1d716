"""Squash files: one migration file standing for the earlier files it replaced.

``mongoshift squash --to NAME`` moves the files up to NAME into the archive folder
``<migrations>/_squashed/<squash stem>/`` (a ``_`` folder, so never read as part of the
line) and writes ``<NAME's version>_squashed.py``, whose ``squashes`` literal names
each replaced file with its checksum at squash time. The manifest is read here with
``ast`` and never imported, so ``status`` and ``list`` stay as cheap as before; the
archived files are ordinary migration files, imported only when a run executes them
(a new database runs them in order through the squash file; ``down`` across the squash
runs their ``down``).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChecksumMismatchError, FileNotFoundMigrationError, InvalidExportError

#: The folder of the migrations folder that keeps the files each squash replaced.
ARCHIVE = "_squashed"
#: The attribute of a squash file: ``{file name: checksum}`` of the files it replaced, in order.
MANIFEST = "squashes"
#: The attribute of a squash file made over an earlier one: the earlier squash files it stands for too.
ABSORBS = "absorbs"


@dataclass(frozen=True)
class Manifest:
    """What a squash file declares: the replaced files in line order, each with its checksum at squash time."""

    parts: tuple[tuple[str, str], ...]
    #: Earlier squash files this one replaced (their files are among ``parts``): their records fold into it.
    absorbs: tuple[str, ...] = ()

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.parts]


def archive_of(directory: Path, squash_name: str) -> Path:
    """The folder holding the files ``squash_name`` replaced."""
    return directory / ARCHIVE / Path(squash_name).stem


def unnamed_archives(directory: Path) -> dict[str, list[str]]:
    """Each archive folder that holds migration files while no squash file names it (``_squashed/NAME/``:
    the files, sorted): what a squash killed while it moved the files leaves, or a squash file deleted by
    hand. Those files are applied migrations out of the line, and the folder holds their only copy."""
    root = directory / ARCHIVE
    if not root.is_dir():
        return {}
    found: dict[str, list[str]] = {}
    for folder in sorted(root.iterdir()):
        if not folder.is_dir() or folder.name.startswith(".") or (directory / f"{folder.name}.py").is_file():
            continue
        held = sorted(p.name for p in folder.glob("*.py"))
        if held:
            found[f"{ARCHIVE}/{folder.name}/"] = held
    return found


def stranded_files(directory: Path) -> dict[str, str]:
    """The files of :func:`unnamed_archives` by name, each with its folder (``_squashed/NAME/``): where an
    applied migration's missing file is, for every command that warns about it."""
    return {name: folder for folder, held in unnamed_archives(directory).items() for name in held}


def read_manifest(path: Path) -> Manifest | None:
    """The ``squashes`` literal of ``path`` when it has an archive folder; None for any other file.

    Read with ``ast`` (never imported): a squash file is plain data, and the line is decided
    without running any project code. A manifest that is not a literal dict of file name to
    checksum, or names a file missing from the archive, is refused with the file's name."""
    archive = archive_of(path.parent, path.name)
    if not archive.is_dir():
        return None
    try:
        tree = ast.parse(path.read_bytes(), filename=path.name)
    except SyntaxError as exc:
        raise InvalidExportError(f"{path.name}: a squash file that does not parse (line {exc.lineno})", file=path.name) from None
    value = _literal(tree, MANIFEST)
    absorbs = _literal(tree, ABSORBS) or []
    if not isinstance(absorbs, list) or not all(isinstance(name, str) for name in absorbs):
        raise InvalidExportError(f"{path.name}: '{ABSORBS}' must be a literal list of squash file names", file=path.name)
    if not isinstance(value, dict) or not value or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise InvalidExportError(
            f"{path.name}: its archive folder {ARCHIVE}/{path.stem}/ makes it a squash file, but it has no "
            f"'{MANIFEST} = {{file name: checksum, ...}}' literal",
            file=path.name,
        )
    parts = tuple((str(k), str(v)) for k, v in value.items())
    missing = [name for name, _ in parts if not (archive / name).is_file()]
    if missing:
        raise FileNotFoundMigrationError(
            f"{path.name} squashes files missing from {ARCHIVE}/{path.stem}/: {', '.join(missing)}; "
            "restore them from version control (a new database runs them through the squash file)",
            file=path.name,
            missing=missing,
        )
    names = [name for name, _ in parts]
    own = int(path.name.split("_", 1)[0])
    if names != sorted(names) or any(int(name.split("_", 1)[0]) > own for name in names):
        raise InvalidExportError(f"{path.name}: {MANIFEST} must list earlier files in name order", file=path.name)
    return Manifest(parts, tuple(absorbs))


def _literal(tree: ast.Module, name: str) -> object:
    """The literal value assigned to ``name`` at module level (None when absent or not a literal)."""
    value: object = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                value = None
    return value


def verify_archive(squash_name: str, archive: Path, manifest: Manifest, checksum_of: dict[str, str]) -> None:
    """Refuse (exit 4) a replaced file whose archived copy changed since the squash: a new database
    would run other code than the databases that applied it. ``checksum_of``: each part's checksum now."""
    changed = [name for name, recorded in manifest.parts if checksum_of.get(name) != recorded]
    if changed:
        raise ChecksumMismatchError(
            f"{squash_name}: files it squashes changed in {archive.parent.name}/{archive.name}/ since the squash: "
            f"{', '.join(changed)} (restore them: databases that applied them ran the recorded version)",
            file=squash_name,
            files=changed,
        )
