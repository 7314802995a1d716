"""The planner counts a pass's ``_id`` brackets with one ``$group`` by the ``_id``'s ``$type`` (cm): one
command where a ``count`` per bracket took 17, and the same counts, bracket by bracket.

Counted with pymongo's command monitoring; unchanged against a real replica set (MONGOSHIFT_TEST_URI).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from bson import Binary, Code, Decimal128, Int64, MaxKey, MinKey, ObjectId, Timestamp
from bson.dbref import DBRef
from pymongo import AsyncMongoClient, monitoring

from mongoshift.background.plan.bson_order import BRACKETS
from mongoshift.background.plan.planner import bracket_counts

from ..conftest import TEST_CLIENT_OPTIONS

#: ``_id``s of every type an ``_id`` can have that pymongo sends, several of some.
IDS: list[Any] = [
    MinKey(), MaxKey(), None, 1, -7, Int64(2), Int64(2**40), 2.5, float("-inf"), Decimal128("3.5"), "a", "b", "",
    {"k": 1}, DBRef("other", 1), Binary(b"", 0), Binary(b"x", 5), Binary(uuid.UUID(int=3).bytes, 4),
    ObjectId("0123456789ab0123456789ab"), True, False, datetime.datetime(2020, 1, 2), Timestamp(1, 2),
    Code("f()"), Code("g()"), Code("f()", {"x": 1}),
]
EXPECTED = {
    "minKey": 1, "null": 1, "number": 7, "string": 3, "object": 2, "binData": 3, "objectId": 1, "bool": 2,
    "date": 1, "timestamp": 1, "javascript": 2, "javascriptWithScope": 1, "maxKey": 1,
}


class Commands(monitoring.CommandListener):
    """The names of the commands sent to the test's collection's database, in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.database_name != "admin":
            self.sent.append(event.command_name)

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def _one_by_one(collection: Any, match: dict[str, Any]) -> dict[str, int]:
    """The planner's counts before (cm): a ``count_documents`` per bracket, by the query's ``$type``."""
    counts: dict[str, int] = {}
    for bracket in BRACKETS:
        n = await collection.count_documents({"$and": [match, {"_id": {"$type": bracket}}]})
        if n:
            counts[bracket] = n
    return counts


@pytest.mark.parametrize("version", [1, 0])
async def test_the_brackets_are_counted_in_one_command_as_the_counts_count_them(mongo_uri: str, db_name: str, version: int) -> None:
    """(cm) On mixed ``_id`` types, ``bracket_counts`` sends one ``aggregate`` and gives what 17 counts give,
    under a version equality (the version index answers it on the embedded server) and version 0's
    ``$in: [None, 0]``; documents at another version are left out."""
    commands = Commands()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[commands], **TEST_CLIENT_OPTIONS)
    try:
        collection = client[db_name].mixed
        await collection.create_index([("__v", 1), ("_id", 1)])
        others = [f"other{i}" for i in range(5)]
        await collection.insert_many([{"_id": value, "__v": version} for value in IDS] + [{"_id": value, "__v": 7} for value in others])
        match = {"__v": version} if version else {"__v": {"$in": [None, 0]}}
        commands.sent.clear()
        counted = await bracket_counts(collection, match)
        assert commands.sent == ["aggregate"]
        assert list(counted) == [bracket for bracket in BRACKETS if bracket in EXPECTED]  # BSON order
        assert counted == EXPECTED
        assert counted == await _one_by_one(collection, match)
        assert await bracket_counts(collection, {"__v": 8}) == {}
    finally:
        await client.drop_database(db_name)
        await client.close()
