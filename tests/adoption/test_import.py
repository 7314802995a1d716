"""``mongoshift import``: changelogs written by the other tools themselves, then status, up and down.

migrate-mongo 14 (npm, run with node) and Beanie's own migration runner write their
changelogs against the test server; mongoshift adopts them without touching them.
pymongo-migrate and mongodb-migrations records are written in the shapes their
published source writes (docs/adoption.md).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from mongoshift.api.adoption import import_history
from mongoshift.api.migrations import down, status as migration_status, up

from ..conftest import cli_env
from ..node_tools import NodePackages

MARK = """
def up(ctx):
    ctx.db.marks.insert_one({{"file": "{name}"}})

def down(ctx):
    ctx.db.marks.delete_many({{"file": "{name}"}})
"""

MIGRATE_MONGO_CONFIG = """
module.exports = {{
  mongodb: {{ url: {uri}, databaseName: {db}, options: {{}} }},
  migrationsDir: "migrations",
  changelogCollectionName: "changelog",
  lockCollectionName: "changelog_lock",
  lockTtl: 0,
  migrationFileExtension: ".js",
  useFileHash: false,
  moduleSystem: "commonjs",
}};
"""

MIGRATE_MONGO_FILE = """
module.exports = {{
  async up(db) {{ await db.collection("seen_by_node").insertOne({{ file: {name} }}); }},
  async down(db) {{ await db.collection("seen_by_node").deleteMany({{ file: {name} }}); }},
}};
"""


def _add_marked(project, *names: str) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        project.add(f"{name}.py", MARK.format(name=name))


def _json(result: subprocess.CompletedProcess[str]) -> dict:  # type: ignore[type-arg]
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


@pytest.fixture
def migrate_mongo_history(node_packages: NodePackages, project, tmp_path: Path):  # type: ignore[no-untyped-def]
    """migrate-mongo 14 applies two files to the test database, as a Node team would have."""
    folder = tmp_path / "node-project"
    (folder / "migrations").mkdir(parents=True)
    (folder / "migrate-mongo-config.js").write_text(
        MIGRATE_MONGO_CONFIG.format(uri=json.dumps(project.uri), db=json.dumps(project.db))
    )
    for name in ("20240101000000-create-users.js", "20240102000000-add-Email-index.js"):
        (folder / "migrations" / name).write_text(MIGRATE_MONGO_FILE.format(name=json.dumps(name)))
    result = subprocess.run(
        [str(node_packages.bin("migrate-mongo")), "up"], cwd=folder, env=node_packages.env(), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return folder


async def test_migrate_mongo_changelog_is_adopted_then_up_runs_only_the_rest_and_down_refuses(
    project, migrate_mongo_history, sync_client
, cli) -> None:  # type: ignore[no-untyped-def]
    db = sync_client[project.db]
    theirs = list(db.changelog.find({}, sort=[("_id", 1)]))
    assert [d["fileName"] for d in theirs] == ["20240101000000-create-users.js", "20240102000000-add-Email-index.js"]
    _add_marked(project, "20240101000000_create_users", "20240102000000_add_email_index", "20240103000000_add_roles")

    dry = await import_history(project.settings(), "migrate-mongo", dry_run=True)
    assert dry.dry_run and len(dry.adopted) == 2
    assert db[_changelog()].count_documents({}) == 0  # a dry run writes nothing

    report = _json(cli(project, "import", "--from", "migrate-mongo", "--json"))
    assert [(r["name"], r["source_name"]) for r in report["adopted"]] == [
        ("20240101000000_create_users.py", "20240101000000-create-users.js"),
        ("20240102000000_add_email_index.py", "20240102000000-add-Email-index.js"),
    ]
    assert report["batch"] == 1
    ours = {d["name"]: d for d in db[_changelog()].find()}
    for doc in theirs:  # the times are the other tool's, to the millisecond
        name = report["adopted"][theirs.index(doc)]["name"]
        assert ours[name]["applied_at"] == doc["appliedAt"]
        assert ours[name]["origin"] == "migrate-mongo" and ours[name]["status"] == "applied"
    assert list(db.changelog.find({}, sort=[("_id", 1)])) == theirs  # the source is only read

    again = await import_history(project.settings(), "migrate-mongo")  # a re-import is stable
    assert again.adopted == [] and len(again.kept) == 2
    assert {d["name"]: d["batch"] for d in db[_changelog()].find()} == {n: 1 for n in ours}

    status = _json(cli(project, "status", "--json"))["migrations"]
    assert [(r["state"], r["origin"]) for r in status] == [("applied", "migrate-mongo"), ("applied", "migrate-mongo"), ("pending", None)]

    await up(project.settings())
    assert [d["file"] for d in db.marks.find()] == ["20240103000000_add_roles"]  # only what migrate-mongo had not applied

    await down(project.settings())  # mongoshift's own batch rolls back
    for args in (["down"], ["dry-run", "down"]):  # the last batch left is the imported one
        refused = cli(project, *args)
        assert refused.returncode == 13, (args, refused.stderr)
        assert "never ran" in refused.stderr
    assert db[_changelog()].count_documents({"status": "applied"}) == 2


def _changelog() -> str:
    return "_mongoshift_migrations"


BEANIE_FILE = """
from beanie import Document, free_fall_migration


