"""``--json``: stdout carries exactly one JSON document, whatever the project's own code prints."""

from __future__ import annotations

import json
import subprocess
import sys

from ..conftest import cli_env, cli_process

SYNC_PRINTS = """
import os
import subprocess
import sys

def up(ctx):
    print("migrating...")
    os.write(1, b"written to descriptor 1\\n")
    subprocess.run([sys.executable, "-c", "print('a child process prints')"], check=True)
    ctx.db.marks.insert_one({"file": "sync"})
"""

ASYNC_PRINTS = """
async def up(ctx):
    print("async migrating...")
    await ctx.db.marks.insert_one({"file": "async"})
"""

BACKGROUND_PRINTS = """
from mongoshift import Background

def migrate(doc, ctx):
    print("transforming a document")
    doc["v2"] = True
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=10, pause_ms=0)
"""

HOOKS = """
def before_all(ctx):
    print("hook: before all")

async def after_each(name, duration_ms, ctx, info):
    print("hook: after", name)
"""

FACTORY = "def mongo_uri():\n    print('fetching the uri')\n    return {uri!r}\n"

PRINTED = ["migrating...", "written to descriptor 1", "a child process prints", "async migrating...", "transforming a document",
           "hook: before all", "hook: after 0001_sync.py", "fetching the uri"]


def test_user_output_never_breaks_the_json_document(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].people.insert_many([{"_id": i, "__v": 1} for i in range(3)])
    project.add("0001_sync.py", SYNC_PRINTS)
    project.add("0002_async.py", ASYNC_PRINTS)
    project.add("0003_people.py", BACKGROUND_PRINTS)
    (project.root / "hooks.py").write_text(HOOKS, encoding="utf-8")
    (project.root / "uri_source.py").write_text(FACTORY.format(uri=project.uri), encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "uri_source:mongo_uri"\ndb = "{project.db}"\nmigrations_dir = "migrations"\n'
        'hooks = "hooks.py"\nbackground_inline = true\n',
        encoding="utf-8",
    )
    result = cli_process(project, "up", "--json")  # a real process: descriptor 1 and a child's output too
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # the whole of stdout is one document
    assert [r["status"] for r in document["results"]] == ["applied", "applied", "applied"]
    for line in PRINTED:
        assert line in result.stderr and line not in result.stdout
    assert sync_client[project.db].people.count_documents({"v2": True}) == 3


def test_a_failing_migration_that_printed_still_gives_one_error_document(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_fails.py", "def up(ctx):\n    print('about to fail')\n    raise RuntimeError('no')\n")
    result = cli(project, "up", "--json")
    assert result.returncode == 7
    assert json.loads(result.stdout)["error"]["kind"] == "execution_failed"
    assert "about to fail" in result.stderr


def test_without_json_user_output_stays_on_stdout(project, cli) -> None:  # type: ignore[no-untyped-def]
    """Documented: a table and the project's prints share stdout when no document is asked for."""
    project.add("0001_prints.py", "def up(ctx):\n    print('migrating...')\n")
    result = cli(project, "up")
    assert result.returncode == 0, result.stderr
    assert "migrating..." in result.stdout


def test_json_through_a_pipe_like_a_user(project) -> None:  # type: ignore[no-untyped-def]
    """The issue's reproduction: ``mongoshift up --json | python -c 'json.load(sys.stdin)'``."""
    project.add("0001_prints.py", "def up(ctx):\n    print('migrating...')\n")
    up = subprocess.Popen(
        [sys.executable, "-m", "mongoshift", "up", "--json"], cwd=project.root, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    reader = subprocess.run(
        [sys.executable, "-c", "import json, sys; json.load(sys.stdin)"], stdin=up.stdout, capture_output=True, text=True, timeout=120, check=False
    )
    assert up.stdout is not None
    up.stdout.close()
    assert up.wait(timeout=120) == 0
    assert reader.returncode == 0, reader.stderr


def test_version_plain_and_as_json(project, cli) -> None:  # type: ignore[no-untyped-def]
    from importlib.metadata import version

    plain = cli(project, "--version")
    assert plain.returncode == 0 and plain.stdout == f"mongoshift, version {version('mongoshift')}\n"
    as_json = cli(project, "--json", "--version")
    assert as_json.returncode == 0 and json.loads(as_json.stdout) == {"version": version("mongoshift")}
    assert cli(project, "-V").stdout == plain.stdout  # the short form most tools take


def test_a_file_given_as_the_migrations_folder_is_44(project, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(project, "--json", "--dir", str(project.config), "status")
    assert result.returncode == 44 and json.loads(result.stdout)["error"]["kind"] == "io_failed"
    assert "it is a file, not a folder" in result.stderr
