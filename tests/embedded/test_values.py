"""Fixes (ai) and (aj) of mongoshift.embedded.patches: index keys of top-level fields, ObjectIds not
deep-copied, plain wire values converted at once. Each is compared with the mongoeco function it
replaces (kept as ``__wrapped__``) on random values: the same keys, the same documents on the wire."""

from __future__ import annotations

import copy
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp, encode
from hypothesis import given, settings, strategies as st

from ..conftest import examples
from .in_process import InProcessServer, count_calls, same_tree, sync_client

scalars = (
    st.integers(-(2**31), 2**31 - 1) | st.builds(Int64, st.integers(-(2**63), 2**63 - 1)) | st.floats(allow_nan=True)
    | st.builds(lambda d: Decimal128(str(d)), st.decimals(allow_nan=False, allow_infinity=False, places=3, min_value=-1000, max_value=1000))
    | st.text(max_size=4) | st.booleans() | st.none() | st.builds(ObjectId, st.binary(min_size=12, max_size=12))
    | st.builds(lambda ms: datetime.datetime(2000, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms), st.integers(0, 10**12))
    | st.sampled_from([Binary(b"\x01", 0), Binary(b"\x02" * 16, 4), Binary(b"x", 128), Regex("^a", "i"), Timestamp(1, 2),
                      MinKey(), MaxKey(), Code("f()"), Code("g()", {"x": 1})])
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c.d"]), inner, max_size=3), max_leaves=8)
documents = st.dictionaries(st.sampled_from(["a", "b", "v", "_x", "z"]), values, max_size=5)


@examples(thorough=300, quick=60)
def test_index_keys_are_the_originals(server: InProcessServer, max_examples: int) -> None:
    """(ai) The keys of any document under any key pattern, as mongoeco derives them: for one field, its
    index keys; (ay) for several, the keys of a unique index on them (every key the document has)."""
    @settings(max_examples=max_examples)
    @given(stored=documents, fields=st.lists(st.sampled_from(["a", "b", "v", "a.b", "missing", "_x"]), min_size=1, max_size=3, unique=True))
    def check(stored: dict[str, Any], fields: list[str]) -> None:
        from mongoeco.core.codec import DocumentCodec
        from mongoeco.engines.memory import MemoryEngine

        engine = server.engine
        document = DocumentCodec.decode(DocumentCodec.encode(stored), preserve_bson_wrappers=True)  # as the engine holds it
        from mongoeco.core.codec import _own_internal_bson

        for held in (document, _own_internal_bson(document)):  # as decoded, and as the engine stores it
            if len(fields) == 1:
                assert engine._index_keys(held, fields) == MemoryEngine._index_keys.__wrapped__(engine, held, fields)
            else:
                assert engine._index_keys(held, fields) == engine._unique_index_keys(held, fields)
        for value in document.values():
            key = MemoryEngine._index_equality_key
            assert key(value) == key.__wrapped__(value)

    check()


@settings(max_examples=500)
@given(value=st.integers(-(2**63), 2**63 - 1) | st.builds(lambda d, z: d * 10**z, st.integers(-999, 999), st.integers(0, 15))
       | st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 10**18, -(10**18), 2**63, -(2**63) - 1, 10**40]))
def test_int_index_keys_are_the_originals_digit_for_digit(value: int) -> None:
    """(ai) An int's equality key is mongoeco's: the same Decimal digits and exponent, not only an
    equal value (ints past int64 keep the original function)."""
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.embedded import patches

    patches.apply()
    key = MemoryEngine._index_equality_key
    if not -(2**63) <= value < 2**63:  # past int64: the original refuses it, and so does the fix
        with pytest.raises(Exception) as refused:
            key.__wrapped__(value)
        with pytest.raises(type(refused.value)):
            key(value)
        return
    got, expected = key(value), key.__wrapped__(value)
    assert got == expected and hash(got) == hash(expected)
    assert got[0] == expected[0] and type(got[1]) is type(expected[1]) and got[1].as_tuple() == expected[1].as_tuple()


