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


# -- The batch's diff against the diff before it (issue 27, fifth pass) -----------------------------
#
# ``differ`` binds a batch's settings once and runs one loop per document; the reference below is
# ``stamped_diff`` as it was before (one comprehension, then the per-field checks, a set of the
# system fields per call), kept verbatim: for any stored document, any transform and any settings,
# the two give the very same update, byte for byte (operators, fields and their order, BSON types),
# or the same shape error.


def _reference_stamped_diff(old: dict[str, Any], new: Any, *, version_field: str, revision_field: str | None, to_version: int) -> dict[str, Any]:
    from mongoshift.background.write.document import _GOOD_KEYS, _PLAIN, MISSING as _MISSING, ShapeError, _check_keys, _check_top_key, same

    if not isinstance(new, dict):
        raise ShapeError(f"the transform returned {type(new).__name__}, not a document")
    old_id = old["_id"]
    new_id = new.get("_id", old_id)
    if new_id is not old_id and not same(new_id, old_id):
        raise ShapeError("the transform changed _id")
    system = {"_id", version_field, revision_field}
    get = old.get
    set_: dict[str, Any] = {}
    for key, value in [(key, value) for key, value in new.items() if value is not get(key, _MISSING)]:
        if key in system:
            continue
        before = get(key, _MISSING)
        kind = type(value)
        if kind is type(before):
            if kind in _PLAIN:
                if before == value:
                    continue
            elif same(before, value):
                continue
        if key not in _GOOD_KEYS:
            _check_top_key(key)
        if kind is dict or kind is list or isinstance(value, (dict, list)):
            _check_keys(value, key)
        set_[key] = value
    unset = {key: "" for key in old if key not in new and key not in system}
    if to_version == 0:
        unset[version_field] = ""
    else:
        set_[version_field] = to_version
    increment: str | None = None
    if revision_field is not None:
        if get(revision_field) is None:
            set_[revision_field] = 1
        else:
            increment = revision_field
    update: dict[str, Any] = {}
    if set_:
        update["$set"] = set_
    if unset:
        update["$unset"] = unset
    if increment is not None:
        update["$inc"] = {increment: 1}
    return update


SYSTEM_KEYS = ["_id", "__v", "__rev"]
#: What a transform may do besides :data:`operations`: touch the system fields, return no document,
#: set a field name that cannot be stored (top level or nested), change ``_id`` (or set it to an equal value).
diff_operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(KEYS + SYSTEM_KEYS), values),
        st.tuples(st.just("unset"), st.sampled_from(KEYS + SYSTEM_KEYS)),
        st.tuples(st.just("retype"), st.sampled_from(KEYS + SYSTEM_KEYS)),
        st.tuples(st.just("poke"), st.sampled_from(KEYS), scalars),
        st.tuples(st.just("alias"), st.sampled_from(KEYS + SYSTEM_KEYS), st.sampled_from(KEYS + SYSTEM_KEYS)),
        st.tuples(st.just("rebuild")),
        st.tuples(st.just("copy"), st.sampled_from(KEYS)),  # an equal value, not the same object
        st.tuples(st.just("bad key"), st.sampled_from(["$x", "a.b", 7, "ok\x00"]), st.booleans()),
        st.tuples(st.just("not a document")),
    ),
    max_size=5,
)
#: How the stored document carries its version and revision (missing, null, a number).
system_values = st.sampled_from([None, "missing", 0, 1, Int64(1), 1.0])


def diff_transform(doc: dict[str, Any], ops: list[tuple[Any, ...]]) -> Any:
    for op in ops:
        if op[0] == "copy" and op[1] in doc:
            doc[op[1]] = decode(encode({"v": doc[op[1]]}))["v"]  # equal, a new object
        elif op[0] == "bad key":
            if op[2]:
                doc[op[1]] = 1
            else:
                doc.setdefault("a", {})
                if isinstance(doc["a"], dict):
                    doc["a"][op[1]] = 1
        elif op[0] == "not a document":
            return [doc]
        elif op[0] in ("set", "unset", "retype", "poke", "alias", "rebuild"):
            doc = transform(doc, [op])
    return doc


def _outcome(fn: Any, old: dict[str, Any], new: Any) -> tuple[str, Any]:
    from mongoshift.background.write.document import ShapeError

    try:
        return "update", encode(fn(old, new))
    except ShapeError as exc:
        return "shape", str(exc)


@settings(max_examples=300)
@given(
    batch=st.lists(st.tuples(stored_docs, system_values, system_values, diff_operations), min_size=1, max_size=6),
    revision_field=st.sampled_from(["__rev", None]),
    to_version=st.sampled_from([0, 2]),
)
@example(batch=[({"a": 1, "b": [1]}, 1, 1, [("copy", "b"), ("set", "c", 1)])], revision_field="__rev", to_version=2)
@example(batch=[({"a": 0.0}, None, "missing", [("set", "__v", 3), ("unset", "__rev"), ("set", "a", -0.0)])], revision_field="__rev", to_version=0)
@example(batch=[({"a": {"x": 1}}, 1, 1, [("bad key", "$x", False), ("set", "_id", 9)])], revision_field=None, to_version=2)
def test_the_batch_diff_is_the_diff_before_it(
    batch: list[tuple[dict[str, Any], Any, Any, list[tuple[Any, ...]]]], revision_field: str | None, to_version: int
) -> None:
    """``differ`` (bound once for the batch, as ``_updates`` uses it) and ``stamped_diff`` give, for every
    document, byte for byte the update (or the shape error) of the diff before this pass."""
    from mongoshift.background.write.document import differ

    diff = differ("__v", revision_field, to_version)
    for index, (stored, version, revision, ops) in enumerate(batch):
        old: dict[str, Any] = {"_id": index, **stored}
        for field_, value in (("__v", version), ("__rev", revision)):
            if value != "missing":
                old[field_] = value
        read = decode(encode(old))  # as a lane reads it: decoded from BSON
        top = dict(read)  # the original the diff compares with; the transform gets ``read``
        new = diff_transform(read, ops)
        expected = _outcome(lambda o, n: _reference_stamped_diff(o, n, version_field="__v", revision_field=revision_field, to_version=to_version), top, new)
        assert _outcome(diff, top, new) == expected
        assert _outcome(lambda o, n: stamped_diff(o, n, version_field="__v", revision_field=revision_field, to_version=to_version), top, new) == expected
