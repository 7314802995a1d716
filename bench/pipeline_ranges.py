"""Benchmark: a ``pipeline=`` lane's range loop against the embedded server of one or more source trees,
timed by phase, in one run.

Run from the repository root (``python bench/pipeline_ranges.py``)::

    python bench/pipeline_ranges.py src                       # this checkout's server, 20,000 documents
    python bench/pipeline_ranges.py OTHER/src src OTHER/src src --size 20000   # alternate two trees
    python bench/pipeline_ranges.py src src:no-transaction    # the same updates outside any transaction

It is a script, not a timed test. Each tree's server (``python -m mongoshift.embedded`` with that
tree's ``src`` first on ``PYTHONPATH``) runs in its own process and gets freshly seeded, identical data
(bench/background.py's documents and version index). Then, per range of 500 documents, what a lane
of the engine sends (``background.lanes.modes.PipelineRanges``): the read of the range's last ``_id``
through the version index, then in one snapshot transaction the range's ``update_many`` with the
engine's pipeline (bench/background.py's, with the version and revision stamp) and a checkpoint
``findAndModify``, then the commit. A tree named ``TREE:no-transaction`` sends the same reads and
updates with no transaction and no checkpoint. It prints, per tree, the loop's docs/s, the server
process's CPU per document (user + system, ``/proc``, Linux only), the seconds spent in each phase,
and the load average at the start and the end; it verifies every document is at version 2.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient, ReadPreference
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

import background  # bench/background.py: the same documents and pipeline

RANGE = 500
HINT = [("__v", 1), ("_id", 1)]
PIPELINE = [*background.ENGINE_PIPELINE, {"$set": {"__v": {"$literal": 2}, "__rev": {"$add": [{"$ifNull": ["$__rev", 0]}, 1]}}}]


def server_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(src: str, size: int, transaction: bool) -> tuple[float, float, dict[str, float]]:
    """(wall seconds, server CPU seconds, seconds by phase) of the range loop over ``size`` documents."""
    environment = dict(os.environ, PYTHONPATH=str(Path(src).resolve()))
    server = subprocess.Popen([sys.executable, "-m", "mongoshift.embedded", "--port", "0"], stdout=subprocess.PIPE, env=environment, text=True)
    try:
        assert server.stdout is not None
        client: MongoClient[Any] = MongoClient(server.stdout.readline().strip(), socketTimeoutMS=600_000)
        collection, partitions = client.bench.docs, client.bench.partitions
        rng = random.Random(1)
        for start in range(0, size, 1000):
            collection.insert_many([background.make_doc(i, rng) for i in range(start, min(size, start + 1000))])
        collection.create_index(HINT)
        partitions.insert_one({"_id": "p", "lease": {"token": "t"}, "counters": {"migrated": 0}, "cursor": None})
        phases = dict.fromkeys(("read", "update", "checkpoint", "commit"), 0.0)
        cursor: Any = None
        migrated = 0
        began, cpu = time.perf_counter(), server_cpu(server.pid)
        while True:
            source: dict[str, Any] = {"__v": 1} if cursor is None else {"__v": 1, "_id": {"$gt": cursor}}
            at = time.perf_counter()
            last = collection.find(source, {"_id": 1}, sort=[("_id", 1)], limit=1, skip=RANGE - 1).hint(HINT).to_list()
            phases["read"] += time.perf_counter() - at
            range_filter = source if not last else {"$and": [source, {"_id": {"$lte": last[0]["_id"]}}]}
            if transaction:
                with client.start_session() as session:
                    session.start_transaction(
                        read_concern=ReadConcern("snapshot"), write_concern=WriteConcern(w="majority"), read_preference=ReadPreference.PRIMARY
                    )
                    at = time.perf_counter()
                    matched = collection.update_many(range_filter, PIPELINE, hint=HINT, session=session).matched_count
                    phases["update"] += time.perf_counter() - at
                    at = time.perf_counter()
                    partitions.find_one_and_update(
                        {"_id": "p", "lease.token": "t"},
                        {"$set": {"cursor": last[0]["_id"] if last else None}, "$inc": {"counters.migrated": matched}},
                        session=session,
                    )
                    phases["checkpoint"] += time.perf_counter() - at
                    at = time.perf_counter()
                    session.commit_transaction()
                    phases["commit"] += time.perf_counter() - at
            else:
                at = time.perf_counter()
                matched = collection.update_many(range_filter, PIPELINE, hint=HINT).matched_count
                phases["update"] += time.perf_counter() - at
            migrated += matched
            if not last:
                break
            cursor = last[0]["_id"]
        wall, cpu = time.perf_counter() - began, server_cpu(server.pid) - cpu
        at_version = collection.count_documents({"__v": 2})
        if migrated != size or at_version != size:
            raise SystemExit(f"{src}: {migrated} matched, {at_version} at version 2, of {size}")
        client.close()
        return wall, cpu, phases
    finally:
        server.terminate()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", help="source trees (a checkout's src), in the order to run them; TREE:no-transaction for no transaction")
    parser.add_argument("--size", type=int, default=20_000, help="documents (default 20000)")
    args = parser.parse_args()
    for tree in args.trees:
        src, _, mode = tree.partition(":")
        load = os.getloadavg()[0]
        wall, cpu, phases = run(src, args.size, mode != "no-transaction")
        print(
            f"{tree}: {args.size / wall:,.0f} docs/s, server CPU {cpu / args.size * 1e6:,.0f} µs/doc, "
            + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items())
            + f" (load {load:.1f} -> {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
