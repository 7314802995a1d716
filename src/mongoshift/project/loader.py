"""Finding migration files on disk and importing them.

A file is a migration when its name is ``YYYYMMDDHHMMSS_slug.py`` (or
``0001_slug.py`` in a sequential project). Files starting with ``_`` or ``.``
are private helpers and ignored; any other ``.py`` file in the folder is an
error, because a misnamed migration that silently never runs is worse than a
refusal. Importing happens only for the files a command is about to run, and
all of them are imported before anything is written.
"""

from __future__ import annotations

import bisect
import difflib
import hashlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..errors import (
    ConfigInvalidError,
    DuplicateVersionError,
    FileNotFoundMigrationError,
    InvalidExportError,
    InvalidNameError,
    IOFailedError,
    IrreversibleMigrationError,
)
from ..schema.validation import list_errors
from .redaction import describe_error
from .squashes import ARCHIVE, MANIFEST, Manifest, archive_of, read_manifest, verify_archive
from .user_code import own_failure, run_source, source_module

if TYPE_CHECKING:
    from ..schema.background import Background

TIMESTAMP_NAME = re.compile(r"^\d{14}_[a-z0-9][a-z0-9_]*\.py$")
SEQUENTIAL_NAME = re.compile(r"^\d{4,}_[a-z0-9][a-z0-9_]*\.py$")
#: The longest slug a migration file name takes.
MAX_SLUG = 81
SLUG = re.compile(rf"^[a-z0-9][a-z0-9_]{{0,{MAX_SLUG - 1}}}$")


def checksum(path: Path) -> str:
    """SHA-256 of the file, BOM- and CRLF-normalised so editors and git settings don't matter."""
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    data = data.replace(b"\r\n", b"\n")
    return hashlib.sha256(data).hexdigest()


def is_migration_name(name: str) -> bool:
    return bool(TIMESTAMP_NAME.match(name) or SEQUENTIAL_NAME.match(name))


def slugify(name: str) -> str:
    """A migration name as typed by a user → the slug used in the file name."""
    slug = re.sub(r"[\s\-]+", "_", name.strip().lower())
    if not SLUG.match(slug):
        raise InvalidNameError(
            f"invalid migration name {name!r}: use ASCII letters and digits, spaces, '-' or '_' (max 81 characters)"
        )
    return slug


@dataclass
class MigrationFile:
    """One migration file on disk; ``module`` is filled by :func:`load`."""

    name: str
    path: Path
    module: ModuleType | None = field(default=None, repr=False)
    #: The file's background spec as the engine runs it, once aligned with the collection's
    #: declaration (see :mod:`mongoshift.background.plan.declared`); None means as written.
    aligned: Background | None = field(default=None, repr=False)
    #: A squash file's replaced files, in line order (archived copies; see :mod:`~mongoshift.project.squashes`).
    parts: list[MigrationFile] = field(default_factory=list, repr=False)
    #: The checksum each replaced file had when it was squashed (a squash file only).
    part_checksums: dict[str, str] = field(default_factory=dict, repr=False)
    #: The squash file that replaced this one (an archived file only).
    squashed_into: str | None = None
    #: Earlier squash files a squash file replaced: their records fold into it (a squash file only).
    absorbs: list[str] = field(default_factory=list, repr=False)

    @property
    def is_squash(self) -> bool:
        return bool(self.parts)

    @property
    def checksum(self) -> str:
        return checksum(self.path)

    @property
    def up(self) -> Callable[..., Any]:
        return self._export("up")

    @property
    def background(self) -> Background | None:
        if self.aligned is not None:
            return self.aligned
        if self.is_squash:
            return None
        value = getattr(self._loaded(), "background", None)
        if value is None:
            return None
        from ..schema.background import Background  # start-up time: status and list never load a file

        return value if isinstance(value, Background) else None

    @property
    def requires(self) -> list[str]:
        value = getattr(self._loaded(), "requires", None) or []
        return [name if name.endswith(".py") else name + ".py" for name in value]

    @property
    def kind(self) -> str:
        if self.is_squash:
            return "squash"
        return "background" if self.background is not None else "migration"

    @property
    def down(self) -> Callable[..., Any] | None:
        module = self._loaded()
        fn = getattr(module, "down", None)
        return fn if callable(fn) else None

    @property
    def irreversible(self) -> bool:
        """A plain migration without ``down(ctx)``: nothing can roll it back, in any database (a background
        migration's revert depends on what it rewrote there, a squash file's on its parts)."""
        return self.background is None and not self.is_squash and self.down is None

    @property
    def description(self) -> str | None:
        value = getattr(self._loaded(), "description", None)
        if value is None and self.background is not None:
            value = self.background.description
        return value if isinstance(value, str) else None

    @property
    def use_transaction(self) -> bool | None:
        value = getattr(self._loaded(), "use_transaction", None)
        return value if isinstance(value, bool) else None

    def timeout(self, default: float | None) -> float | None:
        """Seconds the body may run: the file's ``timeout_seconds`` (None: no limit) or else ``default``."""
        module = self._loaded()
        if not hasattr(module, "timeout_seconds"):
            return default
        value = module.timeout_seconds
        return None if value is None else float(value)

    def _loaded(self) -> ModuleType:
        if self.module is None:
            raise RuntimeError(f"{self.name} was not loaded")
        return self.module

    def _export(self, attr: str) -> Callable[..., Any]:
        fn: Callable[..., Any] = getattr(self._loaded(), attr)
        return fn


