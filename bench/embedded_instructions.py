"""Instructions of the embedded server per migrated document in a B3-shaped loop, counted instead of timed.

Run from the repository root (Linux, with valgrind's callgrind and ``callgrind_control`` on ``PATH``)::

    python bench/embedded_instructions.py 20000
    python bench/embedded_instructions.py 100000 --skip 10 --count 20
    python bench/embedded_instructions.py 100000 --cache-sim --keep callgrind.out.100000

The server (this checkout's ``src`` on this interpreter, ``PYTHONHASHSEED=0``) runs under callgrind with its
counter off; it is seeded as ``bench/background.py`` seeds (not counted), then a client outside valgrind runs the
B3 loop (keyset ``find`` through the version index, an unordered ``bulk_write`` of guarded ``UpdateOne``s,
``w: "majority"``). The counter is zeroed and switched on after ``--skip`` batches and dumped after ``--count``
more, so the figure is the server process's instructions for that slice of the loop, per migrated document: the
same slice at every size, and the same figure on a busy machine as on a quiet one (only slower to get: the seed of
100,000 documents takes 10-50 minutes under valgrind). Which young collections fall in the slice is chance: the
figure is also printed without them (``gc_collect_main``, inclusive).

``--cache-sim`` adds callgrind's cache simulation (the host's D1 and last-level caches as valgrind reads them): the
data reads and writes that miss each level, a document, and the functions with the most last-level misses. A miss
count, like the instruction count, does not depend on the machine's load; it is what a larger heap costs that the
instruction count cannot show. ``--keep`` copies the dump out for ``callgrind_annotate``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
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


def _events(text: str, line: str) -> dict[str, int]:
    """A dump's events by name from one of its lines of counts (the ``totals:`` or ``summary:`` line)."""
    names = re.search(r"^events:\s*(.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
    return dict(zip(names, (int(v) for v in line.split()), strict=False))


def _totals(dump: Path) -> tuple[dict[str, int], dict[str, int]]:
    """The dump's events, and those of the collections inside it (``gc_collect_main``, inclusive).

    The listing splits the function by the files its inlined code comes from; the whole function's
    inclusive count is the largest of its parts (each other part's is inside it), not their sum."""
    text = dump.read_text()
    total = _events(text, re.search(r"^(?:summary|totals):\s*(.*)$", text, re.M).group(1))  # type: ignore[union-attr]
    return total, _collections(_listing(dump, list(total), "--inclusive=yes"), list(total))


def _collections(rows: list[tuple[list[int], str]], events: list[str]) -> dict[str, int]:
    """The collections' counts in an inclusive listing: ``gc_collect_main``'s largest part."""
    parts = [counts for counts, name in rows if re.search(r":gc_collect_main\b", name)]
    whole = max(parts, key=lambda counts: counts[0], default=[0] * len(events))
    return dict(zip(events, whole, strict=True))


def _misses(total: dict[str, int]) -> dict[str, int]:
    """Data misses by level: D1 (reads + writes) and the last level (reads + writes)."""
    return {"D1": total.get("D1mr", 0) + total.get("D1mw", 0), "LL": total.get("DLmr", 0) + total.get("DLmw", 0)}


_COUNT = r"(?:([\d,]+) \(\s*[\d.]+%\)|(\.))"


def _listing(dump: Path, events: list[str], *extra: str) -> list[tuple[list[int], str]]:
    """callgrind_annotate's rows of a dump: the counts of ``events`` and the function, for each function."""
    text = subprocess.run(["callgrind_annotate", f"--show={','.join(events)}", "--threshold=100", *extra, str(dump)],
                          check=True, capture_output=True, text=True).stdout
    row = re.compile(r"^\s*" + r"\s+".join([_COUNT] * len(events)) + r"\s+(\S.*)$")
    rows = []
    for line in text.splitlines():
        m = row.match(line)
        if m is None or "PROGRAM TOTALS" in line:
            continue
        groups = m.groups()
        counts = [0 if groups[2 * i] is None else int(groups[2 * i].replace(",", "")) for i in range(len(events))]
        rows.append((counts, groups[-1]))
    return rows


def _top_misses(dump: Path, migrated: int, lines: int = 25) -> str:
    """The functions with the most last-level data misses of their own, a document."""
    rows = _listing(dump, ["Ir", "D1mr", "D1mw", "DLmr", "DLmw"])
    rows.sort(key=lambda r: r[0][3] + r[0][4], reverse=True)
    out = [f"{'Ir':>9} {'D1 miss':>8} {'LL miss':>8}  a document, own (exclusive)"]
    for (ir, d1r, d1w, llr, llw), name in rows[:lines]:
        out.append(f"{ir / migrated:9,.0f} {(d1r + d1w) / migrated:8.1f} {(llr + llw) / migrated:8.2f}  {name[:110]}")
    return "\n".join(out)


def _host_last_level(caches: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[str]:
    """``--LL`` for the host's last-level cache as the kernel describes it: valgrind's own guess from the CPU's
    identification can be far off (a 512 MB two-way cache on one host whose L3 is 32 MB, 16-way)."""
    levels = []
    for index in caches.glob("index*"):
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text())
            size = (index / "size").read_text().strip()
            ways = int((index / "ways_of_associativity").read_text())
            line = int((index / "coherency_line_size").read_text())
        except (OSError, ValueError):
            continue
        if kind == "Unified" and size.endswith("K"):
            levels.append((level, int(size[:-1]) * 1024, ways, line))
    if not levels:
        return []
    _, size_b, ways, line = max(levels)
    # valgrind takes only a power-of-two number of sets (a 300 MB, 20-way L3 has 245,760): as valgrind does with its
    # own guess, the sets are rounded down to a power of two and the ways raised to keep at least the size
    sets = 1 << ((size_b // (ways * line)).bit_length() - 1)
    ways = -(-size_b // (sets * line))
    return [f"--LL={sets * ways * line},{ways},{line}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("size", type=int, help="documents seeded")
    parser.add_argument("--skip", type=int, default=10, help="batches of 500 run before counting (default 10)")
    parser.add_argument("--count", type=int, default=20, help="batches of 500 counted (default 20)")
    parser.add_argument("--cache-sim", action="store_true", help="simulate the caches: data misses a document, by level and function")
    parser.add_argument("--keep", type=Path, help="copy callgrind's dump of the slice to this file")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONHASHSEED"] = "0"
    with tempfile.TemporaryDirectory(prefix="mongoshift-instructions-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             *(["--cache-sim=yes", *_host_last_level()] if args.cache_sim else []),
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
        if args.keep is not None:
            shutil.copyfile(dumps[-1], args.keep)
        total, collections = _totals(dumps[-1])
        top = _top_misses(dumps[-1], migrated) if args.cache_sim else ""
    ir, gc_ir = total["Ir"], collections["Ir"]
    print(f"{args.size:,} documents: {migrated:,} migrated while counting, {ir / migrated:,.0f} instructions a document, "
          f"{(ir - gc_ir) / migrated:,.0f} without the collections inside the slice")
    if args.cache_sim:
        misses, gc_misses = _misses(total), _misses(collections)
        for level in ("D1", "LL"):
            print(f"  {level} data misses: {misses[level] / migrated:,.1f} a document, "
                  f"{(misses[level] - gc_misses[level]) / migrated:,.1f} without the collections")
        print(top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
