"""Writing new files: the project config (``init``) and migration skeletons (``create``)."""

from __future__ import annotations

import os
import re
import string
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import ValidationError

from ..errors import ConfigFileExistsError, ConfigInvalidError, IOFailedError, MigrationFileExistsError
from ..project.connection import check_uri_options
from ..project.loader import SEQUENTIAL_NAME, TIMESTAMP_NAME, discover, slugify
from ..project.redaction import without_secrets
from ..project.settings import Settings, hidden_pyproject
from ..schema.validation import loc_path, message_of

MIGRATION_TEMPLATE = '''"""$title"""

description = "$title"
# use_transaction = True  # run up/down and the changelog record in one transaction


async def up(ctx):
    """Apply the change. ctx.db is the async database; use ctx.session inside a transaction."""
    # await ctx.db.users.update_many({"status": {"$$exists": False}}, {"$$set": {"status": "active"}})


async def down(ctx):
    """Undo up(). Delete this function if the migration cannot be rolled back."""
'''

BACKGROUND_TEMPLATE = '''"""$title: a background migration (up registers it; 'mongoshift background run' runs it)."""

from mongoshift import Background


def migrate(doc, ctx):
    """Return the whole new document; fields you drop are unset, others keep their BSON types."""
    # doc["full_name"] = f"{doc.pop('first', '')} {doc.pop('last', '')}".strip()
    return doc


def revert(doc, ctx):
    """Undo migrate() for one document; delete this (and revert=) for a one-way migration."""
    return doc


background = Background(
    collection="TODO",  # the collection to rewrite
    from_version=0,  # documents without __v are version 0: a collection never versioned starts here
    to_version=1,
    migrate=migrate,
    revert=revert,
    description="$title",
    # batch_size=500, max_parallel=1, max_document_errors=0, filter={"status": "active"},
)
'''

CONFIG_TEMPLATE = '''# mongoshift settings; environment variables (MONGOSHIFT_URI, MONGOSHIFT_DB, ...),
# a .env file next to this one and command-line flags override them. Keep passwords
# out of this file: put the full URI (with credentials) in MONGOSHIFT_URI, or fetch it
# at run time with uri_command = ["program", "arg"] or uri_factory = "package.module:function".
[mongoshift]
$uri_line
$db_line
migrations_dir = $migrations_dir
# lock_ttl_seconds = 60
# strict = false            # refuse to run when an applied file changed on disk
# use_transaction = false   # default for files that do not say
# out_of_order = "warn"     # warn | error | allow
# hooks = "migrations/_hooks.py"
'''


def _toml_string(value: str) -> str:
    """``value`` as a TOML basic string: quotes, backslashes and control characters escaped, so any folder name reads back."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", escaped) + '"'


CREDENTIALS_NOTE = (
    "# The credentials of this URI are not written here: set the full URI in the\n"
    "# environment variable MONGOSHIFT_URI (or in a .env file git ignores), which overrides it.\n"
)


def _uri_line(uri: str | None) -> str:
    """The ``uri`` line; a URI that held credentials loses them and points to where they go."""
    if not uri:
        return '# uri = "mongodb://localhost:27017"'
    kept = without_secrets(uri)
    return (CREDENTIALS_NOTE if kept != uri else "") + f"uri = {_toml_string(kept)}"


def write_config(directory: Path, *, uri: str | None, db: str | None, migrations_dir: str, force: bool) -> Path:
    """Write mongoshift.toml and create the migrations folder.

    The file is meant to be committed, so ``uri`` is written without its user, password
    and secret options; the full URI goes in ``MONGOSHIFT_URI``, which overrides it."""
    target = directory / "mongoshift.toml"
    if target.exists() and not force:
        raise ConfigFileExistsError(f"{target.name} already exists (use --force to overwrite it)")
    hidden = hidden_pyproject(directory)
    if hidden is not None and not force:
        raise ConfigFileExistsError(
            f"{hidden.name} holds the project's settings ([tool.mongoshift]): a {target.name} would be read instead, "
            f"and they would be ignored (use --force to write {target.name} anyway)"
        )
    _check_values(uri, db, migrations_dir)
    text = string.Template(CONFIG_TEMPLATE).substitute(
        uri_line=_uri_line(uri),
        db_line=f"db = {_toml_string(db)}" if db else '# db = "myapp"',
        migrations_dir=_toml_string(Path(migrations_dir).as_posix()),
    )
    # the folder first, then the file in one step: a failure leaves an existing project file as it was
    folder = directory / migrations_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise IOFailedError.from_os(exc, "create the migrations folder", folder) from None
    _replace(target, text)
    return target


#: The flag that gives each value ``init`` writes, for its refusal (as every command names it).
_FLAGS = {"uri": "--uri", "db": "--db", "migrations_dir": "--dir"}


def _check_values(uri: str | None, db: str | None, migrations_dir: str) -> None:
    """The values ``init`` writes, validated as every command validates them (exit 6), before anything is written."""
    try:
        Settings.model_validate({"uri": uri, "db": db, "migrations_dir": migrations_dir})  # text, as the flag gave it: "" is refused, not read as "."
    except ValidationError as exc:
        problems = [f"setting {loc_path(e['loc'])!r} from {_FLAGS.get(loc_path(e['loc']), 'the command line')}: {message_of(e)}" for e in exc.errors()]
        raise ConfigInvalidError("; ".join(problems), problems=problems) from None
    if uri:
        check_uri_options(uri)


def _replace(path: Path, text: str) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it, then renamed over it."""
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        raise IOFailedError.from_os(exc, "write", path) from None


