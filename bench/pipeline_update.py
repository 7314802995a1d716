"""Benchmark: the embedded server's pipeline ``update_many`` as a ``pipeline=`` range sends it, in one process.

Run from the repository root::

    python bench/pipeline_update.py                          # 4,000 documents: CPU µs per updated document
    python bench/pipeline_update.py --profile out.prof       # the same under cProfile (slower: shares, not times)
    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no python bench/pipeline_update.py --size 2000 --seed-only
    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no python bench/pipeline_update.py --size 2000
                                                             # instructions: (second - first) ÷ 2,000 a document

It is a script, not a timed test. mongoeco's client on a fresh memory engine with mongoshift's fixes
(no wire, no event loop thread) is seeded with bench/background.py's documents and version index, then
updated by ranges of 500 documents with the engine's pipeline (bench/background.py's stages and the
engine's version and revision stamp) and its range filter (the source shape after the previous range's
last ``_id``, up to this one's, as ``planner.range_filter`` writes it for ObjectIds) through the ``update`` command's own entry
(``execute_server_update``, ``multi``), outside a transaction; every document must come out at version 2.
``--seed-only`` stops before the updates (the baseline an instruction count subtracts). ``--transaction`` runs each
range in a transaction of its own, committed after it, as a ``pipeline=`` lane does (the commit's merge and change
dispatch then count with the update; the lane's checkpoint is not sent), under the server process's collector policy
(``embedded/collector.py``: young collections at its threshold, the seeded heap frozen). ``--history`` makes the
server's change history (``embedded/change_streams.py: attach_history``, as the server attaches it) the client's change
sink, so that each write's event is recorded as the server records it (without it, mongoeco's own hub of the client
takes them: its steps are not the server's). With another
tree's ``src`` first on ``PYTHONPATH``, it measures that tree's server.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import sys
import time
from typing import Any

import background  # bench/background.py: the same documents and pipeline

RANGE = 500
HINT = {"__v": 1, "_id": 1}
PIPELINE = [*background.ENGINE_PIPELINE, {"$set": {"__v": {"$literal": 2}, "__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}}}]


async def run(size: int, seed_only: bool, profile: str | None, transaction: bool = False, history: bool = False) -> None:
    from bson import ObjectId
    from mongoeco.api import AsyncMongoClient
    from mongoeco.api._async import _collection_modify
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.embedded import patches
    from mongoshift.embedded.server import ENGINE_OPTIONS

    patches.apply()
    engine = MemoryEngine(**ENGINE_OPTIONS)
    client: Any = AsyncMongoClient(engine)
    if history:  # the server's change sink, as the server attaches it
        from mongoshift.embedded.change_streams import DEFAULT_MAX_EVENTS, attach_history

        attach_history(client, DEFAULT_MAX_EVENTS)
    await engine.connect()
    collection = client.bench.docs
    docs = await background.seed_docs(collection, size)
    await collection.create_index(list(HINT.items()))
    if transaction:  # the server process's collector policy (young collections at its threshold, survivors frozen)
        from mongoshift.embedded.collector import Collector

        Collector().install()  # its full collections are the server's check loop's, not run here
    if seed_only:
        return
    ids = [doc["_id"] for doc in docs]
    profiler = cProfile.Profile() if profile else None
    began = time.process_time()
    if profiler:
        profiler.enable()
    modified = 0
    low: dict[str, Any] = {"$gte": ObjectId("0" * 24)}  # the engine's objectId bracket, then after each range's last
    for start in range(0, size, RANGE):
        last = ids[min(size, start + RANGE) - 1]
        query = {"$and": [{"$and": [{"__v": 1}, {"_id": {**low, "$lte": ObjectId("f" * 24)}}]}, {"_id": {"$lte": last}}]}
        low = {"$gt": last}
        if transaction:
            session = client.start_session()
            session.start_transaction()
            result = await _collection_modify.execute_server_update(collection, query, PIPELINE, multi=True, hint=HINT, session=session)
            session.commit_transaction()
            session.close()
        else:
            result = await _collection_modify.execute_server_update(collection, query, PIPELINE, multi=True, hint=HINT)
        modified += result.modified_count
    if profiler and profile:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu = time.process_time() - began
    if modified != size or await collection.count_documents({"__v": 2}) != size:
        raise SystemExit(f"{modified} of {size} documents updated")
    print(f"{size} documents, {1e6 * cpu / size:.1f} µs of CPU per updated document{' (under cProfile)' if profiler else ''}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4000, help="documents (default 4,000)")
    parser.add_argument("--seed-only", action="store_true", help="seed, then stop (an instruction count's baseline)")
    parser.add_argument("--profile", help="write cProfile's stats of the updates to this file")
    parser.add_argument("--transaction", action="store_true", help="each range in its own transaction, committed after it")
    parser.add_argument("--history", action="store_true", help="the server's change history as the change sink")
    args = parser.parse_args()
    asyncio.run(run(args.size, args.seed_only, args.profile, args.transaction, args.history))
    return 0


if __name__ == "__main__":
    sys.exit(main())
