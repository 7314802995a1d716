"""A batch lent to its transforms: the originals the diff compares with, whatever the transforms did.

:class:`Lent` checks the batch's nested values with one encode before and one after the
transforms, and when they differ, each document on its own: these tests hold it to the
documents as read, and to keeping the top (the diff's identity shortcut) of every document left
alone, without a server (the server-side property is in ``tests/background/test_write_property.py``).
"""

from __future__ import annotations

import copy as copy_module
import datetime
import re
from collections.abc import Sequence
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp, decode, decode_all, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from hypothesis import HealthCheck, example, given, settings, strategies as st

from mongoshift.background.write.batch import array_elements, element_value, lend, lend_decoded
from mongoshift.background.write.document import IMMUTABLE

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


# -- The in-place check on one flat list, against the check before it (issue 27, fifth pass) ---------
#
# ``Lent`` now keeps a batch's nested values in one flat list (no dict per document) and, when the
# batch's bytes differ, finds the altered documents by their runs of the array's elements
# (:func:`array_elements`). The reference is the class before (one dict of nested values per
# document, each document checked against its dict's bytes), kept verbatim: for any batch, any
# in-place edits (deep ones, inside regular expressions and code scopes, unencodable ones) and both
# ways of lending, the originals are byte for byte the reference's, and a document is kept as its
# top (the diff's identity shortcut) exactly when the reference keeps it.

class _ReferenceLent:
    """``Lent`` as it was before the fifth pass of issue 27 (one dict of nested values per document), verbatim."""

    __slots__ = ("copies", "encoded", "kept", "mutables", "raws", "tops")

    def __init__(self, raws: list[bytes | memoryview] | None, copies: list[dict[str, Any]], codec: CodecOptions[Any]) -> None:
        self.raws = raws
        self.copies = copies
        self.tops = [dict(copy) for copy in copies]
        immutable = IMMUTABLE
        self.mutables = [{key: value for key, value in copy.items() if type(value) not in immutable} for copy in copies]
        self.encoded: bytes | None
        self.kept: list[dict[str, Any]] | None = None
        try:
            self.encoded = encode({"m": self.mutables}, codec_options=codec)
        except Exception:  # a value only the codec can decode: each original is decoded again instead
            self.encoded = None
            if raws is None:  # nothing to decode again: the originals are copies made now, before the transforms
                self.kept = copy_module.deepcopy(copies)

    def __len__(self) -> int:
        return len(self.copies)

    def subset(self, indices: Sequence[int], codec: CodecOptions[Any]) -> _ReferenceLent:
        """Only the documents at ``indices`` (not lent yet: call before the transforms)."""
        part = _ReferenceLent.__new__(_ReferenceLent)
        part.raws = None if self.raws is None else [self.raws[i] for i in indices]
        part.copies = [self.copies[i] for i in indices]
        part.tops = [self.tops[i] for i in indices]
        part.mutables = [self.mutables[i] for i in indices]
        part.kept = None if self.kept is None else [self.kept[i] for i in indices]
        try:
            part.encoded = None if part.kept is not None else encode({"m": part.mutables}, codec_options=codec)
        except Exception:
            part.encoded = None
        return part

    def originals(self, codec: CodecOptions[Any]) -> list[dict[str, Any]]:
        """The documents as read (call after the batch's transforms)."""
        if self.encoded is not None:
            try:
                if encode({"m": self.mutables}, codec_options=codec) == self.encoded:
                    return self.tops
            except Exception:  # the transform put something unencodable inside a value read
                pass
            # Some transform altered a value read in place: find which documents, one by one.
            before = decode(self.encoded, CodecOptions(document_class=RawBSONDocument))["m"]
            return [self._original(i, before[i].raw, codec) for i in range(len(self.tops))]
        if self.raws is None:
            assert self.kept is not None
            return self.kept
        return [decode(raw, codec) for raw in self.raws]

    def _original(self, index: int, before: bytes, codec: CodecOptions[Any]) -> dict[str, Any]:
        mutables = self.mutables[index]
        if not mutables:
            return self.tops[index]
        try:
            if encode(mutables, codec_options=codec) == before:
                return self.tops[index]
        except Exception:
            pass
        if self.raws is None:  # the top as read, its nested values as encoded before the transforms
            rebuilt = dict(self.tops[index])
            rebuilt.update(decode(before, codec))
            return rebuilt
        original: dict[str, Any] = decode(self.raws[index], codec)
        return original



def _reference_lend(docs: Any, codec: CodecOptions[Any]) -> _ReferenceLent:
    raws = [doc.raw if isinstance(doc, RawBSONDocument) else encode(doc, codec_options=codec) for doc in docs]
    return _ReferenceLent(raws, decode_all(b"".join(raws), codec) if raws else [], codec)


