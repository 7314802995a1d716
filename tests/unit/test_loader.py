import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from mongoshift.errors import (
    ConfigInvalidError,
    DuplicateVersionError,
    FileNotFoundMigrationError,
    InvalidExportError,
    InvalidNameError,
)
from mongoshift.line.scaffold import create_migration
from mongoshift.project.loader import (
    checksum,
    discover,
    find,
    is_migration_name,
    load,
    slugify,
)


def test_discover_orders_by_name_and_skips_private(tmp_path: Path) -> None:
    for name in ("20260102000000_b.py", "20260101000000_a.py", "_helpers.py", "__init__.py", "notes.txt"):
        (tmp_path / name).write_text("def up(ctx): pass\n")
    assert [f.name for f in discover(tmp_path)] == ["20260101000000_a.py", "20260102000000_b.py"]


def test_misnamed_python_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "add_users.py").write_text("def up(ctx): pass\n")
    with pytest.raises(InvalidNameError, match=r"add_users\.py"):
        discover(tmp_path)


@pytest.mark.parametrize("name", ["20260101000000_add_users.PY", "0002_b.Py"])
def test_a_python_file_with_an_extension_in_another_case_is_refused_not_skipped(tmp_path: Path, name: str) -> None:
    (tmp_path / "0001_a.py").write_text("def up(ctx): pass\n")
    (tmp_path / name).write_text("def up(ctx): pass\n")
    (tmp_path / "_helper.PY").write_text("")  # a helper, as every '_' file
    (tmp_path / "notes.txt").write_text("")  # not Python at all: not ours to judge
    with pytest.raises(InvalidNameError, match=r"not '\.py': it would never run") as caught:
        discover(tmp_path)
    assert name in caught.value.message


@pytest.mark.parametrize("name", ["0002_b.py", "helpers.py"])
def test_a_folder_named_like_a_module_is_refused_not_skipped(tmp_path: Path, name: str) -> None:
    """``0002_b.py/`` (a mkdir by mistake, a package) was skipped in silence: never run, never listed."""
    (tmp_path / "0001_a.py").write_text("def up(ctx): pass\n")
    (tmp_path / name).mkdir()
    (tmp_path / "_pkg.py").mkdir()  # a helper, as every '_' entry
    (tmp_path / "data").mkdir()  # not named as Python: not ours to judge
    with pytest.raises(InvalidNameError, match=r"is a folder: it would never run") as caught:
        discover(tmp_path)
    assert name in caught.value.message


@pytest.mark.parametrize(
    ("names", "clashes"),
    [
        (["20260101000000_a.py", "20260101000000_b.py", "20260102000000_c.py"], ["20260101000000_a.py", "20260101000000_b.py"]),
        (["0001_a.py", "0001_b.py", "0002_c.py"], ["0001_a.py", "0001_b.py"]),
        (["0001_a.py", "00001_b.py"], ["00001_b.py", "0001_a.py"]),  # one number, written two ways
        (["0001_a.py", "0001_b.py", "0002_c.py", "0002_d.py"], ["0001_a.py", "0001_b.py", "0002_c.py", "0002_d.py"]),
    ],
)
def test_files_sharing_a_version_are_refused_naming_both(tmp_path: Path, names: list[str], clashes: list[str]) -> None:
    for name in names:
        (tmp_path / name).write_text("def up(ctx): pass\n")
    with pytest.raises(DuplicateVersionError) as info:
        discover(tmp_path)
    assert info.value.exit_code == 43 and info.value.details["files"] == clashes
    assert all(name in info.value.message for name in clashes)