class Note(Document):
    title: str

    class Settings:
        name = "notes"


class Forward:
    @free_fall_migration(document_models=[Note])
    async def seed(self, session):
        await Note(title={title!r}).insert(session=session)


class Backward:
    @free_fall_migration(document_models=[Note])
    async def unseed(self, session):
        await Note.find(Note.title == {title!r}, session=session).delete(session=session)
"""


async def test_beanie_migration_log_is_adopted(project, tmp_path: Path, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("beanie", reason="beanie is the optional 'beanie' extra")
    folder = tmp_path / "beanie-migrations"
    folder.mkdir()
    for name in ("20240101000000_first_notes", "20240102000000_second_notes", "20240103000000_third_notes"):
        (folder / f"{name}.py").write_text(textwrap.dedent(BEANIE_FILE.format(title=name)))
    beanie = [sys.executable, "-m", "beanie.executors.migrate", "migrate", "-uri", project.uri, "-db", project.db, "-p", str(folder),
              "--no-use-transaction"]
    for args in ([], ["--backward", "-d", "1"]):  # all three forward, then the last one back
        result = await asyncio.to_thread(subprocess.run, [*beanie, *args], env=cli_env(), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    db = sync_client[project.db]
    assert db.migrations_log.count_documents({"is_current": True, "name": "20240102000000_second_notes.py"}) == 1
    _add_marked(project, "20240101000000_first_notes", "20240102000000_second_notes", "20240103000000_third_notes")

    report = await import_history(project.settings(), "beanie")
    assert [r.name for r in report.adopted] == ["20240101000000_first_notes.py", "20240102000000_second_notes.py"]
    status = await migration_status(project.settings())
    assert [r.state for r in status] == ["applied", "applied", "pending"]  # beanie rolled the third back
    await up(project.settings())
    assert [d["file"] for d in db.marks.find()] == ["20240103000000_third_notes"]
    assert cli(project, "down", "--steps", "2").returncode == 13


async def test_a_beanie_history_rolled_back_to_its_start_adopts_nothing(project, tmp_path: Path, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """Beanie rolled back step by step (``--backward -d N``) to before its first migration marks its root node current:
    a record named ``root``. That was refused as an applied migration without a file (exit 8), and a ``--map`` line
    ``"root" = false`` then adopted every migration Beanie had rolled back (each name sorts before ``root``)."""
    pytest.importorskip("beanie", reason="beanie is the optional 'beanie' extra")
    folder = tmp_path / "beanie-migrations"
    folder.mkdir()
    names = ("20240101000000_first_notes", "20240102000000_second_notes")
    for name in names:
        (folder / f"{name}.py").write_text(textwrap.dedent(BEANIE_FILE.format(title=name)))
    beanie = [sys.executable, "-m", "beanie.executors.migrate", "migrate", "-uri", project.uri, "-db", project.db, "-p", str(folder),
              "--no-use-transaction"]
    for args in ([], ["--backward", "-d", "2"]):  # both forward, then both back
        result = await asyncio.to_thread(subprocess.run, [*beanie, *args], env=cli_env(), capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout + result.stderr
    assert sync_client[project.db].migrations_log.count_documents({"is_current": True, "name": "root"}) == 1
    _add_marked(project, *names)

    result = cli(project, "import", "--from", "beanie", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["adopted"] == []
    assert report["warnings"] == [
        "4 beanie records, the current one Beanie's start (root): Beanie reads that as every migration rolled back, "
        "so none was adopted"
    ]
    assert [r.state for r in await migration_status(project.settings())] == ["pending", "pending"]


async def test_a_beanie_root_record_no_longer_current_is_no_migration(project, sync_client, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rolled back to its start and forward again, Beanie's log keeps a ``root`` record; with migration names that sort
    after it, it was taken for an applied migration without a file (exit 8)."""
    sync_client[project.db].migrations_log.insert_many([
        {"name": "add_a.py", "ts": datetime.datetime(2024, 1, 1), "is_current": False},
        {"name": "root", "ts": datetime.datetime(2024, 1, 2), "is_current": False},
        {"name": "add_a.py", "ts": datetime.datetime(2024, 1, 3), "is_current": False},
        {"name": "zeta_b.py", "ts": datetime.datetime(2024, 1, 4), "is_current": True},
    ])
    _add_marked(project, "20240101000000_a", "20240102000000_b")
    (tmp_path / "map.toml").write_text('"add_a.py" = "20240101000000_a"\n"zeta_b.py" = "20240102000000_b"\n')
    report = await import_history(project.settings(), "beanie", map_file=tmp_path / "map.toml")
    assert [(r.name, r.source_name) for r in report.adopted] == [
        ("20240101000000_a.py", "add_a.py"), ("20240102000000_b.py", "zeta_b.py"),
    ]
    assert report.warnings == []


