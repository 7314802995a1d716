"""A document over 16 MiB in a request's document sequence is refused whole (BSONObjectTooLarge, 10334), as
mongod refuses it, instead of being stored: a transactional batch sends its updates unchecked and relies on it."""

from __future__ import annotations

import pytest
from pymongo import InsertOne, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from .in_process import InProcessServer, sync_client

LIMIT = 16 * 1024 * 1024


def test_an_update_over_16_mib_is_refused_and_one_under_it_is_written(server: InProcessServer) -> None:
    client = sync_client(server)
    try:
        people = client.t_document_size.people
        people.drop()
        people.insert_many([{"_id": 1, "n": 1}, {"_id": 2, "n": 2}])
        with pytest.raises(OperationFailure) as refused:
            people.bulk_write([UpdateOne({"_id": 1}, {"$set": {"big": "x" * (LIMIT + 1)}}), UpdateOne({"_id": 2}, {"$set": {"n": 3}})], ordered=False)
        assert refused.value.code == 10334 and not isinstance(refused.value, BulkWriteError)
        assert "xxx" not in str(refused.value)  # its size, never its content
        assert people.find_one({"_id": 1}) == {"_id": 1, "n": 1} and people.find_one({"_id": 2}) == {"_id": 2, "n": 2}  # none of it
        written = people.bulk_write([UpdateOne({"_id": 1}, {"$set": {"big": "x" * (LIMIT - 1024)}})])
        assert written.modified_count == 1
    finally:
        client.t_document_size.people.drop()
        client.close()


def test_an_insert_over_16_mib_is_refused(server: InProcessServer) -> None:
    client = sync_client(server)
    try:
        people = client.t_document_size.people
        people.drop()
        with pytest.raises(OperationFailure) as refused:
            people.bulk_write([InsertOne({"_id": 1, "big": "x" * LIMIT})])
        assert refused.value.code == 10334
        assert people.count_documents({}) == 0
    finally:
        client.t_document_size.people.drop()
        client.close()
