import re
from pathlib import Path

import pytest

from mongoshift.errors import ConfigInvalidError
from mongoshift.project.settings import Settings, env_name, load_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_any_source(tmp_path: Path) -> None:
    s = load_settings({}, environ={}, cwd=tmp_path)
    assert s.changelog_collection == "_mongoshift_migrations"
    assert s.lock_ttl_seconds == 60 and s.out_of_order == "warn" and s.on_lock_lost == "abort"


def test_precedence_flags_over_env_over_file(tmp_path: Path) -> None:
    write(tmp_path / "mongoshift.toml", '[mongoshift]\nuri = "mongodb://file"\ndb = "filedb"\nlock_ttl_seconds = 5\n')
    env = {"MONGOSHIFT_DB": "envdb", "MONGOSHIFT_LOCK_TTL_SECONDS": "7"}
    s = load_settings({"db": "flagdb"}, environ=env, cwd=tmp_path)
    assert (s.uri, s.db, s.lock_ttl_seconds) == ("mongodb://file", "flagdb", 7)


def test_pyproject_section_and_relative_dir(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[tool.mongoshift]\nmigrations_dir = "db/migrations"\nstrict = true\n')
    s = load_settings({}, environ={}, cwd=tmp_path)
    assert s.strict is True
    assert s.migrations_dir == tmp_path / "db" / "migrations"


def test_the_default_migrations_folder_is_next_to_the_project_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--config app/mongoshift.toml`` without ``migrations_dir``: "migrations" was the folder where the command
    ran (another project's, or none), while the collections folder and the .env were the project file's."""
    app = tmp_path / "app"
    app.mkdir()
    write(app / "mongoshift.toml", '[mongoshift]\ndb = "app"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    s = load_settings({}, config_path=app / "mongoshift.toml", environ={}, cwd=elsewhere)
    assert s.migrations_dir.resolve() == app / "migrations"
    found = load_settings({}, environ={}, cwd=app)  # the file found in cwd= (not the process's folder)
    assert found.migrations_dir.resolve() == app / "migrations"
    assert load_settings({"migrations_dir": "mine"}, config_path=app / "mongoshift.toml", environ={}).migrations_dir == Path("mine")


def test_bad_environment_value_fails_closed_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError, match="MONGOSHIFT_STRICT"):
        load_settings({}, environ={"MONGOSHIFT_STRICT": "perhaps"}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match="MONGOSHIFT_OUT_OF_ORDER"):
        load_settings({}, environ={"MONGOSHIFT_OUT_OF_ORDER": "sometimes"}, cwd=tmp_path)


def test_unknown_key_in_file_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / "mongoshift.toml", "[mongoshift]\nlock_tll_seconds = 5\n")
    with pytest.raises(ConfigInvalidError, match="lock_tll_seconds"):
        load_settings({}, environ={}, cwd=tmp_path)


def test_invalid_value_in_file_names_key_and_file(tmp_path: Path) -> None:
    path = write(tmp_path / "mongoshift.toml", "[mongoshift]\nlock_ttl_seconds = 0\n")
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert "lock_ttl_seconds" in info.value.message and str(path) in info.value.message


def test_broken_toml_and_missing_config(tmp_path: Path) -> None:
    write(tmp_path / "mongoshift.toml", "[mongoshift\n")
    with pytest.raises(ConfigInvalidError, match="not valid TOML"):
        load_settings({}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match="not found"):
        load_settings({}, config_path=tmp_path / "nope.toml", environ={}, cwd=tmp_path)


def test_uri_scheme_and_collection_names(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalidError, match="--uri"):
        load_settings({"uri": "http://x"}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match="changelog_collection"):
        load_settings({}, environ={"MONGOSHIFT_CHANGELOG_COLLECTION": "system.x"}, cwd=tmp_path)


def test_connection_settings_required_only_when_connecting(tmp_path: Path) -> None:
    s = load_settings({}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match="no server"):
        s.require_connection()


def test_a_flag_no_command_line_has_is_named_as_the_python_argument_it_came_in(tmp_path: Path) -> None:
    """``load_settings({"lock_ttl_seconds": -1})`` said "from --lock-ttl-seconds", a flag that does not exist
    (stop 56, h5); the three the command line gives keep their flag's name."""
    with pytest.raises(ConfigInvalidError) as refused:
        load_settings({"lock_ttl_seconds": -1, "unknown_key": 1, "db": ""}, environ={}, cwd=tmp_path)
    message = refused.value.message
    assert "setting 'lock_ttl_seconds' from load_settings(flags):" in message
    assert "setting 'unknown_key' from load_settings(flags): unknown key" in message
    assert "setting 'db' from --db:" in message and "--lock-ttl-seconds" not in message and "--unknown-key" not in message


def test_a_table_setting_from_the_environment_is_refused_as_the_files_alone(tmp_path: Path) -> None:
    # No variable can hold a table: MONGOSHIFT_TENANTS=x was refused as "should be a table ({...} in TOML)".
    write(tmp_path / ".env", "MONGOSHIFT_SHARD_KEYS=x\n")
    env = {"MONGOSHIFT_TENANTS": "acme", "MONGOSHIFT_COLLECTIONS": "users"}
    with pytest.raises(ConfigInvalidError) as caught:
        load_settings({}, environ=env, cwd=tmp_path)
    problems = caught.value.details["problems"]
    assert len(problems) == 3, problems
    assert any(p.startswith("setting 'tenants' from MONGOSHIFT_TENANTS: a table") and "[mongoshift.tenants]" in p for p in problems)
    assert any("MONGOSHIFT_COLLECTIONS" in p and "[[mongoshift.collections]]" in p for p in problems)
    assert any(f"MONGOSHIFT_SHARD_KEYS in {tmp_path / '.env'}" in p and "[mongoshift.shard_keys]" in p for p in problems)
    assert not any("should be" in p for p in problems)


def test_the_readmes_configuration_table_lists_every_setting_with_its_variable() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Configuration", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]  # "\|" is a pipe inside a cell
        if line.startswith("| `") and len(cells) == 4:
            rows[cells[0].strip("`")] = cells[2]
    assert sorted(rows) == sorted(Settings.model_fields), "settings missing from (or unknown to) README's table"
    for key, variable in rows.items():
        assert variable == ("—" if key in {"shard_keys", "collections", "tenants"} else f"`{env_name(key)}`"), key


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_a_value_that_is_no_finite_number_is_refused_as_such(tmp_path: Path, value: str) -> None:
    # "nan" was refused as "Input should be less than or equal to 600", which it is not about
    write(tmp_path / "mongoshift.toml", "[mongoshift]\nbackground_poll_seconds = nan\n")
    env = {"MONGOSHIFT_CONNECT_TIMEOUT_SECONDS": value, "MONGOSHIFT_MIGRATION_TIMEOUT_SECONDS": value}
    with pytest.raises(ConfigInvalidError) as caught:
        load_settings({}, environ=env, cwd=tmp_path)
    problems = caught.value.details["problems"]
    assert sorted(problems) == [
        f"setting 'background_poll_seconds' from {tmp_path / 'mongoshift.toml'}: Input should be a finite number",
        "setting 'connect_timeout_seconds' from MONGOSHIFT_CONNECT_TIMEOUT_SECONDS: Input should be a finite number",
        "setting 'migration_timeout_seconds' from MONGOSHIFT_MIGRATION_TIMEOUT_SECONDS: Input should be a finite number",
    ]


def test_a_uri_command_whose_program_is_empty_is_refused_before_it_runs(tmp_path: Path) -> None:
    # it was run, and failed as "uri_command '' cannot be run: Permission denied" (exit 41)
    write(tmp_path / "mongoshift.toml", '[mongoshift]\nuri_command = ["", "-field=uri"]\n')
    with pytest.raises(ConfigInvalidError, match=r"'uri_command' from .*mongoshift.toml: its first word, the program to run, is empty"):
        load_settings({}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match=r"'uri_command' from MONGOSHIFT_URI_COMMAND: its first word"):
        load_settings({}, environ={"MONGOSHIFT_URI_COMMAND": "'  ' get"}, cwd=tmp_path / "nowhere")


def test_a_project_file_that_is_not_utf8_names_the_byte_and_its_line(tmp_path: Path) -> None:
    # it was "is not valid TOML: 'utf-8' codec can't decode byte 0xe9 in position 31: invalid continuation byte"
    (tmp_path / "mongoshift.toml").write_bytes(b'[mongoshift]\n# the db\ndb = "caf\xe9"\n')
    with pytest.raises(ConfigInvalidError) as caught:
        load_settings({}, environ={}, cwd=tmp_path)
    assert caught.value.message == f"config file {tmp_path / 'mongoshift.toml'} is not UTF-8 text (byte 0xE9 on line 3): save it as UTF-8"
    assert caught.value.details["line"] == 3


def test_a_tool_mongoshift_table_in_mongoshift_toml_is_named_for_what_it_is(tmp_path: Path) -> None:
    # it was "setting 'tool' from ...: unknown setting (known: uri, uri_command, ... every setting)"
    write(tmp_path / "mongoshift.toml", '[tool.mongoshift]\ndb = "app"\n')
    with pytest.raises(ConfigInvalidError) as caught:
        load_settings({}, environ={}, cwd=tmp_path)
    assert caught.value.message == (
        f"config file {tmp_path / 'mongoshift.toml'}: [tool.mongoshift] is how a pyproject.toml names mongoshift's "
        "table; in mongoshift.toml write it [mongoshift]"
    )


def test_a_project_file_named_by_the_environment_that_fails_names_the_variable(tmp_path: Path) -> None:
    # "config file not found: /x/mongoshift.toml" did not say that MONGOSHIFT_CONFIG named it
    missing = tmp_path / "deploy" / "mongoshift.toml"
    with pytest.raises(ConfigInvalidError) as caught:
        load_settings({}, environ={"MONGOSHIFT_CONFIG": str(missing)}, cwd=tmp_path)
    assert caught.value.message == f"config file not found: {missing} (named by MONGOSHIFT_CONFIG)"
    assert caught.value.details == {"file": str(missing)}
    write(tmp_path / "broken.toml", "[mongoshift\n")
    with pytest.raises(ConfigInvalidError, match=r"is not valid TOML: .* \(named by MONGOSHIFT_CONFIG\)$"):
        load_settings({}, environ={"MONGOSHIFT_CONFIG": str(tmp_path / "broken.toml")}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError, match=r"^config file not found: [^(]*$"):  # --config names itself
        load_settings({}, config_path=missing, environ={"MONGOSHIFT_CONFIG": str(missing)}, cwd=tmp_path)
