"""A transactional batch's read (:func:`..write.transaction.read_replies`): the ``find`` a lane's cursor
sends, its replies taken whole and decoded with them, a batch past one reply completed by ``getMore``,
and the documents the cursor and the checkpoint are taken from kept as read whatever a transform does."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
from bson import MaxKey, MinKey
from pymongo import AsyncMongoClient, monitoring

from mongoshift.background.lanes.modes import PartitionWork
from mongoshift.background.state.model import Checkpoint, Scope

#: What the driver adds to any command (sessions, transactions, the cluster's clock): not the read's shape.
DRIVER_FIELDS = {"lsid", "$db", "$clusterTime", "txnNumber", "autocommit", "startTransaction", "readConcern", "$readPreference"}


class _Finds(monitoring.CommandListener):
    def __init__(self) -> None:
        self.commands: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "find":
            self.commands.append(dict(event.command))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _work(scope: Scope, *, hint: Any, projection: dict[str, int] | None) -> PartitionWork:
    job = SimpleNamespace(spec=SimpleNamespace(version_field="__v"), source=1, projection=projection)
    partition = SimpleNamespace(scope=scope)
    fields: dict[str, Any] = dict.fromkeys(PartitionWork.__dataclass_fields__)
    fields.update(job=job, partition=partition, match={"__v": 1}, hint=hint)
    return PartitionWork(**fields)


SCOPES = {
    "id range": (Scope("number", gte=0, lt=100), Checkpoint(last_id=5, started=True), [("__v", 1), ("_id", 1)], None),
    "id range, first batch, no hint": (Scope("number", gte=0, lt=100), Checkpoint(), None, {"n": 1}),
    "shard-key ranges": (
        Scope(None, shard="s0", key=(("tenant", 1),), ranges=(((MinKey(),), (MaxKey(),)),)),
        Checkpoint(last_id=5, started=True, last_key=("a",)),
        [("__v", 1), ("tenant", 1), ("_id", 1)],
        {"n": 1},
    ),
    "hash range": (
        Scope(None, shard="s0", key=(("tenant", "hashed"),), ranges=(((MinKey(),), (MaxKey(),)),)),
        Checkpoint(started=True, stuck=(3,)),
        None,
        None,
    ),
}


@pytest.mark.parametrize("name", list(SCOPES))
async def test_the_find_command_is_the_one_the_lanes_cursor_sends(mongo_uri, db_name, name: str) -> None:  # type: ignore[no-untyped-def]
    scope, cursor, hint, projection = SCOPES[name]
    work = _work(scope, hint=hint, projection=projection)
    listener = _Finds()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[listener])
    try:
        collection = client[db_name].people
        find = work.find(collection, cursor, 7, max_time_ms=1234)
        assert find is not None
        try:
            await find.to_list(None)
        except Exception:  # the shape is what is compared; a hint the collection lacks fails the read
            pass
        (sent,) = listener.commands
        ours = work.find_command("people", cursor, 7, max_time_ms=1234)
        assert ours is not None
        shape = {key: value for key, value in sent.items() if key not in DRIVER_FIELDS}
        assert list(shape) == list(ours) or set(shape) == set(ours)
        for key, value in ours.items():
            sent_value = shape[key]
            if key in ("min", "max"):  # the cursor sends the bounds' pairs as given (an array); the command, as a document
                sent_value = dict(sent_value)
            assert sent_value == value, key
            if isinstance(value, dict):
                assert list(sent_value) == list(value), key  # orders (sort, hint, bounds) too
    finally:
        await client.close()


async def test_a_batch_past_one_reply_is_read_whole_and_cut_by_its_documents_sizes(client, db) -> None:  # type: ignore[no-untyped-def]
    """Four documents of 5 MiB: one reply holds at most 16 MiB, so the read takes a getMore for the
    fourth, and the 8 MiB limit keeps the first document alone, measured exactly."""
    from mongoshift.background.write.transaction import read_replies

    big = "x" * (5 * 1024 * 1024)
    for i in range(4):
        await db.people.insert_one({"_id": i, "__v": 1, "big": big})
    await db.people.insert_one({"_id": 9, "__v": 2})
    codec = db.people.codec_options.with_options(document_class=dict)
    command = {"find": "people", "filter": {"__v": 1}, "sort": {"_id": 1}, "limit": 10, "batchSize": 10, "maxTimeMS": 60000}
    async with client.start_session() as session:
        await session.start_transaction()
        read = await read_replies(db, command, session=session, codec=codec)
        await session.commit_transaction()
    assert [d["_id"] for d in read.docs] == [0, 1, 2, 3] and all(d["big"] == big for d in read.docs)
    assert len(read.replies) > 1 and sum(len(r.raw) for r in read.replies) > 20 * 1024 * 1024
    assert read.fit() == read.docs[:1]

    limited = {**command, "limit": 2, "batchSize": 2}
    async with client.start_session() as session:
        await session.start_transaction()
        read = await read_replies(db, limited, session=session, codec=codec)
        await session.commit_transaction()
    assert [d["_id"] for d in read.docs] == [0, 1] and read.fit() == read.docs[:1]


async def test_the_cursor_and_a_skipped_document_are_taken_as_read(client, db) -> None:  # type: ignore[no-untyped-def]
    """A read's documents are lent as they are: a transform editing a subdocument ``_id`` in place changes
    neither the last document the checkpoint takes the cursor from nor a lone skipped document."""
    from mongoshift import Background
    from mongoshift.background.write.batch import BatchResult, WriteConflict
    from mongoshift.background.write.transaction import Read, Skip, TransactionalBatchSize, run_batch

    spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, transaction={"timeout_ms": 5000, "max_retries": 2})
    seen: list[Any] = []

    async def read(session, limit):  # type: ignore[no-untyped-def]
        return Read([{"_id": {"k": i}, "n": i} for i in range(limit)])

    async def write(session, docs):  # type: ignore[no-untyped-def]
        for copy in docs.copies:
            copy["_id"]["k"] = -1
        return BatchResult(migrated=len(docs))

    async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
        seen.append((len(docs), len(fetched), docs[-1]["_id"]))
        return True

    outcome = await run_batch(
        client=client, collection=db.people, spec=spec, read=read, write=write, checkpoint=checkpoint,
        sizing=TransactionalBatchSize(3), rng=random.Random(1),
    )
    assert seen == [(3, 3, {"k": 2})] and outcome.docs[-1]["_id"] == {"k": 2} and outcome.result.migrated == 3

    async def conflicting(session, docs):  # type: ignore[no-untyped-def]
        docs.copies[0]["_id"]["k"] = -1
        raise WriteConflict("in the way")

    with pytest.raises(Skip) as skipped:
        await run_batch(
            client=client, collection=db.people, spec=spec, read=read, write=conflicting, checkpoint=checkpoint,
            sizing=TransactionalBatchSize(1), rng=random.Random(1),
        )
    assert skipped.value.doc["_id"] == {"k": 0}


async def test_a_hash_range_read_by_the_cursor_sends_its_bounds_as_documents(mongo_uri, db_name) -> None:  # type: ignore[no-untyped-def]
    """A plain batch's cursor: ``min``/``max`` given as lists of pairs went as BSON arrays, which mongod refuses."""
    scope, cursor, hint, projection = SCOPES["hash range"]
    listener = _Finds()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[listener])
    try:
        find = _work(scope, hint=hint, projection=projection).find(client[db_name].people, cursor, 7)
        assert find is not None
        try:
            await find.to_list(None)
        except Exception:  # the collection has no such index here: what was sent is the point
            pass
        (sent,) = listener.commands
        for bound in ("min", "max"):
            assert isinstance(sent[bound], dict), f"{bound} went as {type(sent[bound]).__name__}"
            assert list(sent[bound]) == list(sent["hint"])  # the index's fields, in its order
    finally:
        await client.close()