def discover(directory: Path) -> list[MigrationFile]:
    """The migration files of ``directory``, in name order (the order they apply in)."""
    if directory.exists() and not directory.is_dir():  # a file where the folder should be: 44, as for every path
        raise IOFailedError(f"cannot read the migrations folder {directory}: it is a file, not a folder", path=str(directory), reason="not a folder")
    if not directory.is_dir():
        raise FileNotFoundMigrationError(
            f"migrations folder not found: {directory} (run 'mongoshift init' or pass --dir)"
        )
    try:
        entries = sorted(directory.iterdir())
    except OSError as exc:
        raise IOFailedError.from_os(exc, "list the migrations folder", directory) from None
    files: list[MigrationFile] = []
    for path in entries:
        if path.name.startswith(("_", ".")):
            continue
        if path.suffix.lower() == ".py" and path.suffix != ".py" and path.is_file():
            # 0003_x.PY: meant as a migration, never run (nor listed) on a file system that tells case apart
            raise InvalidNameError(
                f"{path.name} in {directory} ends in {path.suffix!r}, not '.py': it would never run; "
                f"rename it to {path.stem}.py, or prefix it with '_' if it is not a migration"
            )
        if path.suffix != ".py":
            continue
        if path.is_symlink() and not path.exists():
            raise FileNotFoundMigrationError(
                f"{path.name} in {directory} is a symbolic link to a file that does not exist; "
                "restore its target or remove the link",
                file=path.name,
            )
        if not path.is_file():
            # a folder (or a pipe) named like a module: meant as a migration, it would never run, nor be listed
            kind = "a folder" if path.is_dir() else "not a regular file"
            raise InvalidNameError(
                f"{path.name} in {directory} is {kind}: it would never run; a migration is one .py file "
                "(move it out, or prefix it with '_')"
            )
        if not is_migration_name(path.name):
            raise InvalidNameError(
                f"{path.name} in {directory} is not a migration name (YYYYMMDDHHMMSS_slug.py or "
                "0001_slug.py); rename it, or prefix it with '_' if it is a helper module"
            )
        files.append(MigrationFile(name=path.name, path=path))
    _refuse_duplicate_versions(files, directory)
    _refuse_text_order(files, directory)
    if (directory / ARCHIVE).is_dir():
        for item in files:
            _attach_parts(item)
        _refuse_archived_versions(files, directory)
    return files


