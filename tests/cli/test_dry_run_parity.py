"""``dry-run`` refuses exactly what the real command refuses: same exit code, same message."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from .test_cli import QUICK

ONE_WAY = "def up(ctx):\n    ctx.db.marks.insert_one({'one': 'way'})\n"

BACKGROUND = """
from mongoshift import Background

def migrate(doc, ctx):
    doc["full_name"] = doc.pop("first", "")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate)
"""

NEEDS_BACKGROUND = "requires = ['0001_names']\n\ndef up(ctx):\n    ctx.db.marks.insert_one({'contract': True})\n"


def irreversible(project: Any, cli: Any) -> list[str]:
    project.add("0001_oneway.py", ONE_WAY)
    assert cli(project, "up").returncode == 0
    return ["down"]


def irreversible_file(project: Any, cli: Any) -> list[str]:
    irreversible(project, cli)
    return ["down", "0001_oneway.py"]


def out_of_order(project: Any, cli: Any) -> list[str]:
    project.write_config(out_of_order="error")
    project.add("0002_b.py", QUICK)
    assert cli(project, "up").returncode == 0
    project.add("0001_a.py", QUICK)
    return ["up"]


def strict_mismatch(project: Any, cli: Any) -> list[str]:
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.write_text(QUICK + "# edited\n")
    project.add("0002_b.py", QUICK)
    return ["up", "--strict"]


def strict_setting_mismatch(project: Any, cli: Any) -> list[str]:
    args = strict_mismatch(project, cli)
    project.write_config(strict=True)
    return args[:1]


def invalid_export(project: Any, cli: Any) -> list[str]:
    project.add("0001_a.py", "def up():\n    pass\n")
    return ["up"]


def missing_named_file(project: Any, cli: Any) -> list[str]:
    project.add("0001_a.py", QUICK)
    return ["up", "0009_missing.py"]


def missing_applied_file(project: Any, cli: Any) -> list[str]:
    path = project.add("0001_a.py", QUICK)
    assert cli(project, "up").returncode == 0
    path.unlink()
    return ["down"]


def requirements_pending(project: Any, cli: Any) -> list[str]:
    project.add("0001_names.py", BACKGROUND)
    assert cli(project, "up").returncode == 0  # registered, not run
    project.add("0002_contract.py", NEEDS_BACKGROUND)
    return ["up"]


def broken_hooks(project: Any, cli: Any) -> list[str]:
    hooks = project.root / "hooks_file.py"
    hooks.write_text("raise RuntimeError('broken hooks')\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", QUICK)
    return ["up"]


def down_not_applied(project: Any, cli: Any) -> list[str]:
    project.add("0001_a.py", QUICK)
    return ["down", "0001_a.py"]


REFUSALS: dict[str, tuple[Callable[[Any, Any], list[str]], int]] = {
    "down-without-down": (irreversible, 13),
    "down-file-without-down": (irreversible_file, 13),
    "out-of-order-error": (out_of_order, 23),
    "strict-flag-checksum-mismatch": (strict_mismatch, 4),
    "strict-setting-checksum-mismatch": (strict_setting_mismatch, 4),
    "invalid-export": (invalid_export, 20),
    "missing-named-file": (missing_named_file, 8),
    "missing-applied-file": (missing_applied_file, 8),
    "requirements-pending": (requirements_pending, 24),
    "hooks-do-not-import": (broken_hooks, 12),
    "down-not-applied": (down_not_applied, 9),
}


def snapshot(sync_client: Any, project: Any) -> list[dict[str, Any]]:
    return list(sync_client[project.db]["_mongoshift_migrations"].find({}, {"_id": 0, "name": 1, "status": 1}).sort("name", 1))


@pytest.mark.parametrize(("setup", "code"), list(REFUSALS.values()), ids=list(REFUSALS))
def test_dry_run_refuses_what_the_real_command_refuses(project, sync_client, setup, code: int, cli) -> None:  # type: ignore[no-untyped-def]
    args = setup(project, cli)
    dry = cli(project, "dry-run", *args, "--json")
    before = snapshot(sync_client, project)
    real = cli(project, *args, "--json")
    assert real.returncode == code, real.stderr
    assert dry.returncode == real.returncode, dry.stdout + dry.stderr
    assert json.loads(dry.stdout)["error"]["message"] == json.loads(real.stdout)["error"]["message"]
    assert snapshot(sync_client, project) == before  # the real command refused before writing


def test_dry_run_stops_where_the_real_command_stops(project, cli) -> None:  # type: ignore[no-untyped-def]
    """on_requires_pending = "stop": both end cleanly before the migration that waits."""
    project.write_config(on_requires_pending="stop")
    project.add("0001_names.py", BACKGROUND)
    assert cli(project, "up").returncode == 0
    project.add("0002_contract.py", NEEDS_BACKGROUND)
    project.add("0003_after.py", QUICK)
    dry = cli(project, "dry-run", "up", "--json")
    assert dry.returncode == 0, dry.stderr
    document = json.loads(dry.stdout)
    assert document["dry_run"] == []
    assert document["waiting"] == [{"migration": "0002_contract.py", "waits_for": ["0001_names.py"]}]
    real = json.loads(cli(project, "up", "--json").stdout)
    assert real["results"] == [] and real["waiting"] == document["waiting"]
