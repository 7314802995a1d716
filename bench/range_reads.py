"""Benchmark: the embedded server's reads around a ``pipeline=`` pass's ranges, in one process.

Run from the repository root::

    python bench/range_reads.py                              # 4,000 documents: CPU µs a document
    python bench/range_reads.py --matcher                    # the same with every document matched (fixes (bz), (ca) off)
    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no python bench/range_reads.py --size 5000 --seed-only
    PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=no python bench/range_reads.py --size 5000 [--matcher]
                                                             # instructions: (second - first) ÷ (size × rounds) a document

It is a script, not a timed test. mongoeco's client on a fresh memory engine with mongoshift's fixes (no wire, no
event loop thread: the counts do not depend on a clock) is seeded with bench/background.py's documents and version
index; one read of every document (what a run's reads leave behind: each stored document decoded once, kept) and
one ``_id``-ordered read (the order built) come before the baseline. Then, ``--rounds`` times, the reads a one-lane
pass makes around its ranges on that server: the planner's bracket counts (``planner.bracket_counts``: one ``$group``
by the ``_id``'s ``$type`` since (cm), 17 ``count_documents`` before), each range's boundary read (the source shape after the previous
boundary, sorted on ``_id``, ``skip`` 499, ``limit`` 1, the ``_id`` alone, hinted to the version index) and the
pass's closing count. The documents are not updated, so every round reads the same.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import background  # bench/background.py: the same documents

RANGE = 500
HINT = [("__v", 1), ("_id", 1)]


async def run(size: int, rounds: int, seed_only: bool, matcher: bool) -> None:
    from bson import ObjectId
    from mongoeco.api import AsyncMongoClient
    from mongoeco.engines.memory import MemoryEngine

    from mongoshift.background.plan import planner
    from mongoshift.embedded import patches
    from mongoshift.embedded.server import ENGINE_OPTIONS

    patches.apply()
    engine = MemoryEngine(**ENGINE_OPTIONS)
    client: Any = AsyncMongoClient(engine)
    await engine.connect()
    collection = client.bench.docs
    await background.seed_docs(collection, size)
    await collection.create_index(HINT)
    await count(collection, {"n": {"$exists": False}})  # every document read once (none matches)
    await collection.find({"__v": 1}, {"_id": 1}, sort=[("_id", 1)], limit=1).to_list(None)  # the _id order built
    if seed_only:
        return
    if matcher:
        from mongoshift.embedded.patches import counts, scans

        scans.covering_test = counts.covering_test = lambda *args: None  # type: ignore[assignment]
    began = time.process_time()
    for _ in range(rounds):
        await planner.bracket_counts(collection, {"__v": 1})  # one $group by the _id's $type (cm)
        low: dict[str, Any] = {"$gte": ObjectId("0" * 24)}
        boundaries = 0
        while True:
            query = {"$and": [{"__v": 1}, {"_id": {**low, "$lte": ObjectId("f" * 24)}}]}
            found = await collection.find(query, {"_id": 1}, sort=[("_id", 1)], skip=RANGE - 1, limit=1).hint(HINT).to_list(None)
            if not found:
                break
            boundaries += 1
            low = {"$gt": found[0]["_id"]}
        left = await count(collection, {"__v": 1})
        if boundaries != size // RANGE or left != size:
            raise SystemExit(f"{boundaries} boundaries, {left} documents counted")
    cpu = time.process_time() - began
    print(f"{size} documents, {rounds} rounds: {1e6 * cpu / size / rounds:.1f} µs of CPU a document a round{' (matcher)' if matcher else ''}")


async def count(collection: Any, filter_: dict[str, Any]) -> int:
    """``count_documents`` as pymongo sends it: the aggregate (ap) answers."""
    found = await collection.aggregate([{"$match": filter_}, {"$group": {"_id": 1, "n": {"$sum": 1}}}]).to_list(None)
    return int(found[0]["n"]) if found else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=4_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed-only", action="store_true", help="stop before the reads (the baseline of an instruction count)")
    parser.add_argument("--matcher", action="store_true", help="every document matched: fixes (bz) and (ca) off")
    args = parser.parse_args()
    asyncio.run(run(args.size, args.rounds, args.seed_only, args.matcher))
    return 0


if __name__ == "__main__":
    sys.exit(main())
