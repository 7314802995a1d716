"""A batch lent to its transforms: the originals the diff compares with, whatever the transforms did.

:class:`Lent` checks the batch's nested values with one encode before and one after the
transforms, and when they differ, each document on its own: these tests hold it to the
documents as read, and to keeping the top (the diff's identity shortcut) of every document left
alone, without a server (the server-side property is in ``tests/background/test_write_property.py``).
"""

from __future__ import annotations

import datetime
from typing import Any

from bson import Decimal128, Int64, ObjectId, decode, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from hypothesis import HealthCheck, given, settings, strategies as st

from mongoshift.background.write.batch import lend, lend_decoded

CODEC: CodecOptions[dict[str, Any]] = CodecOptions(document_class=dict)

scalars = st.one_of(
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1).map(Int64),
    st.floats(allow_nan=False),
    st.sampled_from([0.0, -0.0]),
    st.sampled_from(["1", "1.0", "1.00"]).map(Decimal128),
    st.datetimes(datetime.datetime(1970, 1, 1), datetime.datetime(2100, 1, 1)).map(lambda d: d.replace(microsecond=0)),
    st.just(ObjectId("66000000aaaaaaaaaaaaaaaa")),
    st.binary(max_size=4),
    st.text(st.characters(exclude_categories=["Cs"]), max_size=4),
    st.booleans(),
    st.none(),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner, max_size=3), max_leaves=6)
stored = st.dictionaries(st.sampled_from("abcde"), values, max_size=5)
batches = st.lists(stored, min_size=1, max_size=6).map(lambda docs: [{"_id": i, **doc} for i, doc in enumerate(docs)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=batches, edits=st.lists(st.tuples(st.integers(0, 5), st.sampled_from("abcde"), scalars), max_size=4))
def test_the_originals_are_the_documents_as_read_whatever_the_transforms_did_in_place(
    docs: list[dict[str, Any]], edits: list[tuple[int, str, Any]]
) -> None:
    """Edits inside a value read (an array appended to, a subdocument given a field) never reach the
    originals; a document none of whose values was edited keeps its top (the diff's identity shortcut)."""
    raws = [encode(doc) for doc in docs]
    lent = lend([RawBSONDocument(raw) for raw in raws], CODEC)
    tops = list(lent.tops)
    edited: set[int] = set()
    for index, key, value in edits:
        if index >= len(docs):
            continue
        target = lent.copies[index].get(key)
        if isinstance(target, list):
            target.append(value)
            edited.add(index)
        elif isinstance(target, dict):
            target["w"] = value
            edited.add(index)
        lent.copies[index]["new"] = 1  # a top-level change: never the originals' business
    originals = lent.originals(CODEC)
    for index, original in enumerate(originals):
        assert encode(original) == raws[index]
        if index not in edited:
            assert original is tops[index]


def test_a_subset_checks_only_its_own_documents() -> None:
    raws = [encode({"_id": 1, "a": [1]}), encode({"_id": 2, "a": {"x": 1}}), encode({"_id": 3, "a": [3]})]
    part = lend([RawBSONDocument(raw) for raw in raws], CODEC).subset([0, 2], CODEC)
    part.copies[1]["a"].append(4)
    originals = part.originals(CODEC)
    assert [encode(doc) for doc in originals] == [raws[0], raws[2]]
    assert originals[0] is part.tops[0] and originals[1] is not part.tops[1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=batches, edits=st.lists(st.tuples(st.integers(0, 5), st.sampled_from("abcde"), scalars), max_size=4))
def test_documents_lent_as_decoded_keep_their_originals_as_read_whatever_the_transforms_did_in_place(
    docs: list[dict[str, Any]], edits: list[tuple[int, str, Any]]
) -> None:
    """The lane's path: the driver's decoded documents lent as they are (no raw bytes kept). An altered
    document's original is rebuilt from its top and the nested values encoded before the transforms:
    byte for byte the document as read; one left alone keeps its top."""
    raws = [encode(doc) for doc in docs]
    decoded: list[dict[str, Any]] = [decode(raw, CODEC) for raw in raws]
    lent = lend_decoded(decoded, CODEC)
    assert lent.copies is decoded  # lent as they are: no copy, no second decode
    tops = list(lent.tops)
    edited: set[int] = set()
    for index, key, value in edits:
        if index >= len(docs):
            continue
        target = lent.copies[index].get(key)
        if isinstance(target, list):
            target.append(value)
            edited.add(index)
        elif isinstance(target, dict):
            target["w"] = value
            edited.add(index)
        lent.copies[index]["new"] = 1
    originals = lent.originals(CODEC)
    for index, original in enumerate(originals):
        assert encode(original) == raws[index]
        if index not in edited:
            assert original is tops[index]


class _Opaque:
    """A value BSON cannot encode (as a codec's own decoded type may be)."""

    def __init__(self, items: list[int]) -> None:
        self.items = items


def test_decoded_documents_whose_values_do_not_encode_keep_deep_copies_as_originals() -> None:
    docs: list[dict[str, Any]] = [{"_id": 1, "a": [1], "o": _Opaque([1])}, {"_id": 2, "a": {"x": 1}}]
    lent = lend_decoded(docs, CODEC)
    lent.copies[0]["a"].append(2)
    lent.copies[0]["o"].items.append(2)
    lent.copies[1]["a"]["y"] = 2
    originals = lent.originals(CODEC)
    assert originals[0]["a"] == [1] and originals[0]["o"].items == [1]
    assert originals[1] == {"_id": 2, "a": {"x": 1}}
