"""The write path as a property: for any stored documents and any transform, what the server
holds afterwards is exactly what the transform returned, BSON types included.

Documents mix every common BSON type (int32, int64, double with -0.0, Decimal128 with
trailing zeros, datetime, ObjectId, bytes, None, nested documents and arrays). Transforms
set, drop, retype (1 -> Int64(1) -> 1.0 -> Decimal128("1")), reorder, mutate nested values in
place and build new documents. Each example runs :func:`apply_batch` against the server, reads
the documents back and compares them, field by field, as encoded BSON.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from bson import Decimal128, Int64, ObjectId, decode, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from hypothesis import HealthCheck, example, given, settings, strategies as st
from pymongo import AsyncMongoClient

from mongoshift.background.write.batch import apply_batch
from mongoshift.background.write.document import stamped_diff
from mongoshift.background.write.job import Job
from mongoshift.project.run import CancelSignal
from mongoshift.schema.background import Background

from ..conftest import TEST_CLIENT_OPTIONS

KEYS = ["a", "b", "c", "d", "e"]

scalars = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0, 1.0]),
    st.sampled_from(["1", "1.0", "1.00", "-0", "0", "2.5E+3"]).map(Decimal128),
    st.datetimes(datetime.datetime(1970, 1, 1), datetime.datetime(2100, 1, 1)).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    st.sampled_from([ObjectId("66000000aaaaaaaaaaaaaaaa"), ObjectId("66000000bbbbbbbbbbbbbbbb")]),
    st.binary(max_size=4),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=4),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["x", "y", "z"]), inner, max_size=3), max_leaves=6
)
stored_docs = st.dictionaries(st.sampled_from(KEYS), values, max_size=5)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS), values),
        st.tuples(st.just("unset"), st.sampled_from(KEYS)),
        st.tuples(st.just("retype"), st.sampled_from(KEYS)),
        st.tuples(st.just("poke"), st.sampled_from(KEYS), scalars),
        st.tuples(st.just("alias"), st.sampled_from(KEYS), st.sampled_from(KEYS)),
        st.tuples(st.just("rebuild")),
    ),
    max_size=4,
)


def retype(value: Any) -> Any:
    """The same number as another BSON type (or the value unchanged)."""
    if type(value) is int:
        return Int64(value)
    if type(value) is Int64:
        return float(value)
    if type(value) is float and value.is_integer() and abs(value) < 1e15:
        return Decimal128(str(int(value)))
    if type(value) is Decimal128:
        return int(value.to_decimal()) if value.to_decimal().is_finite() and abs(value.to_decimal()) < 2**31 else None
    return value


def transform(doc: dict[str, Any], ops: list[tuple[Any, ...]]) -> dict[str, Any]:
    for op in ops:
        if op[0] == "set":
            doc[op[1]] = op[2]
        elif op[0] == "unset":
            doc.pop(op[1], None)
        elif op[0] == "retype" and op[1] in doc:
            doc[op[1]] = retype(doc[op[1]])
        elif op[0] == "poke":  # in place, inside a value the document was read with
            target = doc.get(op[1])
            if isinstance(target, list):
                target.append(op[2])
            elif isinstance(target, dict):
                target["z"] = op[2]
        elif op[0] == "alias" and op[1] in doc:
            doc[op[2]] = doc[op[1]]
        elif op[0] == "rebuild":  # a new document, fields in another order
            doc = {key: doc[key] for key in reversed(list(doc))}
    return doc


def fields(doc: dict[str, Any]) -> dict[str, bytes]:
    """Each top-level field as its encoded BSON: types and nested order count, top-level order does not."""
    return {key: encode({key: value}) for key, value in doc.items()}


def check_diff_is_exact(stored: dict[str, Any], new: dict[str, Any]) -> None:
    """Without the server: the update sets exactly the fields whose BSON changed and drops the ones gone."""
    update = stamped_diff(stored, dict(new), version_field="__v", revision_field="__rev", to_version=2)
    before, after = fields(stored), fields(new)
    changed = {key for key in after if before.get(key) != after[key]}
    assert set(update.get("$set", {})) == changed | {"__v"}
    assert set(update.get("$unset", {})) == set(before) - set(after) - {"_id", "__v", "__rev"}


def run_batch(uri: str, batch: list[tuple[dict[str, Any], list[tuple[Any, ...]]]]) -> None:
    async def body() -> None:
        client: AsyncMongoClient[Any] = AsyncMongoClient(uri, **TEST_CLIENT_OPTIONS)
        db = client["t_write_property"]
        try:
            await db.docs.drop()
            await db.docs.insert_many([{"_id": i, **stored, "__v": 1, "__rev": 1} for i, (stored, _) in enumerate(batch)])
            raw = db.docs.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
            docs = await raw.find({}).sort("_id").to_list(None)  # what a lane reads
            wanted = {}
            for doc in docs:
                stored = decode(doc.raw)
                new = transform(decode(doc.raw), batch[stored["_id"]][1])
                check_diff_is_exact(stored, new)
                wanted[stored["_id"]] = {**new, "_id": stored["_id"], "__v": 2, "__rev": 2}

            def migrate(doc: dict[str, Any], ctx: Any) -> dict[str, Any]:
                return transform(doc, batch[doc["_id"]][1])

            spec = Background(collection="docs", from_version=1, to_version=2, migrate=migrate)
            job = Job("0001_property.py", spec, "forward", 1, 1, 2, migrate, None, None, [])
            result = await apply_batch(job, docs, db.docs, job.context("0", CancelSignal()))
            assert (result.migrated, result.errors) == (len(batch), [])
            after = await raw.find({}).sort("_id").to_list(None)
            for doc in after:
                got = decode(doc.raw)
                assert fields(got) == fields(wanted[got["_id"]]), (got, wanted[got["_id"]])
        finally:
            await db.docs.drop()
            await client.close()

    asyncio.run(body())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batch=st.lists(st.tuples(stored_docs, operations), min_size=1, max_size=4))
@example(batch=[({"a": 0.0}, [("set", "a", -0.0)])])
@example(batch=[({"a": 1, "b": [1, 2]}, [("retype", "a"), ("poke", "b", Int64(3))])])
@example(batch=[({"a": {"x": 1}}, [("alias", "a", "b"), ("poke", "b", 2), ("rebuild",)])])
@example(batch=[({"a": Decimal128("1.0")}, [("set", "a", Decimal128("1.00"))])])
# One document of the batch edited in place, its neighbours (one with the same nested value) not:
# the batch's one check of its nested values fails, and only that document is decoded again.
@example(batch=[({"a": [1], "b": "x"}, [("set", "b", "y")]), ({"a": {"x": 1}}, [("poke", "a", 2)]), ({"a": [1]}, [])])
def test_the_server_ends_with_exactly_the_transformed_document(mongo_uri: str, batch: list[tuple[dict[str, Any], list[tuple[Any, ...]]]]) -> None:
    run_batch(mongo_uri, batch)


async def test_the_guarded_updates_go_out_as_update_one_would_send_them(mongo_uri: str) -> None:
    """The batch's updates skip ``UpdateOne``'s per-document checks, not anything it sends."""
    from pymongo import UpdateOne, monitoring

    from mongoshift.background.write.batch import _GuardedUpdates
    from mongoshift.background.write.document import guard

    class Updates(monitoring.CommandListener):
        def __init__(self) -> None:
            self.sent: list[list[Any]] = []

        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "update":
                self.sent.append(list(event.command["updates"]))

        def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
            pass

        def failed(self, event: monitoring.CommandFailedEvent) -> None:
            pass

    listener = Updates()
    client: AsyncMongoClient[Any] = AsyncMongoClient(mongo_uri, event_listeners=[listener], **TEST_CLIENT_OPTIONS)
    db = client["t_write_ops"]
    try:
        await db.docs.insert_many([{"_id": 1, "a": 1, "__v": 1, "__rev": 1}, {"_id": 2, "a": 2, "__v": 1}])
        owners = await db.docs.find({}).sort("_id").to_list(None)
        updates = [{"$set": {"a": 10, "__v": 2}, "$inc": {"__rev": 1}}, {"$unset": {"a": ""}, "$set": {"__v": 2}, "$inc": {"__rev": 1}}]
        await db.docs.bulk_write([UpdateOne(guard(d, "__v", "__rev"), u) for d, u in zip(owners, updates, strict=True)], ordered=False)
        await db.docs.update_many({}, {"$set": {"__v": 1}})
        await db.docs.bulk_write([_GuardedUpdates(owners, updates, "__v", "__rev")], ordered=False)
        by_update_one, by_batch = listener.sent[0], listener.sent[2]  # [1] is the update_many
        assert by_batch == by_update_one
        assert by_batch[1]["q"] == {"_id": 2, "__v": 1, "__rev": {"$exists": False}}

        class Bulk:  # a bulk that is not pymongo's current one: real UpdateOne requests instead
            def __init__(self) -> None:
                self.added: list[tuple[Any, ...]] = []

            def add_update(self, *args: Any, **kwargs: Any) -> None:
                self.added.append(args[:2])

        other = Bulk()
        _GuardedUpdates(owners, updates, "__v", "__rev")._add_to_bulk(other)
        assert other.added == [(op["q"], op["u"]) for op in by_batch]
    finally:
        await client.drop_database("t_write_ops")
        await client.close()