def _refuse_archived_versions(files: list[MigrationFile], directory: Path) -> None:
    """The version rule holds across a squash: a file of the line that shares a version with a file a squash
    archived (a branch that created it before the squash was merged) would apply in an order nobody chose.
    So does one whose version falls between a squash's first and last files: a new database would run it before
    all of them (the squash file sorts by its last), a database that ran them, after: two orders."""
    archived = {_version(part.name): (item.name, part.name) for item in files for part in item.parts}
    spans = [(_version(item.parts[0].name), _version(item.name), item) for item in files if item.parts]
    clashes: list[tuple[str, str]] = []
    inside: list[tuple[str, str]] = []
    for item in files:
        version = _version(item.name)
        hit = archived.get(version)
        if hit is not None and hit[0] != item.name:  # a squash file takes the version of its last file
            clashes.append((item.name, f"{ARCHIVE}/{Path(hit[0]).stem}/{hit[1]}"))
            continue
        for first, last, squash in spans:
            if first < version < last and not item.parts:
                inside.append((item.name, f"{squash.name} ({squash.parts[0].name} to {squash.parts[-1].name})"))
    if clashes:
        listed = "; ".join(f"{name} and {part}" for name, part in clashes)
        raise DuplicateVersionError(
            f"migration files in {directory} share a version with files a squash replaced: {listed}; "
            "give the file of the line a later timestamp or number (rename it, or create it again)",
            files=[name for name, _ in clashes],
        )
    if inside:
        listed = "; ".join(f"{name} among the files of {squash}" for name, squash in inside)
        raise DuplicateVersionError(
            f"migration files in {directory} sort among the files a squash replaced: {listed}; a new database would "
            "run them before those files, the others after; give each a timestamp or number after the squash's "
            "(rename it, or create it again)",
            files=[name for name, _ in inside],
        )


def _attach_parts(item: MigrationFile) -> None:
    """A squash file gets its replaced files (archived copies), read from its manifest without importing anything."""
    manifest = read_manifest(item.path)
    if manifest is None:
        return
    archive = archive_of(item.path.parent, item.name)
    item.parts = [MigrationFile(name=name, path=archive / name, squashed_into=item.name) for name in manifest.names]
    item.part_checksums = dict(manifest.parts)
    item.absorbs = list(manifest.absorbs)


def unsquashed(files: list[MigrationFile]) -> list[MigrationFile]:
    """The line as the files that run: each squash file replaced by the files it archived, in order.
    What adopts another history (``import``, ``baseline``) records those, as the databases that ran them did."""
    return [part for item in files for part in (item.parts or [item])]


def squashed_names(files: list[MigrationFile]) -> dict[str, str]:
    """Every file (and earlier squash file) a squash file of ``files`` replaced, with the squash file's name."""
    return {name: item.name for item in files for name in [*(part.name for part in item.parts), *item.absorbs]}


def _version(name: str) -> int:
    """The number a file name starts with: its timestamp, or its sequence number (``0001`` and ``00001`` are one)."""
    return int(name.split("_", 1)[0])


def _refuse_duplicate_versions(files: list[MigrationFile], directory: Path) -> None:
    """Two files with one timestamp (or sequence number) apply in an order decided by their slugs,
    which nobody chose (two branches that each created a file in the same second, say): refuse
    before anything runs, naming every file of every clash, so one look fixes them all."""
    by_version: dict[int, list[str]] = {}
    for item in files:
        by_version.setdefault(_version(item.name), []).append(item.name)
    clashes = [names for names in by_version.values() if len(names) > 1]
    if clashes:
        listed = "; ".join(" and ".join(names) for names in clashes)
        raise DuplicateVersionError(
            f"migration files in {directory} share a version, so their order would be a guess: {listed}; "
            "give one of each a later timestamp or number (rename it, or create it again)",
            files=[name for names in clashes for name in names],
        )


def _refuse_text_order(files: list[MigrationFile], directory: Path) -> None:
    """Files apply in name order, and names sort as text: ``10000_y.py`` sorts before ``9999_x.py``, so the higher
    number would run first, an order nobody chose (a number past the folder's width, named by hand; ``create``
    never writes one). Refused before anything runs, naming each such pair."""
    swapped: list[tuple[str, str]] = []
    highest: MigrationFile | None = None
    for item in files:  # in name order
        if highest is not None and _version(item.name) < _version(highest.name):
            swapped.append((highest.name, item.name))
        if highest is None or _version(item.name) > _version(highest.name):
            highest = item
    if swapped:
        listed = "; ".join(f"{first} sorts before {later}" for first, later in swapped)
        raise DuplicateVersionError(
            f"migration files in {directory} run in name order, and names sort as text: {listed}, although its number "
            "is higher, so it would run first; give the numbers one width (rename the new file, or create it again)",
            files=sorted({name for pair in swapped for name in pair}),
        )


