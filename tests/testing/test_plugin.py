"""The pytest plugin for users (``mongoshift.testing``), run on sample user projects by ``pytester``.

The user projects' sessions run in a subprocess each, as a user's would (in-process runs
unload the lazily imported mongoshift modules between runs), and share this suite's server
through ``MONGOSHIFT_TEST_URI``, but one, which checks that the plugin starts its own.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

pytest_plugins = ["pytester"]

USERS = '''
def up(ctx):
    ctx.db.users.insert_many([{"first": f"Ada{i}", "last": "Lovelace"} for i in range(30)])


def down(ctx):
    ctx.db.users.drop()
'''

EMAIL_INDEX = '''
async def up(ctx):
    await ctx.db.users.create_index("first", name="by_first")


async def down(ctx):
    await ctx.db.users.drop_index("by_first")
'''

FULL_NAMES = '''
from mongoshift import Background


def migrate(doc, ctx):
    doc["full_name"] = f"{doc.pop('first')} {doc.pop('last')}"
    return doc


background = Background(collection="users", from_version=0, to_version=1, migrate=migrate, batch_size=7)
'''

ROUND_TRIP_TESTS = '''
import pytest


def test_up_and_down_round_trip(mongoshift_project, mongoshift_db):
    mongoshift_project.migrate_sync(to="0002_index")
    assert "by_first" in mongoshift_db.users.index_information()
    assert mongoshift_db.users.count_documents({}) == 30
    mongoshift_project.rollback_sync(to="0001_users")
    assert "by_first" not in mongoshift_db.users.index_information()
    mongoshift_project.rollback_sync()
    assert "users" not in mongoshift_db.list_collection_names()
    assert [row.state for row in mongoshift_project.status_sync()] == ["reverted", "reverted", "pending"]


async def test_the_async_twins(mongoshift_project, mongoshift_db):
    report = await mongoshift_project.migrate(to="0001_users")
    assert [r.name for r in report.results] == ["0001_users.py"]
    await mongoshift_project.rollback()
    assert mongoshift_db.users.count_documents({}) == 0


def test_a_background_transform(mongoshift_project, mongoshift_db):
    mongoshift_project.migrate_sync()
    assert mongoshift_db.users.count_documents({"full_name": {"$exists": True}}) == 0  # up only registers it
    report = mongoshift_project.run_background_sync("0003_full_names")
    assert report.status == "completed"
    mongoshift_project.assert_at_version("users", 1)
    assert mongoshift_db.users.count_documents({"full_name": {"$regex": "^Ada[0-9]+ Lovelace$"}}) == 30


def test_each_test_has_a_fresh_database(mongoshift_db):
    assert mongoshift_db.list_collection_names() == []


def test_documents_left_behind_fail_the_assertion(mongoshift_project):
    mongoshift_project.migrate_sync()
    mongoshift_project.assert_at_version("users", 1)
'''


@pytest.fixture
def user_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mongo_uri: str) -> pytest.Pytester:
    """A user's project: three migrations and pytest settings, on this suite's server."""
    monkeypatch.setenv("MONGOSHIFT_TEST_URI", mongo_uri)
    monkeypatch.setenv("MONGOSHIFT_URI", "mongodb://production.invalid:1")  # must never be used
    pytester.makefile(".toml", mongoshift='[mongoshift]\nmigrations_dir = "migrations"\n')
    pytester.makeini("[pytest]\nasyncio_mode = auto\nasyncio_default_fixture_loop_scope = function\n")
    migrations = pytester.mkdir("migrations")
    for name, source in (("0001_users", USERS), ("0002_index", EMAIL_INDEX), ("0003_full_names", FULL_NAMES)):
        (migrations / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    return pytester


def test_a_round_trip_a_background_transform_and_the_version_assertion(user_project: pytest.Pytester) -> None:
    user_project.makepyfile(test_migrations=ROUND_TRIP_TESTS)
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines(
        ["*AssertionError: 30 of 30 documents in 'users' are not at __v 1: 30 at 0*", "*1 failed, 4 passed*"]
    )
    assert "Lovelace" not in result.stdout.str().split("short test summary")[0].split("AssertionError")[-1]


def test_a_failing_migration_fails_the_users_test_with_its_name_and_error(user_project: pytest.Pytester, mongo_uri: str) -> None:
    (user_project.path / "migrations" / "0002_index.py").write_text(
        "def up(ctx):\n    raise ValueError('the index needs a field that is not there')\n", encoding="utf-8"
    )
    user_project.makepyfile(
        test_broken="def test_up(mongoshift_project):\n    mongoshift_project.migrate_sync()\n"
    )
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "E *ExecutionFailedError: 0002_index.py failed: ValueError: the index needs a field that is not there",
            "FAILED test_broken.py::test_up - *ExecutionFailedError*",
        ]
    )
    output = result.stdout.str()
    assert "migrations/0002_index.py:2: ValueError" in output  # the user's own line is shown
    assert "executor.py" not in output and "concurrent/futures" not in output  # mongoshift's insides are not
    assert mongo_uri not in output  # nor the URI (a real one may hold a password)


def test_a_background_migration_that_does_not_complete_fails_the_test(user_project: pytest.Pytester) -> None:
    (user_project.path / "migrations" / "0003_full_names.py").write_text(
        textwrap.dedent(FULL_NAMES).replace("doc[\"full_name\"] =", "raise KeyError('middle')\n    doc[\"full_name\"] ="),
        encoding="utf-8",
    )
    user_project.makepyfile(
        test_bg=(
            "def test_bg(mongoshift_project):\n"
            "    mongoshift_project.migrate_sync()\n"
            "    mongoshift_project.run_background_sync('0003_full_names')\n"
        )
    )
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: background migration 0003_full_names.py ended failed, not completed*"])


def test_the_projects_env_file_is_not_read(user_project: pytest.Pytester) -> None:
    """Like the environment, the project's .env never reaches the fixtures: its migrations folder is not
    used, and a name the project would refuse (the test server's variable, say) does not fail them."""
    other = user_project.mkdir("other_migrations")
    (other / "0001_evil.py").write_text("def up(ctx):\n    raise RuntimeError('the .env was read')\n", encoding="utf-8")
    (user_project.path / ".env").write_text(
        "MONGOSHIFT_MIGRATIONS_DIR=other_migrations\nMONGOSHIFT_TEST_URI=mongodb://elsewhere.invalid:1\n", encoding="utf-8"
    )
    user_project.makepyfile(test_env="def test_up(mongoshift_project):\n    mongoshift_project.migrate_sync()\n")
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_test_uri_with_a_password_is_shown_masked(user_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest prints a failing test's values (``-l``; a fixture's, when it fails): the URI's password is masked there, and in the settings' repr."""
    monkeypatch.setenv("MONGOSHIFT_TEST_URI", "mongodb://ci:s3cret@127.0.0.1:1/?authSource=admin")
    user_project.makepyfile(
        test_shown=(
            "from mongoshift import load_settings\n"
            "def test_uri(mongoshift_uri):\n"
            "    settings = load_settings({'uri': mongoshift_uri, 'db': 'x'}, environ={}, env_file=False)\n"
            "    assert mongoshift_uri.endswith('authSource=admin') and settings.uri == mongoshift_uri\n"
            "    assert repr(settings) == 0\n"
        )
    )
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider", "-l")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "mongoshift_uri = 'mongodb://***@127.0.0.1:1/?authSource=admin'" in output
    assert "uri='mongodb://***@127.0.0.1:1/?authSource=admin'" in output  # the settings' repr
    assert "s3cret" not in output


@pytest.mark.skipif(importlib.util.find_spec("mongoeco") is None, reason="needs mongoeco (mongoshift[embedded])")
def test_without_a_test_uri_the_session_starts_its_own_embedded_server(user_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MONGOSHIFT_TEST_URI")
    user_project.makepyfile(
        test_uri=(
            "def test_a(mongoshift_uri, mongoshift_project):\n"
            "    assert mongoshift_project.settings.uri == mongoshift_uri\n"
            "    assert mongoshift_project.db.command('ping')['ok'] == 1\n"
            "def test_b(mongoshift_uri):\n"
            "    assert mongoshift_uri.startswith('mongodb://127.0.0.1:')\n"
        )
    )
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_a_project_that_does_not_use_the_fixtures_starts_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--fixtures")
    result.stdout.fnmatch_lines(["*mongoshift_project*", "*mongoshift_uri*"])  # registered by the entry point
    code = "import json, sys\nimport mongoshift.testing.plugin\nprint(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    heavy = ("pymongo", "mongoeco", "mongoshift.api", "mongoshift.embedded", "mongoshift.project", "mongoshift.testing.harness")
    assert "pytest" in loaded  # the check itself works
    assert [m for m in loaded if any(m == h or m.startswith(h + ".") for h in heavy)] == []


def _doc_blocks(after: str) -> list[str]:
    """The python code blocks of docs/testing.md's section ``after``, as printed there."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "testing.md").read_text(encoding="utf-8")
    section = text.split(f"## {after}\n", 1)[1].split("\n## ", 1)[0]
    return [block.split("```", 1)[0].lstrip("\n") for block in section.split("```python")[1:]]


def test_the_docs_examples_pass_as_printed(user_project: pytest.Pytester) -> None:
    """docs/testing.md's round trip and background examples, copied from the page, pass on a project of the files
    they name (the seed migration adds the same two users the background example inserts, as a reader's might)."""
    migrations = user_project.path / "migrations"
    for old in migrations.iterdir():
        old.unlink()
    round_trip, round_trip_async = _doc_blocks("An up/down round trip")
    migration, background_test = _doc_blocks("A background transform")
    assert migration.startswith("# migrations/0003_full_names.py")
    (migrations / "0001_seed_users.py").write_text(
        "def up(ctx):\n    ctx.db.users.insert_many([{'first': 'Ada', 'last': 'Lovelace'}, {'first': 'Alan', 'last': 'Turing'}])\n\n\n"
        "def down(ctx):\n    ctx.db.users.drop()\n",
        encoding="utf-8",
    )
    (migrations / "0002_users_email_index.py").write_text(
        "def up(ctx):\n    ctx.db.users.create_index('email')\n\n\ndef down(ctx):\n    ctx.db.users.drop_index('email_1')\n",
        encoding="utf-8",
    )
    (migrations / "0003_full_names.py").write_text(migration, encoding="utf-8")
    user_project.makepyfile(test_round_trip=round_trip, test_round_trip_async=round_trip_async, test_background=background_test)
    result = user_project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