#: Every BSON type a read document may hold, the ones that decode to mutable Python values included.
rich_scalars = st.one_of(
    scalars,
    st.sampled_from([Regex("^a", 0), Regex("b+", re.IGNORECASE), Code("f()"), Code("g(x)", {"x": 1}), MinKey(), MaxKey()]),
    st.sampled_from([Binary(b"\x01" * 16, 4), Binary(b"xy", 0x80), Timestamp(5, 1), DBRef("c", 1), DBRef("c", ObjectId("66000000aaaaaaaaaaaaaaaa"), "d")]),
)
rich_values = st.recursive(
    rich_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("xyz"), inner, max_size=3), max_leaves=8
)
rich_batches = st.lists(st.dictionaries(st.sampled_from("abcde"), rich_values, max_size=5), min_size=1, max_size=6).map(
    lambda docs: [{"_id": i, **doc} for i, doc in enumerate(docs)]
)
#: An edit: the document, the top-level field, the path down into its value, what to do there, a value.
deep_edits = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.sampled_from("abcde"),
        st.lists(st.integers(0, 3), max_size=3),
        st.sampled_from(["add", "pop", "replace", "same", "regex", "scope", "unencodable", "top"]),
        rich_scalars,
    ),
    max_size=5,
)


def _edit(doc: dict[str, Any], key: str, path: list[int], action: str, value: Any) -> None:
    """One edit of a lent document, in place inside the value read at ``key`` (or of its top: ``top``)."""
    if key not in doc:
        return
    if action == "top":
        doc[key] = value  # a new top-level value: never the originals' business
        return
    target = doc[key]
    for step in path:
        inner = list(target.values()) if isinstance(target, dict) else target if isinstance(target, list) else []
        containers = [item for item in inner if isinstance(item, (dict, list, Regex, Code))]
        if not containers:
            break
        target = containers[step % len(containers)]
    if action == "regex" and isinstance(target, Regex):
        target.flags ^= re.MULTILINE
    elif action == "scope" and isinstance(target, Code) and target.scope is not None:
        target.scope["x"] = value
    elif isinstance(target, list):
        if action == "add":
            target.append(value)
        elif action == "pop" and target:
            target.pop(0)
        elif action == "replace" and target:
            target[0] = value
        elif action == "same" and target:
            target[0] = decode(encode({"v": target[0]}))["v"]  # an equal value, another object: same bytes
        elif action == "unencodable":
            target.append(_Opaque([1]))
    elif isinstance(target, dict):
        if action == "add":
            target["w"] = value
        elif action == "pop" and target:
            target.pop(next(iter(target)))
        elif action == "replace" and target:
            target[next(iter(target))] = value
        elif action == "unencodable":
            target["w"] = _Opaque([1])


@settings(max_examples=250)
@given(docs=rich_batches, edits=deep_edits, decoded=st.booleans(), subset=st.lists(st.integers(0, 5), unique=True, max_size=6))
def test_the_flat_check_gives_the_originals_of_the_check_before_it(
    docs: list[dict[str, Any]], edits: list[tuple[int, str, list[int], str, Any]], decoded: bool, subset: list[int]
) -> None:
    raws = [encode(doc) for doc in docs]
    if decoded:  # the lane's path: the driver's decode, lent as it is (two decodes: one per check)
        lent: Any = lend_decoded([decode(raw, CODEC) for raw in raws], CODEC)
        reference: Any = _ReferenceLent(None, [decode(raw, CODEC) for raw in raws], CODEC)
    else:  # raw documents (a transaction's read, a re-read)
        lent = lend([RawBSONDocument(raw) for raw in raws], CODEC)
        reference = _reference_lend([RawBSONDocument(raw) for raw in raws], CODEC)
    indices = sorted(i for i in subset if i < len(docs))
    if indices:  # a transaction's retry without some documents: taken before the transforms
        lent, reference = lent.subset(indices, CODEC), reference.subset(indices, CODEC)
    tops, reference_tops = list(lent.tops), list(reference.tops)
    for index, key, path, action, value in edits:
        if index < len(lent.copies):  # the same edits, on each one's own copies
            _edit(lent.copies[index], key, path, action, value)
            _edit(reference.copies[index], key, path, action, value)
    originals, expected = lent.originals(CODEC), reference.originals(CODEC)
    assert [encode(doc) for doc in originals] == [encode(doc) for doc in expected]
    assert [doc is top for doc, top in zip(originals, tops, strict=True)] == [doc is top for doc, top in zip(expected, reference_tops, strict=True)]
    read = [raws[i] for i in indices] if indices else raws
    assert [encode(doc) for doc in originals] == read  # and both are the documents as read


_EVERY_TYPE = [
    1.5, "s", {"x": [1]}, [1, {"y": None}], b"b", Binary(b"\x01" * 16, 4), ObjectId("66000000aaaaaaaaaaaaaaaa"), True,
    datetime.datetime(2024, 1, 1), None, Regex("^a", re.IGNORECASE), Regex("b", 0), DBRef("c", 1), Code("f()"),
    Code("g(x)", {"x": 1}), 7, Timestamp(5, 1), Int64(8), Decimal128("1.0"), MinKey(), MaxKey(),
]  # fmt: skip


@settings(max_examples=200)
@given(items=st.lists(rich_values, max_size=8))
@example(items=_EVERY_TYPE)
@example(items=[[item] for item in _EVERY_TYPE])
def test_an_arrays_elements_are_its_bytes_in_order(items: list[Any]) -> None:
    """Each element as its type byte and value bytes: put back with their positions, they are the
    array's bytes; each decodes to what a decode of the whole array gives at its position."""
    encoded = encode({"m": items})
    elements = array_elements(encoded)
    assert b"".join(bytes((kind,)) + str(i).encode() + b"\x00" + value for i, (kind, value) in enumerate(elements)) == encoded[11:-2]
    assert encode({"m": [element_value(element, CODEC) for element in elements]}) == encoded
