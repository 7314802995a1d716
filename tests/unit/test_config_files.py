"""Project and declaration files: broken TOML and wrong types are errors naming the file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from mongoshift.errors import ConfigInvalidError
from mongoshift.project.declarations import load_declarations
from mongoshift.project.settings import Settings, load_settings


def test_a_malformed_pyproject_is_an_error_naming_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text('[project]\nname = "app"\n\n[tool.mongoshift]\nstrict = tru\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert info.value.exit_code == 6
    assert str(path) in info.value.message and "line 5" in info.value.message


def test_a_malformed_mongoshift_toml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mongoshift.toml"
    path.write_text('[mongoshift]\ndb = "a"\nuri = \n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert str(path) in info.value.message and "line 3" in info.value.message


def test_a_broken_pyproject_is_not_read_when_the_config_is_named(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool\n")
    named = tmp_path / "elsewhere.toml"
    named.write_text("[mongoshift]\nstrict = true\n")
    assert load_settings({}, environ={"MONGOSHIFT_CONFIG": str(named)}, cwd=tmp_path).strict is True
    assert load_settings({}, config_path=named, environ={}, cwd=tmp_path).strict is True


def test_a_pyproject_without_a_mongoshift_section_is_still_ignored(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "app"\n')
    assert load_settings({}, environ={}, cwd=tmp_path).strict is False


def test_a_named_pyproject_without_a_mongoshift_table_is_refused(tmp_path: Path) -> None:
    """``--config pyproject.toml`` (or ``MONGOSHIFT_CONFIG``) naming one without ``[tool.mongoshift]`` was read as no
    settings at all: the run went on with the defaults, whatever the user meant to set."""
    named = tmp_path / "pyproject.toml"
    named.write_text('[project]\nname = "app"\n\n[tool.other]\nstrict = true\n')
    for kwargs in ({"config_path": named, "environ": {}}, {"environ": {"MONGOSHIFT_CONFIG": str(named)}}):
        with pytest.raises(ConfigInvalidError) as info:
            load_settings({}, cwd=tmp_path, **kwargs)  # type: ignore[arg-type]
        assert info.value.exit_code == 6 and "no [tool.mongoshift] table" in info.value.message


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ('strict = "yes"', "strict"),
        ('use_transaction = 1', "use_transaction"),
        ('lock_ttl_seconds = "60"', "lock_ttl_seconds"),
        ("lock_ttl_seconds = 60.5", "lock_ttl_seconds"),
        ('connect_timeout_seconds = "10"', "connect_timeout_seconds"),
        ("environment = 5", "environment"),
        ("db = 12", "db"),
        ("migrations_dir = 3", "migrations_dir"),
        ("background_inline = 0", "background_inline"),
        ("migration_timeout_seconds = inf", "migration_timeout_seconds"),  # a file's timeout_seconds is at most a day
        ("migration_timeout_seconds = 86401", "migration_timeout_seconds"),
    ],
)
def test_wrong_types_in_a_project_file_are_refused(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "mongoshift.toml"
    path.write_text(f"[mongoshift]\n{line}\n")
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert f"setting {key!r} from {path}" in info.value.message


def _problems(tmp_path: Path, text: str) -> dict[str, str]:
    """The problems a mongoshift.toml of ``text`` is refused for (exit 6), each setting's name to what is wrong with it."""
    path = tmp_path / "mongoshift.toml"
    path.write_text(text)
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    return dict(p.split(f" from {path}: ") for p in info.value.details["problems"])


def test_a_path_setting_of_the_wrong_type_is_told_in_words_not_as_a_python_class(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "[mongoshift]\nmigrations_dir = 5\ntemplate_path = 1.5\ncollections_dir = []\n")
    assert problems == {
        "setting 'migrations_dir'": "Input should be a path (text), not int",
        "setting 'template_path'": "Input should be a path (text), not float",
        "setting 'collections_dir'": "Input should be a path (text), not list",
    }


