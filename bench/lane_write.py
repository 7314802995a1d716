"""Probe: what a lane's write path costs per document on one batch in memory, stage by stage.

Run from the repository root::

    python bench/lane_write.py                      # this checkout: client CPU per document and stage
    python bench/lane_write.py --against OTHER/src  # this checkout and another source tree, alternated

It is a script, not a timed test (issue 27: the engine's ``migrate=`` path against B3's
hand-written loop). No server: the documents of ``bench/background.py`` (500, about 1 KB each)
are encoded once, and each batch runs the functions a lane runs between its read and its
``bulk_write``, with the engine's codec (``tz_aware``):

* **decode**: the driver's decode of the batch (``decode_all``; what B3's read does too);
* **lend**: :func:`lend_decoded` (the private copies' tops, the nested values, their encode);
* **user**: the bench's ``migrate`` through the engine's worker-thread loop, called in this thread;
* **originals**: :meth:`Lent.originals` (the in-place check after the transforms);
* **updates**: ``_updates`` (the diff, the shard-key check, the BSON check of the batch's updates);
* **ops**: the guards and the bulk's operations (``_GuardedUpdates``, into a bulk that only collects);
* **free**: dropping all of it;
* **B3 build**: B3's loop for the same batch (its guard, ``raw_update``, ``UpdateOne``), freed.

Each stage is timed with the thread's CPU clock over ``--batches`` batches per round; a round's
figure is the mean per document, the printed figure the median of ``--rounds`` rounds. With
``--against``, each round runs each tree in its own child process (``PYTHONPATH`` first), in
alternating order, and the paired differences (this checkout minus the other) are printed too.
The collector runs, as in a run (``--no-gc`` turns it off).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import Any

STAGES = ["decode", "lend", "user", "originals", "updates", "ops", "free", "B3 build"]
ENGINE = STAGES[1:7]


def measure(batches: int, collect: bool) -> dict[str, float]:
    """One round in this process: µs of thread CPU per document, by stage."""
    from bson import decode_all, encode
    from bson.codec_options import CodecOptions
    from pymongo import UpdateOne

    from mongoshift.background.write import batch as write
    from mongoshift.background.write.job import Job
    from mongoshift.schema.background import Background

    import background as bg  # bench/background.py: the same documents and transform

    codec: CodecOptions[Any] = CodecOptions(tz_aware=True, tzinfo=UTC)
    rng = random.Random(1)
    raw = b"".join(encode(bg.make_doc(i, rng)) for i in range(bg.BATCH_SIZE))
    spec = Background(collection=bg.COLLECTION, from_version=1, to_version=2, migrate=bg.migrate)
    job = Job("0001_bench.py", spec, "forward", 1, 1, 2, bg.migrate, None, None, [])

    class Bulk:
        def __init__(self) -> None:
            self.ops: list[Any] = []

    seconds = dict.fromkeys(STAGES, 0.0)
    clock = time.thread_time
    if not collect:
        gc.disable()
    for _ in range(batches):
        t0 = clock()
        docs = decode_all(raw, codec)
        t1 = clock()
        lent = write.lend_decoded(docs, codec)
        t2 = clock()
        transformed = write._each_in_thread(bg.migrate, lent.copies, None)
        t3 = clock()
        originals = lent.originals(codec)
        t4 = clock()
        errors: list[Any] = []
        owners, updates = write._updates(job, originals, transformed, codec, errors)
        t5 = clock()
        bulk = Bulk()
        write._GuardedUpdates(owners, updates, spec.version_field, job.revision_field)._add_to_bulk(bulk)
        t6 = clock()
        del docs, lent, transformed, originals, owners, updates, bulk
        t7 = clock()
        for stage, spent in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6), strict=False):
            seconds[stage] += spent
        docs = decode_all(raw, codec)
        t8 = clock()
        ops = [UpdateOne({"_id": d["_id"], "__v": d["__v"], "__rev": d["__rev"]}, bg.raw_update(d)) for d in docs]
        del ops, docs
        seconds["B3 build"] += clock() - t8
    gc.enable()
    return {stage: spent / batches / bg.BATCH_SIZE * 1e6 for stage, spent in seconds.items()}


def child(tree: str | None, batches: int, collect: bool) -> dict[str, float]:
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = os.pathsep.join([tree, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    args = [sys.executable, __file__, "--child", "--batches", str(batches)] + ([] if collect else ["--no-gc"])
    done = subprocess.run(args, capture_output=True, text=True, env=env, check=True)
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def render(name: str, rounds: list[dict[str, float]]) -> str:
    cells = [f"{statistics.median(r[s] for r in rounds):6.2f}" for s in STAGES]
    engine = statistics.median(sum(r[s] for s in ENGINE) for r in rounds)
    return f"| {name} | " + " | ".join(cells) + f" | {engine:6.2f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="another source tree (its src folder): alternated with this checkout")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--batches", type=int, default=20, help="batches of 500 per round")
    parser.add_argument("--no-gc", action="store_true", help="the collector off while timing")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if args.child:
        print(json.dumps(measure(args.batches, not args.no_gc)))
        return 0
    here = str(Path(__file__).resolve().parent.parent / "src")
    trees = {"this checkout": here} if not args.against else {"this checkout": here, "--against": args.against}
    results: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    load0 = os.getloadavg()[0]
    for round_ in range(args.rounds):
        order = list(trees) if round_ % 2 == 0 else list(reversed(trees))
        for name in order:
            results[name].append(child(trees[name], args.batches, not args.no_gc))
    load1 = os.getloadavg()[0]
    print(f"µs of client CPU per document (thread CPU), median of {args.rounds} rounds of {args.batches} batches of 500; load {load0:.2f} -> {load1:.2f}\n")
    print("| tree | " + " | ".join(STAGES) + " | engine (lend to free) |")
    print("|---|" + "---:|" * (len(STAGES) + 1))
    for name, rounds in results.items():
        print(render(name, rounds))
    if args.against:
        mine, other = results["this checkout"], results["--against"]
        paired = {s: statistics.median(a[s] - b[s] for a, b in zip(mine, other, strict=True)) for s in STAGES}
        engine = statistics.median(sum(a[s] - b[s] for s in ENGINE) for a, b in zip(mine, other, strict=True))
        print("| paired difference (this - other) | " + " | ".join(f"{paired[s]:+6.2f}" for s in STAGES) + f" | {engine:+6.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
