"""A ``[tool.mongoshift]`` section beside a mongoshift.toml is never read (mongoshift.toml comes first):
``init`` does not hide it without ``--force``, and every command warns about it rather than drop its settings silently."""

from __future__ import annotations

import json
from pathlib import Path

from ..conftest import Cli

PYPROJECT = '[project]\nname = "app"\n\n[tool.mongoshift]\ndb = "shop"\nstrict = true\n'
HIDDEN = "pyproject.toml has a [tool.mongoshift] section that is not read"


def test_init_refuses_to_hide_the_settings_of_pyproject(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    code, out, _ = cli(tmp_path, "init", "--db", "shop", "--json")
    error = json.loads(out)["error"]
    assert code == 16 and error["kind"] == "config_file_exists"
    assert "pyproject.toml holds the project's settings ([tool.mongoshift])" in error["message"] and "--force" in error["message"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml"]  # nothing written
    code, _, _ = cli(tmp_path, "init", "--db", "shop", "--force")
    assert code == 0 and (tmp_path / "mongoshift.toml").is_file()


def test_init_beside_a_pyproject_without_the_section_writes_as_usual(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n')
    code, _, err = cli(tmp_path, "init", "--db", "shop")
    assert code == 0 and (tmp_path / "mongoshift.toml").is_file() and "warning" not in err


def test_a_command_warns_that_the_section_beside_mongoshift_toml_is_not_read(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ndb = "shop"\n')
    (tmp_path / "migrations").mkdir()
    code, _, err = cli(tmp_path, "create", "one")
    assert code == 0 and err.count(HIDDEN) == 1
    code, _, err = cli(tmp_path, "--config", str(tmp_path / "mongoshift.toml"), "create", "two")  # named: a choice
    assert code == 0 and HIDDEN not in err
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n')
    code, _, err = cli(tmp_path, "create", "three")
    assert code == 0 and HIDDEN not in err
