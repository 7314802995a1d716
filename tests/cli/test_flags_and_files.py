"""--quiet, --no-lock, dangling symlinks in the migrations folder, and FILE given as a path."""

from __future__ import annotations

import json
import os

import pytest

from .test_cli import QUICK

NO_LOCK_WARNING = "without the migration lock"


@pytest.mark.parametrize("args", [["up"], ["status"], ["list"], ["dry-run", "up"], ["lock"]])
def test_quiet_success_prints_nothing_on_stdout(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli(project, *args, "-q")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""


def test_quiet_keeps_json_and_errors(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    result = cli(project, "up", "-q", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["results"][0]["status"] == "applied"
    failed = cli(project, "down", "0009_nope.py", "-q")
    assert failed.returncode == 8 and "not found" in failed.stderr and failed.stdout == ""


@pytest.mark.parametrize("args", [["up"], ["redo"], ["down"]])
def test_no_lock_warns_once_per_run(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    for i in range(1, 4):
        project.add(f"000{i}_m.py", QUICK)
    if args != ["up"]:
        assert cli(project, "up").returncode == 0
    result = cli(project, *args, "--no-lock")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count(NO_LOCK_WARNING) == 1, result.stderr


def test_dangling_symlink_in_the_migrations_folder_is_refused(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    os.symlink(project.root / "nowhere" / "0002_b.py", project.migrations / "0002_b.py")
    for args in (["up"], ["status"]):
        result = cli(project, *args, "--json")
        assert result.returncode == 8, result.stderr
        assert "0002_b.py" in json.loads(result.stdout)["error"]["message"]
    assert sync_client[project.db]["_mongoshift_migrations"].count_documents({}) == 0


def test_dangling_symlink_with_any_python_name_is_refused(project, cli) -> None:  # type: ignore[no-untyped-def]
    os.symlink(project.root / "gone.py", project.migrations / "helpers.py")
    result = cli(project, "status", "--json")
    assert result.returncode == 8 and "helpers.py" in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize("spelled", ["migrations/0001_a.py", "./migrations/0001_a.py", "migrations/0001_a"])
def test_file_may_be_given_as_a_path_into_the_migrations_folder(project, spelled: str, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    up = cli(project, "up", spelled, "--json")
    assert up.returncode == 0, up.stderr
    assert [r["name"] for r in json.loads(up.stdout)["results"]] == ["0001_a.py"]
    dry = cli(project, "dry-run", "down", spelled, "--json")
    assert [r["name"] for r in json.loads(dry.stdout)["dry_run"]] == ["0001_a.py"]
    down = cli(project, "down", spelled, "--json")
    assert down.returncode == 0 and json.loads(down.stdout)["results"][0]["status"] == "reverted"


def test_up_to_may_be_given_as_a_path(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    project.add("0002_b.py", QUICK)
    up = cli(project, "up", "--to", "migrations/0001_a.py", "--json")
    assert [r["name"] for r in json.loads(up.stdout)["results"]] == ["0001_a.py"]


@pytest.mark.parametrize("spelled", ["elsewhere/0001_a.py", "../0001_a.py", "{absolute}"])
def test_path_outside_the_migrations_folder_is_refused(project, spelled: str, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", QUICK)
    (project.root / "elsewhere").mkdir()
    (project.root / "elsewhere" / "0001_a.py").write_text(QUICK)
    spelled = spelled.format(absolute=project.root / "elsewhere" / "0001_a.py")
    result = cli(project, "up", spelled, "--json")
    assert result.returncode == 19, result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert "outside the migrations folder" in message


def test_create_refuses_a_folder_whose_files_share_a_version(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Every command that reads the folder refuses it (43): create too, which would add a file to a line whose order is a guess."""
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    project.add("00001_b.py", "def up(ctx):\n    pass\n")
    result = cli(project, "create", "next")
    assert result.returncode == 43, result.stderr
    assert sorted(p.name for p in project.migrations.glob("*.py")) == ["00001_b.py", "0001_a.py"]


def test_the_mongoshift_command_imports_the_projects_code_in_a_migration(project) -> None:  # type: ignore[no-untyped-def]
    """``from myapp.rules import LIMIT`` in a migration (or ``hooks = "deploy_hooks"``) worked under ``python -m
    mongoshift`` but not under the ``mongoshift`` command (whose sys.path starts with its own folder): exit 20 (12)."""
    import subprocess
    import sys
    from pathlib import Path

    from ..conftest import cli_env

    (project.root / "myapp").mkdir()
    (project.root / "myapp" / "__init__.py").write_text("")
    (project.root / "myapp" / "rules.py").write_text("LIMIT = 7\n")
    (project.root / "deploy_hooks.py").write_text("def before_all(ctx):\n    ctx.db.marks.insert_one({'hook': 'ran'})\n")
    project.write_config(hooks="deploy_hooks")  # a dotted hooks module: the same import
    project.add("0001_a.py", "from myapp.rules import LIMIT\n\ndef up(ctx):\n    ctx.db.marks.insert_one({'limit': LIMIT})\n")
    env = {k: v for k, v in cli_env().items() if k != "PYTHONPATH"}
    script = Path(sys.executable).parent / "mongoshift"
    result = subprocess.run([str(script), "up", "--json"], cwd=project.root, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["status"] for r in json.loads(result.stdout)["results"]] == ["applied"]


@pytest.mark.parametrize(
    "args",
    [["background", "--json", "status"], ["dry-run", "--json", "up"], ["collections", "--json", "generate", "--check", "--models", "nosuch_models_pkg"]],
)
def test_global_flags_are_taken_between_a_group_and_its_command(project, args: list[str], cli) -> None:  # type: ignore[no-untyped-def]
    """README: global flags are accepted before or after the command, ``mongoshift background --json status`` too."""
    project.add("0001_a.py", QUICK)
    result = cli(project, *args)
    document = json.loads(result.stdout)
    assert "No such option" not in result.stderr
    assert result.returncode == document.get("error", {}).get("code", 0), result.stderr
    assert document.get("error", {}).get("kind") != "config_invalid", document
