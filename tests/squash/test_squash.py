"""``mongoshift squash --to NAME``: one file for the applied start of the line, and every database it meets."""

from __future__ import annotations

import json
import shutil

import pytest

from mongoshift.api.hygiene import squash
from mongoshift.api.migrations import down, status, up
from mongoshift.errors import ChecksumMismatchError, FileNotFoundMigrationError, IrreversibleMigrationError, SquashRefusedError

# Each file appends its name to ``marks`` going up and removes it going down: the collection is the
# proof of which bodies ran, in which order.
MARK = '''
async def up(ctx):
    await ctx.db.marks.insert_one({{"file": "{name}"}})

def down(ctx):
    ctx.db.marks.delete_one({{"file": "{name}"}})
'''


def marks(sync_client, project) -> list[str]:  # type: ignore[no-untyped-def]
    return [d["file"] for d in sync_client[project.db].marks.find(sort=[("_id", 1)])]


def line(project, *names: str) -> None:  # type: ignore[no-untyped-def]
    for name in names:
        project.add(f"{name}.py", MARK.format(name=name))


async def test_squash_replaces_the_files_and_an_up_to_date_database_never_runs_it(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c", "0004_d")
    await up(project.settings(), to="0003_c")
    assert cli(project, "squash", "--to", "0003_c").returncode == 42  # not interactive: --yes is needed
    dry = json.loads(cli(project, "squash", "--to", "0003_c", "--dry-run", "--json").stdout)
    assert dry["dry_run"] is True and dry["file"] is None and dry["replaced"] == ["0001_a.py", "0002_b.py", "0003_c.py"]
    assert not (project.migrations / "_squashed").exists() and not (project.migrations / "0003_squashed.py").exists()

    written = json.loads(cli(project, "squash", "--to", "0003_c", "--yes", "--json").stdout)
    assert written == {
        "to": "0003_c.py", "name": "0003_squashed.py", "replaced": ["0001_a.py", "0002_b.py", "0003_c.py"],
        "dry_run": False, "file": "0003_squashed.py", "tenants": None, "runs": 3,
    }
    assert sorted(p.name for p in project.migrations.glob("*.py")) == ["0003_squashed.py", "0004_d.py"]
    assert sorted(p.name for p in (project.migrations / "_squashed" / "0003_squashed").iterdir()) == ["0001_a.py", "0002_b.py", "0003_c.py"]

    rows = await status(project.settings())
    assert [(r.name, r.shown_state, r.checksum) for r in rows] == [
        ("0003_squashed.py", "applied (squashed files applied)", "ok"), ("0004_d.py", "pending", None)
    ]
    report = await up(project.settings())
    assert [r.name for r in report.results] == ["0004_d.py"]  # the squash file never runs here
    assert marks(sync_client, project) == ["0001_a", "0002_b", "0003_c", "0004_d"]
    names = {d["name"]: d["status"] for d in sync_client[project.db]["_mongoshift_migrations"].find()}
    assert names == {"0001_a.py": "applied", "0002_b.py": "applied", "0003_c.py": "applied", "0004_d.py": "applied"}  # history kept
    assert cli(project, "status", "--check").returncode == 0
    archived = str(project.migrations / "_squashed" / "0003_squashed" / "0002_b.py")  # a path, as a shell completes it
    for args in (["down", "0002_b"], ["down", "--to", "0002_b"], ["up", "0002_b"], ["redo", "0002_b"], ["up", archived]):
        named = cli(project, *args, "--json")
        assert named.returncode == 8, args
        assert json.loads(named.stdout)["error"]["details"]["squashed_into"] == "0003_squashed.py"


async def test_a_new_database_runs_the_squash_file_and_rolls_it_back_as_one(project, sync_client, db_name) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    sync_client.drop_database(db_name)  # a new database: the same project, nothing applied

    rows = await status(project.settings())
    assert [(r.name, r.state) for r in rows] == [("0002_squashed.py", "pending"), ("0003_c.py", "pending")]
    report = await up(project.settings())
    assert [(r.name, r.status) for r in report.results] == [
        ("0001_a.py", "applied"), ("0002_b.py", "applied"), ("0002_squashed.py", "applied"), ("0003_c.py", "applied")
    ]
    assert marks(sync_client, project) == ["0001_a", "0002_b", "0003_c"]
    assert [(r.name, r.state, r.checksum) for r in await status(project.settings())] == [
        ("0002_squashed.py", "applied", "ok"), ("0003_c.py", "applied", "ok")
    ]

    await down(project.settings(), to="0002_squashed")  # only what follows the squash
    assert marks(sync_client, project) == ["0001_a", "0002_b"]
    back = await down(project.settings(), steps=1)  # the squash rolls back whole, its files newest first
    assert [(r.name, r.status) for r in back.results] == [
        ("0002_b.py", "reverted"), ("0001_a.py", "reverted"), ("0002_squashed.py", "reverted")
    ]
    assert marks(sync_client, project) == []
    assert [r.state for r in await status(project.settings())] == ["reverted", "reverted"]
    await up(project.settings())  # and runs again whole
    assert marks(sync_client, project) == ["0001_a", "0002_b", "0003_c"]


async def test_down_across_a_squash_on_a_database_that_applied_the_files_one_by_one(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings(), to="0001_a")
    await up(project.settings(), to="0002_b")  # two batches: the squash still rolls back whole
    await squash(project.settings(), "0002_b")
    changelog = sync_client[project.db]["_mongoshift_migrations"]
    first = changelog.find_one({"name": "0001_a.py"})["applied_at"]
    report = await down(project.settings())
    assert [(r.name, r.status) for r in report.results] == [
        ("0002_b.py", "reverted"), ("0001_a.py", "reverted"), ("0002_squashed.py", "reverted")
    ]
    assert marks(sync_client, project) == []
    # the squash file's record is as old as its first file's: the rollback wrote it, but did not apply it then
    recorded = changelog.find_one({"name": "0002_squashed.py"})
    assert recorded["first_applied_at"] == first and recorded["applied_at"] == first
    assert [r.state for r in await status(project.settings())] == ["reverted", "pending"]


async def test_a_database_in_between_is_refused_and_told_what_to_do(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c", "0004_d")
    await up(project.settings(), to="0003_c")
    await squash(project.settings(), "0003_c")
    coll = sync_client[project.db]["_mongoshift_migrations"]
    coll.delete_many({"name": {"$in": ["0002_b.py", "0003_c.py"]}})  # as a database the old release left at 0001
    sync_client[project.db].marks.delete_many({"file": {"$ne": "0001_a"}})

    rows = await status(project.settings())
    assert (rows[0].name, rows[0].shown_state) == ("0003_squashed.py", "partial (1 of 3 squashed files applied)")
    assert cli(project, "status", "--check").returncode == 2
    audit = json.loads(cli(project, "audit", "--json").stdout)
    assert [(f["check"], f["subject"]) for f in audit["findings"] if f["severity"] == "fail"] == [("line.squash_partial", "0003_squashed.py")]
    refused = cli(project, "up", "--json")
    assert refused.returncode == 50
    error = json.loads(refused.stdout)["error"]
    assert error["kind"] == "squash_refused"
    assert error["details"]["not_applied"] == ["0002_b.py", "0003_c.py"]
    assert "up --to 0003_c.py" in error["message"] and "tenant" in error["message"]
    # one sentence that reads right: how many of the replaced files are applied, and which are not
    assert "of the 3 files it replaced, 1 is applied and 2 are not (0002_b.py, 0003_c.py)" in error["message"]
    assert marks(sync_client, project) == ["0001_a"]  # nothing ran
    assert cli(project, "dry-run", "up").returncode == 50  # the dry run refuses alike


FLAGGED = '''
async def up(ctx):
    if await ctx.db.flags.find_one({"fail": True}):
        raise RuntimeError("flagged")
    await ctx.db.marks.insert_one({"file": "0002_b"})

def down(ctx):
    ctx.db.marks.delete_one({"file": "0002_b"})
'''


async def test_a_failed_run_of_the_squash_file_is_finished_by_the_next(project, sync_client, db_name, cli) -> None:  # type: ignore[no-untyped-def]
    """In between because the squash file's own run failed here (its record says it began): the next ``up`` goes on."""
    line(project, "0001_a", "0003_c")
    project.add("0002_b.py", FLAGGED)
    await up(project.settings())
    await squash(project.settings(), "0003_c")
    sync_client.drop_database(db_name)

    sync_client[project.db].flags.insert_one({"fail": True})
    assert cli(project, "up").returncode == 7
    (row,) = await status(project.settings())
    assert (row.name, row.shown_state) == ("0003_squashed.py", "partial (1 of 3 squashed files applied, 'up' finishes it)")
    sync_client[project.db].flags.delete_many({})
    report = await up(project.settings())
    assert [r.name for r in report.results] == ["0002_b.py", "0003_c.py", "0003_squashed.py"]
    assert marks(sync_client, project) == ["0001_a", "0002_b", "0003_c"]


async def test_an_archived_file_that_changed_never_runs(project, sync_client, db_name) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    sync_client.drop_database(db_name)
    archived = project.migrations / "_squashed" / "0002_squashed" / "0002_b.py"
    archived.write_text(archived.read_text() + "\n# edited\n")
    with pytest.raises(ChecksumMismatchError, match=r"0002_squashed.py: files it squashes changed .*: 0002_b.py"):
        await up(project.settings())
    assert marks(sync_client, project) == []
    shutil.rmtree(project.migrations / "_squashed")  # no archive at all: the squash file says what is missing
    with pytest.raises(FileNotFoundMigrationError, match=r"0002_squashed.py is a squash file, but its archive folder"):
        await up(project.settings())
    (project.migrations / "_squashed" / "0002_squashed").mkdir(parents=True)
    with pytest.raises(FileNotFoundMigrationError, match=r"squashes files missing from _squashed/0002_squashed/: 0001_a\.py, 0002_b\.py"):
        await status(project.settings())


async def test_what_a_squash_refuses(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b")
    project.add("0003_bg.py", '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["x"] = 1
    return doc

background = Background(collection="things", from_version=0, to_version=1, migrate=migrate)
''')
    project.add("0004_needs_b.py", MARK.format(name="0004_needs_b") + '\nrequires = ["0002_b"]\n')
    line(project, "0005_e")
    with pytest.raises(SquashRefusedError, match="nothing to squash"):
        await squash(project.settings(), "0001_a")
    with pytest.raises(SquashRefusedError, match=r"not applied in this database: 0001_a.py, 0002_b.py") as refused:
        await squash(project.settings(), "0002_b")
    assert "named by requires: 0002_b.py" in refused.value.message
    await up(project.settings())
    refused_cli = cli(project, "squash", "--to", "0003_bg", "--yes", "--json")
    assert refused_cli.returncode == 50
    problems = json.loads(refused_cli.stdout)["error"]["details"]["problems"]
    assert [p.split(":")[0] for p in problems] == ["background migrations", "named by requires"]
    assert sorted(p.name for p in project.migrations.glob("*.py")) == ["0001_a.py", "0002_b.py", "0003_bg.py", "0004_needs_b.py", "0005_e.py"]
    assert not (project.migrations / "_squashed").exists()  # nothing written
    (project.migrations / "0001_a.py").write_text(MARK.format(name="changed"))
    with pytest.raises(SquashRefusedError, match=r"changed on disk since they were applied: 0001_a\.py"):
        await squash(project.settings(), "0002_b", dry_run=True)


async def test_a_file_sharing_a_version_with_a_squashed_one_is_refused(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A branch that created 0002_x before the squash merged: its version is taken by an archived file."""
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    await squash(project.settings(), "0003_c")
    line(project, "0002_x")
    refused = cli(project, "status", "--json")
    assert refused.returncode == 43
    error = json.loads(refused.stdout)["error"]
    assert "0002_x.py and _squashed/0003_squashed/0002_b.py" in error["message"] and error["details"]["files"] == ["0002_x.py"]


async def test_a_file_sorting_among_the_squashed_ones_is_refused(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """A branch that created 0002_x (between 0001_a and 0003_c) before the squash of 0001..0004 merged: a new
    database would run it before 0001_a (the squash file sorts as 0004), the others after 0004: refused (43), naming
    it and the squash, before anything runs; a file before the squash's first or after its last is not."""
    line(project, "0002_a", "0004_b", "0006_c")
    await up(project.settings())
    await squash(project.settings(), "0006_c")
    line(project, "0003_x", "0005_y", "0001_early", "0007_late")
    refused = cli(project, "up", "--json")
    assert refused.returncode == 43
    error = json.loads(refused.stdout)["error"]
    assert error["details"]["files"] == ["0003_x.py", "0005_y.py"]
    assert "0003_x.py among the files of 0006_squashed.py (0002_a.py to 0006_c.py)" in error["message"]
    assert marks(sync_client, project) == ["0002_a", "0004_b", "0006_c"]  # nothing ran
    for name in ("0003_x", "0005_y"):
        (project.migrations / f"{name}.py").unlink()
    assert cli(project, "status").returncode == 0  # 0001_early and 0007_late sort outside the squash


async def test_a_job_system_queues_the_squash_file_as_one_task(project, sync_client, db_name, cli) -> None:  # type: ignore[no-untyped-def]
    """``dry-run`` shows the replaced files a new database runs; a job system's line queues the squash file once."""
    from mongoshift.api.migrations import dry_run
    from mongoshift.celery import LineOptions
    from mongoshift.celery.line import plan_line

    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    sync_client.drop_database(db_name)
    shown = cli(project, "dry-run", "up").stdout
    assert "0001_a.py (in 0002_squashed.py)" in shown and "0003_c.py (in" not in shown
    preview = await dry_run(project.settings(), "up")
    assert [(row.name, row.squashed_into) for row in preview.rows] == [
        ("0001_a.py", "0002_squashed.py"), ("0002_b.py", "0002_squashed.py"), ("0002_squashed.py", None), ("0003_c.py", None)
    ]
    planned = await plan_line(project.settings(), LineOptions(intent_ttl_seconds=60.0))
    assert [payload.name for payload, _ in planned.tasks] == ["0002_squashed.py", "0003_c.py"]


async def test_squashing_again_takes_the_earlier_squash_in(project, sync_client, db_name, cli) -> None:  # type: ignore[no-untyped-def]
    line(project, "0001_a", "0002_b", "0003_c", "0004_d")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    other = f"{db_name}_fresh"
    try:
        fresh = project.settings(db=other)
        await up(fresh)  # a database that ran the first squash file itself: its record is in the changelog
        assert sync_client[other]["_mongoshift_migrations"].find_one({"name": "0002_squashed.py"})["status"] == "applied"

        written = json.loads(cli(project, "squash", "--to", "0003_c", "--yes", "--json").stdout)
        assert written["replaced"] == ["0002_squashed.py", "0003_c.py"] and written["name"] == "0003_squashed.py"
        assert written["runs"] == 3  # the earlier squash file stands for two: what the new file's text says
        assert 'Squash of 3 migration files' in (project.migrations / "0003_squashed.py").read_text()
        assert sorted(p.name for p in project.migrations.glob("*.py")) == ["0003_squashed.py", "0004_d.py"]
        archive = project.migrations / "_squashed"
        assert [p.name for p in archive.iterdir()] == ["0003_squashed"]  # the first archive moved into the second
        assert sorted(p.name for p in (archive / "0003_squashed").iterdir()) == ["0001_a.py", "0002_b.py", "0002_squashed.py", "0003_c.py"]
        source = (project.migrations / "0003_squashed.py").read_text()
        assert "absorbs = ['0002_squashed.py']" in source

        for settings in (project.settings(), fresh):  # applied one by one, or through the first squash file
            rows = await status(settings)
            assert [(r.name, r.state, r.checksum) for r in rows] == [("0003_squashed.py", "applied", "ok"), ("0004_d.py", "applied", "ok")]
        assert cli(project, "up", "0002_squashed", "--json").returncode == 8  # named: answered with the squash that stands for it

        await down(fresh, to="0003_squashed")
        back = await down(fresh)  # the squash rolls back whole, and the earlier squash file's record with it
        assert [r.name for r in back.results] == ["0003_c.py", "0002_b.py", "0001_a.py", "0003_squashed.py"]
        assert sync_client[other]["_mongoshift_migrations"].find_one({"name": "0002_squashed.py"})["status"] == "reverted"
        assert [d["file"] for d in sync_client[other].marks.find()] == []
        sync_client.drop_database(other)
        report = await up(fresh)  # a new database runs every file, once
        assert [r.name for r in report.results] == ["0001_a.py", "0002_b.py", "0003_c.py", "0003_squashed.py", "0004_d.py"]
    finally:
        sync_client.drop_database(other)


async def test_a_squash_that_cannot_be_written_leaves_the_folder_as_it_was(project, monkeypatch, cli) -> None:  # type: ignore[no-untyped-def]
    """The third move fails (a full disk, say): the files already moved come back, nothing of the squash is left."""
    import os

    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    before = sorted(p.relative_to(project.migrations).as_posix() for p in project.migrations.rglob("*"))
    real = os.replace
    calls: list[str] = []

    def failing(source, destination) -> None:  # type: ignore[no-untyped-def]
        calls.append(str(source))
        if len(calls) == 3:
            raise OSError(28, "No space left on device", str(destination))
        real(source, destination)

    monkeypatch.setattr("mongoshift.squash.writer.os.replace", failing)
    result = cli(project, "squash", "--to", "0003_c", "--yes", "--json")
    assert result.returncode == 44
    assert "No space left on device" in json.loads(result.stdout)["error"]["message"]
    assert sorted(p.relative_to(project.migrations).as_posix() for p in project.migrations.rglob("*")) == before


async def test_checksums_across_a_squash(project, sync_client, db_name, cli) -> None:  # type: ignore[no-untyped-def]
    """A database that ran another version of a replaced file sees the squash file as changed; --strict refuses."""
    line(project, "0001_a", "0002_b", "0003_c")
    older = f"{db_name}_older"
    try:
        await up(project.settings(db=older), to="0002_b")  # ran the first version of 0001_a
        (project.migrations / "0001_a.py").write_text(MARK.format(name="0001_a") + "\n# reviewed\n")
        await up(project.settings(), to="0002_b")  # the project's database ran the file as it is now
        await squash(project.settings(), "0002_b")

        first = (await status(project.settings()))[0]
        assert (first.name, first.checksum) == ("0002_squashed.py", "ok")
        first = (await status(project.settings(db=older)))[0]
        assert (first.name, first.state, first.checksum) == ("0002_squashed.py", "applied", "mismatch")
        strict = cli(project, "up", "--strict", "--db", older, "--json")
        assert strict.returncode == 4 and "0002_squashed.py" in json.loads(strict.stdout)["error"]["message"]
        assert [r.name for r in (await up(project.settings(db=older))).results] == ["0003_c.py"]  # not strict: a warning
    finally:
        sync_client.drop_database(older)


async def test_a_squash_without_a_way_back_refuses_to_roll_back(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", "async def up(ctx):\n    await ctx.db.marks.insert_one({'file': '0001_a'})\n")  # no down
    line(project, "0002_b")
    await up(project.settings())
    await squash(project.settings(), "0002_b")
    with pytest.raises(IrreversibleMigrationError, match=r"0001_a\.py has no down"):
        await down(project.settings())
    assert marks(sync_client, project) == ["0001_a", "0002_b"]  # refused before anything ran


async def test_a_squash_killed_while_moving_the_files_is_refused_until_they_are_back(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A kill -9 (or a power cut) while the writer moves the replaced files into the archive leaves some of them
    there and no squash file. The next ``squash --to`` a later file squashed the rest and stranded those (a new
    database would never run them); ``--to`` the same file said "nothing to squash"; and the folder's refusal
    advised to remove it, with the only copy of the files in it. Each squash is refused until they are back."""
    line(project, "0001_a", "0002_b", "0003_c", "0004_d")
    await up(project.settings())
    archive = project.migrations / "_squashed" / "0003_squashed"
    archive.mkdir(parents=True)
    for name in ("0001_a.py", "0002_b.py"):  # what the kill leaves after the writer's first two moves
        (project.migrations / name).replace(archive / name)
    for to in ("0003_c", "0004_d"):
        for dry in ((), ("--dry-run",)):
            refused = cli(project, "squash", "--to", to, "--yes", "--json", *dry)
            assert refused.returncode == 50, refused.stdout + refused.stderr
            error = json.loads(refused.stdout)["error"]
            assert "_squashed/0003_squashed/ holds 2 migration files (0001_a.py, 0002_b.py) and no squash file names it" in error["message"]
            assert "move them back into the migrations folder" in error["message"]
    assert sorted(p.name for p in project.migrations.glob("*.py")) == ["0003_c.py", "0004_d.py"]
    # status says where the missing files are, in its table, its warning, --check's verdict (8) and --json
    shown = cli(project, "status")
    assert "missing (in _squashed/0003_squashed/)" in shown.stdout
    assert "missing: 0001_a.py, 0002_b.py; they are in _squashed/0003_squashed/, which no squash file names" in shown.stderr
    checked = cli(project, "--json", "status", "--check")
    assert checked.returncode == 8
    rows = {row["name"]: row for row in json.loads(checked.stdout)["migrations"]}
    assert rows["0001_a.py"]["state"] == "missing" and rows["0001_a.py"]["found_in"] == "_squashed/0003_squashed/"
    assert rows["0003_c.py"]["found_in"] is None
    assert "move them back into the migrations folder" in checked.stderr
    for name in ("0001_a.py", "0002_b.py"):
        (archive / name).replace(project.migrations / name)
    archive.rmdir()
    assert cli(project, "squash", "--to", "0003_c", "--yes").returncode == 0


async def test_every_command_that_warns_of_a_missing_file_says_which_folder_a_killed_squash_left_it_in(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``status`` said where a killed squash left the files; ``up`` (its checksum warnings), ``dry-run up``, ``down``'s
    refusal and ``audit`` said only "missing", with the files' only copy one folder away. They use status's words."""
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    archive = project.migrations / "_squashed" / "0003_squashed"
    archive.mkdir(parents=True)
    for name in ("0002_b.py", "0003_c.py"):  # what a kill leaves after the writer's moves
        (project.migrations / name).replace(archive / name)
    where = "0002_b.py, 0003_c.py; they are in _squashed/0003_squashed/, which no squash file names"
    status_said = cli(project, "status").stderr
    assert where in status_said
    for command in (("up",), ("dry-run", "up")):
        plain = cli(project, *command)
        assert plain.returncode == 0, plain.stderr
        assert where in plain.stderr and "move them back into the migrations folder" in plain.stderr, plain.stderr
        as_json = cli(project, *command, "--json")
        warnings = json.loads(as_json.stdout)["warnings"]
        assert any(where in w for w in warnings), warnings
    refused = cli(project, "down", "--json")
    assert refused.returncode == 8
    error = json.loads(refused.stdout)["error"]
    assert "missing: 0003_c.py, 0002_b.py; they are in _squashed/0003_squashed/, which no squash file names" in error["message"]
    assert error["details"]["found_in"] == {"0002_b.py": "_squashed/0003_squashed/", "0003_c.py": "_squashed/0003_squashed/"}
    audit = cli(project, "audit", "--json")
    findings = [f for f in json.loads(audit.stdout)["findings"] if f["check"] == "line.missing"]
    assert findings and all("_squashed/0003_squashed/" in f["message"] for f in findings), findings


def test_the_missing_warning_names_the_files_a_folder_holds_only_when_some_are_elsewhere() -> None:
    from mongoshift.line.plan import StatusRow, missing_words

    lost = StatusRow("0001_a.py", "missing")
    held = [StatusRow(name, "missing", found_in="_squashed/0004_squashed/") for name in ("0002_b.py", "0003_c.py")]
    assert missing_words([StatusRow("0005_e.py", "applied")]) is None
    mixed = missing_words([lost, *held]) or ""
    assert mixed.startswith("the files of applied migrations are missing: 0001_a.py, 0002_b.py, 0003_c.py; 0002_b.py, 0003_c.py are in")
    assert mixed.endswith("move them back into the migrations folder")
    alone = missing_words(held[:1]) or ""
    assert alone.startswith("the files of applied migrations are missing: 0002_b.py; it is in _squashed/0004_squashed/")
    assert alone.endswith("move it back into the migrations folder")


async def test_a_session_that_squashed_reads_the_folder_again(project, sync_client) -> None:  # type: ignore[no-untyped-def]
    """``ms.squash`` moves the files; the session's list of them (read once) still named the moved ones, so its
    next ``status``, ``plan`` and ``up`` failed with a bare FileNotFoundError, and ``down`` rolled the replaced
    files back one by one as if there were no squash (stop 56, h5)."""
    import mongoshift

    line(project, "0001_a", "0002_b", "0003_c", "0004_d")
    async with mongoshift.connect(project.settings()) as ms:
        await ms.up(to="0003_c")
        assert (await ms.squash("0003_c")).file == "0003_squashed.py"
        assert [(r.name, r.shown_state) for r in await ms.status()] == [
            ("0003_squashed.py", "applied (squashed files applied)"), ("0004_d.py", "pending")
        ]
        assert [row.name for row in (await ms.plan("up")).rows] == ["0004_d.py"]
        assert [r.name for r in (await ms.up()).results] == ["0004_d.py"]
        assert (await ms.lint()).files == ["0004_d.py"]
        back = await ms.down(steps=2)  # the squash file is one migration: its files roll back through it
        assert [r.name for r in back.results] == ["0004_d.py", "0003_c.py", "0002_b.py", "0001_a.py", "0003_squashed.py"]
    assert marks(sync_client, project) == []


async def test_a_failed_file_in_the_range_is_named_failed_not_only_not_applied(project, cli) -> None:  # type: ignore[no-untyped-def]
    """A file whose run failed was listed with the pending ones, and the advice was "apply up to NAME first", which
    an up cannot do before the file is fixed. The refusal says which failed, and to fix it."""
    line(project, "0001_a", "0002_b", "0004_d")
    project.add("0003_c.py", "async def up(ctx):\n    raise RuntimeError('boom')\n")
    assert cli(project, "up").returncode == 7

    refused = cli(project, "squash", "--to", "0004_d", "--dry-run", "--json")

    assert refused.returncode == 50, refused.stderr
    (problem,) = json.loads(refused.stdout)["error"]["details"]["problems"]
    assert problem == (
        "not applied in this database: 0003_c.py (failed), 0004_d.py (fix 0003_c.py and apply up to 0004_d.py first: a squash records what ran)"
    ), problem


async def test_a_squash_up_to_the_first_squash_file_says_it_is_one_already(project, cli) -> None:  # type: ignore[no-untyped-def]
    """``squash --to 0002_squashed`` (the line's first file, standing for two) was told "is the first file of the line
    (a squash replaces two files or more)", which it does; the refusal says it is a squash file already."""
    line(project, "0001_a", "0002_b", "0003_c")
    await up(project.settings())
    await squash(project.settings(), "0002_b")

    refused = cli(project, "squash", "--to", "0002_squashed", "--dry-run", "--json")

    assert refused.returncode == 50, refused.stderr
    message = json.loads(refused.stdout)["error"]["message"]
    assert message == (
        "nothing to squash: 0002_squashed.py is a squash file already, the first of the line; squash up to a later file to take it in"
    ), message