def test_an_object_id_copies_to_itself() -> None:
    """(aj) mongoeco's ObjectId is immutable: a copy is the object, equal and hashed as before."""
    from mongoeco.types import ObjectId as EcoObjectId

    from mongoshift.embedded import patches

    patches.apply()
    oid = EcoObjectId()
    assert copy.deepcopy(oid) is oid and copy.copy(oid) is oid
    assert copy.deepcopy({"_id": oid})["_id"] is oid
    assert copy.deepcopy(ObjectId(oid.binary)) == oid  # pymongo's own class keeps its copy protocol


@examples(thorough=200, quick=40)
def test_documents_cross_the_wire_as_with_the_original_conversions(server: InProcessServer, max_examples: int) -> None:
    """(aj) A document stored and read back is the same bytes with and without the fast conversions."""
    @settings(max_examples=max_examples)
    @given(document=documents)
    def check(document: dict[str, Any]) -> None:
        from mongoeco.api._async import raw_batch_cursor
        from mongoeco.wire import bson_bridge, protocol

        client = sync_client(server)
        try:
            collection = client.values.roundtrip
            collection.drop()
            collection.insert_one({"_id": 1, **document})
            fast = encode(collection.find_one({"_id": 1}))
            patched = {name: getattr(bson_bridge, name) for name in ("decode_wire_value", "encode_wire_value")}
            owners = {"decode_wire_value": (bson_bridge, protocol), "encode_wire_value": (bson_bridge, protocol, raw_batch_cursor)}
            try:
                for name, function in patched.items():
                    for module in owners[name]:
                        setattr(module, name, function.__wrapped__)
                collection.drop()
                collection.insert_one({"_id": 1, **document})
                slow = encode(collection.find_one({"_id": 1}))
            finally:
                for name, function in patched.items():
                    for module in owners[name]:
                        setattr(module, name, function)
            assert fast == slow
        finally:
            client.close()

    check()


_INDEX_MAP_METHODS = ("add", "discard", "ordinal_for", "ordered_storage_keys", "__getitem__", "get", "__delitem__", "pop")
_INDEX_MAP_ACTIONS = [
    "add", "add", "add", "discard", "discard", "delitem", "pop", "pop2", "setitem", "setdefault", "update",
    "snapshot", "restore", "copy", "deepcopy", "clear",
]

index_steps = st.lists(
    st.tuples(st.sampled_from(_INDEX_MAP_ACTIONS), st.integers(0, 3), st.integers(0, 4), st.integers(0, 2), st.none() | st.integers(0, 50)),
    max_size=40,
)
#: One NaN shared by every storage key that holds it: such a key equals itself only through a
#: tuple's identity shortcut, which rpds' key comparison and ``==`` share.
_SHARED_NAN = float("nan")


def _storage_key(member: int, kind: int) -> Any:
    """A storage key: an ObjectId's (as the engine keys one), one holding the shared NaN, one holding a
    new NaN each time (never equal to another draw of itself)."""
    if kind == 0:
        return ("objectid", ObjectId(f"{member:024x}"))
    return ("number", _SHARED_NAN if kind == 1 else float("nan"), member)


def _index_view(index_map: Any, probes: list[Any]) -> Any:
    """What an index map answers, as text: its keys, its buckets (read by ``[]``, ``get``, ``items`` and
    ``values``), each probe's ordinal in every bucket, the membership order (whole and its first), an
    absent key's answers, the next ordinal. Sorted, not in iteration order: each new rpds map hashes
    with its own random seed, so two of mongoeco's own maps of the same keys iterate differently (and
    keys holding different NaNs print alike)."""
    absent = (9,)
    buckets = sorted(
        repr((
            key, sorted(map(repr, index_map[key])), type(index_map[key]).__name__, sorted(map(repr, index_map.get(key, ("default",)))),
            key in index_map, [index_map.ordinal_for(key, probe) for probe in probes],
            index_map.ordered_storage_keys(key), index_map.ordered_storage_keys(key, limit=1), index_map.ordered_storage_keys(key, limit=0),
        ))
        for key in index_map
    )
    return (
        buckets, sorted(repr((key, sorted(map(repr, members)))) for key, members in index_map.items()),
        sorted(repr(sorted(map(repr, members))) for members in index_map.values()),
        index_map._next_membership_ordinal, len(index_map), absent in index_map, index_map.get(absent), index_map.get(absent, ("d",)),
        index_map.ordinal_for(absent, probes[0]), index_map.ordered_storage_keys(absent),
    )