def resolve_name(name: str, directory: Path) -> str:
    """A FILE argument as the bare name :func:`find` takes: ``migrations/0001_a.py`` (as a shell
    completes it) names ``0001_a.py``, and so does a path into the folder's archive of squashed files
    (then :func:`find` names the squash file that stands for it); a path to anywhere else is refused."""
    if not isinstance(name, str):
        raise ConfigInvalidError(f"a migration name is text, not {type(name).__name__}")
    if not name.strip():  # `up "$FILE"` with the variable unset must not mean every pending file
        raise InvalidNameError("a migration name cannot be empty (an unset variable?): name a migration file")
    if "/" not in name and "\\" not in name and os.sep not in name:
        return name
    given = Path(name)
    parent = Path(os.path.abspath(given)).parent
    try:
        folder = directory.resolve()
        where = parent.resolve()
        inside = where == folder or where.is_relative_to(folder / ARCHIVE)
        itself = Path(os.path.abspath(given)).resolve() == folder
    except OSError:
        inside = itself = False
    if itself:  # `migrations/` is not outside the folder: it is the folder
        raise InvalidNameError(f"{name!r} is the migrations folder itself: name a file in it, or leave FILE out")
    if not inside:
        raise InvalidNameError(
            f"{name!r} is outside the migrations folder ({directory}); name a file in it, "
            "or point --dir at the folder it is in"
        )
    return given.name


def find(files: list[MigrationFile], name: str) -> MigrationFile:
    """A file by its name, with or without ``.py``."""
    wanted = name if name.endswith(".py") else name + ".py"
    if "/" in wanted or "\\" in wanted or wanted.startswith("."):
        raise InvalidNameError(f"{name!r} is not a bare migration file name")
    for item in files:
        if item.name == wanted:
            return item
    into = squashed_names(files).get(wanted)
    if into is not None:
        raise FileNotFoundMigrationError(
            f"{wanted} was squashed into {into}: name {into} (it stands for every file it replaced)", file=wanted, squashed_into=into
        )
    raise not_found(files, name, wanted)


def not_found(files: list[MigrationFile], name: str, wanted: str, *, flag: str = "") -> FileNotFoundMigrationError:
    """Exit 8 for a name no file has (``name`` as given, ``wanted`` the file name looked for; ``flag``, such as
    ``--to ``, says which argument): what was looked for, why an extension did not count, and the migration
    files whose names are nearest (only those: the folder may hold other files, a ``.env``)."""
    names = sorted(item.name for item in files)
    suffix = Path(name).suffix
    stem = name[: -len(suffix)] if suffix and suffix != ".py" else wanted.removesuffix(".py")
    words = [f"{flag}migration file not found: {wanted} (looked for it in the migrations folder"]
    if suffix and suffix != ".py":
        if suffix.lower() == ".py":
            words.append(f"; file names are case-sensitive: the extension is '.py', not {suffix!r}")
        else:
            words.append(f"; a migration file ends in '.py': {suffix!r} makes {wanted} a name no migration has")
    words.append(")")
    near = [n for n in names if n.removesuffix(".py").lower() == stem.lower()]
    near = near or difflib.get_close_matches(stem + ".py", names, n=3, cutoff=0.85)
    if near:
        words.append(f"; did you mean {' or '.join(near[:3])}?")
        shown = near[:3]
    elif names:
        at = bisect.bisect_left(names, wanted)
        shown = names[max(0, at - 1) : at + 1]
        words.append(f"; the files next to where it would sort: {', '.join(shown)} ({len(names)} in the folder)")
    else:
        shown = []
        words.append("; the folder holds no migration file")
    return FileNotFoundMigrationError("".join(words), file=wanted, nearby=shown)


