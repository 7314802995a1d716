"""``background dry-run FILE``: a preview that writes nothing and shows what the engine will write."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import signal
from typing import Any

import pytest
from bson import Int64, ObjectId, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument

from mongoshift import api
from mongoshift.api import background as bg, migrations as command
from mongoshift.background.inspect.preview import updated
from mongoshift.errors import ConfigInvalidError, ExitCode, IrreversibleMigrationError
from mongoshift.project.session import open_session

from .conftest import seed
from .test_pipeline import pipeline_file

NAME = "0001_names.py"

TRANSFORM = '''
from mongoshift import Background

def migrate(doc, ctx):
    if doc["n"] == 3:
        raise ValueError("cannot parse _id: " + str(doc["_id"]))
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    doc["n"] = doc["n"] * 10
    return doc

def revert(doc, ctx):
    first, last = doc.pop("full_name").split(" ")
    doc.update(first=first, last=last)
    return doc

background = Background(
    collection="people", from_version=1, to_version=2, migrate=migrate, {revert}
    batch_size=50, pause_ms=0, max_document_errors=5,
)
'''


def transform_file(revert: bool = True) -> str:
    return TRANSFORM.replace("{revert}", "revert=revert," if revert else "")


async def database_hash(db: Any) -> str:
    """Every collection of the database (mongoshift's own included): its options, indexes and raw BSON documents by _id."""
    digest = hashlib.sha256()
    raw = CodecOptions(document_class=RawBSONDocument)
    for info in sorted(await (await db.list_collections()).to_list(None), key=lambda i: i["name"]):
        digest.update(encode(info))
        collection = db.get_collection(info["name"], codec_options=raw)
        for index in sorted(await (await collection.list_indexes()).to_list(None), key=lambda i: i["name"]):
            digest.update(encode(index))
        async for doc in collection.find({}, sort=[("_id", 1)]):
            digest.update(doc.raw)
    return digest.hexdigest()


def assert_same_document(stored: dict[str, Any], after: dict[str, Any]) -> None:
    """BSON-exact, field by field (the order of new fields is the server's business)."""
    assert set(stored) == set(after)
    for key in stored:
        assert encode({"v": stored[key]}) == encode({"v": after[key]}), key  # the BSON bytes (a tz-aware date is the same date)


async def seed_people(db: Any, *, long_revision: bool = False) -> None:
    await seed(db.people, 12)
    extra = {"__rev": Int64(7)} if long_revision else {}
    await db.people.update_one({"_id": 5}, {"$set": {**extra, "when": datetime.datetime(2026, 1, 2, 3, 4, 5), "ref": ObjectId()}})
    await db.people.update_one({"_id": 6}, {"$set": {"__v": 2}})  # not of the old shape: never shown
    await db.people.update_one({"_id": 7}, {"$unset": {"__rev": ""}})


async def test_a_preview_writes_nothing_and_shows_what_the_engine_then_writes(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed_people(db)
    fast_project.add(NAME, transform_file())
    settings = fast_project.settings()
    before = await database_hash(db)
    preview = await api.preview_background(settings, NAME, first=8)  # not registered
    assert await database_hash(db) == before  # byte for byte: documents, indexes, own collections (no lock, no state)
    assert (preview.method, preview.requested, preview.found, preview.migrated, preview.failed) == ("first", 8, 8, 7, 1)
    assert [row.id for row in preview.rows] == [0, 1, 2, 3, 4, 5, 7, 8]
    failed = preview.rows[3]
    assert (failed.reason, failed.update, failed.after) == ("transform", None, None)
    assert "ValueError" in (failed.error or "") and "<redacted>" in (failed.error or "")  # redacted like any stored error
    assert failed.before["first"] == "F3"
    row = preview.rows[1]
    assert row.update == {"$set": {"full_name": "F1 L1", "n": 10, "__v": 2}, "$unset": {"first": "", "last": ""}, "$inc": {"__rev": 1}}
    assert row.before["first"] == "F1" and row.after is not None and row.after["__rev"] == 2
    assert preview.rows[0].update == {"$set": {"full_name": "F0 L0", "__v": 2}, "$unset": {"first": "", "last": ""}, "$inc": {"__rev": 1}}

    await command.up(settings)
    (report,) = await bg.run(settings, [NAME])
    assert report.status == "completed"
    for row in preview.rows:
        stored = await db.people.find_one({"_id": row.id})
        if row.ok:
            assert row.after is not None
            assert_same_document(stored, row.after)  # the update shown is the update the engine sent
        else:
            assert stored["__v"] == 1


async def test_the_revision_keeps_its_long_type_as_mongod_does(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed_people(db, long_revision=True)
    fast_project.add(NAME, transform_file())
    settings = fast_project.settings()
    preview = await api.preview_background(settings, NAME, first=8)
    assert preview.rows[5].after is not None and type(preview.rows[5].after["__rev"]) is Int64
    await command.up(settings)
    await bg.run(settings, [NAME])
    assert_same_document(await db.people.find_one({"_id": 5}), preview.rows[5].after)


async def test_a_random_sample_takes_only_old_shape_documents(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed_people(db)
    project.add(NAME, transform_file())
    preview = await api.preview_background(project.settings(), "0001_names", sample=20)
    assert preview.method == "sample" and preview.found == 11  # all the old shape has: _id 6 is at v2
    assert sorted(row.id for row in preview.rows) == [i for i in range(12) if i != 6]
    default = await api.preview_background(project.settings(), str(project.migrations / NAME))
    assert default.requested == 5 and default.found == 5


async def test_a_pipeline_is_evaluated_by_the_server_without_writing(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 6)
    await db.people.update_one({"_id": 4}, {"$set": {"last": 12}})  # $concat of a number: the server refuses it
    fast_project.add(NAME, pipeline_file(extra="max_document_errors=3,"))
    settings = fast_project.settings()
    before = await database_hash(db)
    preview = await api.preview_background(settings, NAME, first=6)
    assert await database_hash(db) == before
    assert preview.pipeline is not None and preview.pipeline[-1] == {"$set": {"__v": {"$literal": 2}, "__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}}}
    assert (preview.found, preview.failed) == (6, 1)
    assert preview.rows[4].reason == "server" and preview.rows[4].after is None
    assert preview.rows[0].update == {"$set": {"full_name": "F0 L0", "__v": 2}, "$unset": {"first": "", "last": ""}, "$inc": {"__rev": 1}}

    await command.up(settings)
    await bg.run(settings, [NAME])
    for row in preview.rows:
        if row.ok:
            assert row.after is not None and updated(row.before, row.update or {}) == row.after
            assert_same_document(await db.people.find_one({"_id": row.id}), row.after)


async def test_revert_previews_the_declared_revert_and_is_refused_without_one(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3, version=2)
    await db.people.update_many({}, {"$set": {"full_name": "Ada Lovelace"}, "$unset": {"first": "", "last": ""}})
    project.add(NAME, transform_file())
    preview = await api.preview_background(project.settings(), NAME, first=3, revert=True)
    assert (preview.direction, preview.from_version, preview.to_version, preview.found) == ("revert", 2, 1, 3)
    assert preview.rows[0].update == {"$set": {"first": "Ada", "last": "Lovelace", "__v": 1}, "$unset": {"full_name": ""}, "$inc": {"__rev": 1}}
    forward = await api.preview_background(project.settings(), NAME, first=3)
    assert forward.found == 0  # nothing of the old shape left
    project.add(NAME, transform_file(revert=False))
    with pytest.raises(IrreversibleMigrationError) as caught:
        await api.preview_background(project.settings(), NAME, revert=True)
    assert caught.value.exit_code == ExitCode.IRREVERSIBLE


async def test_a_preview_takes_no_lock_and_works_while_another_run_holds_it(project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3)
    project.add(NAME, transform_file())
    settings = project.settings()
    async with open_session(settings, take_lock=True) as holder:
        preview = await api.preview_background(settings, NAME, first=2)
        assert preview.found == 2
        locks = await db[settings.lock_collection].find().to_list(None)
        assert [lock["owner"] for lock in locks] == [holder.run.run_id]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"sample": 0}, "1 to 1000"), ({"first": 1001}, "1 to 1000"), ({"sample": 2, "first": 2}, "not both"), ({"first": True}, "1 to 1000")],
)
async def test_bad_sizes_are_refused_before_connecting(project, options, message) -> None:  # type: ignore[no-untyped-def]
    nowhere = project.settings(uri="mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=100")  # refused before connecting
    with pytest.raises(ConfigInvalidError, match=message):
        await api.preview_background(nowhere, NAME, **options)


async def test_a_step_migration_or_a_plain_one_is_refused(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_step.py",
        "from mongoshift import Background\n\ndef step(ctx):\n    return {'checkpoint': None, 'done': True}\n\n"
        "background = Background(collection='people', from_version=1, to_version=2, step=step)\n",
    )
    project.add("0002_plain.py", "def up(ctx):\n    pass\n")
    with pytest.raises(ConfigInvalidError, match="step migration"):
        await api.preview_background(project.settings(), "0001_step.py")
    with pytest.raises(ConfigInvalidError, match="not a background migration"):
        await api.preview_background(project.settings(), "0002_plain.py")


def test_the_command_prints_relaxed_extended_json_and_a_plain_diff(project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    ref = ObjectId()
    people = sync_client[project.db].people
    people.insert_many([{"_id": 1, "first": "A", "last": "B", "n": 3, "when": when, "ref": ref, "big": Int64(2**40), "__v": 1, "__rev": 1}])
    project.add(NAME, transform_file())
    result = cli(project, "background", "dry-run", NAME, "--first", "5", "--json")
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["preview"]["documents"]
    assert row["before"]["when"] == {"$date": "2026-01-02T03:04:05Z"} and row["before"]["ref"] == {"$oid": str(ref)}
    assert row["before"]["big"] == 2**40  # relaxed: a number, not {"$numberLong": ...}
    assert (row["reason"], row["_id"]) == ("transform", 1)  # n == 3 fails
    people.update_one({"_id": 1}, {"$set": {"n": 4}})
    plain = cli(project, "background", "dry-run", NAME)
    assert plain.returncode == 0, plain.stderr
    lines = plain.stdout.splitlines()
    assert "nothing was written" in lines[0]
    assert "1 document (random sample; 5 asked for, only 1 matched): 1 would be rewritten" in lines[0]  # not "1 of 5"
    assert lines[1:3] == ["_id\t1", "=\t_id\t1\t1"]
    for line in [
        "~\tn\t4\t40",
        "~\t__v\t1\t2",
        '+\tfull_name\t\t"A B"',
        '-\tfirst\t"A"\t',
        '=\twhen\t{"$date": "2026-01-02T03:04:05Z"}\t{"$date": "2026-01-02T03:04:05Z"}',
    ]:
        assert line in lines
    assert "update\t" in plain.stdout and '"$unset": {"first": "", "last": ""}' in plain.stdout


def test_the_command_exit_codes(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add(NAME, transform_file(revert=False))
    assert cli(project, "background", "dry-run", NAME, "--first", "0").returncode == ExitCode.CONFIG_INVALID
    both = cli(project, "background", "dry-run", NAME, "--first", "1", "--sample", "1", "--json")
    assert both.returncode == ExitCode.CONFIG_INVALID and "not both" in json.loads(both.stdout)["error"]["message"]
    assert cli(project, "background", "dry-run", NAME, "--revert").returncode == ExitCode.IRREVERSIBLE
    assert cli(project, "background", "dry-run", "0009_missing.py").returncode == ExitCode.FILE_NOT_FOUND
    project.add("0002_broken.py", "from mongoshift import Background\nbackground = Background(collection='people', from_version=1)\n")
    assert cli(project, "background", "dry-run", "0002_broken.py").returncode == ExitCode.INVALID_EXPORT


def test_after_is_what_the_update_makes_as_mongod_applies_it() -> None:
    before = {"_id": 1, "b": 1, "a": 2, "__v": 1, "__rev": Int64(4)}
    update = {"$set": {"z": 1, "b": 10, "c": 3, "__v": 2}, "$unset": {"a": ""}, "$inc": {"__rev": 1}}
    after = updated(before, update)
    assert list(after) == ["_id", "b", "__v", "__rev", "c", "z"]  # fields in place; new ones appended in name order
    assert after["__rev"] == 5 and type(after["__rev"]) is Int64
    assert updated({"_id": 1}, {"$inc": {"__rev": 1}}) == {"_id": 1, "__rev": 1}
    with pytest.raises(TypeError):
        updated({"_id": 1, "__rev": "x"}, {"$inc": {"__rev": 1}})
    # an int32 grows into a long, as mongod's $inc does; a long at its largest overflows, which mongod refuses
    assert updated({"_id": 1, "__rev": 2**31 - 1}, {"$inc": {"__rev": 1}})["__rev"] == 2**31
    for largest in (2**63 - 1, Int64(2**63 - 1)):
        with pytest.raises(OverflowError):
            updated({"_id": 1, "__rev": largest}, {"$inc": {"__rev": 1}})


async def test_a_revision_at_the_largest_long_is_shown_as_a_write_the_server_refuses(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A legacy document whose revision is 2**63-1: the preview showed 9223372036854775808 in ``after``, a number
    no BSON integer holds, as a document that would be rewritten."""
    await seed(db.people, 3)
    await db.people.update_one({"_id": 1}, {"$set": {"__rev": Int64(2**63 - 1)}})
    fast_project.add(NAME, transform_file())
    preview = await api.preview_background(fast_project.settings(), NAME, first=3)
    row = next(r for r in preview.rows if r.id == 1)
    assert (row.reason, row.after) == ("write", None), row
    assert row.error is not None and "largest 64-bit integer" in row.error
    assert [r.ok for r in preview.rows] == [True, False, True]


WAITS_FOR_CTRL_C = '''
from pathlib import Path

from mongoshift import Background

def migrate(doc, ctx):
    with Path("transforming").open("a") as seen:  # one line per document whose transform started
        seen.write(f"{doc['n']}\\n")
    ctx.cancelled.wait(120)  # this document's transform ends once Ctrl-C arrived
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate)
'''


async def interrupted_once_begun(process: Any, seen: Any) -> tuple[str, str]:
    """Ctrl-C once the file ``seen`` shows that the first transform (or step call) began; the process's output."""
    for _ in range(2400):  # until it began (a hang guard, not a time budget)
        if seen.exists() or process.poll() is not None:
            break
        await asyncio.sleep(0.05)
    assert seen.exists(), process.communicate()
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    return str(out), str(err)


async def test_a_first_ctrl_c_stops_a_preview_after_the_document_in_progress(project, db) -> None:  # type: ignore[no-untyped-def]
    """One Ctrl-C said "stopping: nothing new starts", yet the sync transform ran on every remaining document
    of the worker-thread batch and the command exited 0: the signal was not looked at between documents."""
    from ..conftest import reaped, start_cli

    await seed(db.people, 5)
    project.add(NAME, WAITS_FOR_CTRL_C)
    seen = project.root / "transforming"
    with reaped(start_cli(project, "background", "dry-run", NAME, "--first", "5", "--json")) as process:
        out, err = await interrupted_once_begun(process, seen)
    assert process.returncode == int(ExitCode.ABORTED), err[-2000:]
    assert json.loads(out)["error"]["kind"] == "aborted"
    assert seen.read_text().split() == ["0"]  # the document in progress ended; no other started
    assert await db.people.count_documents({"__v": 1}) == 5  # and nothing was written


STEP_WAITS_FOR_CTRL_C = '''
from pathlib import Path

from mongoshift import Background

def step(ctx):
    with Path("stepping").open("a") as seen:  # one line per call that started
        seen.write(f"{ctx.checkpoint or 0}\\n")
    ctx.cancelled.wait(120)  # this call ends once Ctrl-C arrived
    ctx.db.people.update_one({"_id": ctx.checkpoint or 0}, {"$set": {"__v": 2}}, session=ctx.session)
    return {"checkpoint": (ctx.checkpoint or 0) + 1, "done": False}

background = Background(collection="people", from_version=1, to_version=2, step=step)
'''


async def test_a_first_ctrl_c_stops_a_step_validation_between_calls_and_exits_11(project, db) -> None:  # type: ignore[no-untyped-def]
    """A step migration's ``dry-run --validate`` stopped by Ctrl-C showed ``stopped: cancelled`` and exited 0, where
    every other stop exits 11; the calls made are still shown."""
    from ..conftest import reaped, start_cli

    await seed(db.people, 5)
    project.add("0001_step.py", STEP_WAITS_FOR_CTRL_C)
    seen = project.root / "stepping"
    with reaped(start_cli(project, "background", "dry-run", "0001_step.py", "--validate", "--steps", "3", "--json")) as process:
        out, err = await interrupted_once_begun(process, seen)
    assert process.returncode == int(ExitCode.ABORTED), err[-2000:]
    preview = json.loads(out)["preview"]
    assert preview["stopped"] == "cancelled" and len(preview["steps"]) == 1
    assert seen.read_text().split() == ["0"]  # the call in progress ended; no other started
    assert await db.people.count_documents({"__v": 1}) == 5  # and nothing was written (the transaction is aborted)