def _step(index_map: Any, action: str, index_key: Any, storage_key: Any, other: Any, ordinal: int | None) -> Any:
    """One step on ``index_map``; what it answers (a value, or the type of its error)."""
    try:
        if action == "add":
            index_map.add(index_key, storage_key, ordinal=ordinal)
        elif action == "discard":
            index_map.discard(index_key, storage_key)
        elif action == "delitem":
            del index_map[index_key]
        elif action == "pop":
            popped = index_map.pop(index_key, None)
            return None if popped is None else sorted(map(repr, popped))
        elif action == "pop2":
            return index_map.pop(index_key, None, None)
        elif action == "setitem":
            index_map[index_key] = [storage_key, other][: 1 + (ordinal or 0) % 2]
        elif action == "setdefault":
            return sorted(map(repr, index_map.setdefault(index_key, [storage_key])))
        elif action == "update":
            index_map.update({index_key: [storage_key], (index_key[0] + 1,): [other]})
        elif action == "clear":
            index_map.clear()
    except (KeyError, TypeError) as error:
        return type(error).__name__
    return None


@settings(max_examples=400)
@given(steps=index_steps)
def test_index_buckets_change_as_with_the_original_steps(steps: list[tuple[str, int, int, int, int | None]]) -> None:
    """(ai, aw, br) An index map answers as mongoeco's own after any steps, every read alike: buckets of
    one document kept in the lone form (since (br) one entry of one map), buckets of several (which a
    lone one joins when it gains a member) in mongoeco's; snapshots restored, copies and deep copies
    answer as the map they were taken from did."""
    from mongoeco.engines._memory_collection import MemoryIndexMap

    from mongoshift.embedded import patches

    patches.apply()
    original = type("OriginalIndexMap", (MemoryIndexMap,), {name: getattr(MemoryIndexMap, name).__wrapped__ for name in _INDEX_MAP_METHODS})
    fast, slow = MemoryIndexMap(), original()
    states: tuple[Any, Any] | None = None
    probes: list[Any] = [_storage_key(0, 0)]
    for action, key, member, kind, ordinal in steps:
        storage_key, other = _storage_key(member, kind), _storage_key((member + 1) % 5, kind)
        probes += [storage_key, other]
        index_key = (key,) if key < 2 else (key, storage_key)  # buckets of many documents, and of one
        answers = [_step(index_map, action, index_key, storage_key, other, ordinal) for index_map in (fast, slow)]
        if action == "snapshot":
            states = (fast._snapshot_state(), slow._snapshot_state())
        elif action == "restore" and states is not None:
            fast._restore_state(states[0])
            slow._restore_state(states[1])
        elif action == "copy":
            fast, slow = fast.copy(), slow.copy()
        elif action == "deepcopy":  # a deep copy holds copies of the storage keys, equal to the originals
            fast, slow = copy.deepcopy(fast), copy.deepcopy(slow)
        assert answers[0] == answers[1]
        assert _index_view(fast, probes) == _index_view(slow, probes)
        assert fast == slow


plain_names = st.sampled_from(["a", "b", "ids", "_x"])
def _engine_object_id(raw: bytes) -> Any:
    """mongoeco's own ObjectId (what a stored document and an update's internal value hold)."""
    from mongoeco.types import ObjectId as EngineObjectId

    return EngineObjectId(raw)


