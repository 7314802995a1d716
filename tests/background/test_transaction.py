"""Transactional batches: exact counters and once-only side writes, through injected errors."""

from __future__ import annotations

import random

import pytest

from mongoshift.api import background as bg, migrations as command

from ..conftest import fail_command
from .conftest import seed

TXN_FILE = '''
from mongoshift import Background

async def migrate(doc, ctx):
    # A side write in the same transaction: it must happen once per migrated document.
    await ctx.db.audit.insert_one({{"order": doc["_id"]}}, session=ctx.session)
    {bad}
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(
    collection="people", from_version=1, to_version=2, migrate=migrate, pause_ms=0,
    transaction={{"timeout_ms": 5000, "max_retries": {retries}}}, max_document_errors=5, {extra}
)
'''


@pytest.fixture
def fast_project(project):  # type: ignore[no-untyped-def]
    """A lease TTL of 15 s, not the 2 s of the other background tests: a transaction that runs past
    0.6 of the TTL must renew its lease, and that write conflicts with the transaction's own
    checkpoint (by design). On a loaded machine, batches of 100 take over 1.2 s, so with 2 s every
    batch conflicted, halved, and the exact batch counts these tests check came out wrong."""
    project.write_config(background_lease_ttl_seconds=15, background_poll_seconds=0.2)
    return project


def txn_file(bad: str = "", retries: int = 6, extra: str = "") -> str:
    return TXN_FILE.format(bad=bad, retries=retries, extra=extra)


async def test_transactional_batches_count_exactly_and_side_write_once(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 450)
    fast_project.add("0001_txn.py", txn_file())
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "completed"
    assert result.totals["migrated"] == 450 and result.totals["scanned"] == 450
    assert await db.audit.count_documents({}) == 450
    assert len(await db.audit.distinct("order")) == 450
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 450
    assert result.totals["batches"] == 5  # batch size 100 by default in transaction mode