def load(item: MigrationFile) -> MigrationFile:
    """Import the file and check its exports; every failure names the file."""
    if item.module is not None:
        return item
    module_name = f"mongoshift_migrations.{item.path.stem}"
    try:
        module = source_module(module_name, item.path)
    except ImportError:
        problem = "cannot be imported as a Python module"
        raise InvalidExportError(f"{item.name}: {problem}", file=item.name, problems=[problem]) from None
    try:
        run_source(module, item.path)
    except ValidationError as exc:
        # The module stopped at Background(...): what it defined before (requires) is checked too.
        _refuse(item, list_errors(exc, prefix="background", unknown="unknown setting") + _requires_problems(item, module))
    except BaseException as exc:  # a file may raise anything while importing, even SystemExit
        if not own_failure(exc):
            raise
        where = _where(exc, item.path)
        problem = f"failed to import{where}: {_what(exc)}"
        raise InvalidExportError(f"{item.name}: {problem}", file=item.name, problems=[problem]) from None
    finally:
        sys.modules.pop(module_name, None)
    if item.is_squash:
        _load_squash(item, module)
        return item
    if hasattr(module, MANIFEST):
        raise FileNotFoundMigrationError(
            f"{item.name} is a squash file, but its archive folder {ARCHIVE}/{item.path.stem}/ is missing: "
            "restore it from version control (it holds the files the squash file runs)",
            file=item.name,
        )
    if hasattr(module, "background"):
        _refuse(item, _background_problems(module) + _requires_problems(item, module))
        item.module = module
        return item
    # every problem of the file at once (exit-codes.md, 20), so that one edit fixes them all
    problems: list[str] = []
    up = getattr(module, "up", None)
    if not callable(up):
        problems.append("must define a function up(ctx)")
    down = getattr(module, "down", None)
    if down is not None and not callable(down):
        problems.append("down must be a function down(ctx)")
    for fn_name, fn in (("up", up), ("down", down)):
        if fn is not None and callable(fn) and not _takes_one_argument(fn):
            problems.append(f"{fn_name} must take one argument (ctx)")
    problems += _requires_problems(item, module) + _timeout_problems(module)
    for attr, kind in (("description", str), ("use_transaction", bool)):
        if hasattr(module, attr) and not isinstance(getattr(module, attr), kind):
            problems.append(f"{attr} must be a {kind.__name__}")
    _refuse(item, problems)
    item.module = module
    return item


def _load_squash(item: MigrationFile, module: ModuleType) -> None:
    """A squash file has no body of its own: its replaced files, unchanged since the squash, are its body."""
    extra = [name for name in ("up", "down", "background", "requires", "use_transaction", "timeout_seconds") if hasattr(module, name)]
    if extra:
        _refuse(item, [f"a squash file declares no {', '.join(extra)}: its replaced files are its body"])
    archive = archive_of(item.path.parent, item.name)
    manifest_now = {part.name: part.checksum for part in item.parts}
    verify_archive(item.name, archive, Manifest(tuple(item.part_checksums.items())), manifest_now)
    item.module = module


def _refuse(item: MigrationFile, problems: list[str]) -> None:
    """One error for every problem of the file, so that one edit fixes them all."""
    if len(problems) == 1:
        raise InvalidExportError(f"{item.name}: {problems[0]}", file=item.name, problems=problems) from None
    if problems:
        raise InvalidExportError(f"{item.name}: {len(problems)} problems: {'; '.join(problems)}", file=item.name, problems=problems) from None


def _requires_problems(item: MigrationFile, module: ModuleType) -> list[str]:
    value = getattr(module, "requires", None)
    if value is None:
        return []
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        return ["requires must be a list of earlier migration file names"]
    problems: list[str] = []
    seen: set[str] = set()
    for name in value:
        wanted = name if name.endswith(".py") else name + ".py"
        if wanted in seen:
            problems.append(f"requires names {name!r} twice")
        elif not is_migration_name(wanted) or wanted >= item.name:
            problems.append(f"requires {name!r}: a requirement must be an earlier migration file")
        seen.add(wanted)
    return problems


