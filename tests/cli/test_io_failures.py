"""A file or folder the system refuses is exit 44 naming the path and the reason, never "unexpected OSError".

Tests run as root, which ignores permissions: the refusal is simulated by making the one
file operation raise the error a read-only file system (or a missing permission) raises.
"""

from __future__ import annotations

import errno
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mongoshift.errors import IOFailedError
from mongoshift.line.scaffold import create_migration
from mongoshift.project.loader import discover
from mongoshift.project.settings import load_settings

from ..conftest import Cli


def refuse(monkeypatch: pytest.MonkeyPatch, method: str, code: int = errno.EROFS, only: str | None = None) -> None:
    """``Path.<method>`` raises the system's error for the paths whose name is ``only`` (every path without it)."""
    original: Callable[..., Any] = getattr(Path, method)

    def refused(self: Path, *args: Any, **kwargs: Any) -> Any:
        if only is None or self.name == only:
            raise OSError(code, os.strerror(code), str(self))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, method, refused)


def run_cli(cli: Any, where: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    """``mongoshift ARGS --json`` in this process: its exit code, its error document and stderr."""
    code, out, err = cli(where, *args, "--json")
    return code, json.loads(out)["error"], err


def test_init_into_a_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    refuse(monkeypatch, "write_text")
    code, error, stderr = run_cli(cli, tmp_path, "init")
    assert code == 44 and error["kind"] == "io_failed"
    assert error["details"] == {"path": str(tmp_path / "mongoshift.toml"), "reason": "Read-only file system"}
    assert f"cannot write {tmp_path / 'mongoshift.toml'}: Read-only file system" in stderr and "please report" not in stderr


def test_create_into_a_read_only_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    (tmp_path / "migrations").mkdir()
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nmigrations_dir = "migrations"\n')
    refuse(monkeypatch, "write_text")
    code, error, stderr = run_cli(cli, tmp_path, "create", "add users")
    assert code == 44 and error["details"]["reason"] == "Read-only file system"
    written = Path(error["details"]["path"])
    assert written.parent == tmp_path / "migrations" and written.name.endswith("_add_users.py")
    assert str(written) in error["message"] and "please report" not in stderr


@pytest.mark.parametrize("command", [["create", "add users"], ["status"]])
def test_a_file_where_the_migrations_folder_should_be(tmp_path: Path, cli: Cli, command: list[str]) -> None:
    """``create`` refuses it as every command does (44, "a file"), not as a folder that is missing (8)."""
    (tmp_path / "migrations").write_text("")
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nuri = "mongodb://127.0.0.1:1"\ndb = "a"\n')
    code, error, _ = run_cli(cli, tmp_path, *command)
    assert code == 44 and error["details"] == {"path": str(tmp_path / "migrations"), "reason": "not a folder"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["migrations", "mongoshift.toml"]


def test_init_cannot_create_the_migrations_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    refuse(monkeypatch, "mkdir", errno.EACCES)
    code, error, _ = run_cli(cli, tmp_path, "init")
    assert code == 44 and error["details"] == {"path": str(tmp_path / "migrations"), "reason": "Permission denied"}


def test_an_os_error_no_command_expected_still_names_its_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    """The last net: an OSError that carries a file name is exit 44 with it, not a bug report."""
    (tmp_path / "migrations").mkdir()
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nmigrations_dir = "migrations"\n')

    def broken(*args: Any, **kwargs: Any) -> Path:
        raise PermissionError(errno.EACCES, "Permission denied", "/srv/app/migrations/x.py")

    monkeypatch.setattr("mongoshift.line.scaffold.create_migration", broken)
    code, error, stderr = run_cli(cli, tmp_path, "create", "x")
    assert code == 44 and error["details"] == {"path": "/srv/app/migrations/x.py", "reason": "Permission denied"}
    assert "please report" not in stderr


@pytest.mark.parametrize("name", ["mongoshift.toml", ".env"])
def test_a_config_or_env_file_that_cannot_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ndb = "a"\n')
    (tmp_path / ".env").write_text("MONGOSHIFT_DB=b\n")
    refuse(monkeypatch, "open" if name == "mongoshift.toml" else "read_text", errno.EACCES, only=name)  # the project file is read bounded
    with pytest.raises(IOFailedError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.exit_code == 44 and info.value.details == {"path": str(tmp_path / name), "reason": "Permission denied"}


def test_a_template_or_migrations_folder_that_cannot_be_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = tmp_path / "tpl.txt"
    template.write_text("def up(ctx):\n    pass\n")
    refuse(monkeypatch, "read_text", errno.EACCES, only="tpl.txt")
    with pytest.raises(IOFailedError, match=f"cannot read the template {template}: Permission denied"):
        create_migration(tmp_path, "one", template=template)
    refuse(monkeypatch, "iterdir", errno.EACCES)
    with pytest.raises(IOFailedError, match=f"cannot list the migrations folder {tmp_path}: Permission denied"):
        discover(tmp_path)


def test_a_failed_init_leaves_the_project_file_as_it_was(tmp_path: Path, cli: Cli) -> None:
    """``init --force`` with a migrations folder that cannot be made: it wrote the new project file
    first and then failed (44), the committed URI gone."""
    assert run_cli_plain(cli, tmp_path, "init", "--uri", "mongodb://127.0.0.1:27017", "--db", "good") == 0
    before = (tmp_path / "mongoshift.toml").read_text()
    (tmp_path / "afile").write_text("")
    code, error, _ = run_cli(cli, tmp_path, "init", "--force", "--dir", "afile", "--db", "other")
    assert code == 44 and error["kind"] == "io_failed"
    assert (tmp_path / "mongoshift.toml").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


@pytest.mark.parametrize(
    ("args", "said"),
    [(["--uri", "http://x"], "setting 'uri'"), (["--db", "a.b"], "setting 'db'"), (["--uri", "mongodb://h/?badopt=1"], "unknown option 'badopt'")],
)
def test_init_refuses_a_value_every_other_command_would_refuse(tmp_path: Path, cli: Cli, args: list[str], said: str) -> None:
    code, error, _ = run_cli(cli, tmp_path, "init", *args)
    assert code == 6 and error["kind"] == "config_invalid" and said in error["message"]
    assert list(tmp_path.iterdir()) == []  # nothing written


def run_cli_plain(cli: Any, where: Path, *args: str) -> int:
    code, _, _ = cli(where, *args)
    return int(code)


def test_init_writes_a_folder_name_with_quotes_that_reads_back(tmp_path: Path, cli: Cli) -> None:
    """A double quote in ``--dir`` was written unescaped (the next command refused the project file, exit 6), a backslash as a slash."""
    folder = "sh'op\"x\\y"  # a quote and a backslash (a plain name character on POSIX)
    assert run_cli_plain(cli, tmp_path, "init", "--db", "app", "--dir", folder) == 0
    settings = load_settings(cwd=tmp_path, environ={}, env_file=False)
    assert settings.migrations_dir == tmp_path / folder and (tmp_path / folder).is_dir()
