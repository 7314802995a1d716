"""The server-side fast path: ``pipeline=[...]`` migrations, end to end against the server."""

from __future__ import annotations

import pytest
from bson import Int64

from mongoshift.api import background as bg
from mongoshift.api import migrations as command
from mongoshift.background.batch import apply_batch
from mongoshift.background.job import Job
from mongoshift.project.run import CancelSignal
from mongoshift.schema.background import Background

from .conftest import seed

PIPELINE_FILE = '''
from mongoshift import Background

background = Background(
    collection="people",
    from_version=1,
    to_version=2,
    pipeline=[
        {{"$set": {{"full_name": {{"$concat": ["$first", " ", "$last"]}}}}}},
        {{"$unset": ["first", "last"]}},
    ],
    batch_size={batch_size},
    pause_ms=0,
    max_parallel={max_parallel},
    {extra}
)
'''

NAMES = [{"$set": {"full_name": {"$concat": ["$first", " ", "$last"]}}}, {"$unset": ["first", "last"]}]


def pipeline_file(batch_size: int = 200, max_parallel: int = 1, extra: str = "") -> str:
    return PIPELINE_FILE.format(batch_size=batch_size, max_parallel=max_parallel, extra=extra)


async def test_a_pipeline_migration_rewrites_every_document_on_the_server(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 1200)
    await db.people.update_one({"_id": 5}, {"$set": {"__rev": Int64(7)}})
    fast_project.add("0001_names.py", pipeline_file(batch_size=200, max_parallel=2))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"], concurrency=2)
    assert result.status == "completed"
    assert result.totals["migrated"] == 1200 and result.totals["scanned"] == 1200
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 1199
    doc = await db.people.find_one({"_id": 5})
    assert doc["full_name"] == "F5 L5" and "first" not in doc and doc["n"] == 5
    assert doc["__rev"] == 8  # the revision is $add-ed on the server, from whatever it was


async def test_an_application_write_after_the_read_is_kept_without_a_re_read(db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    spec = Background(collection="people", from_version=1, to_version=2, pipeline=NAMES)
    job = Job("0001_names.py", spec, "forward", 1, 1, 2, None, None, None, [], pipeline=spec.pipeline)
    docs = await db.people.find({}, {"_id": 1}).sort("_id").to_list(None)
    # After the batch was read: one document gets an application write, one moves on to v3.
    await db.people.update_one({"_id": 3}, {"$set": {"first": "Ann", "email": "a@example.com"}, "$inc": {"__rev": 1}})
    await db.people.update_one({"_id": 4}, {"$set": {"__v": 3}, "$inc": {"__rev": 1}})
    ctx = job.context("0", CancelSignal())
    result = await apply_batch(job, docs, db.people, ctx)
    assert (result.migrated, result.skipped, result.conflicts, result.retried) == (19, 1, 0, 0)
    doc = await db.people.find_one({"_id": 3})
    assert doc["full_name"] == "Ann L3" and doc["email"] == "a@example.com" and doc["__rev"] == 3
    assert (await db.people.find_one({"_id": 4}))["__v"] == 3  # not ours any more: untouched


async def test_a_document_the_server_refuses_is_a_document_error(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30)
    await db.people.update_one({"_id": 9}, {"$set": {"last": 12}})  # $concat of a number fails on the server
    fast_project.add("0001_names.py", pipeline_file(batch_size=10, extra="max_document_errors=3,"))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed" and result.failed_documents == 1
    assert await db.people.count_documents({"__v": 2}) == 29
    assert (await db.people.find_one({"_id": 9}))["__v"] == 1


async def test_revert_pipeline_brings_documents_back(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    revert = '[{"$set": {"first": {"$arrayElemAt": [{"$split": ["$full_name", " "]}, 0]}, "last": {"$arrayElemAt": [{"$split": ["$full_name", " "]}, 1]}}}, {"$unset": "full_name"}]'
    fast_project.add("0001_names.py", pipeline_file(batch_size=40, extra=f"revert_pipeline={revert},"))
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, ["0001_names.py"])
    await command.down(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.direction == "revert"
    doc = await db.people.find_one({"_id": 42})
    assert doc["first"] == "F42" and doc["last"] == "L42" and "full_name" not in doc
    assert doc["__v"] == 1 and doc["__rev"] == 3


async def test_a_transactional_pipeline_migration_counts_exactly(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 150)
    fast_project.add("0001_names.py", pipeline_file(batch_size=50, extra="transaction=True,"))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 150
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 150


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ([], "pipeline is empty"),
        ([{"$replaceWith": "$doc"}], "$replaceWith is not allowed"),
        ([{"$set": {"__v": 3}}], "may not write __v"),
        ([{"$unset": ["old", "__rev"]}], "may not write __rev"),
        ([{"$set": {"_id.x": 1}}], "may not write _id.x"),
        ([{"$set": {"a": 1}, "$unset": "b"}], "must be one stage"),
    ],
)
def test_bad_pipelines_are_refused_with_their_reason(pipeline: list, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message.replace("$", r"\$")):
        Background(collection="people", from_version=1, to_version=2, pipeline=pipeline)


def test_pipeline_is_one_form_among_migrate_and_step() -> None:
    with pytest.raises(ValueError, match="exactly one of migrate, migrate_batch, pipeline or step"):
        Background(collection="people", from_version=1, to_version=2, pipeline=NAMES, migrate=lambda d, c: d)
    spec = Background(collection="people", from_version=1, to_version=2, pipeline=NAMES)
    assert spec.settings()["pipeline"].startswith('[{"$set"') and not spec.reversible