async def test_injected_transient_errors_are_retried_without_double_writes(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    fast_project.add("0001_txn.py", txn_file())
    s = fast_project.settings()
    await command.up(s)
    transient = {"failCommands": ["update"], "errorCode": 112, "errorLabels": ["TransientTransactionError"], "namespace": f"{db.name}.people"}
    async with fail_command(client, {"times": 3}, **transient):
        (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "completed"
    assert result.totals["migrated"] == 300 and result.totals["txn_retries"] >= 3
    assert await db.audit.count_documents({}) == 300  # the aborted attempts' side writes never committed
    assert await db.people.count_documents({"__rev": 2}) == 300


async def test_an_unknown_commit_result_is_committed_again(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 150)
    fast_project.add("0001_txn.py", txn_file())
    s = fast_project.settings()
    await command.up(s)
    unknown = {"failCommands": ["commitTransaction"], "errorCode": 91, "errorLabels": ["UnknownTransactionCommitResult"]}
    async with fail_command(client, {"times": 1}, **unknown):
        (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "completed" and result.totals["migrated"] == 150
    assert await db.audit.count_documents({}) == 150


async def test_a_bad_document_is_rolled_back_alone(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 250)
    fast_project.add("0001_txn.py", txn_file(bad="if doc['_id'] == 42:\n        raise ValueError('bad 42')"))
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "completed" and result.failed_documents == 1
    assert result.totals["migrated"] == 249 and result.totals["failed"] == 1
    assert await db.audit.count_documents({"order": 42}) == 0  # its side write rolled back with it
    assert await db.audit.count_documents({}) == 249
    assert (await db.people.find_one({"_id": 42}))["__v"] == 1


async def test_a_time_limit_error_halves_the_batch(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    fast_project.add("0001_txn.py", txn_file())
    s = fast_project.settings()
    await command.up(s)
    async with fail_command(client, {"times": 2}, failCommands=["find"], errorCode=50, namespace=f"{db.name}.people"):
        (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "completed" and result.totals["migrated"] == 200
    assert result.totals["batches"] > 2  # ran at 25 documents per batch after two halvings, growing back
    assert await db.audit.count_documents({}) == 200


async def test_a_lane_without_its_lease_commits_nothing(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.lanes.lane import Lane

    await seed(db.people, 100)
    fast_project.add(
        "0001_txn.py",
        txn_file().replace(
            '    doc["full_name"]',
            "    await ctx.db['_mongoshift_background_partitions'].update_many({}, {'$unset': {'lease.token': ''}})\n    doc[\"full_name\"]",
        ),
    )
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as engine:
        spec = engine.spec("0001_txn.py")
        state = (await engine.coordinator.step("0001_txn.py", spec)).state
        result = await Lane(engine.context, "doomed").run_slice(state, spec)
    assert result.outcome in ("lost", "error")
    assert await db.audit.count_documents({}) == 0
    assert await db.people.count_documents({"__v": 2}) == 0


async def test_a_step_runs_in_a_transaction_with_its_checkpoint(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120, version=None)
    fast_project.add(
        "0001_step.py",
        """
        from mongoshift import Background

        async def step(ctx):
            after = (ctx.checkpoint or {}).get("after", -1)
            ids = [d["_id"] async for d in ctx.db.people.find({"_id": {"$gt": after}}, {"_id": 1}, session=ctx.session).sort("_id", 1).limit(40)]
            if ids:
                await ctx.db.people.update_many({"_id": {"$in": ids}}, {"$inc": {"stepped": 1}}, session=ctx.session)
            return {"checkpoint": {"after": ids[-1] if ids else after}, "done": len(ids) < 40, "migrated": len(ids)}

        background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0, transaction=True)
        """,
    )
    s = fast_project.settings()
    await command.up(s)
    transient = {"failCommands": ["update"], "errorCode": 112, "errorLabels": ["TransientTransactionError"], "namespace": f"{db.name}.people"}
    async with fail_command(client, {"times": 2}, **transient):
        (result,) = await bg.run(s, ["0001_step.py"])
    assert result.status == "completed" and result.totals["migrated"] == 120
    assert await db.people.count_documents({"stepped": 1}) == 120  # the failed attempts rolled back


async def test_a_server_without_transactions_fails_the_migration_clearly(fast_project, db, client) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    fast_project.add("0001_txn.py", txn_file())
    s = fast_project.settings()
    await command.up(s)
    no_txn = {
        "failCommands": ["find"],
        "errorCode": 20,
        "namespace": f"{db.name}.people",
        "errmsg": "Transaction numbers are only allowed on a replica set member or mongos",
    }
    async with fail_command(client, {"times": 1}, **no_txn):
        (result,) = await bg.run(s, ["0001_txn.py"])
    assert result.status == "failed" and "without transaction" in (result.last_error or "")


async def test_a_left_out_document_counts_only_in_the_batch_that_holds_it(client, db) -> None:  # type: ignore[no-untyped-def]
    """Document 60 fails, then a time limit halves the batch to 50: the committed batch (0-49)
    must not count 60 as failed, or the batch that reaches it again counts it twice."""
    import random

    from pymongo.errors import OperationFailure

    from mongoshift import Background
    from mongoshift.background.write.batch import (
        BatchResult,
        DocumentError,
        DocumentFailed,
    )
    from mongoshift.background.write.transaction import (
        TransactionalBatchSize,
        run_batch,
    )

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, transaction={"timeout_ms": 5000, "max_retries": 6})
    writes = 0
    checkpointed: list[list[object]] = []

    async def read(session, limit):  # type: ignore[no-untyped-def]
        return [{"_id": i} for i in range(limit)]

    async def write(session, docs):  # type: ignore[no-untyped-def]
        nonlocal writes
        writes += 1
        if writes == 1:
            raise DocumentFailed(DocumentError(60, "transform", "bad 60"))
        if writes == 2:
            raise OperationFailure("operation exceeded time limit", code=50)
        return BatchResult()

    async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
        checkpointed.append([e.id for e in excluded])
        return True

    outcome = await run_batch(
        client=client,
        collection=db.people,
        spec=spec,
        read=read,
        write=write,
        checkpoint=checkpoint,
        sizing=TransactionalBatchSize(100),
        rng=random.Random(1),
    )
    assert [d["_id"] for d in outcome.docs] == list(range(50))
    assert checkpointed == [[]] and outcome.result.errors == [] and outcome.excluded == []


def test_a_read_past_the_byte_limit_is_cut_to_the_documents_that_fit() -> None:
    """The size check on the documents as read: a read within the limit is kept whole, one past it is
    cut before the first document that would cross it, and a first document larger than the limit is
    kept alone (a batch holds at least one)."""
    from bson import encode
    from bson.raw_bson import RawBSONDocument

    from mongoshift.background.write.transaction import fitting

    docs = [RawBSONDocument(encode({"_id": i, "pad": "x" * (40 * (i + 1))})) for i in range(6)]
    sizes = [len(d.raw) for d in docs]
    assert fitting(docs, limit=sum(sizes)) == docs
    assert fitting(docs, limit=sum(sizes[:4]) - 1) == docs[:3]  # the fourth document crosses it by one byte
    assert fitting(docs, limit=sizes[0] - 1) == docs[:1]
    decoded = [{"_id": i, "pad": "x" * 100} for i in range(3)]  # a re-read's documents are measured by an encode
    assert fitting(decoded, limit=2 * len(encode(decoded[0]))) == decoded[:2]


async def test_a_batch_past_the_transactions_byte_limit_is_cut(client, db) -> None:  # type: ignore[no-untyped-def]
    """Four documents of 3 MiB read into one transaction (12 MiB, past the 8 MiB limit): the batch
    written and checkpointed holds the two that fit, and it does not end the partition."""
    import random

    from bson import encode
    from bson.raw_bson import RawBSONDocument

    from mongoshift import Background
    from mongoshift.background.write.batch import BatchResult
    from mongoshift.background.write.transaction import MAX_TRANSACTION_BYTES, TransactionalBatchSize, run_batch

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, transaction={"timeout_ms": 5000, "max_retries": 6})
    big = "x" * (3 * 1024 * 1024)
    written: list[list[object]] = []
    checkpointed: list[tuple[int, int]] = []

    async def read(session, limit):  # type: ignore[no-untyped-def]
        return [RawBSONDocument(encode({"_id": i, "big": big})) for i in range(4)]

    async def write(session, docs):  # type: ignore[no-untyped-def]
        written.append([d["_id"] for d in docs.tops])
        return BatchResult(migrated=len(docs))

    async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
        checkpointed.append((len(docs), len(fetched)))
        return True

    assert 2 * len(big) < MAX_TRANSACTION_BYTES < 3 * len(big)
    outcome = await run_batch(
        client=client, collection=db.people, spec=spec, read=read, write=write, checkpoint=checkpoint,
        sizing=TransactionalBatchSize(100), rng=random.Random(1),
    )
    assert written == [[0, 1]] and checkpointed == [(2, 4)]
    assert [d["_id"] for d in outcome.docs] == [0, 1] and outcome.result.migrated == 2 and not outcome.done


async def test_a_lone_document_too_big_for_a_transaction_is_left_out_as_a_document_error(client, db) -> None:  # type: ignore[no-untyped-def]
    """A batch of one whose transaction fails for its size or time: the document is left out (a
    document error naming its id as read), and the batch read again without it commits its checkpoint."""
    import random

    from pymongo.errors import OperationFailure

    from mongoshift import Background
    from mongoshift.background.write.transaction import TransactionalBatchSize, run_batch

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, transaction={"timeout_ms": 5000, "max_retries": 6})
    written: list[int] = []
    checkpointed: list[list[object]] = []

    async def read(session, limit):  # type: ignore[no-untyped-def]
        return [{"_id": {"k": 7}, "n": 1}]

    async def write(session, docs):  # type: ignore[no-untyped-def]
        written.append(len(docs))
        docs.copies[0]["_id"]["k"] = 8  # a transform editing the id in place: the error still names it as read
        raise OperationFailure("transaction is too large", code=10334)

    async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
        checkpointed.append([e.id for e in excluded])
        return True

    outcome = await run_batch(
        client=client, collection=db.people, spec=spec, read=read, write=write, checkpoint=checkpoint,
        sizing=TransactionalBatchSize(1), rng=random.Random(1),
    )
    assert written == [1] and checkpointed == [[{"k": 7}]]
    assert [(e.id, e.reason) for e in outcome.excluded] == [({"k": 7}, "transaction")] and outcome.retries == 1


class _NoWait(random.Random):
    """Backoffs of zero seconds: the test waits on attempts, not on time."""

    def random(self) -> float:
        return 0.0


@pytest.mark.parametrize(("code", "seconds_per_attempt", "survives"), [(112, 0.0, True), (112, 100.0, False), (251, 0.0, False)])
async def test_write_conflicts_are_waited_out_for_the_transaction_lifetime(client, db, caplog, code: int, seconds_per_attempt: float, survives: bool) -> None:  # type: ignore[no-untyped-def]
    """A lane killed in the middle of a transaction (kill -9) leaves it open, holding its partition's
    checkpoint until the server aborts it (60 s on mongod): the partition's next holder meets write
    conflicts (112) on it for that long. Past ``max_retries``, a batch keeps retrying conflicts until
    CONFLICT_PATIENCE_S after the first one instead of failing the slice (three such slices failed the
    whole migration after a kill -9 and an immediate rerun). Other transient errors, and conflicts
    past the patience, still fail the slice after ``max_retries``."""
    from pymongo.errors import OperationFailure

    from mongoshift import Background
    from mongoshift.background.write.batch import BatchResult
    from mongoshift.background.write.transaction import CONFLICT_PATIENCE_S, TransactionalBatchSize, run_batch

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, transaction={"timeout_ms": 5000, "max_retries": 2})
    conflicts_left = 10
    clock = [1_000.0]

    def now() -> float:
        return clock[0]

    async def read(session, limit):  # type: ignore[no-untyped-def]
        return [{"_id": i} for i in range(limit)]

    async def write(session, docs):  # type: ignore[no-untyped-def]
        return BatchResult(migrated=len(docs))

    async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
        nonlocal conflicts_left
        if conflicts_left:
            conflicts_left -= 1
            clock[0] += seconds_per_attempt
            raise OperationFailure("the dead lane's transaction holds this partition", code=code)
        return True

    assert 10 * seconds_per_attempt < CONFLICT_PATIENCE_S or not survives
    run = run_batch(
        client=client, collection=db.people, spec=spec, read=read, write=write, checkpoint=checkpoint,
        sizing=TransactionalBatchSize(4), rng=_NoWait(), now=now,
    )
    caplog.set_level("INFO", logger="mongoshift.background")
    if survives:
        outcome = await run
        assert outcome.retries == 10 and outcome.result.migrated > 0 and conflicts_left == 0
        waits = [r.getMessage() for r in caplog.records if "waits them out" in r.getMessage()]
        assert len(waits) == 1 and "people" in waits[0]  # said once, naming the collection only
    else:
        with pytest.raises(OperationFailure) as raised:
            await run
        assert raised.value.code == code and conflicts_left == 10 - 3  # max_retries + 1 attempts
