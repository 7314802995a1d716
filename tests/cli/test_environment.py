"""Settings from a .env file (read by default, --env-file, --no-env) and a URI fetched at run
time (uri_factory, uri_command), as a user runs them from the project folder."""

from __future__ import annotations

import json
import sys

SEES_THE_DOTENV = """
import os

def up(ctx):
    ctx.db.marks.insert_one({"seen": os.environ.get("APP_FLAG")})
"""


def without_connection(project) -> None:  # type: ignore[no-untyped-def]
    """The project file says nothing of the server: the URI must come from elsewhere."""
    project.config.write_text('[mongoshift]\nmigrations_dir = "migrations"\n', encoding="utf-8")


def test_dotenv_is_read_by_default_and_exported_env_file_and_no_env(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    without_connection(project)
    project.add("0001_a.py", SEES_THE_DOTENV)
    (project.root / ".env").write_text(f"MONGOSHIFT_URI={project.uri}\nMONGOSHIFT_DB={project.db}\nAPP_FLAG='from .env'\n", encoding="utf-8")
    applied = cli(project, "up", "--json")
    assert applied.returncode == 0, applied.stderr
    assert sync_client[project.db].marks.find_one({}, {"_id": 0}) == {"seen": "from .env"}  # the migration saw it too

    ignored = cli(project, "status", "--no-env", "--json")
    assert ignored.returncode == 6 and "no server given" in json.loads(ignored.stdout)["error"]["message"]

    (project.root / "deploy.env").write_text(f"MONGOSHIFT_URI={project.uri}\nMONGOSHIFT_DB={project.db}_other\n", encoding="utf-8")
    other = cli(project, "status", "--env-file", "deploy.env", "--json")
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["migrations"][0]["state"] == "pending"  # another database: nothing applied there


def test_uri_factory_and_uri_command_fetch_the_uri_when_a_command_connects(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "def up(ctx):\n    pass\n")
    (project.root / "secret_source.py").write_text(f"async def mongo_uri():\n    return {project.uri!r}\n", encoding="utf-8")
    project.config.write_text(
        f'[mongoshift]\nuri_factory = "secret_source:mongo_uri"\ndb = "{project.db}"\nmigrations_dir = "migrations"\n', encoding="utf-8"
    )
    by_factory = cli(project, "up", "--json")
    assert by_factory.returncode == 0, by_factory.stderr
    assert [r["status"] for r in json.loads(by_factory.stdout)["results"]] == ["applied"]

    command = [sys.executable, "-c", f"print({project.uri!r})"]
    project.config.write_text(
        f'[mongoshift]\nuri_command = {json.dumps(command)}\ndb = "{project.db}"\nmigrations_dir = "migrations"\n', encoding="utf-8"
    )
    by_command = cli(project, "status", "--json")
    assert by_command.returncode == 0, by_command.stderr
    assert json.loads(by_command.stdout)["migrations"][0]["state"] == "applied"
