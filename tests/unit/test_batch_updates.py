"""A batch's updates and guards against the code before issue 27's sixth pass, without a server.

The sixth pass gave each batch's transform results as two flat containers (no pair per document),
diffed a batch whose transforms all returned in one pass (again document by document at the first
shape error), and built the plain guards inline. The references below are the code before, kept
verbatim: for any batch (transform errors, shape errors, values BSON cannot hold, a shard key moved,
either revision setting, target 0 or not) the same documents get the same updates, byte for byte,
and the same failures, in the same order; and every guard is the one :func:`guard` builds.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from bson import Decimal128, Int64, ObjectId, decode, encode
from bson.codec_options import CodecOptions
from hypothesis import example, given, settings, strategies as st

from mongoshift.background.write.batch import DocumentError, Transformed, _GuardedUpdates, _updates, shard_key_change
from mongoshift.background.write.document import ShapeError, bson_problems, differ, guard
from mongoshift.background.write.job import Job
from mongoshift.project.redaction import describe_transform_error
from mongoshift.schema.background import Background

CODEC: CodecOptions[dict[str, Any]] = CodecOptions(document_class=dict)
KEYS = ["a", "b", "c", "d"]

scalars = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0]),
    st.sampled_from(["1", "1.0"]).map(Decimal128),
    st.datetimes(datetime.datetime(1970, 1, 1), datetime.datetime(2100, 1, 1)).map(lambda d: d.replace(microsecond=0)),
    st.just(ObjectId("66000000aaaaaaaaaaaaaaaa")),
    st.text(max_size=3),
    st.booleans(),
    st.none(),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("xy"), inner, max_size=2), max_leaves=4)
system_values = st.sampled_from([None, "missing", 0, 1, Int64(1), 1.0])
#: What one document's transform does: its edits, or how it fails.
outcomes = st.one_of(
    st.lists(
        st.one_of(
            st.tuples(st.just("set"), st.sampled_from(KEYS), values),
            st.tuples(st.just("unset"), st.sampled_from(KEYS)),
            st.tuples(st.just("copy"), st.sampled_from(KEYS)),  # an equal value, not the same object
        ),
        max_size=3,
    ),
    st.sampled_from(["raise", "not a document", "bad key", "bad nested key", "unencodable", "too big an int", "new _id"]),
)


def _new(read: dict[str, Any], outcome: Any) -> tuple[Any, BaseException | None]:
    """What the transform of ``read`` (the lent copy) gives: its result and what it raised."""
    if outcome == "raise":
        return None, ValueError("the transform failed")
    if outcome == "not a document":
        return [read], None
    if outcome == "bad key":
        read["$x"] = 1
    elif outcome == "bad nested key":
        read["a"] = {"b.c": 1}
    elif outcome == "unencodable":
        read["b"] = {1, 2}
    elif outcome == "too big an int":
        read["c"] = 2**70
    elif outcome == "new _id":
        read["_id"] = -1
    else:
        for op in outcome:
            if op[0] == "set":
                read[op[1]] = op[2]
            elif op[0] == "unset":
                read.pop(op[1], None)
            elif op[1] in read:
                read[op[1]] = decode(encode({"v": read[op[1]]}))["v"]
    return read, None


def _updates_before(
    job: Job, originals: list[dict[str, Any]], transformed: list[tuple[Any, BaseException | None]], codec: CodecOptions[Any], errors: list[DocumentError]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``_updates`` as it was before the sixth pass, verbatim (one pair per document)."""
    spec = job.spec
    owners: list[dict[str, Any]] = []
    updates: list[dict[str, Any]] = []
    failures: list[tuple[int, DocumentError]] = []
    at: list[int] = []
    shard_key = job.shard_key
    diff = differ(spec.version_field, job.revision_field, job.target)
    for index, (doc, (new, error)) in enumerate(zip(originals, transformed, strict=True)):
        if error is not None:
            failures.append((index, DocumentError(doc["_id"], "transform", describe_transform_error(error))))
            continue
        try:
            update = diff(doc, new)
        except ShapeError as exc:
            failures.append((index, DocumentError(doc["_id"], "shape", str(exc))))
            continue
        if shard_key and (moved := shard_key_change(doc, new, shard_key)):
            failures.append((index, DocumentError(doc["_id"], "shard-key-changed", moved)))
            continue
        owners.append(doc)
        updates.append(update)
        at.append(index)
    problems = bson_problems(updates, codec)
    if problems:
        failures += [(at[i], DocumentError(owners[i]["_id"], "shape", problem)) for i, problem in problems.items()]
        failures.sort(key=lambda failure: failure[0])
        owners = [doc for i, doc in enumerate(owners) if i not in problems]
        updates = [update for i, update in enumerate(updates) if i not in problems]
    errors += [failure for _, failure in failures]
    return owners, updates