trees = st.recursive(
    st.integers(-(2**64), 2**64) | st.floats(allow_nan=True) | st.text(max_size=3) | st.booleans() | st.none() | scalars
    | st.builds(_engine_object_id, st.binary(min_size=12, max_size=12)),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(plain_names | st.sampled_from(["c.d", "$e", "1", ""]), inner, max_size=3),
    max_leaves=12,
)


@examples(thorough=500, quick=80)
def test_a_plain_tree_crosses_the_codec_as_the_codec_takes_it(server: InProcessServer, max_examples: int) -> None:
    """A list or document of plain values and ObjectIds (pymongo's or mongoeco's), or one ObjectId, is
    built as DocumentCodec.to_internal and .encode build it, node by node and type by type; anything
    else (a wrapped number, a binary, a special name, an int beyond 64 bits) is left to the codec."""
    from mongoeco.core.codec import DocumentCodec

    from mongoshift.embedded.patches import updates

    @settings(max_examples=max_examples)
    @given(
        value=st.lists(trees, max_size=6) | st.dictionaries(plain_names, trees, max_size=4) | st.lists(st.integers(-(2**63), 2**63 - 1), max_size=50)
        | st.builds(ObjectId, st.binary(min_size=12, max_size=12)) | st.builds(_engine_object_id, st.binary(min_size=12, max_size=12))
    )
    def check(value: Any) -> None:
        internal = updates.plain_tree(value, internal=True)
        if internal is updates._MISSING:
            return
        assert same_tree(internal, DocumentCodec.to_internal(value))
        assert same_tree(updates.plain_tree(internal, internal=False), DocumentCodec.encode(DocumentCodec.to_internal(value)))

    check()


def test_what_a_plain_tree_leaves_to_the_codec(server: InProcessServer) -> None:
    from mongoshift.embedded.patches import updates

    for value in ([Int64(1)], [2**63], {"$e": 1}, {"c.d": 1}, [{"a": Timestamp(1, 2)}], [b"x"], {"a": [1, {"b": 2**64}]}, 7):
        assert updates.plain_tree(value, internal=True) is updates._MISSING
    assert updates.plain_tree([1, 2.5, "x", None, True, {"a": [1]}], internal=True) is not updates._MISSING
    # (bb) a checkpoint's ids: not left to the codec's encode-then-decode
    ids = {"token": "t", "ids": [ObjectId() for _ in range(3)], "revs": [1, 2, None]}
    assert updates.plain_tree(ids, internal=True) is not updates._MISSING


def test_a_checkpoint_of_object_ids_does_not_cross_the_codec(server: InProcessServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """(bb) The engine's fenced checkpoint: a findAndModify whose ``$set`` carries the batch's 500
    ``_id``s. ObjectIds went through DocumentCodec.to_internal (an encode, then a decode) and
    DocumentCodec.encode one by one: over 2,000 codec calls a checkpoint, a dozen now (its other
    values); the document stored is the one the codec builds (the property test above)."""
    from mongoeco.core.codec import DocumentCodec
    from pymongo import ReturnDocument

    client = sync_client(server)
    try:
        partitions = client.values.partitions
        partitions.drop()
        partitions.insert_one({"_id": "p", "status": "running", "lease": {"token": "t"}})
        ids = [ObjectId() for _ in range(500)]
        intent = {"token": "t", "ids": ids, "revs": list(range(500))}
        calls = count_calls(monkeypatch, (DocumentCodec, "to_internal"), (DocumentCodec, "encode"))
        doc = partitions.find_one_and_update(
            {"_id": "p", "lease.token": "t", "status": "running"},
            {"$set": {"inflight": intent}, "$currentDate": {"lease.renewed_at": True}, "$inc": {"counters.migrated": 500}},
            projection={"_id": 0, "status": 1},
            return_document=ReturnDocument.AFTER,
        )
        monkeypatch.undo()
        assert doc == {"status": "running"}
        assert calls["to_internal"] + calls["encode"] <= 50, calls  # unpatched: over 2,000
        stored = partitions.find_one({"_id": "p"})
        assert stored is not None and stored["inflight"] == intent and stored["counters"] == {"migrated": 500}
        assert [type(i) for i in stored["inflight"]["ids"]] == [ObjectId] * 500
        assert partitions.count_documents({"inflight.ids": ids[250]}) == 1
    finally:
        client.close()


wire_scalars = scalars | st.sampled_from([
    Binary(b"\x03" * 16, 3), Binary(b"\x04" * 15, 4), b"raw", DBRef("c", ObjectId(bytes(12))), DBRef("c", 7, "db", extra={"k": Int64(2)}),
    Code("h()", {"id": ObjectId(bytes(12)), "n": Int64(3)}), Regex("x", 0), float("inf"),
])
wire_values = st.recursive(
    wire_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["a", "b", "c.d", "$e"]), inner, max_size=3), max_leaves=8
)
wire_documents = st.dictionaries(st.sampled_from(["update", "a", "lsid", "txnNumber", "updates", "documents"]), wire_values, max_size=4)