def test_create_never_reuses_a_timestamp(tmp_path: Path) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    first = create_migration(tmp_path, "one", now=now)
    second = create_migration(tmp_path, "two", now=now)  # two creates within one second
    assert (first.name, second.name) == ("20260101000000_one.py", "20260101000001_two.py")
    assert [f.name for f in discover(tmp_path)] == [first.name, second.name]


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundMigrationError, match="init"):
        discover(tmp_path / "missing")


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def up(ctx):\n    return (\n", "line"),
        ("import does_not_exist_anywhere\n", "ModuleNotFoundError"),
        ("x = 1\n", "must define a function up"),
        ("def up():\n    pass\n", "one argument"),
        ("def up(ctx): pass\ndown = 3\n", "down must be a function"),
        ("def up(ctx): pass\nuse_transaction = 'yes'\n", "use_transaction must be a bool"),
        ("raise SystemExit(3)\n", "SystemExit"),
    ],
)
def test_broken_files_name_the_file(tmp_path: Path, source: str, message: str) -> None:
    (tmp_path / "20260101000000_broken.py").write_text(source)
    (item,) = discover(tmp_path)
    with pytest.raises(InvalidExportError) as info:
        load(item)
    assert "20260101000000_broken.py" in info.value.message and message in info.value.message


def test_a_syntax_error_names_its_file_and_line_once(tmp_path: Path) -> None:
    (tmp_path / "20260101000000_broken.py").write_text("def up(ctx)\n    pass\n")
    (item,) = discover(tmp_path)
    with pytest.raises(InvalidExportError) as info:
        load(item)
    assert info.value.message == "20260101000000_broken.py: failed to import (line 1): SyntaxError: expected ':'"


def test_a_file_without_up_names_its_other_problems_too(tmp_path: Path) -> None:
    """Every problem at once (exit-codes.md, 20): a missing up hid the rest until it was added."""
    (tmp_path / "20260101000000_broken.py").write_text('timeout_seconds = "5"\nrequires = 5\nuse_transaction = "yes"\n')
    (item,) = discover(tmp_path)
    with pytest.raises(InvalidExportError) as info:
        load(item)
    problems = info.value.details["problems"]
    assert problems[0] == "must define a function up(ctx)" and len(problems) == 4, problems
    assert any("requires" in p for p in problems) and any("timeout_seconds" in p for p in problems)


def test_checksum_ignores_bom_and_line_endings(tmp_path: Path) -> None:
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_bytes(b"def up(ctx):\n    pass\n")
    b.write_bytes(b"\xef\xbb\xbfdef up(ctx):\r\n    pass\r\n")
    assert checksum(a) == checksum(b)
    b.write_bytes(b"def up(ctx):\n    return 1\n")
    assert checksum(a) != checksum(b)


def test_find_refuses_paths(tmp_path: Path) -> None:
    (tmp_path / "20260101000000_a.py").write_text("def up(ctx): pass\n")
    files = discover(tmp_path)
    assert find(files, "20260101000000_a").name == "20260101000000_a.py"
    with pytest.raises(InvalidNameError):
        find(files, "../20260101000000_a.py")
    with pytest.raises(FileNotFoundMigrationError):
        find(files, "20990101000000_zzz.py")


@given(st.text(alphabet="abcdefghij XYZ-_0123456789", min_size=1, max_size=40))
def test_slugify_gives_loadable_names_or_refuses(name: str) -> None:
    try:
        slug = slugify(name)
    except InvalidNameError:
        return
    assert is_migration_name(f"20260101000000_{slug}.py")
    assert is_migration_name(f"0001_{slug}.py")


def test_create_writes_a_loadable_skeleton_and_refuses_bad_names(tmp_path: Path) -> None:
    path = create_migration(tmp_path, "Add users index")
    assert path.name.endswith("_add_users_index.py")
    (item,) = discover(tmp_path)
    assert load(item).down is not None
    with pytest.raises(InvalidNameError):
        create_migration(tmp_path, "bad/name")


def test_create_sequential_and_template(tmp_path: Path) -> None:
    template = tmp_path / "tpl.txt"
    template.write_text('description = "$title"\ndef up(ctx):\n    return "$$literal"\n')
    folder = tmp_path / "m"
    folder.mkdir()
    first = create_migration(folder, "one", sequential=True, template=template)
    second = create_migration(folder, "two", sequential=True, template=template)
    assert (first.name, second.name) == ("0001_one.py", "0002_two.py")
    assert 'description = "One"' in first.read_text() and '"$literal"' in first.read_text()


