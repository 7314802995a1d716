"""One rule for every database name a user gives: ``db`` however it is given, and every tenant name.

``admin``, ``config`` and ``local`` are the server's (a changelog and lock in ``local`` are not
replicated), in any case; control and bidirectional characters are refused and never echoed raw.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mongoshift.errors import TenantsInvalidError
from mongoshift.project.settings import Settings
from mongoshift.tenants.selection import TenantFlags, select

RESERVED = ["local", "admin", "config", "Local", "ADMIN"]
#: ESC, BEL, a C1 CSI, DEL, the right-to-left override and a right-to-left isolate.
CONTROLS = ["a\x1b[31mb", "a\x07b", "a\x9bb", "a\x7fb", "a\u202eb", "a\u2067b"]


def _refused(result, code: int, bad: str) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    shown = result.stdout + result.stderr
    for c in bad:
        if not c.isprintable():
            assert c not in shown, repr(shown)  # never the raw control character
    return str(json.loads(result.stdout)["error"]["message"])


@pytest.mark.parametrize("name", RESERVED + CONTROLS)
def test_db_flag_environment_and_project_file_refuse_the_name_with_6(project, cli, monkeypatch, name: str) -> None:  # type: ignore[no-untyped-def]
    message = _refused(cli(project, "--db", name, "status", "--json"), 6, name)
    assert "setting 'db' from --db: not a database mongoshift can use" in message

    monkeypatch.setenv("MONGOSHIFT_DB", name)
    message = _refused(cli(project, "status", "--json"), 6, name)
    assert "from MONGOSHIFT_DB: not a database mongoshift can use" in message
    monkeypatch.delenv("MONGOSHIFT_DB")

    project.db = name
    project.write_config()
    message = _refused(cli(project, "status", "--json"), 6, name)
    assert f"setting 'db' from {project.config}: not a database mongoshift can use" in message


@pytest.mark.parametrize("name", ["local", "Config", "a\x1bb", "a\u202eb"])
def test_init_refuses_the_name_before_writing_anything(tmp_path: Path, cli, name: str) -> None:  # type: ignore[no-untyped-def]
    message = _refused(cli(tmp_path, "--db", name, "init", "--json"), 6, name)
    assert "setting 'db' from --db: not a database mongoshift can use" in message  # named as status names it
    assert not (tmp_path / "mongoshift.toml").exists()


def test_the_words_say_why() -> None:
    from mongoshift.schema.validation import refused_database_name

    assert "local is the server's own database" in str(refused_database_name("local"))
    assert "differs from another only in case: this is admin" in str(refused_database_name("Admin"))
    assert refused_database_name("a\x1bb\u202ec") == "a database name cannot hold control or bidirectional characters (found U+001B, U+202E)"
    assert refused_database_name("local_shop") is None and refused_database_name("Ünïcode") is None


@pytest.mark.parametrize("name", [*CONTROLS, "Local"])
def test_a_tenant_name_is_refused_by_the_same_rule(project, cli, name: str) -> None:  # type: ignore[no-untyped-def]
    message = _refused(cli(project, "status", "--tenant", name, "--json"), 46, name)
    assert message.startswith("--tenant ")
    if name != "Local":
        assert "control or bidirectional characters" in message and ("\\x" in message or "\\u" in message)


def test_a_listed_tenant_with_a_control_character_is_refused_with_6(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.config.write_text(project.config.read_text() + '[mongoshift.tenants]\ndatabases = ["ok", "a\\u001bb"]\n', encoding="utf-8")
    message = _refused(cli(project, "status", "--all-tenants", "--json"), 6, "a\x1bb")
    assert "'a\\x1bb': a database name cannot hold control or bidirectional characters (found U+001B)" in message


async def test_a_pattern_matching_a_server_database_with_a_control_character_is_refused() -> None:
    async def names() -> list[str]:
        return ["tenant_a", "tenant_\x1b[2J", "LOCAL"]

    for section, flags in (({"match": "*"}, TenantFlags(all=True)), (None, TenantFlags(pattern="tenant_*"))):
        settings = Settings(uri="mongodb://h", tenants=section)  # type: ignore[arg-type]
        with pytest.raises(TenantsInvalidError) as raised:
            await select(settings, flags, names)
        assert "matches the database tenant_\\x1b[2J: a database name cannot hold control" in raised.value.message
        assert "\x1b" not in raised.value.message
    # another case of a server database is never matched
    async def plain() -> list[str]:
        return ["tenant_a", "LOCAL", "Admin"]

    chosen = await select(Settings(uri="mongodb://h", tenants={"match": "*"}), TenantFlags(all=True), plain)  # type: ignore[arg-type]
    assert [t.name for t in chosen] == ["tenant_a"]