def _op_msg(flags: int, sections: list[tuple[int, Any]]) -> bytes:
    """An OP_MSG payload: each section a body (kind 0, one document) or a sequence (kind 1, a name and documents)."""
    payload = flags.to_bytes(4, "little")
    for kind, content in sections:
        if kind == 0:
            payload += b"\x00" + encode(content)
        else:
            name, documents = content
            inner = name.encode() + b"\x00" + b"".join(encode(document) for document in documents)
            payload += b"\x01" + (len(inner) + 4).to_bytes(4, "little") + inner
    return payload


def _decode_outcome(decode: Any, header: Any, payload: bytes) -> Any:
    try:
        request = decode(header, payload)
    except Exception as error:
        return "raised", type(error), str(error)
    return request.header, request.flag_bits, request.body


@examples(thorough=1000, quick=150)
def test_a_request_decodes_as_with_mongoeco_decode_op_msg(max_examples: int) -> None:
    """(as) Any OP_MSG payload (a body and document sequences in any order, repeated names, flags,
    a byte changed or cut off) decodes to the same request, type by type, or fails the same way."""
    from mongoeco.wire import protocol, proxy

    from mongoshift.embedded import patches

    patches.apply()
    fast = protocol.decode_op_msg
    assert proxy.decode_op_msg is fast

    @settings(max_examples=max_examples)
    @given(
        flags=st.sampled_from([0, 2, 1 << 16, 1, 4, 1 << 20]),
        sections=st.lists(
            st.tuples(st.just(0), wire_documents)
            | st.tuples(st.just(1), st.tuples(st.sampled_from(["updates", "documents", "a", ""]), st.lists(wire_documents, max_size=3))),
            max_size=4,
        ),
        damage=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 255)) | st.integers(0, 10**6),
    )
    def check(flags: int, sections: list[tuple[int, Any]], damage: Any) -> None:
        payload = _op_msg(flags, sections)
        if isinstance(damage, tuple):
            at = damage[0] % len(payload)
            payload = payload[:at] + bytes([damage[1]]) + payload[at + 1 :]
        elif damage is not None:
            payload = payload[: damage % (len(payload) + 1)]
        header = protocol.MessageHeader(16 + len(payload), 1, 0, protocol.OP_MSG)
        expected = _decode_outcome(fast.__wrapped__, header, payload)
        got = _decode_outcome(fast, header, payload)
        assert got[:2] == expected[:2]
        assert same_tree(got[2], expected[2]) and repr(got[2]) == repr(expected[2])  # repr: a Code's scope, a DBRef's parts

    check()