#: The largest per-file timeout: a day; anything longer is a typo, not a migration.
MAX_TIMEOUT_SECONDS = 86_400


def _timeout_problems(module: ModuleType) -> list[str]:
    """``timeout_seconds``: None (no limit for this file) or seconds, more than 0 and at most a day."""
    if not hasattr(module, "timeout_seconds"):
        return []
    value = module.timeout_seconds
    if value is None:
        return []
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_TIMEOUT_SECONDS:
        shown = type(value).__name__ if not isinstance(value, (int, float)) else repr(value)
        return [f"timeout_seconds must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS:,} (or None for no limit), not {shown}"]
    return []


def _background_problems(module: ModuleType) -> list[str]:
    from ..schema.background import Background  # start-up time: see MigrationFile.background

    spec = module.background
    problems: list[str] = []
    if hasattr(module, "timeout_seconds"):
        problems.append("timeout_seconds bounds an up/down body; a background migration runs in slices and has none")
    if not isinstance(spec, Background):
        problems.append(f"background must be a mongoshift.Background(...), not {type(spec).__name__}")
    both = [name for name in ("up", "down") if hasattr(module, name)]
    if both:
        problems.append(f"it declares background and also {', '.join(both)}: a background migration has no up or down; split it into two files")
    return problems


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    try:
        inspect.signature(fn).bind(object())
    except TypeError:
        return False
    except ValueError:  # builtins without a signature: let the call decide
        return True
    return True


def _what(exc: BaseException) -> str:
    """The import's error, without a syntax error's own "(file, line N)": the message names both already."""
    if isinstance(exc, SyntaxError) and exc.msg:
        return describe_error(SyntaxError(exc.msg))
    return describe_error(exc)


def _where(exc: BaseException, path: Path) -> str:
    if isinstance(exc, SyntaxError) and exc.lineno:
        return f" (line {exc.lineno})"
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if Path(frame.filename) == path:
            return f" (line {frame.lineno})"
    return ""


def refuse_irreversible(files: list[MigrationFile], target: str) -> None:
    """Refuse a rollback of ``target`` when its file has no ``down(ctx)`` (exit 13), before anything is written:
    across tenants once, up front, not in every tenant whose line has it applied."""
    name = target if target.endswith(".py") else target + ".py"
    for item in files:
        if item.name == name and load(item).irreversible:
            raise IrreversibleMigrationError(f"{name} has no down(ctx): it cannot be rolled back", file=name)


def load_all(items: Iterable[MigrationFile]) -> None:
    """Import every one of ``items``, going on past a broken one: a run refused for a broken file (exit 20)
    names every broken file it would run, not only the first, so that one look fixes them all. One broken
    file keeps its own error; several make one, with each file's problems in ``details.problems``."""
    broken: list[InvalidExportError] = []
    seen: set[str] = set()
    for item in items:
        if item.name in seen:  # redo runs one file twice, down then up: named once
            continue
        seen.add(item.name)
        try:
            load(item)
        except InvalidExportError as exc:
            broken.append(exc)
    if len(broken) == 1:
        raise broken[0]
    if broken:
        names = [str(exc.details.get("file")) for exc in broken]
        problems = [
            f"{exc.details.get('file')}: {problem}" for exc in broken for problem in exc.details.get("problems") or [exc.message]
        ]
        raise InvalidExportError(
            f"{len(broken)} migration files are broken: {'; '.join(exc.message for exc in broken)}",
            file=names[0],
            files=names,
            problems=problems,
        )


def import_first(files: list[MigrationFile], *, target: str | None = None, to: str | None = None, applied: Iterable[str] = ()) -> None:
    """Import every file an ``up`` may run (``target`` alone, or those up to ``to``; none in ``applied``)
    before the run writes anything: a file that does not import fails the command (exit 20, naming every
    such file) before the lock or the changelog exist, and across tenants once, not in every tenant."""
    done = set(applied)
    only = None if target is None else (target if target.endswith(".py") else target + ".py")
    last = None if to is None else (to if to.endswith(".py") else to + ".py")
    load_all(
        item for item in files
        if not (item.name in done or (only is not None and item.name != only) or (last is not None and item.name > last))
    )
