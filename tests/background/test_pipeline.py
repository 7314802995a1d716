"""The server-side fast path: ``pipeline=[...]`` migrations, end to end against the server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from bson import Decimal128, Int64
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import AsyncMongoClient, monitoring
from pymongo.errors import OperationFailure

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes import modes
from mongoshift.background.write.batch import apply_batch
from mongoshift.background.write.job import Job
from mongoshift.project.events import Event
from mongoshift.project.run import CancelSignal
from mongoshift.schema.background import Background

from ..conftest import TEST_CLIENT_OPTIONS, fail_command
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


def names_job(pipeline: list | None = None, *, occ: str = "revision") -> Job:  # type: ignore[type-arg]
    spec = Background(collection="people", from_version=1, to_version=2, pipeline=pipeline or NAMES, occ=occ)
    return Job("0001_names.py", spec, "forward", 1, 1, 2, None, None, None, [], pipeline=spec.pipeline)


class _Updates(monitoring.CommandListener):
    """The ``multi`` flag of every statement of every ``update`` command, per command."""

    def __init__(self) -> None:
        self.commands: list[list[bool]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update":
            self.commands.append([bool(u.get("multi")) for u in event.command["updates"]])

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def test_a_batch_is_one_multi_document_update(db, mongo_uri: str) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30)
    job = names_job()
    docs = await db.people.find({}, {"_id": 1}).sort("_id").to_list(None)
    updates = _Updates()
    watched: AsyncMongoClient = AsyncMongoClient(mongo_uri, event_listeners=[updates], **TEST_CLIENT_OPTIONS)
    try:
        result = await apply_batch(job, docs, watched[db.name].people, job.context("0", CancelSignal()))
    finally:
        await watched.close()
    assert (result.migrated, result.skipped, result.errors) == (30, 0, [])
    assert updates.commands == [[True]]  # one command, one multi-document statement, for the whole batch
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 30


async def test_a_document_the_pipeline_cannot_evaluate_fails_alone_in_its_batch(db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    await db.people.update_one({"_id": 3}, {"$set": {"__rev": Int64(7)}})
    await db.people.update_one({"_id": 9}, {"$set": {"last": 12}})  # $concat of a number fails on the server
    job = names_job()
    docs = await db.people.find({}, {"_id": 1}).sort("_id").to_list(None)
    # After the read: one document moves on to v3 (not ours any more), one gets an application write.
    await db.people.update_one({"_id": 4}, {"$set": {"__v": 3}, "$inc": {"__rev": 1}})
    await db.people.update_one({"_id": 15}, {"$set": {"first": "Ann"}, "$inc": {"__rev": 1}})
    result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    # The multi-update stopped at _id 9 after rewriting some of the others; the count is still exact.
    assert (result.migrated, result.skipped, result.conflicts, result.retried) == (18, 1, 0, 0)
    assert [(e.id, e.reason) for e in result.errors] == [(9, "write")] and "16702" in result.errors[0].error
    assert await db.people.find_one({"_id": 9}) == {"_id": 9, "first": "F9", "last": 12, "n": 9, "__v": 1, "__rev": 1}
    assert await db.people.find_one({"_id": 4}) == {"_id": 4, "first": "F4", "last": "L4", "n": 4, "__v": 3, "__rev": 2}
    # Every other document rewritten exactly once: one revision bump each.
    rewritten = {d["_id"]: d async for d in db.people.find({"__v": 2})}
    assert sorted(rewritten) == [i for i in range(20) if i not in (4, 9)]
    for id_, doc in rewritten.items():
        first = "Ann" if id_ == 15 else f"F{id_}"
        assert doc == {"_id": id_, "n": id_, "__v": 2, "__rev": {3: 8, 15: 3}.get(id_, 2), "full_name": f"{first} L{id_}"}


@pytest.mark.parametrize("code", [2, 91])  # BadValue; ShutdownInProgress (a batch error: not the document's)
async def test_a_multi_update_refused_as_a_whole_falls_back_to_one_update_per_document(db, client, code: int) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 25)
    job = names_job()
    docs = await db.people.find({}, {"_id": 1}).sort("_id").to_list(None)
    async with fail_command(client, {"times": 1}, failCommands=["update"], errorCode=code, namespace=f"{db.name}.people"):
        result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    assert (result.migrated, result.skipped, result.errors) == (25, 0, [])
    assert await db.people.count_documents({"__v": 2, "__rev": 2, "full_name": {"$exists": True}, "first": {"$exists": False}}) == 25


async def test_a_batch_error_in_the_fallback_still_fails_the_batch(db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 10)
    job = names_job()
    docs = await db.people.find({}, {"_id": 1}).to_list(None)
    async with fail_command(client, {"times": 2}, failCommands=["update"], errorCode=2, namespace=f"{db.name}.people"):
        with pytest.raises(OperationFailure) as info:
            await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    assert info.value.code == 2  # the second refusal is the fallback's own: the lane retries the batch
    assert await db.people.count_documents({"__v": 1}) == 10


@pytest.mark.parametrize("occ", ["revision", "version-only"])
async def test_the_multi_update_writes_exactly_what_one_update_per_document_writes(db, client, occ: str) -> None:  # type: ignore[no-untyped-def]
    """Same documents, same batch: once as one multi-update, once forced into the per-document form."""
    odd = [
        {"_id": "s", "first": "A", "last": "B", "__v": 1, "__rev": Int64(41), "keep": Decimal128("1.10"), "nested": {"x": [1, 2.0]}},
        {"_id": 7.5, "first": "C", "last": "D", "__v": 1.0},  # no revision yet: $ifNull starts it at 1
        {"_id": {"k": 1}, "first": "E", "last": "F", "__v": Int64(1), "__rev": 3, "extra": None},
    ]
    for name in ("many", "each"):
        await seed(db[name], 12)
        await db[name].insert_many([dict(d) for d in odd])
    job = names_job(occ=occ)
    for name in ("many", "each"):
        docs = await db[name].find({}, {"_id": 1}).to_list(None)
        ctx = job.context("0", CancelSignal())
        if name == "each":
            async with fail_command(client, {"times": 1}, failCommands=["update"], errorCode=2, namespace=f"{db.name}.{name}"):
                result = await apply_batch(job, docs, db[name], ctx)
        else:
            result = await apply_batch(job, docs, db[name], ctx)
        assert (result.migrated, result.skipped, result.errors) == (15, 0, [])
    raw = CodecOptions(document_class=RawBSONDocument)
    many = {d["_id"] if not isinstance(d["_id"], RawBSONDocument) else "k": d.raw async for d in db.many.with_options(codec_options=raw).find()}
    each = {d["_id"] if not isinstance(d["_id"], RawBSONDocument) else "k": d.raw async for d in db.each.with_options(codec_options=raw).find()}
    assert many == each and len(many) == 15  # byte for byte: field order, BSON types, stamps


async def test_lanes_count_exactly_around_documents_the_pipeline_cannot_evaluate(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120)
    bad = [7, 35, 36, 118]  # mid-batch, two in one batch, in the last batch
    await db.people.update_many({"_id": {"$in": bad}}, {"$set": {"last": 12}})
    fast_project.add("0001_names.py", pipeline_file(batch_size=25, max_parallel=2, extra="max_document_errors=10,"))
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"], concurrency=2)
    assert result.status == "completed" and result.failed_documents == 4
    assert (result.totals["migrated"], result.totals.get("skipped", 0)) == (116, 0)
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 116
    assert sorted([d["_id"] async for d in db.people.find({"__v": 1})]) == bad


async def test_revert_pipeline_brings_documents_back(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    revert = (
        '[{"$set": {"first": {"$arrayElemAt": [{"$split": ["$full_name", " "]}, 0]}, '
        '"last": {"$arrayElemAt": [{"$split": ["$full_name", " "]}, 1]}}}, {"$unset": "full_name"}]'
    )
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


# -- bounded ranges: the server rewrites a range, no _id of it is read ---------------------------------------------


async def _run_names(fast_project, batch_size: int, extra: str = "") -> tuple[Any, list[dict[str, Any]]]:  # type: ignore[no-untyped-def]
    # adaptive=False: the range size stays the batch size, whatever the machine's load.
    fast_project.add("0001_names.py", pipeline_file(batch_size=batch_size, extra="adaptive=False," + extra))
    s = fast_project.settings()
    await command.up(s)
    seen: list[Event] = []
    (result,) = await bg.run(s, ["0001_names.py"], observers=[seen.append])
    return result, [e.data for e in seen if e.kind == "batch"]


async def test_ranges_are_rewritten_by_the_server_without_reading_their_ids(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 500)
    result, batches = await _run_names(fast_project, 100)
    assert result.status == "completed" and (result.totals["migrated"], result.totals["scanned"]) == (500, 500)
    ranges = [b for b in batches if b.get("range")]
    # Every range went through one update_many of its _id interval (the last one: the rest of the partition).
    assert sum(b["migrated"] for b in ranges) == 500 and all(b["size"] == 100 for b in ranges)
    assert sum(b["migrated"] for b in batches) == 500
    assert await db.people.count_documents({"__v": 2, "__rev": 2, "first": {"$exists": False}}) == 500


@pytest.mark.parametrize("nan", [float("nan"), Decimal128("NaN")], ids=["double", "decimal"])
async def test_a_nan_id_is_rewritten_by_the_first_range_of_its_pass(fast_project, db, nan: Any) -> None:  # type: ignore[no-untyped-def]
    """NaN sorts before every number and matches no ``$lte``: a range bounded that way left it behind,
    scanned and skipped, for a second pass that scanned it again (102 scanned for 101 documents)."""
    await seed(db.people, 100)
    await db.people.insert_one({"_id": nan, "first": "N", "last": "aN", "__v": 1, "__rev": 1})
    result, batches = await _run_names(fast_project, 10)
    assert result.status == "completed" and result.pass_number == 1
    assert (result.totals["migrated"], result.totals["scanned"], result.totals["skipped"]) == (101, 101, 0)
    assert batches[0].get("range") and batches[0]["migrated"] == 10
    assert await db.people.count_documents({"__v": 2, "first": {"$exists": False}}) == 101


def _before_first_range(monkeypatch: pytest.MonkeyPatch, act: Callable[[int], Awaitable[None]]) -> list[int]:
    """Run ``act(call)`` at each range write, after its boundary was read and before the server rewrites it."""
    original = modes.rewrite_range
    calls: list[int] = []

    async def rewrite(job: Job, collection: Any, filter_: dict[str, Any], **options: Any) -> int:
        calls.append(len(calls))
        await act(len(calls) - 1)
        return await original(job, collection, filter_, **options)

    monkeypatch.setattr(modes, "rewrite_range", rewrite)
    return calls


async def test_counts_are_exact_around_application_writes_made_while_a_range_is_written(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)

    async def application(call: int) -> None:
        if call != 0:
            return
        # Inside the first range (its last _id, 99, is read): a change, a move out of the source
        # version, a deletion, and a new document in the source version.
        await db.people.update_one({"_id": 10}, {"$set": {"first": "Ann", "email": "a@example.com"}, "$inc": {"__rev": 1}})
        await db.people.update_one({"_id": 20}, {"$set": {"__v": 3}, "$inc": {"__rev": 1}})
        await db.people.delete_one({"_id": 40})
        await db.people.insert_one({"_id": 30.5, "first": "New", "last": "One", "n": -1, "__v": 1, "__rev": 1})

    calls = _before_first_range(monkeypatch, application)
    result, batches = await _run_names(fast_project, 100)
    assert result.status == "completed" and len(calls) >= 3
    first = next(b for b in batches if b.get("range"))
    assert (first["scanned"], first["migrated"], first["skipped"]) == (100, 99, 1)  # 98 read + the new one; 2 gone
    assert (result.totals["migrated"], result.totals["scanned"], result.totals.get("skipped", 0)) == (299, 300, 1)
    assert await db.people.count_documents({"__v": 2}) == 299
    assert await db.people.find_one({"_id": 10}) == {"_id": 10, "n": 10, "email": "a@example.com", "__v": 2, "__rev": 3, "full_name": "Ann L10"}
    assert (await db.people.find_one({"_id": 20}))["__v"] == 3
    assert (await db.people.find_one({"_id": 30.5}))["full_name"] == "New One"


async def test_a_range_whose_transaction_conflicts_is_written_again_from_the_documents_as_they_are(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    original = modes.rewrite_range
    attempts: list[int] = []

    async def conflicting(job: Job, collection: Any, filter_: dict[str, Any], **options: Any) -> int:
        attempts.append(1)
        matched = await original(job, collection, filter_, **options)
        if len(attempts) == 1:
            # The server rewrote the range in the transaction, then the application's write to one of
            # its documents conflicts: the transaction is aborted, so none of that rewrite may remain.
            await db.people.update_one({"_id": 7}, {"$set": {"first": "Zoe"}, "$inc": {"__rev": 1}})
            raise OperationFailure("WriteConflict", code=112, details={"code": 112, "errorLabels": ["TransientTransactionError"]})
        return matched

    monkeypatch.setattr(modes, "rewrite_range", conflicting)
    result, _ = await _run_names(fast_project, 100)
    assert result.status == "completed" and len(attempts) >= 3
    assert (result.totals["migrated"], result.totals.get("skipped", 0)) == (200, 0)
    # Each document rewritten exactly once (one revision bump), the application's write kept.
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 199
    assert await db.people.find_one({"_id": 7}) == {"_id": 7, "n": 7, "__v": 2, "__rev": 3, "full_name": "Zoe L7"}


async def test_a_range_with_a_document_the_pipeline_cannot_evaluate_names_it_through_the_id_path(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    await db.people.update_many({"_id": {"$in": [60, 61]}}, {"$set": {"last": 12}})  # $concat of a number fails on the server
    result, batches = await _run_names(fast_project, 50, extra="max_document_errors=5,")
    assert result.status == "completed" and result.failed_documents == 2
    assert (result.totals["migrated"], result.totals.get("skipped", 0), result.totals["failed"]) == (198, 0, 2)
    ranges = [b for b in batches if b.get("range")]
    # The range holding 60 and 61, (49, 99], went through the _id path, which named each failure.
    assert [b["migrated"] for b in ranges] == [50, 50, 50, 0]  # the last: the rest of the partition, empty
    assert sorted([d["_id"] async for d in db.people.find({"__v": 1})]) == [60, 61]
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 198


async def test_a_range_whose_lease_is_lost_writes_nothing_and_the_next_holder_counts_it(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    original = modes.rewrite_range
    stolen: list[int] = []

    async def lease_lost(job: Job, collection: Any, filter_: dict[str, Any], **options: Any) -> int:
        matched = await original(job, collection, filter_, **options)
        if not stolen:
            # After the server rewrote the range, another lane reaps the lease: the fenced checkpoint
            # (or the commit) fails, and the rewrite must go with it.
            stolen.append(1)
            partitions = db["_mongoshift_background_partitions"]
            assert (await partitions.update_many({"lease": {"$exists": True}}, {"$set": {"lease.token": "another"}})).modified_count == 1
        return matched

    monkeypatch.setattr(modes, "rewrite_range", lease_lost)
    result, _ = await _run_names(fast_project, 100)
    assert result.status == "completed" and stolen
    assert (result.totals["migrated"], result.totals.get("skipped", 0)) == (200, 0)
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 200  # each rewritten once


async def test_without_transactions_ranges_give_way_to_the_id_path(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    refused: list[int] = []

    async def standalone(job: Job, collection: Any, filter_: dict[str, Any], **options: Any) -> int:
        refused.append(1)
        raise OperationFailure("Transaction numbers are only allowed on a replica set member or mongos", code=20)

    monkeypatch.setattr(modes, "rewrite_range", standalone)
    result, batches = await _run_names(fast_project, 50)
    assert result.status == "completed" and refused == [1]  # asked once, then never again
    assert (result.totals["migrated"], result.totals["scanned"]) == (200, 200) and not any(b.get("range") for b in batches)
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 200