def test_a_sequential_create_refuses_a_folder_of_timestamped_files(tmp_path: Path) -> None:
    """``sequential = true`` in a folder of timestamped files wrote ``0001_x.py``, which sorts before every one of
    them: a fresh database ran it first, every other database out of order. The setting contradicts the folder."""
    create_migration(tmp_path, "first", now=datetime(2026, 12, 5, 8, 0, tzinfo=UTC))
    with pytest.raises(ConfigInvalidError) as info:
        create_migration(tmp_path, "second", sequential=True)
    assert "20261205080000_first.py" in info.value.message and "sequential" in info.value.message
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["20261205080000_first.py"]  # nothing written


def test_a_sequential_create_keeps_the_folders_width_and_never_writes_a_number_that_sorts_first(tmp_path: Path) -> None:
    """After ``9999_x.py`` create wrote ``10000_y.py``: file names sort as text, so it ran before 9999 (and before
    every file from 1000 up, in a fresh database). A folder numbered on five digits keeps five."""
    (tmp_path / "9999_x.py").write_text("def up(ctx): pass\n")
    with pytest.raises(ConfigInvalidError) as info:
        create_migration(tmp_path, "y", sequential=True)
    assert info.value.exit_code == 6 and "10000" in info.value.message and "9999_" in info.value.message
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["9999_x.py"]  # nothing written
    (tmp_path / "9999_x.py").rename(tmp_path / "09999_x.py")
    assert create_migration(tmp_path, "y", sequential=True).name == "10000_y.py"
    assert sorted(p.name for p in tmp_path.glob("*.py")) == ["09999_x.py", "10000_y.py"]
    folder = tmp_path / "wide"
    folder.mkdir()
    (folder / "00005_a.py").write_text("def up(ctx): pass\n")
    assert create_migration(folder, "b", sequential=True).name == "00006_b.py"


def test_a_higher_number_that_sorts_first_as_text_is_refused(tmp_path: Path) -> None:
    """A ``10000_y.py`` named by hand beside ``9999_x.py`` sorts first and ran first, silently: names sort as text.
    Every command that reads the folder refuses it (43), naming the pair; the same width, or a timestamp, is fine."""
    for name in ("0001_a.py", "9999_x.py", "10000_y.py"):
        (tmp_path / name).write_text("def up(ctx): pass\n")
    with pytest.raises(DuplicateVersionError) as info:
        discover(tmp_path)
    assert info.value.exit_code == 43 and "10000_y.py sorts before 9999_x.py" in info.value.message
    assert info.value.details["files"] == ["10000_y.py", "9999_x.py"]
    (tmp_path / "9999_x.py").rename(tmp_path / "09999_x.py")
    assert [f.name for f in discover(tmp_path)] == ["0001_a.py", "09999_x.py", "10000_y.py"]
    (tmp_path / "20240101000000_t.py").write_text("def up(ctx): pass\n")  # a later switch to timestamps sorts after
    assert [f.name for f in discover(tmp_path)][-1] == "20240101000000_t.py"


def test_a_file_edited_within_the_same_second_to_the_same_size_runs_its_new_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Python's bytecode cache trusts a cached file whose recorded time (whole seconds) and size
    match: the loader must not, and must leave no ``__pycache__`` among the migrations."""
    monkeypatch.setattr("sys.dont_write_bytecode", False)  # as on a machine that caches bytecode
    path = tmp_path / "0001_a.py"
    path.write_text("VALUE = 1\ndef up(ctx): pass\n")
    stamp = path.stat().st_mtime_ns
    assert load(discover(tmp_path)[0]).module.VALUE == 1  # type: ignore[union-attr]
    path.write_text("VALUE = 2\ndef up(ctx): pass\n")  # a rolling deploy's fix: the same size
    os.utime(path, ns=(stamp, stamp))  # and, as within one second, the same recorded time
    assert load(discover(tmp_path)[0]).module.VALUE == 2  # type: ignore[union-attr]
    assert not (tmp_path / "__pycache__").exists()
