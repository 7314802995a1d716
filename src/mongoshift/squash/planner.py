"""Whether the files up to NAME can be squashed, judged against one database; every refusal says why.

The files of the range must all be applied in the database the command looks at (a squash
records what ran, checksums included), none may be a background migration (its work lives
in the engine's state and runs outside ``up``) or the target of a ``requires`` (that name is
a contract other files point at, and it would no longer be a file of the line). An earlier
squash file at the start of the range is replaced with its files: the new squash file runs
them all and stands for the earlier one's records too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import SquashRefusedError
from ..project.changelog import ChangelogRecord
from ..project.loader import MigrationFile, find, load


@dataclass(frozen=True)
class SquashPlan:
    """What a squash up to ``to`` replaces, and the file it writes."""

    to: str
    name: str
    #: The files of the line it replaces (an earlier squash file among them, when there is one).
    files: tuple[MigrationFile, ...]

    @property
    def replaced(self) -> list[str]:
        return [f.name for f in self.files]

    @property
    def parts(self) -> list[tuple[MigrationFile, str]]:
        """Every file the squash file will run on a new database, with the checksum of what ran: an earlier
        squash file's own files (with the checksums it recorded), then the others."""
        return [
            (part, item.part_checksums[part.name]) if item.is_squash else (part, part.checksum)
            for item in self.files
            for part in (item.parts or [item])
        ]

    @property
    def absorbs(self) -> list[str]:
        """The earlier squash files it replaces, with those they replaced in turn."""
        return [name for item in self.files if item.is_squash for name in (*item.absorbs, item.name)]


def squash_name(to: str) -> str:
    """The squash file takes the version of the last file it replaces, so it sorts where they did."""
    return f"{to.split('_', 1)[0]}_squashed.py"


def plan_squash(files: list[MigrationFile], records: dict[str, ChangelogRecord], to: str) -> SquashPlan:
    """The squash up to ``to`` (inclusive) as one database allows it, or :class:`~mongoshift.errors.SquashRefusedError`
    naming every reason (the range's own and the database's at once, so one look fixes them all)."""
    return plan_range(files, to, records=records)


def plan_range(files: list[MigrationFile], to: str, *, records: dict[str, ChangelogRecord] | None = None) -> SquashPlan:
    """The squash up to ``to`` judged on the files (and, given ``records``, on one database's changelog)."""
    limit = find(files, to).name
    chosen = [f for f in files if f.name <= limit]
    if len(chosen) < 2:
        if chosen and chosen[0].is_squash:  # "the first file of the line" said nothing of why: it is a squash already
            raise SquashRefusedError(
                f"nothing to squash: {limit} is a squash file already, the first of the line; squash up to a later file to take it in",
                to=limit,
            )
        raise SquashRefusedError(f"nothing to squash: {limit} is the first file of the line (a squash replaces two files or more)", to=limit)
    problems = _database_problems(chosen, records, limit) if records is not None else []
    for item in files:
        load(item)
    background = [f.name for f in chosen if f.background is not None]
    if background:
        problems.append(
            f"background migrations: {', '.join(background)} (their work runs outside 'up' and lives in the engine's state; "
            "squash up to a file before the first of them)"
        )
    in_range = {part.name for f in chosen for part in (f.parts or [f])}
    required = sorted({name for f in files for name in f.requires if name in in_range})
    if required:
        problems.append(
            f"named by requires: {', '.join(required)} (other files point at that name; squash up to a file before it, "
            "or drop the requires once it is done everywhere)"
        )
    if problems:
        raise SquashRefusedError(f"cannot squash up to {limit}: " + "; ".join(problems), to=limit, problems=problems)
    return SquashPlan(limit, squash_name(limit), tuple(chosen))


def _database_problems(chosen: list[MigrationFile], records: dict[str, ChangelogRecord], limit: str) -> list[str]:
    problems: list[str] = []
    not_applied = [f for f in chosen if not _applied(f, records)]
    if not_applied:
        # a failed file is not one to "apply up to": it needs a fix first, so the list says which failed
        failed = [f.name for f in not_applied if (r := records.get(f.name)) is not None and r.status == "failed"]
        listed = ", ".join(f"{f.name} (failed)" if f.name in failed else f.name for f in not_applied)
        fix = f"fix {', '.join(failed)} and " if failed else ""
        problems.append(f"not applied in this database: {listed} ({fix}apply up to {limit} first: a squash records what ran)")
    changed = [name for f in chosen for name in _changed(f, records)]
    if changed:
        problems.append(f"changed on disk since they were applied: {', '.join(changed)} (restore them: the squash keeps the files that ran)")
    return problems


def _applied(item: MigrationFile, records: dict[str, ChangelogRecord]) -> bool:
    """An earlier squash file is applied where it ran or where every file it replaced is."""
    if _is_applied(records.get(item.name)):
        return True
    return item.is_squash and all(_is_applied(records.get(part.name)) for part in item.parts)


def _is_applied(record: ChangelogRecord | None) -> bool:
    return record is not None and record.status == "applied"


def _changed(item: MigrationFile, records: dict[str, ChangelogRecord]) -> list[str]:
    """Files whose recorded checksum differs from what the squash will keep (an earlier squash's: what it recorded)."""
    expected = item.part_checksums if item.is_squash else {item.name: item.checksum}
    return [name for name, checksum in expected.items() if (r := records.get(name)) is not None and r.checksum and r.checksum != checksum]
