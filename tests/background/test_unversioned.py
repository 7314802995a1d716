"""Documents without a version field: version 0 for the engine, and a loud warning when a migration skips them."""

from __future__ import annotations

import json
import logging

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.inspect import input_probe
from mongoshift.line.scaffold import create_migration

from .conftest import background_file, seed


@pytest.mark.parametrize(
    "extra",
    ["", "transaction=True,", "__pipeline__"],
    ids=["migrate", "transaction", "pipeline"],
)
async def test_from_version_0_migrates_documents_that_have_no_version_or_revision_field(fast_project, db, extra: str) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120, version=None)  # no __v and no __rev at all, as in a collection never versioned
    await db.people.insert_one({"_id": 1000, "first": "N", "last": "ull", "__v": None})
    await db.people.insert_one({"_id": 1001, "first": "N", "last": "ull", "__rev": None})  # a null revision: stamped 1 as well
    source = background_file(batch_size=50).replace("from_version=1", "from_version=0").replace("to_version=2", "to_version=1")
    if extra == "__pipeline__":
        source = source.replace(
            "migrate=migrate,", "pipeline=[{'$set': {'full_name': {'$concat': ['$first', ' ', '$last']}}}, {'$unset': ['first', 'last']}],"
        )
    else:
        source = source.replace("    pause_ms=0,", f"    pause_ms=0, {extra}")
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    report = await command.up(s)
    assert report.results[0].warnings == []  # from_version=0 is the version they have
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 122
    assert await db.people.count_documents({"__v": 1, "__rev": 1}) == 122
    assert (await db.people.find_one({"_id": 7}))["full_name"] == "F7 L7"