@examples(thorough=1000, quick=150)
def test_a_reply_encodes_as_with_mongoeco_encode_wire_value(max_examples: int) -> None:
    """(as) Any reply, of pymongo's types and of mongoeco's, goes out as the same bytes as through
    mongoeco's conversion, and is left as it was (a plain container goes to the encoder as it is)."""
    from mongoeco.wire import bson_bridge, protocol

    from mongoshift.embedded import patches

    patches.apply()
    fast = protocol.encode_wire_value
    to_mongoeco = bson_bridge.decode_wire_value.__wrapped__

    flat = st.dictionaries(plain_names, st.integers(-(2**31), 2**31 - 1) | st.text(max_size=2) | st.none() | st.booleans(), max_size=3)

    @settings(max_examples=max_examples)
    @given(
        document=wire_documents,
        plain=st.dictionaries(plain_names, st.lists(st.integers(-(2**31), 2**31 - 1) | st.text(max_size=2), max_size=3), max_size=3),
        batch=st.lists(flat, max_size=4),
        at=st.none() | st.integers(0, 4),
        converted=st.booleans(),
    )
    def check(document: dict[str, Any], plain: dict[str, Any], batch: list[Any], at: int | None, converted: bool) -> None:
        if at is not None:  # a batch of flat plain documents, or one with another document or value among them
            batch.insert(at, [to_mongoeco(document) if converted else document, plain, 7][at % 3])
        reply = {"cursor": {"firstBatch": batch, "id": 0}, "ok": 1.0, "more": [to_mongoeco(document) if converted else document, plain]}
        before = repr(reply)
        assert encode(fast(reply)) == encode(fast.__wrapped__(reply))
        assert repr(reply) == before

    check()


def test_a_reply_of_documents_with_mongoecos_object_ids_goes_out_as_it_is() -> None:
    """(au) Nothing in a find's reply of plain documents with mongoeco's ObjectId ``_id``s (nested
    documents and arrays included) needs converting: the reply is handed to the encoder as it is,
    and the encoder writes the ObjectIds as the conversion would."""
    from mongoeco.types import ObjectId as EcoObjectId
    from mongoeco.wire import protocol

    from mongoshift.embedded import patches

    patches.apply()
    batch = [{"_id": EcoObjectId(bytes([i]) * 12), "a": {"b": [1, "x", {"c": EcoObjectId(bytes([7]) * 12)}]}} for i in range(3)]
    reply = {"cursor": {"firstBatch": batch, "id": Int64(0)}, "ok": 1.0}
    assert protocol.encode_wire_value(reply) is reply
    assert encode(reply) == encode(protocol.encode_wire_value.__wrapped__(reply))
    reply["cursor"]["firstBatch"][1]["a"]["b"].append(Binary(b"\x01", 0))  # one value deep down to convert
    out = protocol.encode_wire_value(reply)
    assert out is not reply and out["cursor"]["firstBatch"][0] is batch[0]  # rebuilt only along its path
    assert encode(out) == encode(protocol.encode_wire_value.__wrapped__(reply))


def _containers(value: Any) -> Iterator[int]:
    """The ids of every dict and list of a tree."""
    if isinstance(value, dict):
        yield id(value)
        for item in value.values():
            yield from _containers(item)
    elif isinstance(value, list):
        yield id(value)
        for item in value:
            yield from _containers(item)