def _job(revision: bool, target: int, shard_key: Sequence[str]) -> Job:
    spec = Background(collection="c", from_version=1, to_version=2, migrate=lambda doc, ctx: doc, occ="revision" if revision else "version-only")
    job = Job("0001_x.py", spec, "forward" if target else "backward", 1, 1 if target else 2, target, spec.migrate, None, None, [])
    job.shard_key = tuple(shard_key)
    return job


def _batch(stored: list[tuple[dict[str, Any], Any, Any]]) -> list[dict[str, Any]]:
    """The documents as read (decoded from BSON), ``_id`` first, version and revision as given."""
    docs = []
    for index, (fields, version, revision) in enumerate(stored):
        doc: dict[str, Any] = {"_id": index, **fields}
        for name, value in (("__v", version), ("__rev", revision)):
            if value != "missing":
                doc[name] = value
        docs.append(decode(encode(doc)))
    return docs


@settings(max_examples=300, deadline=None)
@given(
    batch=st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), values, max_size=4), system_values, system_values, outcomes), min_size=1, max_size=6),
    revision=st.booleans(),
    target=st.sampled_from([0, 2]),
    shard_key=st.sampled_from([(), ("a",)]),
)
@example(batch=[({"a": 1}, 1, 1, []), ({"a": 1}, 1, 1, "bad key"), ({"a": 1}, 1, 1, [])], revision=True, target=2, shard_key=())
@example(batch=[({"a": 1}, 1, 1, [("set", "a", 2)]), ({"a": 1}, 1, 1, "unencodable")], revision=True, target=2, shard_key=())
@example(batch=[({"a": 1}, 1, 1, "raise"), ({"a": 1}, 1, 1, [("set", "b", 2)])], revision=False, target=0, shard_key=())
def test_a_batchs_updates_are_the_updates_before_the_pass(
    batch: list[tuple[dict[str, Any], Any, Any, Any]], revision: bool, target: int, shard_key: tuple[str, ...]
) -> None:
    job = _job(revision, target, shard_key)
    originals = _batch([(fields, version, rev) for fields, version, rev, _ in batch])
    reads = _batch([(fields, version, rev) for fields, version, rev, _ in batch])  # the copies lent to the transforms
    pairs = [_new(read, outcome) for read, (_, _, _, outcome) in zip(reads, batch, strict=True)]
    transformed = Transformed([new for new, _ in pairs], {i: error for i, (_, error) in enumerate(pairs) if error is not None})

    errors_before: list[DocumentError] = []
    owners_before, updates_before = _updates_before(job, originals, pairs, CODEC, errors_before)
    errors: list[DocumentError] = []
    owners, updates = _updates(job, originals, transformed, CODEC, errors)

    assert [id(doc) for doc in owners] == [id(doc) for doc in owners_before]  # the very documents as read
    assert [encode(update) for update in updates] == [encode(update) for update in updates_before]
    assert [(e.id, e.reason, e.error) for e in errors] == [(e.id, e.reason, e.error) for e in errors_before]


@settings(max_examples=200, deadline=None)
@given(
    stored=st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), scalars, max_size=2), system_values, system_values), min_size=1, max_size=5),
    revision_field=st.sampled_from(["__rev", None]),
    shard_key=st.sampled_from([(), ("a",), ("a", "b")]),
)
def test_each_guard_is_the_one_guard_builds(stored: list[tuple[dict[str, Any], Any, Any]], revision_field: str | None, shard_key: tuple[str, ...]) -> None:
    """The plain guards, built inline for the batch, are :func:`guard`'s, byte for byte (and with a shard key, as before)."""
    from mongoshift.background.write.batch import key_of

    owners = _batch(stored)
    guards = _GuardedUpdates(owners, [{} for _ in owners], "__v", revision_field, shard_key)._guards()
    expected = [guard(doc, "__v", revision_field, key_of(doc, shard_key) if shard_key else None) for doc in owners]
    assert [encode(g) for g in guards] == [encode(g) for g in expected]


def test_a_set_value_of_a_dict_or_list_subclass_has_its_field_names_checked() -> None:
    """The diff skips the nested-name check only for scalar types; a subclass of dict or list (``SON``, an
    ``OrderedDict``, a user's list type) is still checked, as a plain dict or list is."""
    from collections import OrderedDict

    import pytest
    from bson.son import SON

    class Tags(list[Any]):
        pass

    diff = differ("__v", "__rev", 2)
    old = {"_id": 1, "a": 1, "__v": 1, "__rev": 1}
    for value in (SON([("b.c", 1)]), OrderedDict([("$x", 1)]), Tags([{"b.c": 1}])):
        with pytest.raises(ShapeError, match="inside field 'a'"):
            diff(old, {**old, "a": value})
    assert diff(old, {**old, "a": SON([("b", 1)])}) == {"$set": {"a": SON([("b", 1)]), "__v": 2}, "$inc": {"__rev": 1}}