def test_a_word_that_is_none_of_the_choices_is_not_said_to_be_of_the_wrong_type(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nout_of_order = "sometimes"\nstrict = "yes"\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert "'out_of_order'" in info.value.message and "'warn', 'error' or 'allow';" in info.value.message
    assert "Input should be a valid boolean, not str" in info.value.message  # a wrong type still says so


def test_every_wrong_key_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\nstrict = "yes"\nlock_ttl_seconds = "60"\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert "'strict'" in info.value.message and "'lock_ttl_seconds'" in info.value.message


def test_unknown_keys_are_reported_with_the_wrong_values(tmp_path: Path) -> None:
    path = tmp_path / "mongoshift.toml"
    path.write_text('[mongoshift]\ndb = 5\nlock_ttl_seconds = "60"\nbogus_key = 1\nstrikt = true\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    problems = info.value.details["problems"]
    assert [p.split(":")[0] for p in problems] == [
        f"setting 'bogus_key' from {path}", f"setting 'strikt' from {path}", f"setting 'db' from {path}",
        f"setting 'lock_ttl_seconds' from {path}",
    ]
    assert "did you mean 'strict'?" in problems[1] and "; ".join(problems) == info.value.message


def test_a_value_of_the_wrong_form_is_told_in_words_not_as_a_regular_expression(tmp_path: Path) -> None:
    problems = _problems(
        tmp_path,
        '[mongoshift]\ndb = "shop.v2"\nchangelog_collection = "-log"\nuri_factory = "make uri"\n'
        '[mongoshift.tenants]\ndatabases = []\n',
    )
    assert problems == {
        "setting 'db'": "not a database mongoshift can use: MongoDB refuses '.' in a database name",
        "setting 'changelog_collection'": "must be a collection name: 1 to 120 letters, digits, _ . or -, not starting with . or -",
        "setting 'uri_factory'": "must be an import path such as 'package.module:function'",
        "setting 'tenants.databases'": "must not be empty",
    }
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\n[mongoshift.tenants]\nprovider = "tenants.list"\n')
    with pytest.raises(ConfigInvalidError, match=r"tenants\.provider' from .*: must be an import path such as 'package\.module:function'$"):
        load_settings({}, environ={}, cwd=tmp_path)


def test_keys_outside_the_table_are_reported_with_the_other_problems(tmp_path: Path) -> None:
    path = tmp_path / "mongoshift.toml"
    path.write_text('db = "a"\nstrict = true\n[mongoshift]\nbogus = 1\nlock_ttl_seconds = 0\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    message = info.value.message
    for part in ("'db' is outside", "'strict' is outside", "setting 'bogus'", "setting 'lock_ttl_seconds'"):
        assert part in message, (part, message)


def test_every_problem_of_a_dotenv_and_the_project_file_at_once(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text("[mongoshift]\nbogus = 1\n")
    (tmp_path / ".env").write_text("MONGOSHIFT_LOCK_TTL_SECONDS=soon\nMONGOSHIFT_STRIKT=1\nMONGOSHIFT_STRICT=maybe\n")
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    message = info.value.message
    for part in ("setting 'bogus'", "MONGOSHIFT_STRIKT is not a mongoshift setting", "MONGOSHIFT_LOCK_TTL_SECONDS in", "MONGOSHIFT_STRICT in"):
        assert part in message, (part, message)

    (tmp_path / ".env").write_text("NOT A LINE\nA='open\nA=2\n")  # every refused line, with the file's problem
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    message = info.value.message
    for part in ("setting 'bogus'", "line 1: expected NAME=value", "line 2 (A): the quote does not close", "line 3: A is already set on line 2"):
        assert part in message, (part, message)


def test_the_environment_keeps_parsing_strings(tmp_path: Path) -> None:
    env = {"MONGOSHIFT_STRICT": "yes", "MONGOSHIFT_LOCK_TTL_SECONDS": "60", "MONGOSHIFT_CONNECT_TIMEOUT_SECONDS": "2.5"}
    s = load_settings({}, environ=env, cwd=tmp_path)
    assert (s.strict, s.lock_ttl_seconds, s.connect_timeout_seconds) == (True, 60, 2.5)


def test_integers_are_accepted_for_float_settings_in_a_file(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text("[mongoshift]\nconnect_timeout_seconds = 3\nbackground_poll_seconds = 0.5\n")
    s = load_settings({}, environ={}, cwd=tmp_path)
    assert (s.connect_timeout_seconds, s.background_poll_seconds) == (3.0, 0.5)


@pytest.mark.parametrize(
    ("declaration", "where"),
    [
        ('indexes = [{ keys = { a = 1 }, unique = "yes" }]', "indexes[0].unique"),
        ('indexes = [{ keys = { a = 1 }, sparse = 1 }]', "indexes[0].sparse"),
        ('indexes = [{ keys = { a = 1 }, expireAfterSeconds = "60" }]', "indexes[0].expireAfterSeconds"),
        ('prune = "true"', "prune"),
        ('versioning = { current = "2" }', "versioning.current"),
        ('versioning = { current = 2, index = "no" }', "versioning.index"),
        ('indexes = [{ keys = { a = 1 }, name = 5 }]', "indexes[0].name"),
    ],
)
def test_wrong_types_in_a_declaration_are_refused(tmp_path: Path, declaration: str, where: str) -> None:
    (tmp_path / "mongoshift.toml").write_text(f'[mongoshift]\n[[mongoshift.collections]]\nname = "users"\n{declaration}\n')
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    assert f"collections[0].{where}" in info.value.message and "'users'" in info.value.message

    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / "users.toml").write_text(declaration + "\n")
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(Settings(collections_dir=folder))
    assert "users.toml" in info.value.message and where in info.value.message


def test_every_invalid_declaration_file_is_reported_at_once(tmp_path: Path) -> None:
    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / "a.toml").write_text('indexes = [{ keys = { a = 1 }, uniqe = true }]\n')
    (folder / "b.toml").write_text("indexes = [\n")
    (folder / "c.py").write_text("collection = {'prune': 'yes'}\n")
    (folder / "d.py").write_text("raise RuntimeError('boom')\n")
    (folder / "e.toml").write_text("indexes = [{ keys = { e = 1 } }]\n")  # valid
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(Settings(collections_dir=folder))
    message = info.value.message
    for name, what in [("a.toml", "uniqe"), ("b.toml", "not valid TOML"), ("c.py", "prune"), ("d.py", "failed to import")]:
        assert name in message and what in message, (name, message)
    assert "e.toml" not in message
    assert sorted(info.value.details["files"]) == sorted(str(folder / n) for n in ("a.toml", "b.toml", "c.py", "d.py"))


def test_unknown_keys_of_a_declaration_are_reported_with_its_wrong_values(tmp_path: Path) -> None:
    table = 'bogus = 1\nprune = "yes"\nindexes = [{ keys = { a = 1 }, uniqe = true, sparse = 1 }]\n'
    (tmp_path / "mongoshift.toml").write_text(f'[mongoshift]\n[[mongoshift.collections]]\nname = "users"\n{table}')
    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / "users.toml").write_text(table)
    with pytest.raises(ConfigInvalidError) as inline:
        load_settings({}, environ={}, cwd=tmp_path)
    with pytest.raises(ConfigInvalidError) as in_folder:
        load_declarations(Settings(collections_dir=folder))
    for message in (inline.value.message, in_folder.value.message):
        for part in (
            "unknown key 'bogus'", "prune: Input should be a valid boolean", "indexes[0]: unknown key 'uniqe'", "sparse: Input should be a valid boolean"
        ):
            assert part in message, (part, message)


def test_a_wrong_container_is_named_as_the_file_writes_it(tmp_path: Path) -> None:
    """A number where a list or a table belongs said "Input should be a valid tuple" and "a valid dictionary or
    instance of IndexDeclaration": words of the code, not of the file (a TOML array, a table)."""
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ncollections = 5\n[mongoshift.tenants]\ndatabases = "t1"\n')
    with pytest.raises(ConfigInvalidError) as settings_error:
        load_settings({}, environ={}, cwd=tmp_path)
    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / "users.toml").write_text("indexes = [5]\n")
    (folder / "orders.toml").write_text("indexes = 5\n")
    with pytest.raises(ConfigInvalidError) as declaration_error:
        load_declarations(Settings(collections_dir=folder))
    said = settings_error.value.message + declaration_error.value.message
    assert "tuple" not in said and "dictionary" not in said and "IndexDeclaration" not in said, said
    assert "'collections' from" in said and "'tenants.databases' from" in said
    assert said.count("Input should be a list (an array in TOML)") == 3, said
    assert "indexes[0]: Input should be a table ({...} in TOML, a dict in Python)" in said, said


@pytest.mark.parametrize(
    ("source", "key"),
    [
        ("def check(doc):\n    return True\n\ncollection = {'validator': {'$where': check}}\n", "validator"),
        ("loop = {}\nloop['$and'] = [loop]\ncollection = {'validator': loop}\n", "validator"),
        (
            "collection = {'indexes': [{'keys': {'a': 1}, 'partialFilterExpression': {'a': object()}}]}\n",
            "indexes[0].partialFilterExpression",
        ),
        ("collection = {'validator': {1: 2}}\n", "validator"),
    ],
)
def test_a_validator_that_is_not_bson_is_refused_at_load(tmp_path: Path, source: str, key: str) -> None:
    folder = tmp_path / "collections"
    folder.mkdir()
    (folder / "users.py").write_text(source)
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(Settings(collections_dir=folder))
    assert info.value.exit_code == 6
    assert "users.py" in info.value.message and key in info.value.message