@examples(thorough=1000, quick=150)
def test_a_document_materializes_as_with_mongoeco_and_shares_no_container(max_examples: int) -> None:
    """(as) A cursor's document, as the engine returns it, materializes for any codec options as
    mongoeco's function gives it, node by node and type by type, in new containers only."""
    import datetime as dt

    from mongoeco._types.concerns import CodecOptions
    from mongoeco.api._async import collection
    from mongoeco.core.bson_scalars import BsonScalarOverflowError
    from mongoeco.core.codec import DocumentCodec
    from mongoeco.types import SON

    from mongoshift.embedded import patches

    patches.apply()
    fast = collection.materialize_public_document
    options = [
        CodecOptions(), CodecOptions(tz_aware=True), CodecOptions(tz_aware=True, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        CodecOptions(document_class=SON), CodecOptions(type_registry={int: str}), None,
    ]

    @settings(max_examples=max_examples)
    @given(
        document=(
            st.dictionaries(plain_names, trees, max_size=5) | wire_documents
            | st.dictionaries(plain_names, scalars | st.lists(scalars, max_size=2), max_size=4)
        ),
        internal=st.booleans(),
        codec_options=st.sampled_from(options),
    )
    def check(document: dict[str, Any], internal: bool, codec_options: Any) -> None:
        data = document
        if internal:  # as the engine returns a stored document
            try:
                data = DocumentCodec.to_public(DocumentCodec.to_internal(document))
            except BsonScalarOverflowError:  # an int beyond 64 bits: not a document the engine stores
                return
        try:
            expected: Any = fast.__wrapped__(data, codec_options=codec_options)
        except Exception as error:
            expected = type(error)
        try:
            got: Any = fast(data, codec_options=codec_options)
        except Exception as error:
            got = type(error)
        assert same_tree(got, expected) and repr(got) == repr(expected)
        if isinstance(got, dict):
            assert not set(_containers(got)) & set(_containers(data))

    check()


def test_small_int_index_keys_kept_once_are_the_originals() -> None:
    """(aw) The keys kept for small ints (a version field's) are mongoeco's, digit for digit."""
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.embedded import patches
    from mongoshift.embedded.patches.updates import _SMALL_INT_KEYS

    patches.apply()
    key = MemoryEngine._index_equality_key
    assert set(_SMALL_INT_KEYS) >= set(range(0, 101))
    for value, kept in _SMALL_INT_KEYS.items():
        expected = key.__wrapped__(value)
        assert key(value) is kept
        assert kept == expected and kept[1].as_tuple() == expected[1].as_tuple()


def test_a_date_out_of_the_servers_range_is_refused_in_words_naming_no_value(server: InProcessServer) -> None:
    """(cy) A date before year 1 or after 9999 fails the request with 22, saying why, naming no value; nothing runs."""
    from bson.codec_options import DatetimeConversion
    from bson.datetime_ms import DatetimeMS
    from pymongo import MongoClient
    from pymongo.errors import OperationFailure

    client: MongoClient[Any] = MongoClient(server.uri, serverSelectionTimeoutMS=30_000, datetime_conversion=DatetimeConversion.DATETIME_AUTO)
    try:
        dates = client.t_date_range.dates
        dates.drop()
        epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
        last_ms = (datetime.datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=datetime.UTC) - epoch) // datetime.timedelta(milliseconds=1)
        first_ms = (datetime.datetime(1, 1, 1, tzinfo=datetime.UTC) - epoch) // datetime.timedelta(milliseconds=1)
        for ms in (last_ms + 1, first_ms - 1):
            with pytest.raises(OperationFailure) as refused:
                dates.insert_many([{"_id": 1}, {"_id": 2, "at": DatetimeMS(ms)}])
            assert refused.value.code == 22
            message = str(refused.value)
            assert "before year 1 or after year 9999 is not supported by the embedded server" in message
            assert "10000" not in message and "year 0" not in message and "datetime_conversion" not in message
            with pytest.raises(OperationFailure) as refused:
                dates.find_one({"at": {"$lt": DatetimeMS(ms)}})
            assert refused.value.code == 22 and "9999 is not supported" in str(refused.value)
        assert dates.count_documents({}) == 0
        # The first and the last millisecond of the range are stored and read back.
        dates.insert_many([{"_id": 1, "at": DatetimeMS(first_ms)}, {"_id": 2, "at": DatetimeMS(last_ms)}])
        assert [d["at"] for d in dates.find().sort("_id", 1)] == [datetime.datetime(1, 1, 1), datetime.datetime(9999, 12, 31, 23, 59, 59, 999000)]
    finally:
        client.t_date_range.dates.drop()
        client.close()