async def test_a_beanie_log_with_no_current_record_says_why_nothing_was_adopted(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Records, none of them ``is_current``: Beanie's "every migration rolled back". It adopted nothing without a word."""
    sync_client[project.db].migrations_log.insert_many([
        {"name": "20240101000000_a.py", "ts": datetime.datetime(2024, 1, 1), "is_current": False},
        {"name": "20240102000000_b.py", "ts": datetime.datetime(2024, 1, 2), "is_current": False},
    ])
    _add_marked(project, "20240101000000_a", "20240102000000_b")
    report = await import_history(project.settings(), "beanie")
    assert report.adopted == []
    assert report.warnings == [
        "2 beanie records but none marked current (is_current: true): Beanie reads that as every migration rolled back, "
        "so none was adopted"
    ]


@pytest.mark.parametrize(
    ("tool", "collection", "documents"),
    [
        # pymongo-migrate: one {name, applied} per file; applied is null once downgraded
        ("pymongo-migrate", "pymongo_migrate", [
            {"name": "20240101000000_a", "applied": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)},
            {"name": "20240102000000_b", "applied": None},
        ]),
        # mongodb-migrations: {migration_datetime: the file's leading digits, created_at}
        ("mongodb-migrations", "database_migrations", [
            {"migration_datetime": "20240101000000", "created_at": datetime.datetime(2024, 1, 1)},
        ]),
    ],
)
async def test_python_tools_record_shapes(project, sync_client, tool: str, collection: str, documents: list) -> None:  # type: ignore[no-untyped-def, type-arg]
    sync_client[project.db][collection].insert_many(documents)
    _add_marked(project, "20240101000000_a", "20240102000000_b")
    report = (await import_history(project.settings(), tool)).to_json()
    assert [r["name"] for r in report["adopted"]] == ["20240101000000_a.py"]
    assert report["adopted"][0]["applied_at"].startswith("2024-01-01T00:00:00")


