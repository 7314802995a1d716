"""The .env parser (strict), where settings come from, and fetching the URI at run time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mongoshift.errors import ConfigInvalidError, UriUnavailableError
from mongoshift.project.env_file import read_env_file
from mongoshift.project.settings import load_settings
from mongoshift.project.uri_source import resolve_uri

ACCEPTED = """\ufeff# a comment
export MONGOSHIFT_DB=app
PLAIN = value with spaces  # a comment
HASH=a#b
SINGLE='it is $HOME \\n' # no expansion, no escapes
DOUBLE="line\\none \\"q\\" \\\\ #x" # after
EMPTY=
"""


def test_the_accepted_syntax(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(ACCEPTED, encoding="utf-8")
    assert read_env_file(path) == {
        "MONGOSHIFT_DB": "app",
        "PLAIN": "value with spaces",
        "HASH": "a#b",
        "SINGLE": "it is $HOME \\n",
        "DOUBLE": 'line\none "q" \\ #x',
        "EMPTY": "",
    }


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("MONGOSHIFT_URI mongodb://u:hunter9@h\n", "line 1: expected NAME=value"),
        ("A=1\n\nA=2\n", "line 3: A is already set on line 1"),
        ("1A=x\n", "line 1"),
        ("A='hunter9\n", "does not close"),
        ('A="x\\q hunter9"\n', "unknown escape"),
        ("A='x' hunter9\n", "only a comment may follow"),
        ("MONGOSHIFT_URL=mongodb://h\n", "MONGOSHIFT_URL is not a mongoshift setting"),
        ("MONGOSHIFT_CONFIG=x.toml\n", "use --config"),
        # a refused line does not hide the unknown names of the lines that parsed (it did)
        ("MONGOSHIFT_NOPE=1\nbad line hunter9\n", "line 2: expected NAME=value; MONGOSHIFT_NOPE is not a mongoshift setting"),
    ],
)
def test_what_is_refused_names_the_line_never_the_value(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / ".env").write_text(text, encoding="utf-8")
    with pytest.raises(ConfigInvalidError) as raised:
        load_settings({}, environ={}, cwd=tmp_path)
    assert why in raised.value.message and "hunter9" not in raised.value.message


def test_precedence_flag_environment_env_file_project_file(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ndb = "from_file"\nlock_ttl_seconds = 5\nenvironment = "file"\n')
    (tmp_path / ".env").write_text("MONGOSHIFT_DB=from_dotenv\nMONGOSHIFT_LOCK_TTL_SECONDS=7\nMONGOSHIFT_ENVIRONMENT=dotenv\n")
    environ = {"MONGOSHIFT_LOCK_TTL_SECONDS": "9", "MONGOSHIFT_ENVIRONMENT": "env"}
    settings = load_settings({"environment": "flag"}, environ=environ, cwd=tmp_path)
    assert (settings.db, settings.lock_ttl_seconds, settings.environment) == ("from_dotenv", 9, "flag")
    assert load_settings({}, environ={}, cwd=tmp_path, env_file=False).db == "from_file"
    other = tmp_path / "deploy.env"
    other.write_text("MONGOSHIFT_DB=from_other\n")
    assert load_settings({}, environ={}, cwd=tmp_path, env_file=other).db == "from_other"
    with pytest.raises(ConfigInvalidError, match="not found"):
        load_settings({}, environ={}, cwd=tmp_path, env_file=tmp_path / "missing.env")
    (tmp_path / ".env").write_text("MONGOSHIFT_LOCK_TTL_SECONDS=soon\n")
    with pytest.raises(ConfigInvalidError, match=r"MONGOSHIFT_LOCK_TTL_SECONDS in .*\.env"):
        load_settings({}, environ={}, cwd=tmp_path)


def test_the_uri_is_one_setting_given_three_ways(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nuri_command = ["vault", "read", "x"]\n')
    assert load_settings({}, environ={}, cwd=tmp_path).uri_command == ["vault", "read", "x"]
    over = load_settings({}, environ={"MONGOSHIFT_URI": "mongodb://h:1"}, cwd=tmp_path)
    assert (over.uri, over.uri_command) == ("mongodb://h:1", None)  # a higher source replaces it
    factory = load_settings({}, environ={"MONGOSHIFT_URI_FACTORY": "deploy.secrets:mongo_uri"}, cwd=tmp_path)
    assert (factory.uri_factory, factory.uri_command) == ("deploy.secrets:mongo_uri", None)
    split = load_settings({}, environ={"MONGOSHIFT_URI_COMMAND": "op read 'op://vault/mongo uri'"}, cwd=tmp_path)
    assert split.uri_command == ["op", "read", "op://vault/mongo uri"]
    with pytest.raises(ConfigInvalidError, match="only one of uri, uri_command"):
        load_settings({}, environ={"MONGOSHIFT_URI": "mongodb://h:1", "MONGOSHIFT_URI_COMMAND": "x"}, cwd=tmp_path)
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nuri_command = "vault read x"\n')
    with pytest.raises(ConfigInvalidError, match="uri_command"):
        load_settings({}, environ={}, cwd=tmp_path)  # a file gives a list, not text
    with pytest.raises(ConfigInvalidError, match="uri_factory"):
        load_settings({"uri_factory": "not a spec"}, environ={}, cwd=tmp_path)


async def test_a_command_that_hangs_is_stopped_and_a_sync_factory_runs(tmp_path: Path) -> None:
    slow = load_settings({"uri_command": [sys.executable, "-c", "import time; time.sleep(30)"], "uri_timeout_seconds": 0.5}, environ={}, cwd=tmp_path)
    with pytest.raises(UriUnavailableError, match=r"did not finish within 0\.5s"):
        await resolve_uri(slow)
    two_lines = load_settings({"uri_command": [sys.executable, "-c", "print('mongodb://a:hunter9@h');print('x')"]}, environ={}, cwd=tmp_path)
    with pytest.raises(UriUnavailableError, match="more than one line") as raised:
        await resolve_uri(two_lines)
    assert "hunter9" not in raised.value.message
    sys_module = tmp_path / "uri_source_sync_probe.py"
    sys_module.write_text("def get():\n    return ' mongodb://u:p@h:1/ \\n'\n\ndef bad():\n    return 'postgres://h'\n")
    sys.path.insert(0, str(tmp_path))
    try:
        resolved = await resolve_uri(load_settings({"uri_factory": "uri_source_sync_probe:get"}, environ={}, cwd=tmp_path))
        assert resolved.uri == "mongodb://u:p@h:1/"
        with pytest.raises(UriUnavailableError, match="does not start with mongodb://"):
            await resolve_uri(load_settings({"uri_factory": "uri_source_sync_probe:bad"}, environ={}, cwd=tmp_path))
        with pytest.raises(UriUnavailableError, match="has no missing"):
            await resolve_uri(load_settings({"uri_factory": "uri_source_sync_probe:missing"}, environ={}, cwd=tmp_path))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("uri_source_sync_probe", None)


def test_unknown_names_are_counted_right_and_a_near_miss_is_named(tmp_path: Path) -> None:
    # two unknown names "is not a mongoshift setting"; a typo got no hint, while the project file's unknown key has one
    (tmp_path / ".env").write_text("MONGOSHIFT_STRIKT=1\nMONGOSHIFT_LOCK_TTL=3\nMONGOSHIFT_ZZZZ=1\n", encoding="utf-8")
    with pytest.raises(ConfigInvalidError) as raised:
        load_settings({}, environ={}, cwd=tmp_path)
    assert raised.value.message == (
        f"env file {tmp_path / '.env'}: MONGOSHIFT_LOCK_TTL, MONGOSHIFT_STRIKT, MONGOSHIFT_ZZZZ are not mongoshift settings "
        "(did you mean MONGOSHIFT_LOCK_TTL_SECONDS for MONGOSHIFT_LOCK_TTL; MONGOSHIFT_STRICT for MONGOSHIFT_STRIKT?)"
    )
    (tmp_path / ".env").write_text("MONGOSHIFT_STRIKT=1\n", encoding="utf-8")
    with pytest.raises(ConfigInvalidError, match=r"MONGOSHIFT_STRIKT is not a mongoshift setting \(did you mean MONGOSHIFT_STRICT\?\)$"):
        load_settings({}, environ={}, cwd=tmp_path)
