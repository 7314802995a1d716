"""Flags given bad values (empty, negative, huge, a folder for a file, a file that is no TOML, an empty
host) and the refusals around them (tests/cli/test_bad_input.py has the rest): one clear line naming the
flag and what it takes, exit 6, and one JSON document with ``--json``, never a traceback, never click's
``x>=1`` or a "No such option '-1'" for a value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _refused(result, code: int = 6) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["up", "--batch", "0"], "Invalid value for '--batch': must be a whole number of at least 1, not 0"),
        (["down", "--steps", "-5"], "Invalid value for '--steps': must be a whole number of at least 1, not -5"),
        (["dry-run", "down", "--batch", "0"], "Invalid value for '--batch': must be a whole number of at least 1, not 0"),
        (["dashboard", "--port", "70000"], "Invalid value for '--port': must be a whole number from 0 to 65,535, not 70000"),
        (["background", "run", "--all", "--concurrency", "65"], "Invalid value for '--concurrency': must be a whole number from 1 to 64, not 65"),
        (["audit", "--stale-after", "-1"], "Invalid value for '--stale-after': must be a number of at least 0, not -1"),
        (["up", "--wait=-1"], "Invalid value for '--wait': must be a number of at least 0, not -1"),
        (["up", "--wait", "-0.5"], "Invalid value for '--wait': must be a number of at least 0, not -0.5"),
        (["status", "--config", ""], "Invalid value for '--config': must name a file, not be empty"),
        (["status", "--env-file", " "], "Invalid value for '--env-file': must name a file, not be empty"),
    ],
)
def test_a_value_out_of_bounds_is_refused_in_words(tmp_path: Path, cli, args: list[str], said: str) -> None:  # type: ignore[no-untyped-def]
    told = _refused(cli(tmp_path, *args))
    assert f"error: {said}\n" in told and "<=x" not in told and "x>=" not in told and "No such option" not in told
    document = json.loads(cli(tmp_path, *args, "--json").stdout)
    assert document == {"error": {"code": 6, "kind": "config_invalid", "message": said}}


def test_a_dash_that_is_no_number_is_still_an_unknown_option(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    assert "No such option '-5'" in _refused(cli(tmp_path, "status", "-5"))


def test_init_refuses_an_empty_dir_as_every_command_does(tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    told = _refused(cli(tmp_path, "init", "--dir", "", "--db", "app"))
    assert "setting 'migrations_dir' from --dir: must name a path, not be empty" in told
    assert not (tmp_path / "mongoshift.toml").exists()
    assert cli(tmp_path, "init", "--dir", "db/migrations", "--db", "app").returncode == 0
    assert (tmp_path / "db" / "migrations").is_dir()


def test_a_map_file_that_is_missing_no_toml_or_no_text_says_which(project, cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    project.write_config()
    (tmp_path / "words.toml").write_text("this is = = not toml\n", encoding="utf-8")
    (tmp_path / "bytes.toml").write_bytes(b"\xff\xfe\x00 not text")
    for name, said in (
        ("missing.toml", "--map file not found: "),
        ("words.toml", "is not valid TOML: "),
        ("bytes.toml", "is not UTF-8 text"),
    ):
        result = cli(project, "import", "--from", "migrate-mongo", "--map", str(tmp_path / name), "--json")
        assert result.returncode == 6, result.stderr
        message = json.loads(result.stdout)["error"]["message"]
        assert said in message and "Error)" not in message, message
    assert "(at line 1, column" in json.loads(cli(project, "import", "--from", "migrate-mongo", "--map", str(tmp_path / "words.toml"), "--json").stdout)[
        "error"]["message"]


def test_an_empty_tenant_name_is_shown_as_empty(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config()
    told = _refused(cli(project, "status", "--tenant", ""), 46)
    assert "error: --tenant '': a database name cannot be empty" in told
    # the same refusals as the Python API's, in the flags' words (the API names its Tenants parameters)
    assert "error: --all-tenants needs a [tenants] section" in _refused(cli(project, "status", "--all-tenants"), 46)


@pytest.mark.parametrize(
    ("stray", "written"),
    [
        ('[tenants]\ndatabases = ["a", "b"]\n', "write it as [mongoshift.tenants]"),
        ('[[collections]]\nname = "users"\n', "write it as [[mongoshift.collections]]"),
    ],
)
def test_a_table_outside_mongoshift_is_shown_written_inside_in_its_own_shape(tmp_path: Path, cli, stray: str, written: str) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "mongoshift.toml").write_text(f'[mongoshift]\ndb = "x"\n\n{stray}', encoding="utf-8")
    told = _refused(cli(tmp_path, "status"))
    assert f"is outside the [mongoshift] table, so it would be ignored; {written}\n" in told, told


def test_up_force_refuses_a_typo_before_asking_and_asks_true_words(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.write_config()
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    assert "migration file not found: 0002_nope.py" in _refused(cli(project, "up", "0002_nope", "--force"), 8)  # was 42: asked about a typo
    assert "a migration name cannot be empty" in _refused(cli(project, "up", "", "--force"), 19)
    asked = _refused(cli(project, "up", "0001_a", "--force"), 42)  # pending here: "again although it is applied" was untrue
    assert "Run 0001_a even if it is already applied? Nothing was changed" in asked, asked


@pytest.mark.parametrize("command", [["embedded", "--port", "0"], ["dashboard", "--port", "0"]])
def test_a_server_refuses_an_empty_host(tmp_path: Path, command: list[str]) -> None:
    """``--host ""`` bound the embedded server to every interface while it printed 127.0.0.1 (a socket bound to ""
    listens on all of them); the dashboard refused it as a non-loopback address ("on  without ..."). A real process:
    without the fix the server starts and serves, which the timeout ends."""
    import subprocess
    import sys

    from ..conftest import cli_env

    try:
        done = subprocess.run([sys.executable, "-m", "mongoshift", *command, "--host", ""], cwd=tmp_path, env=cli_env(),
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("it served on an empty --host")
    assert done.returncode == 6, done.stderr
    assert "error: Invalid value for '--host': must name an address to listen on" in done.stderr