def test_unmatched_names_are_refused_unless_mapped(project, sync_client, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    db = sync_client[project.db]
    db.changelog.insert_many([
        {"fileName": "20230101000000-old-name.js", "appliedAt": datetime.datetime(2023, 1, 1), "migrationBlock": 1},
        {"fileName": "20230102000000-dropped.js", "appliedAt": datetime.datetime(2023, 1, 2), "migrationBlock": 1},
    ])
    _add_marked(project, "20230101000000_renamed")
    refused = cli(project, "import", "--from", "migrate-mongo", "--json")
    assert refused.returncode == 8
    assert _json(refused)["error"]["details"]["unmatched"] == ["20230101000000-old-name.js", "20230102000000-dropped.js"]
    assert db[_changelog()].count_documents({}) == 0
    mapping = tmp_path / "map.toml"
    mapping.write_text('"20230101000000-old-name.js" = "20230101000000_renamed"\n"20230102000000-dropped.js" = false\n')
    report = _json(cli(project, "import", "--from", "migrate-mongo", "--map", str(mapping), "--json"))
    assert [r["name"] for r in report["adopted"]] == ["20230101000000_renamed.py"]
    assert report["left_out"] == ["20230102000000-dropped.js"]


async def test_an_import_records_every_file_in_one_write(project, sync_client, mongo_uri: str) -> None:  # type: ignore[no-untyped-def]
    """A record written per file left a killed import half-recorded (195 of 3,000 in a trial), and an ``up`` run before
    the rerun would have run the files the other tool had applied. Every record now goes in one ordered bulk write:
    one command the server carries out whole once it has it, so a kill leaves all of them recorded or none."""
    from pymongo import AsyncMongoClient, monitoring

    from ..conftest import TEST_CLIENT_OPTIONS

    names = [f"2023010100{i:04d}_m" for i in range(300)]
    sync_client[project.db].changelog.insert_many(
        [{"fileName": f"{name.replace('_', '-')}.js", "appliedAt": datetime.datetime(2023, 1, 1), "migrationBlock": 1} for name in names]
    )
    _add_marked(project, *names)

    class Writes(monitoring.CommandListener):
        def __init__(self) -> None:
            self.sizes: list[int] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name in ("update", "insert", "delete") and event.command.get(event.command_name) == _changelog():
                self.sizes.append(len(event.command.get("updates") or event.command.get("documents") or event.command.get("deletes") or []))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    writes = Writes()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[writes], **TEST_CLIENT_OPTIONS)
    try:
        report = await import_history(project.settings(), "migrate-mongo", client=client)
    finally:
        await client.close()
    assert len(report.adopted) == 300
    assert writes.sizes == [300]
    assert sync_client[project.db][_changelog()].count_documents({"status": "applied", "batch": report.batch}) == 300