async def test_up_warns_when_documents_without_a_version_field_would_be_skipped(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=None)
    await seed(db.people, 5, version=1, start=100)
    fast_project.add("0001_names.py", background_file())
    caplog.set_level(logging.WARNING, logger="mongoshift")
    report = await command.up(fast_project.settings())
    (warning,) = report.results[0].warnings
    assert "30 documents" in warning and "no __v" in warning and "from_version=1" in warning
    assert "5 documents at version 1" in warning and "from_version=0" in warning
    assert "F1" not in warning and "L1" not in warning  # counts only: no id, no value
    assert report.to_json()["results"][0]["warnings"] == [warning]
    assert any(warning in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert await db["_mongoshift_background"].count_documents({"_id": "0001_names.py"}) == 1  # still registered


async def test_up_does_not_warn_when_every_document_has_a_version(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=1)
    await db.people.insert_one({"_id": "elsewhere", "__v": 7})  # a later version is not this migration's input
    fast_project.add("0001_names.py", background_file())
    report = await command.up(fast_project.settings())
    assert report.results[0].warnings == []


async def test_the_filter_narrows_what_is_counted(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=None)
    fast_project.add("0001_names.py", background_file(extra="filter={'n': {'$lt': 4}},"))
    report = await command.up(fast_project.settings())
    (warning,) = report.results[0].warnings
    assert "4 documents" in warning


async def test_no_warning_when_a_registered_migration_brings_unversioned_documents_to_from_version(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=None)
    first = background_file().replace("from_version=1", "from_version=0").replace("to_version=2", "to_version=1")
    fast_project.add("0001_stamp.py", first)
    fast_project.add("0002_names.py", background_file() + "\nrequires = ['0001_stamp']\n")
    report = await command.up(fast_project.settings())
    assert [r.warnings for r in report.results] == [[], []]


async def test_the_count_is_bounded_and_says_when_it_stopped(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(input_probe, "COUNT_LIMIT", 10)
    await seed(db.people, 30, version=None)
    fast_project.add("0001_names.py", background_file())
    report = await command.up(fast_project.settings())
    (warning,) = report.results[0].warnings
    assert "at least 10 documents" in warning and "stopped counting at 10" in warning


async def test_dry_run_up_gives_the_same_warning_and_writes_nothing(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=None)
    fast_project.add("0001_names.py", background_file())
    report = await command.dry_run(fast_project.settings(), "up")
    assert [r.name for r in report.rows] == ["0001_names.py"]
    assert any("0001_names.py" in w and "30 documents" in w and "no __v" in w for w in report.warnings)
    assert await db["_mongoshift_background"].count_documents({}) == 0


async def test_dry_run_knows_an_earlier_file_of_the_same_run_stamps_them(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30, version=None)
    fast_project.add("0001_stamp.py", background_file().replace("from_version=1", "from_version=0").replace("to_version=2", "to_version=1"))
    fast_project.add("0002_names.py", background_file())
    report = await command.dry_run(fast_project.settings(), "up")
    assert not any("no __v" in w for w in report.warnings)


def test_up_json_carries_the_warning_and_stderr_shows_it(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b"} for i in range(12)])
    fast_project.add("0001_names.py", background_file())
    up = cli(fast_project, "up", "--json")
    assert up.returncode == 0, up.stderr[-2000:]
    (result,) = json.loads(up.stdout)["results"]
    assert len(result["warnings"]) == 1 and "12 documents" in result["warnings"][0]
    assert "12 documents" in up.stderr and "WARNING" in up.stderr


def test_the_background_skeleton_starts_from_version_0(tmp_path) -> None:  # type: ignore[no-untyped-def]
    text = create_migration(tmp_path, "split names", background=True).read_text()
    assert "from_version=0," in text and "to_version=1," in text


def test_the_background_skeleton_loads_with_its_commented_options_switched_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A new user fills in the collection and uncomments the options line: the file must still load."""
    path = create_migration(tmp_path, "split names", background=True)
    text = path.read_text().replace('collection="TODO"', 'collection="users"').replace("    # batch_size=", "    batch_size=")
    path.write_text(text)
    from mongoshift.project.loader import discover, load

    (item,) = discover(tmp_path)
    spec = load(item).background
    assert spec is not None and spec.filter == {"status": "active"} and spec.batch_size == 500


async def test_up_warns_when_the_collection_does_not_exist(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A typo in collection= registers a migration that completes at once having rewritten nothing: said at up."""
    fast_project.add("0001_names.py", background_file().replace('collection="people"', 'collection="peeple"'))
    report = await command.up(fast_project.settings())
    (warning,) = report.results[0].warnings
    assert "'peeple' does not exist (yet)" in warning and "check collection=" in warning
    fast_project.add("0003_peeple.py", background_file().replace('collection="people"', 'collection="peeple"').replace("to_version=2", "to_version=3"))
    (said,) = (await command.dry_run(fast_project.settings(), "up")).warnings
    assert "'peeple' does not exist (yet)" in said
    (fast_project.migrations / "0003_peeple.py").unlink()
    await seed(db.people, 3)
    fast_project.add("0002_more.py", background_file().replace("to_version=2", "to_version=2, description='more'"))
    assert (await command.up(fast_project.settings())).results[0].warnings == []


def test_documents_whose_version_is_text_are_counted_when_registered_and_when_a_run_starts(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """Legacy data with ``__v: "1"`` (text): no pass of a 1 -> 2 migration matches it, so the run completed without a
    word and only ``background verify`` found the documents, stranded. ``up`` (registration), the run's start (stderr)
    and the run's report (``--json`` ``warnings``, ``background status``) now count them: counts only, no id, no value."""
    people = sync_client[fast_project.db].people
    people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1} for i in range(10)])
    people.insert_many([{"_id": f"SECRET-{i}", "first": "SECRET-NAME", "__v": "1"} for i in range(3)])
    people.insert_one({"_id": "SECRET-BOOL", "first": "SECRET-NAME", "__v": True})
    people.create_index([("__v", 1), ("_id", 1)])
    fast_project.add("0001_names.py", background_file())
    said = "4 documents of 'people' matching its filter have a __v that is not a number"
    dry = cli(fast_project, "dry-run", "up", "--json")
    assert any(said in w for w in json.loads(dry.stdout)["warnings"]), dry.stdout
    up = cli(fast_project, "up", "--json")
    assert up.returncode == 0, up.stderr[-2000:]
    (result,) = json.loads(up.stdout)["results"]
    assert [w for w in result["warnings"] if said in w], result["warnings"]
    run = cli(fast_project, "background", "run", "0001_names", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    (report,) = json.loads(run.stdout)["background"]
    assert report["status"] == "completed" and report["totals"]["migrated"] == 10
    (warning,) = [w for w in report["warnings"] if "not a number" in w]
    assert warning.startswith("4 documents") and "'background verify' (through the version index) will report them stranded" in warning
    assert run.stderr.count(said) == 1, run.stderr  # said once at the start, in the log
    status = cli(fast_project, "background", "status", "0001_names", "--json")
    assert any("not a number" in w for w in json.loads(status.stdout)["background"][0]["warnings"])
    for text in (dry.stdout, up.stdout, up.stderr, run.stdout, run.stderr, status.stdout):
        assert "SECRET" not in text
    verify = cli(fast_project, "background", "verify", "--json")
    assert verify.returncode == 31 and json.loads(verify.stdout)["stranded"] == ["0001_names.py"]  # what the warning foretold


async def test_no_word_about_text_versions_when_every_version_is_a_number(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 12, version=1)
    await db.people.insert_one({"_id": "double", "__v": 1.0})  # 1.0 is version 1
    fast_project.add("0001_names.py", background_file())
    s = fast_project.settings()
    report = await command.up(s)
    assert report.results[0].warnings == []
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 13 and result.warnings == []


async def test_a_step_migration_of_a_collection_that_does_not_exist_yet_is_not_warned_about(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A step migration writes where it likes (often creating its collection): the warning that a run "completes it at
    once, having rewritten nothing" was false for it (found in a user trial: it ran its steps as usual)."""
    fast_project.add(
        "0001_step.py",
        """
        from mongoshift import Background

        async def step(ctx):
            n = (ctx.checkpoint or {}).get("n", 0)
            await ctx.db.fresh.insert_one({"n": n})
            return {"checkpoint": {"n": n + 1}, "done": n >= 2, "migrated": 1}

        background = Background(collection="fresh", from_version=0, to_version=1, step=step, pause_ms=0)
        """,
    )
    s = fast_project.settings()
    assert (await command.dry_run(s, "up")).warnings == []
    report = await command.up(s)
    assert report.results[0].warnings == []
    (result,) = await bg.run(s, ["0001_step.py"])
    assert result.status == "completed" and result.totals["migrated"] == 3
    assert await db.fresh.count_documents({}) == 3