def _write(path: Path, text: str) -> None:
    """Write a new file; a refusal of the system (read-only, no permission, disk full) names the file (exit 44)."""
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise IOFailedError.from_os(exc, "write", path) from None


def next_prefix(directory: Path, *, sequential: bool, now: datetime | None = None) -> str:
    """The new file's timestamp or number; never one a file already has (two would be refused, exit 43)."""
    if not sequential:
        taken = {p.name.split("_", 1)[0] for p in directory.glob("*.py") if TIMESTAMP_NAME.match(p.name)}
        moment = now or datetime.now(UTC)
        while moment.strftime("%Y%m%d%H%M%S") in taken:  # a second create within the same second
            moment += timedelta(seconds=1)
        return moment.strftime("%Y%m%d%H%M%S")
    stamped = sorted(p.name for p in directory.glob("*.py") if TIMESTAMP_NAME.match(p.name))
    if stamped:  # a number would sort before every one of them: first in a fresh database, out of order elsewhere
        raise ConfigInvalidError(
            f"sequential = true, but the migrations folder's files are named by timestamp ({stamped[-1]}, ...): a "
            f"numbered file would sort before them; create it with sequential = false (MONGOSHIFT_SEQUENTIAL) for this folder"
        )
    prefixes = [p.name.split("_", 1)[0] for p in directory.glob("*.py") if SEQUENTIAL_NAME.match(p.name)]
    width = max((len(prefix) for prefix in prefixes), default=4)
    number = max((int(prefix) for prefix in prefixes), default=0) + 1
    if len(str(number)) > width:  # file names sort as text: 10000_x.py would run before 9999_y.py
        last = max(prefixes, key=int)
        raise ConfigInvalidError(
            f"sequential = true, but the next number, {number}, has more digits than the folder's files ({last}_...): "
            f"file names sort as text, so a file {number}_... would sort before them and run first (a timestamped "
            "file too); nothing was written"
        )
    return f"{number:0{width}d}"


def create_migration(
    directory: Path,
    name: str,
    *,
    sequential: bool = False,
    template: Path | None = None,
    now: datetime | None = None,
    background: bool = False,
    source: str | None = None,
) -> Path:
    """Write a new migration skeleton; the name becomes the file's slug.

    ``source``: the file's whole text, written as it is (``create --from-models`` renders its own;
    no placeholder is substituted, so its ``$set`` and ``$unset`` stay)."""
    slug = slugify(name)
    # A missing folder (8), a file where it should be (44), a folder whose order is a guess (two files share a
    # version: 43): refused as every command refuses them, and no new file is written.
    discover(directory)
    path = directory / f"{next_prefix(directory, sequential=sequential, now=now)}_{slug}.py"
    if path.exists():
        raise MigrationFileExistsError(f"{path.name} already exists")
    if source is not None:
        _replace(path, source)  # whole or not at all: a generated file's last line records its shape (models.snapshot)
        return path
    if template is not None:
        if template.exists() and not template.is_file():  # a device (/dev/zero) would be read without end
            raise ConfigInvalidError(f"template {template} is not a regular file (--template or template_path)")
        try:
            source = template.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ConfigInvalidError(f"template {template} not found (--template or template_path)") from None
        except UnicodeDecodeError:
            raise ConfigInvalidError(f"template {template} is not UTF-8 text") from None
        except OSError as exc:
            raise IOFailedError.from_os(exc, "read the template", template) from None
    else:
        source = BACKGROUND_TEMPLATE if background else MIGRATION_TEMPLATE
    title = re.sub(r"_+", " ", slug).strip().capitalize()
    try:
        text = string.Template(source).substitute(title=title, name=path.stem, slug=slug)
    except (KeyError, ValueError) as exc:
        raise ConfigInvalidError(
            f"template {template}: unknown or broken placeholder {exc} (use $title, $name, $slug; $$ for $)"
        ) from None
    _write(path, text)
    return path
