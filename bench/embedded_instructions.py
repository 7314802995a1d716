"""Instructions of the embedded server per migrated document in a B3-shaped loop, counted instead of timed.

Run from the repository root (Linux, with valgrind's callgrind and ``callgrind_control`` on ``PATH``)::

    python bench/embedded_instructions.py 20000
    python bench/embedded_instructions.py 100000 --skip 10 --count 20

The server (this checkout's ``src`` on this interpreter, ``PYTHONHASHSEED=0``) runs under callgrind with its
counter off; it is seeded as ``bench/background.py`` seeds (not counted), then a client outside valgrind runs the
B3 loop (keyset ``find`` through the version index, an unordered ``bulk_write`` of guarded ``UpdateOne``s,
``w: "majority"``). The counter is zeroed and switched on after ``--skip`` batches and dumped after ``--count``
more, so the figure is the server process's instructions for that slice of the loop, per migrated document: the
same slice at every size, and the same figure on a busy machine as on a quiet one (only slower to get: the seed of
100,000 documents takes 10-50 minutes under valgrind). Which young collections fall in the slice is chance: the
figure is also printed without them (``gc_collect_main``, inclusive).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from pymongo import MongoClient, UpdateOne
from pymongo.write_concern import WriteConcern

import background  # bench/background.py: the same data, transform and B3 loop

ROOT = Path(__file__).resolve().parent.parent


def _slice(uri: str, pid: int, size: int, skip: int, count: int) -> int:
    """Seed, run ``skip`` batches, count ``count`` more; the documents migrated while counting."""
    def control(*args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)

    client: MongoClient[Any] = MongoClient(uri, **background.CLIENT_OPTIONS)
    try:
        background.seed(client, "instructions", size)
        collection = client["instructions"][background.COLLECTION].with_options(write_concern=WriteConcern(w="majority"))
        last: Any = None
        migrated = 0
        for batch in range(skip + count):
            if batch == skip:
                control("-z")
                control("-i", "on")
            query = {"__v": 1} if last is None else {"__v": 1, "_id": {"$gt": last}}
            docs = list(collection.find(query, sort=[("_id", 1)], limit=background.BATCH_SIZE, batch_size=background.BATCH_SIZE)
                        .hint(background.VERSION_INDEX))
            if not docs:
                raise SystemExit(f"the collection ran out after {batch} batches: take a larger size or fewer batches")
            result = collection.bulk_write(
                [UpdateOne({"_id": d["_id"], "__v": d["__v"], "__rev": d["__rev"]}, background.raw_update(d)) for d in docs], ordered=False,
            )
            if batch >= skip:
                migrated += result.matched_count
            last = docs[-1]["_id"]
        control("-d")
        control("-i", "off")
        return migrated
    finally:
        client.close()


def _totals(dump: Path) -> tuple[int, int]:
    """The dump's instructions, and those of the collections inside it (``gc_collect_main``, inclusive)."""
    total = int(re.search(r"^(?:summary|totals):\s*(\d+)", dump.read_text(), re.M).group(1))  # type: ignore[union-attr]
    listing = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                             check=True, capture_output=True, text=True).stdout
    collections = sum(int(m.group(1).replace(",", "")) for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+\S*:gc_collect_main\b", listing, re.M))
    return total, collections


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("size", type=int, help="documents seeded")
    parser.add_argument("--skip", type=int, default=10, help="batches of 500 run before counting (default 10)")
    parser.add_argument("--count", type=int, default=20, help="batches of 500 counted (default 20)")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory(prefix="mongoshift-instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, "-m", "mongoshift.embedded", "--port", "0", "--log-level", "WARNING"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=ROOT,
        )
        try:
            assert server.stdout is not None
            uri = server.stdout.readline().strip()
            if not uri.startswith("mongodb://"):
                raise SystemExit("the server did not start under valgrind")
            migrated = _slice(uri, server.pid, args.size, args.skip, args.count)
        finally:
            server.terminate()
            server.wait()
        dumps = sorted(Path(tmp).glob("callgrind.out.*"), key=lambda p: p.stat().st_mtime)
        total, collections = _totals(dumps[-1])
    print(f"{args.size:,} documents: {migrated:,} migrated while counting, {total / migrated:,.0f} instructions a document, "
          f"{(total - collections) / migrated:,.0f} without the collections inside the slice")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
