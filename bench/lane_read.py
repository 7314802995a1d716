"""Probe: what a background lane's batch read costs in client CPU, and where it goes.

Run from the repository root::

    python bench/lane_read.py                 # the micro-bench: one read path against another
    python bench/lane_read.py --in-run 20000  # the engine's own run, its event loop accounted
    python bench/lane_read.py --unpack        # in process: one reply's unpack and decode, by read path

It is a script, not a timed test (issue 27: the lane's read cost about twice a bare read of the
same documents). Both modes start their own embedded server and seed it with the documents of
``bench/background.py`` (about 1 KB each, the version index).

* The micro-bench reads the same batches of 500 documents (keyset through the version index,
  sorted by ``_id``, as B3 and the lanes do) by several paths in turn, rounds alternating their
  order, and prints each path's client CPU per document (the process's CPU clock: every thread),
  the median of the rounds. The paths: B3's (async client, documents decoded to dicts), the
  lane's (raw BSON, then one decode of the batch), each also through pymongo's sync client, and
  the lane's with the engine's client options (``tz_aware``, ``appname``, a heartbeat listener), and
  two ways a transactional batch could read and measure its batch (decoded, then one encode of the
  batch; raw batches, their length, then one decode).
* ``--unpack`` needs no server: one reply of 500 documents unpacked and decoded in process by each
  read path, so that only the client's unpack and decode are measured.
* ``--in-run N`` runs the engine itself (``max_parallel`` 1, the bench's migration) over N
  documents in this process and accounts every callback of the event loop by the task it ran
  (thread CPU time): in all, and while a lane's batch read was in flight. What runs during a
  read besides the read is what a clock around the read also counts.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import statistics
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bson import decode_all, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import AsyncMongoClient, MongoClient

import background as bg  # bench/background.py: the same documents, index and project
from _server import server_uri

BATCH = bg.BATCH_SIZE


def seed(uri: str, db_name: str, size: int) -> None:
    client: MongoClient[Any] = MongoClient(uri, **bg.CLIENT_OPTIONS)
    try:
        bg.seed(client, db_name, size)
    finally:
        client.close()


def _filter(last: Any) -> dict[str, Any]:
    return {"__v": 1} if last is None else {"__v": 1, "_id": {"$gt": last}}


async def _read_async(collection: Any, batches: int, decode: CodecOptions[Any] | None) -> int:
    last, n = None, 0
    for _ in range(batches):
        docs = await collection.find(_filter(last), sort=[("_id", 1)], limit=BATCH, batch_size=BATCH).hint(bg.VERSION_INDEX).to_list(None)
        if decode is not None:  # the lane: one C decode of the batch's raw documents (write.batch.lend)
            decode_all(b"".join(doc.raw for doc in docs), decode)
            last = decode_all(docs[-1].raw, decode)[0]["_id"]
        else:
            last = docs[-1]["_id"]
        n += len(docs)
    return n


def _read_sync(collection: Any, batches: int, decode: CodecOptions[Any] | None) -> int:
    last, n = None, 0
    for _ in range(batches):
        docs = collection.find(_filter(last), sort=[("_id", 1)], limit=BATCH, batch_size=BATCH).hint(bg.VERSION_INDEX).to_list(None)
        if decode is not None:
            decode_all(b"".join(doc.raw for doc in docs), decode)
            last = decode_all(docs[-1].raw, decode)[0]["_id"]
        else:
            last = docs[-1]["_id"]
        n += len(docs)
    return n


async def micro(uri: str, db_name: str, batches: int, rounds: int) -> None:
    from mongoshift.project.connection import _RefusedWatch

    plain: AsyncMongoClient[Any] = AsyncMongoClient(uri, **bg.CLIENT_OPTIONS)
    engine_like: AsyncMongoClient[Any] = AsyncMongoClient(
        uri, **bg.CLIENT_OPTIONS, tz_aware=True, appname="mongoshift", event_listeners=[_RefusedWatch(asyncio.get_running_loop())]
    )
    sync: MongoClient[Any] = MongoClient(uri, **bg.CLIENT_OPTIONS)
    for c in (plain, engine_like):
        await c.admin.command("ping")
    sync.admin.command("ping")
    raw_codec: CodecOptions[Any] = CodecOptions(document_class=RawBSONDocument)
    dicts: CodecOptions[Any] = CodecOptions(document_class=dict)
    tz_dicts: CodecOptions[Any] = CodecOptions(document_class=dict, tz_aware=True)
    engine_raw = engine_like.codec_options.with_options(document_class=RawBSONDocument)

    def coll(client: Any, codec: CodecOptions[Any] | None) -> Any:
        c = client[db_name][bg.COLLECTION]
        return c if codec is None else c.with_options(codec_options=codec)

    paths: dict[str, Any] = {
        "async dicts (B3's read)": lambda: _read_async(coll(plain, None), batches, None),
        "async raw + one decode (the lane's)": lambda: _read_async(coll(plain, raw_codec), batches, dicts),
        "async raw only": lambda: _raw_only(coll(plain, raw_codec), batches),
        "async raw only, batches of 100 (the cost per command)": lambda: _raw_only(coll(plain, raw_codec), batches, 100),
        "async raw + decode, engine's client options": lambda: _read_async(coll(engine_like, engine_raw), batches, tz_dicts),
        "async dicts + one encode of the batch (size)": lambda: _dicts_sized(coll(plain, None), batches),
        "async raw batches + one decode (size: their length)": lambda: _raw_batches(coll(plain, None), batches, dicts),
        "sync dicts": lambda: _sync(coll(sync, None), batches, None),
        "sync raw + one decode": lambda: _sync(coll(sync, raw_codec), batches, dicts),
    }
    for fn in paths.values():  # warm up: connections in the pools, the server's caches
        await fn()
    per_doc: dict[str, list[float]] = {name: [] for name in paths}
    names = list(paths)
    for r in range(rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            t0 = time.process_time()
            n = await paths[name]()
            per_doc[name].append((time.process_time() - t0) / n * 1e6)
    print(f"client CPU per document (process clock), median of {rounds} rounds of {batches} batches of {BATCH}; min–max:")
    for name in names:
        values = per_doc[name]
        print(f"  {name:<54} {statistics.median(values):6.2f} µs  ({min(values):.2f}–{max(values):.2f})")
    # Untimed: how many pieces the async client's protocol receives a batch's reply in (each one
    # is a turn of the event loop), against the sync client's single blocking read per message.
    from pymongo.network_layer import PyMongoProtocol

    updated = PyMongoProtocol.buffer_updated
    pieces = 0

    def counting(self: Any, nbytes: int) -> None:
        nonlocal pieces
        pieces += 1
        updated(self, nbytes)

    PyMongoProtocol.buffer_updated = counting  # type: ignore[method-assign]
    try:
        await _raw_only(coll(plain, raw_codec), batches)
    finally:
        PyMongoProtocol.buffer_updated = updated  # type: ignore[method-assign]
    print(f"the async client received each batch's reply in {pieces / batches:.1f} pieces (header included)")
    await plain.close()
    await engine_like.close()
    sync.close()


async def _dicts_sized(collection: Any, batches: int) -> int:
    """A transactional batch's read measured by an encode: documents decoded by the driver, then the
    whole batch encoded once (its BSON size, what the transaction's byte limit is checked on)."""
    last, n = None, 0
    for _ in range(batches):
        docs = await collection.find(_filter(last), sort=[("_id", 1)], limit=BATCH, batch_size=BATCH).hint(bg.VERSION_INDEX).to_list(None)
        len(encode({"d": docs}))
        last = docs[-1]["_id"]
        n += len(docs)
    return n


async def _raw_batches(collection: Any, batches: int, decode: CodecOptions[Any]) -> int:
    """A transactional batch's read by raw batches: each reply's documents as one stream of BSON
    (its length the batch's size), decoded in one call."""
    last, n = None, 0
    for _ in range(batches):
        cursor = collection.find_raw_batches(_filter(last), sort=[("_id", 1)], limit=BATCH, batch_size=BATCH).hint(bg.VERSION_INDEX)
        streams = await cursor.to_list(None)
        sum(map(len, streams))
        docs = [doc for stream in streams for doc in decode_all(stream, decode)] if len(streams) > 1 else decode_all(streams[0], decode)
        last = docs[-1]["_id"]
        n += len(docs)
    return n


async def _raw_only(collection: Any, batches: int, size: int = BATCH) -> int:
    last, n = None, 0
    for _ in range(batches * BATCH // size):
        docs = await collection.find(_filter(last), sort=[("_id", 1)], limit=size, batch_size=size).hint(bg.VERSION_INDEX).to_list(None)
        last = decode_all(docs[-1].raw)[0]["_id"]
        n += len(docs)
    return n


async def _sync(collection: Any, batches: int, decode: CodecOptions[Any] | None) -> int:
    return _read_sync(collection, batches, decode)


# ---------------------------------------------------------------------------------------------
# --in-run: the engine's event loop, callback by callback
# ---------------------------------------------------------------------------------------------


class LoopAccount:
    """Thread CPU of every event-loop callback, by the task (coroutine) or function it ran."""

    def __init__(self) -> None:
        self.total: Counter[str] = Counter()
        self.during_read: Counter[str] = Counter()
        self.calls_during_read: Counter[str] = Counter()
        self.reading = 0
        self.read_cpu = 0.0
        self.read_thread_cpu = 0.0
        self.reads = 0
        self.read_docs = 0

    @staticmethod
    def name_of(callback: Any) -> str:
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Task):
            coro = owner.get_coro()
            return f"task {getattr(coro, '__qualname__', type(coro).__name__)}"
        return getattr(callback, "__qualname__", type(callback).__name__)

    def install(self) -> None:
        account = self
        original = asyncio.events.Handle._run
        clock = time.thread_time

        def _run(handle: Any) -> None:
            t0 = clock()
            try:
                original(handle)
            finally:
                spent = clock() - t0
                name = account.name_of(handle._callback)
                account.total[name] += spent
                if account.reading:
                    account.during_read[name] += spent
                    account.calls_during_read[name] += 1

        asyncio.events.Handle._run = _run  # type: ignore[method-assign]

        from pymongo.asynchronous.cursor import AsyncCursor

        to_list = AsyncCursor.to_list

        async def timed_to_list(cursor: Any, length: int | None = None) -> list[Any]:
            lane = cursor.collection.codec_options.document_class is RawBSONDocument
            if not lane:
                return await to_list(cursor, length)
            account.reading += 1
            t0, u0 = time.process_time(), clock()
            try:
                docs = await to_list(cursor, length)
            finally:
                account.reading -= 1
                account.read_cpu += time.process_time() - t0
                account.read_thread_cpu += clock() - u0
            account.reads += 1
            account.read_docs += len(docs)
            return docs

        AsyncCursor.to_list = timed_to_list  # type: ignore[method-assign]

    def report(self, cpu: float, size: int) -> None:
        per = 1e6 / size
        print(f"engine p=1, {size:,} documents: client CPU {cpu:.2f} s ({cpu * per:.1f} µs a document)")
        print(
            f"lane reads: {self.reads} of {self.read_docs} documents; process CPU inside them {self.read_cpu * per:.2f} µs a document "
            f"(main thread {self.read_thread_cpu * per:.2f})"
        )
        print("event-loop callbacks run while a lane read was in flight (thread CPU, µs a document; calls):")
        for name, spent in self.during_read.most_common(15):
            print(f"  {spent * per:7.3f}  {self.calls_during_read[name]:6d}  {name}")
        print("every event-loop callback of the run (thread CPU, µs a document):")
        for name, spent in self.total.most_common(20):
            print(f"  {spent * per:7.3f}  {name}")


async def in_run(uri: str, db_name: str, size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="mongoshift-probe-") as tmp:
        project = bg.write_project(Path(tmp), uri, db_name, 1)
        work = await bg._engine(project, 1)
        account = LoopAccount()
        account.install()
        t0 = time.process_time()
        migrated, extra = await work()
        cpu = time.process_time() - t0
        print(f"migrated {migrated} ({extra.get('status')})")
        account.report(cpu, size)


def unpack(rounds: int) -> None:
    """In process, no server: one reply of 500 of the bench's documents unpacked and decoded by each
    way a transactional batch could read it, and what its size check would cost on top."""
    import random
    from datetime import UTC

    from bson import _convert_raw_document_lists_to_streams
    from pymongo.message import _OpMsg

    docs = [bg.make_doc(i, random.Random(i)) for i in range(BATCH)]
    message = _OpMsg(0, encode({"cursor": {"firstBatch": docs, "id": 0, "ns": "db.c"}, "ok": 1.0}))
    fields = {"cursor": {"firstBatch": 1, "nextBatch": 1}}
    codec: CodecOptions[Any] = CodecOptions(tz_aware=True, tzinfo=UTC)  # the engine's client decodes tz-aware
    raw = codec.with_options(document_class=RawBSONDocument)

    def dicts() -> list[Any]:
        batch: list[Any] = message.unpack_response(codec_options=codec, user_fields=fields)[0]["cursor"]["firstBatch"]
        return batch

    def raw_then_decode() -> list[Any]:
        batch = message.unpack_response(codec_options=raw, user_fields=fields)[0]["cursor"]["firstBatch"]
        sum(len(doc.raw) for doc in batch)  # the size check on each document's length
        return decode_all(b"".join(doc.raw for doc in batch), codec)

    def raw_batch_then_decode() -> list[Any]:
        reply = message.raw_response(None, user_fields=fields)[0]
        _convert_raw_document_lists_to_streams(reply)
        return decode_all(reply["cursor"]["firstBatch"][0], codec)

    def dicts_then_encode() -> list[Any]:
        batch = dicts()
        len(encode({"d": batch}, codec_options=codec))  # the size check on one encode of the batch
        return batch

    paths = {
        "the driver's decode (B3's and a plain batch's read)": dicts,
        "raw documents, joined, one decode (a transaction's read)": raw_then_decode,
        "a raw batch, one decode": raw_batch_then_decode,
        "the driver's decode, one encode of the batch": dicts_then_encode,
    }
    per_doc: dict[str, list[float]] = {name: [] for name in paths}
    for r in range(rounds):
        for name in list(paths) if r % 2 == 0 else list(paths)[::-1]:
            t0 = time.process_time()
            for _ in range(50):
                assert len(paths[name]()) == BATCH
            per_doc[name].append((time.process_time() - t0) / (50 * BATCH) * 1e6)
    print(f"one reply of {BATCH} documents unpacked and decoded, client CPU per document, median of {rounds} rounds of 50:")
    for name, values in per_doc.items():
        print(f"  {name:<58} {statistics.median(values):6.2f} µs  ({min(values):.2f}–{max(values):.2f})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--uri", help="a server to use instead of a fresh embedded one (a throwaway database)")
    parser.add_argument("--docs", type=int, default=5_000, help="documents seeded for the micro-bench (default 5000)")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--in-run", type=int, metavar="N", help="run the engine over N documents with the event loop accounted")
    parser.add_argument("--unpack", action="store_true", help="in process, no server: a reply's unpack and decode by each read path")
    args = parser.parse_args()
    if args.unpack:
        unpack(args.rounds)
        return 0
    db_name = f"mongoshift_probe_{time.time_ns() % 10**8}"
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        size = args.in_run or args.docs
        seed(uri, db_name, size)
        try:
            if args.in_run:
                asyncio.run(in_run(uri, db_name, size))
            else:
                asyncio.run(micro(uri, db_name, size // BATCH, args.rounds))
        finally:
            client: MongoClient[Any] = MongoClient(uri, **bg.CLIENT_OPTIONS)
            client.drop_database(db_name)
            client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
