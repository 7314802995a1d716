"""Fix (o) of mongoshift.embedded.patches: transactions conflict per document, as in mongod.

Through the real pymongo driver, and unchanged against a real replica set
(MONGOSHIFT_TEST_URI): every assertion is what mongod answers. mongod reports a
write-write conflict at the second write, as the embedded server does for a document
written twice; a secondary unique key or ``_id``s equal under other storage keys (1 and
1.0) it reports at the second commit, so each conflict test expects the error from
either step and never lets a plain write wait on a document a transaction still holds
(mongod would block it).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure
from pymongo.read_concern import ReadConcern


async def _seed(collection: Any, count: int) -> None:
    await collection.insert_many([{"_id": i, "n": 0} for i in range(count)])


async def _loser(client: AsyncMongoClient, first_write: Any, second_write: Any) -> OperationFailure:
    """``first_write`` in one transaction, then ``second_write`` in another; commit both, first first.

    Returns the error of the transaction that loses (at its write; on the embedded
    server, at its commit for a unique key or equal _ids of other types).
    """
    first, second = client.start_session(), client.start_session()
    await first.start_transaction()
    await first_write(first)
    await second.start_transaction()
    with pytest.raises(OperationFailure) as info:
        await second_write(second)
        await first.commit_transaction()
        await second.commit_transaction()
    if first.in_transaction:
        await first.commit_transaction()
    # End the loser last: pymongo hands its lsid to the next implicit session.
    await first.end_session()
    await second.end_session()
    return info.value


def _is_write_conflict(error: OperationFailure) -> bool:
    return error.code == 112 and error.has_error_label("TransientTransactionError")


async def test_transactions_writing_different_documents_both_commit(client, db) -> None:
    await _seed(db.t, 6)
    await db.t.create_index("n")
    first, second = client.start_session(), client.start_session()
    await first.start_transaction()
    await db.t.update_one({"_id": 1}, {"$set": {"n": 7}}, session=first)
    await second.start_transaction()
    await db.t.update_one({"_id": 2}, {"$set": {"n": 8}}, session=second)
    await db.t.insert_one({"_id": 10, "n": 1}, session=second)
    # Plain writes to other documents of the same collection, between the transactions' writes and commits.
    await db.t.update_one({"_id": 3}, {"$set": {"n": 9}})
    await db.t.delete_one({"_id": 4})
    await db.t.insert_one({"_id": 11, "n": 1})
    await first.commit_transaction()
    await second.commit_transaction()
    await first.end_session()
    await second.end_session()
    stored = {d["_id"]: d["n"] async for d in db.t.find()}
    assert stored == {0: 0, 1: 7, 2: 8, 3: 9, 5: 0, 10: 1, 11: 1}
    # The secondary index agrees with the documents (queries on n use it).
    assert [d["_id"] async for d in db.t.find({"n": 7})] == [1]
    assert [d["_id"] async for d in db.t.find({"n": 8})] == [2]
    assert sorted([d["_id"] async for d in db.t.find({"n": 1})]) == [10, 11]
    assert sorted([d["_id"] async for d in db.t.find({"n": 0})]) == [0, 5]


async def test_the_same_document_updated_by_two_transactions_is_write_conflict_112(client, db) -> None:
    await _seed(db.t, 3)

    async def bump(by: int) -> Any:
        return lambda session: db.t.update_one({"_id": 1}, {"$inc": {"n": by}}, session=session)

    error = await _loser(client, await bump(1), await bump(10))
    assert _is_write_conflict(error)
    assert {d["_id"]: d["n"] async for d in db.t.find()} == {0: 0, 1: 1, 2: 0}


async def test_a_document_deleted_by_one_transaction_and_updated_by_another_conflicts(client, db) -> None:
    await _seed(db.t, 3)
    error = await _loser(
        client,
        lambda session: db.t.delete_one({"_id": 1}, session=session),
        lambda session: db.t.update_one({"_id": 1}, {"$set": {"n": 5}}, session=session),
    )
    assert _is_write_conflict(error)
    assert sorted([d["_id"] async for d in db.t.find()]) == [0, 2]


@pytest.mark.parametrize(("first_id", "second_id"), [("x", "x"), (10, 10.0)])  # 10 and 10.0: one _id for MongoDB
async def test_the_same_id_inserted_by_two_transactions_conflicts(client, db, first_id: Any, second_id: Any) -> None:
    await _seed(db.t, 1)
    error = await _loser(
        client,
        lambda session: db.t.insert_one({"_id": first_id, "by": "first"}, session=session),
        lambda session: db.t.insert_one({"_id": second_id, "by": "second"}, session=session),
    )
    assert _is_write_conflict(error)
    assert [d async for d in db.t.find({"_id": {"$ne": 0}})] == [{"_id": first_id, "by": "first"}]


async def test_a_unique_key_taken_by_another_transaction_conflicts(client, db) -> None:
    await db.t.create_index("k", unique=True, sparse=True)
    await _seed(db.t, 3)
    error = await _loser(
        client,
        lambda session: db.t.update_one({"_id": 1}, {"$set": {"k": "same"}}, session=session),
        lambda session: db.t.update_one({"_id": 2}, {"$set": {"k": "same"}}, session=session),
    )
    assert _is_write_conflict(error)
    assert [d["_id"] async for d in db.t.find({"k": "same"})] == [1]


async def test_a_document_written_since_the_snapshot_conflicts(client, db) -> None:
    await _seed(db.t, 3)
    async with client.start_session() as session:
        await session.start_transaction(read_concern=ReadConcern("snapshot"))
        assert (await db.t.find_one({"_id": 1}, session=session))["n"] == 0  # the snapshot is taken
        await db.t.update_one({"_id": 1}, {"$set": {"n": 100}})
        with pytest.raises(OperationFailure) as info:
            await db.t.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=session)
            await session.commit_transaction()
    assert _is_write_conflict(info.value)
    assert (await db.t.find_one({"_id": 1}))["n"] == 100


async def test_snapshot_reads_are_unchanged(client, db) -> None:
    await _seed(db.t, 3)
    reader, writer = client.start_session(), client.start_session()
    await reader.start_transaction(read_concern=ReadConcern("snapshot"))
    assert (await db.t.find_one({"_id": 2}, session=reader))["n"] == 0
    await db.t.update_one({"_id": 2}, {"$set": {"n": 5}})
    await writer.start_transaction(read_concern=ReadConcern("snapshot"))
    await db.t.update_one({"_id": 0}, {"$set": {"n": 3}}, session=writer)
    await writer.commit_transaction()
    # Neither the plain write nor the other transaction's commit shows in the open snapshot.
    assert {d["_id"]: d["n"] async for d in db.t.find(session=reader)} == {0: 0, 1: 0, 2: 0}
    await db.t.update_one({"_id": 1}, {"$set": {"n": 1}}, session=reader)
    assert {d["_id"]: d["n"] async for d in db.t.find(session=reader)} == {0: 0, 1: 1, 2: 0}
    await reader.commit_transaction()
    await reader.end_session()
    await writer.end_session()
    assert {d["_id"]: d["n"] async for d in db.t.find()} == {0: 3, 1: 1, 2: 5}


async def test_transactions_commit_first_time_while_another_client_writes_other_documents(client, db) -> None:
    """The chaos test's situation: an application writes as fast as it can, and each
    transaction (on other documents, with a write to a collection it creates) commits
    at its first attempt."""
    await _seed(db.t, 200)
    stop = asyncio.Event()
    app_writes = 0

    async def application() -> None:
        nonlocal app_writes
        i = 0
        while not stop.is_set():
            await db.t.update_one({"_id": 100 + i % 100}, {"$inc": {"n": 1}})
            app_writes += 1
            i += 1

    calls = 0

    def transaction(i: int) -> Any:
        async def callback(session: Any) -> None:
            nonlocal calls
            calls += 1
            await db.t.update_one({"_id": i}, {"$inc": {"n": 1}}, session=session)
            await asyncio.sleep(0.02)  # the application writes meanwhile
            await db.side.insert_one({"doc": i}, session=session)

        return callback

    writer = asyncio.create_task(application())
    try:
        while app_writes == 0:  # noqa: ASYNC110 - a counter the writer task bumps, not worth an Event of its own
            await asyncio.sleep(0.01)
        for i in range(20):
            async with client.start_session() as session:
                await session.with_transaction(transaction(i))
    finally:
        stop.set()
        await writer
    assert calls == 20
    assert await db.side.count_documents({}) == 20
    assert await db.t.count_documents({"_id": {"$lt": 20}, "n": 1}) == 20
    total = await (await db.t.aggregate([{"$match": {"_id": {"$gte": 100}}}, {"$group": {"_id": None, "n": {"$sum": "$n"}}}])).to_list()
    assert total[0]["n"] == app_writes