def test_a_map_line_naming_a_file_that_is_not_there_is_named(project, sync_client, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """A ``--map`` line whose file the folder does not hold (a typo) was refused with "without a file in the migrations
    folder ...; list them in a --map file": what the user had just done. The message now names the map's file."""
    sync_client[project.db].changelog.insert_many([
        {"fileName": "20230101000000-old-name.js", "appliedAt": datetime.datetime(2023, 1, 1), "migrationBlock": 1},
        {"fileName": "20230102000000-other.js", "appliedAt": datetime.datetime(2023, 1, 2), "migrationBlock": 1},
    ])
    _add_marked(project, "20230101000000_renamed")
    mapping = tmp_path / "map.toml"
    mapping.write_text('"20230101000000-old-name.js" = "20230101000000_renamd"\n')
    refused = cli(project, "import", "--from", "migrate-mongo", "--map", str(mapping), "--json")
    assert refused.returncode == 8
    error = _json(refused)["error"]
    assert error["details"]["unmatched"] == ["20230101000000-old-name.js", "20230102000000-other.js"]
    assert error["details"]["mapped_missing"] == {"20230101000000-old-name.js": "20230101000000_renamd.py"}
    assert error["message"] == (
        "1 applied migrate-mongo migration without a file in the migrations folder: 20230102000000-other.js; add the files, "
        "or list them in a --map file; the --map file names 1 file the migrations folder does not hold: "
        "20230101000000-old-name.js → 20230101000000_renamd.py; add the files, or correct their names in the --map file "
        "(docs/adoption.md)"
    ), error["message"]
    assert sync_client[project.db][_changelog()].count_documents({}) == 0


def test_an_import_from_a_collection_that_holds_nothing_says_so(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A misspelt ``--collection`` said 'recorded 0 file(s) applied' and nothing else."""
    _add_marked(project, "20230101000000_first")
    missing = cli(project, "import", "--from", "migrate-mongo", "--collection", "chnagelog")
    assert missing.returncode == 0 and "collection 'chnagelog' does not exist in this database" in missing.stderr
    sync_client[project.db].create_collection("empty_log")
    empty = cli(project, "import", "--from", "migrate-mongo", "--collection", "empty_log", "--json")
    assert empty.returncode == 0 and _json(empty)["warnings"] == [
        "collection 'empty_log' holds no record in this database: nothing of migrate-mongo's history was found "
        "(is the name right? --collection names it when not 'changelog')"
    ]


@pytest.mark.parametrize(
    ("collection", "said"),
    [
        ("change$log", "not a collection name"),  # the driver's InvalidName: exit 1, "a bug, please report it"
        ("a..b", "not a collection name"),
        ("", "not a collection name"),  # silently read the default 'changelog'
        ("system.users", "belong to the server"),
        ("_mongoshift_migrations", "one of mongoshift's own collections"),
    ],
)
def test_a_collection_import_cannot_read_is_refused_as_a_bad_flag(project, collection: str, said: str, cli) -> None:  # type: ignore[no-untyped-def]
    _add_marked(project, "20230101000000_first")
    refused = cli(project, "import", "--from", "migrate-mongo", "--collection", collection, "--json")
    assert refused.returncode == 6, refused.stdout + refused.stderr
    error = _json(refused)["error"]
    assert error["kind"] == "config_invalid" and said in error["message"]


def test_non_empty_target_needs_force_and_keeps_what_mongoshift_applied(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    _add_marked(project, "20240101000000_a", "20240102000000_b")
    assert cli(project, "up", "--to", "20240101000000_a").returncode == 0
    sync_client[project.db].mongo_changes.insert_many([
        {"fileName": "20240101000000_a.js", "appliedAt": datetime.datetime(2024, 1, 1)},
        {"fileName": "20240102000000_b.js", "appliedAt": datetime.datetime(2024, 1, 2)},
    ])
    refused = cli(project, "import", "--from", "migrate-mongo", "--collection", "mongo_changes", "--json")
    assert refused.returncode == 17 and _json(refused)["error"]["kind"] == "target_not_empty"
    report = _json(cli(project, "import", "--from", "migrate-mongo", "--collection", "mongo_changes", "--force", "--json"))
    assert report["kept"] == ["20240101000000_a.py"] and [r["name"] for r in report["adopted"]] == ["20240102000000_b.py"]
    assert report["batch"] == 2  # after the current maximum
    records = {d["name"]: d for d in sync_client[project.db][_changelog()].find()}
    assert "origin" not in records["20240101000000_a.py"]


def test_a_record_naming_no_file_is_reported_as_left_out(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[project.db].changelog.insert_many([
        {"fileName": "20240101000000-a.js", "appliedAt": datetime.datetime(2024, 1, 1), "migrationBlock": 1},
        {"appliedAt": datetime.datetime(2024, 1, 2), "migrationBlock": 1},  # its file name lost
        {"fileName": None, "appliedAt": datetime.datetime(2024, 1, 3), "migrationBlock": 1},
        {"fileName": 20240104000000, "appliedAt": datetime.datetime(2024, 1, 4), "migrationBlock": 1},  # not text
        {"fileName": True, "appliedAt": datetime.datetime(2024, 1, 5), "migrationBlock": 1},
        {"fileName": "---", "appliedAt": datetime.datetime(2024, 1, 6), "migrationBlock": 1},  # no letter or digit
    ])
    _add_marked(project, "20240101000000_a")
    report = _json(cli(project, "import", "--from", "migrate-mongo", "--dry-run", "--json"))
    assert [r["name"] for r in report["adopted"]] == ["20240101000000_a.py"]
    assert report["unnamed"] == 5 and report["left_out"] == []
    told = cli(project, "import", "--from", "migrate-mongo")
    assert told.returncode == 0 and "5 left out for naming no file" in told.stdout
    assert "5 migrate-mongo records without a file name (the field missing, null, not text, or text without a letter or digit)" in told.stderr


def test_two_records_that_match_one_file_are_refused_until_mapped(project, sync_client, tmp_path: Path, cli) -> None:  # type: ignore[no-untyped-def]
    """Two applied migrate-mongo files whose names give one mongoshift file (``...-add-users.js`` and
    ``..._add_users.ts``) were both "recorded": the summary said 3 files for 2 records written, the first row's source
    was overwritten by the second, and which of the two migrations the file ports was never asked. An empty file name
    was taken for a name and refused the whole import as unmatched (``without a file in the migrations folder: ;``)."""
    db = sync_client[project.db]
    db.changelog.insert_many([
        {"fileName": "20240101000000-add-users.js", "appliedAt": datetime.datetime(2024, 1, 1), "migrationBlock": 1},
        {"fileName": "20240101000000_add_users.ts", "appliedAt": datetime.datetime(2024, 1, 2), "migrationBlock": 2},
        {"fileName": "20240102000000-add-roles.js", "appliedAt": datetime.datetime(2024, 1, 3), "migrationBlock": 2},
        {"fileName": "", "appliedAt": datetime.datetime(2024, 1, 4), "migrationBlock": 2},
    ])
    _add_marked(project, "20240101000000_add_users", "20240102000000_add_roles")
    refused = cli(project, "import", "--from", "migrate-mongo", "--json")
    assert refused.returncode == 8, refused.stdout + refused.stderr
    error = _json(refused)["error"]
    assert error["details"]["shared"] == {"20240101000000_add_users.py": ["20240101000000-add-users.js", "20240101000000_add_users.ts"]}
    assert "2 applied migrate-mongo migrations match one file: 20240101000000_add_users.py" in error["message"]
    assert db[_changelog()].count_documents({}) == 0
    mapping = tmp_path / "map.toml"
    mapping.write_text('"20240101000000_add_users.ts" = false\n')
    report = _json(cli(project, "import", "--from", "migrate-mongo", "--map", str(mapping), "--json"))
    assert [(r["name"], r["source_name"]) for r in report["adopted"]] == [
        ("20240101000000_add_users.py", "20240101000000-add-users.js"), ("20240102000000_add_roles.py", "20240102000000-add-roles.js")
    ]
    assert report["left_out"] == ["20240101000000_add_users.ts"] and report["unnamed"] == 1
    assert db[_changelog()].count_documents({}) == 2


def test_a_reimport_names_the_files_the_other_tool_rolled_back_since(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """migrate-mongo's ``down`` deletes its record (and undoes the change); a re-import kept the file applied here and
    said nothing, so ``up`` would never run it again although the database no longer has its change."""
    changelog = sync_client[project.db].changelog
    changelog.insert_many([
        {"fileName": "20240101000000-a.js", "appliedAt": datetime.datetime(2024, 1, 1), "migrationBlock": 1},
        {"fileName": "20240102000000-b.js", "appliedAt": datetime.datetime(2024, 1, 2), "migrationBlock": 1},
    ])
    _add_marked(project, "20240101000000_a", "20240102000000_b")
    assert cli(project, "import", "--from", "migrate-mongo").returncode == 0
    changelog.delete_one({"fileName": "20240102000000-b.js"})  # migrate-mongo down: the record goes

    again = cli(project, "import", "--from", "migrate-mongo", "--json")
    assert again.returncode == 0, again.stderr
    said = (
        "1 file imported earlier from migrate-mongo is no longer applied there (rolled back since?): 20240102000000_b.py "
        "(20240102000000-b.js); it stays applied here, so 'up' will not run it: check the database, and write a new "
        "migration if its change is gone"
    )
    assert _json(again)["warnings"] == [said]
    assert said in again.stderr
