"""``--db`` with a tenant selection flag is refused before anything connects, on every command that takes both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import Project

#: Every command with the tenant flags, with the arguments it needs to get as far as the selection.
COMMANDS = [
    ("up",),
    ("down",),
    ("redo",),
    ("status",),
    ("list",),
    ("dry-run", "up"),
    ("dry-run", "down"),
    ("lock",),
    ("unlock", "--yes"),
    ("audit",),
    ("baseline", "--to", "0001_a", "--yes"),
    ("import", "--from", "migrate-mongo"),
    ("converge", "--yes"),
    ("squash", "--to", "0001_a", "--yes"),
    ("background", "run", "--all"),
    ("background", "status"),
    ("background", "watch"),
    ("background", "dry-run", "0001_a"),
    ("background", "pause", "0001_a"),
    ("background", "resume", "0001_a"),
    ("background", "cancel", "0001_a", "--yes"),
    ("background", "retry", "0001_a", "--yes"),
    ("background", "repin", "0001_a", "--yes"),
    ("background", "throttle", "0001_a", "--batch-size", "10"),
    ("background", "unlock", "0001_a", "--yes"),
    ("background", "verify"),
]

SELECTIONS = [("--tenant", "t1"), ("--tenants", "t*"), ("--all-tenants",)]


@pytest.fixture
def unreachable(tmp_path: Path) -> Project:
    """A tenant project whose server refuses every connection: a command that connected would fail with 5 or 47."""
    project = Project(tmp_path, "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=2000", "app")
    project.config.write_text(
        "[mongoshift]\n"
        f"uri = {json.dumps(project.uri)}\n"
        'db = "app"\nmigrations_dir = "migrations"\n'
        '[mongoshift.tenants]\ndatabases = ["t1", "t2"]\n',
        encoding="utf-8",
    )
    project.add("0001_a.py", "def up(ctx):\n    pass\n\ndef down(ctx):\n    pass\n")
    return project


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_db_with_a_tenant_flag_is_refused_before_connecting(unreachable: Project, cli, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    for selection in SELECTIONS:
        result = cli(unreachable, *command, "--db", "other", *selection, "--json")
        assert result.returncode == 6, (selection, result.stdout, result.stderr)
        error = json.loads(result.stdout)["error"]
        assert error["kind"] == "config_invalid"
        assert "--db" in error["message"] and selection[0] in error["message"], error["message"]


def test_db_before_the_command_is_refused_too_and_the_project_files_db_is_not(unreachable: Project, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(unreachable, "--db", "other", "status", "--all-tenants")
    assert result.returncode == 6
    assert "--db and --all-tenants cannot be combined" in result.stderr
    # the project file's db (and MONGOSHIFT_DB) is a default that the selection replaces: not refused
    plain = cli(unreachable, "status", "--all-tenants", "--json")
    assert plain.returncode == 5, plain.stderr  # it went on and tried the server


def test_the_list_above_holds_every_command_with_the_tenant_flags() -> None:
    import click

    from mongoshift.cli.main import cli as root

    def walk(group: click.Group, path: tuple[str, ...]) -> set[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                found |= walk(command, (*path, name))
            elif any(p.name == "all_tenants" for p in command.params):
                found.add((*path, name))
        return found

    listed = {tuple(word for word in command if not word.startswith("-") and word not in ("0001_a", "migrate-mongo", "10")) for command in COMMANDS}
    assert walk(root, ()) == listed


def test_a_bare_command_in_a_project_of_tenants_points_at_the_tenant_flags(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """A tenant row's note names a plain command ('mongoshift unlock'); typed as is in a project whose databases are
    its tenants, it answered "put db in mongoshift.toml", as if the project had one database."""
    project = Project(tmp_path, "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=2000", "")
    project.config.write_text(
        f'[mongoshift]\nuri = {json.dumps(project.uri)}\nmigrations_dir = "migrations"\n[mongoshift.tenants]\ndatabases = ["t1", "t2"]\n',
        encoding="utf-8",
    )
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    for command in (("unlock", "--yes"), ("status",), ("up",)):
        result = cli(project, *command)
        assert result.returncode == 6, result.stderr
        assert "--tenant NAME, --tenants PATTERN or --all-tenants, or --db for one database" in result.stderr, result.stderr
        assert "put db in mongoshift.toml" not in result.stderr


def test_the_docs_name_every_command_with_the_tenant_flags() -> None:
    """docs/tenants.md and the README list the commands that take the tenant flags; ``background throttle``,
    ``watch`` and ``dry-run`` take them and were missing from one list or both."""
    import re

    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "tenants.md").read_text(encoding="utf-8").split("## Commands", 1)[1]
    sentence = section.split("take the tenant flags", 1)[0]
    readme = (root / "README.md").read_text(encoding="utf-8")
    said = readme[readme.index("One database per customer?") :].split("act on a selection of tenant", 1)[0]
    for command in COMMANDS:
        words = [w for w in command if not w.startswith("-") and w not in ("0001_a", "migrate-mongo", "10")]
        last = words[-1] if words[0] != "dry-run" else "dry-run"
        assert re.search(rf"`{re.escape(last)}[` ]", sentence), (command, "docs/tenants.md")
        assert re.search(rf"`{re.escape(last)}[` ]", said), (command, "README.md")
