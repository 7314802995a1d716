"""A persistent map's replacements one key at a time against one ``update`` a batch: data misses a key, counted.

Run from the repository root under valgrind's cachegrind, once for each size and mode, with a last-level cache small
enough that a map of 20,000 keys fits in it and one of 100,000 does not (as the embedded server's heap at those sizes
stands to the host's L3)::

    for size in 20000 100000; do for mode in setup one update; do
        PYTHONHASHSEED=0 valgrind --tool=cachegrind --cache-sim=yes --LL=16777216,16,64 \\
            --cachegrind-out-file=cg.$size.$mode python bench/persistent_map_batches.py $size $mode
    done; done
    python bench/persistent_map_batches.py --summary .

An rpds ``HashTrieMap`` of ``size`` keys (tuples, as the engine's index keys and storage keys are), then 20 batches
of 500 keys drawn at random, each key replaced either by its own ``insert`` (``one``: the map's path copied from the
root for every key, as a guarded update writes mongoeco's collection map and a lean index's buckets) or held and
applied with one ``update`` a batch (``update``: the upper levels copied once a batch). Between keys a 64 KB copy
evicts the first-level data cache, as the rest of a statement's work does. ``setup`` makes the same copies without
touching the map; ``--summary`` subtracts it and prints instructions and data misses a key (D1: reads and writes
that miss the first level; LL: trips to memory).

``move`` and ``move-same`` count a version index's entry moved as a guarded update moves it (its key
``(version, _id)`` removed, ``(version + 1, _id)`` inserted), the keys hashed as tuples (``move``) or by their ``_id``
alone (``move-same``: the two keys share their path in the trie); ``setup-move`` and ``setup-move-same`` build and
look up the same keys without moving them."""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

BATCHES, BATCH = 20, 500


class _ById(tuple):  # type: ignore[type-arg]
    """An index key hashed by its ``_id`` (its last element) alone."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self[1])


def moves(size: int, mode: str) -> None:
    from rpds import HashTrieMap

    make: type = _ById if mode.endswith("same") else tuple
    ids = [("objectid", i * 7919 % 1000003) for i in range(size)]
    mapping = HashTrieMap({make((("number", 1), i)): (i, 0) for i in ids})
    rng = random.Random(1)
    chosen = [rng.sample(ids, BATCH) for _ in range(BATCHES)]
    version = dict.fromkeys(ids, 1)
    junk, sink = bytearray(64 * 1024), []
    for n, batch in enumerate(chosen):
        for i in batch:
            sink.append(bytes(junk))
            sink.pop()
            v = version[i]
            old, new = make((("number", v), i)), make((("number", v + 1), i))
            version[i] = v + 1
            if mode.startswith("setup"):
                mapping.get(old)
            else:
                mapping = mapping.remove(old).insert(new, (i, n))
    print(len(mapping))


def run(size: int, mode: str) -> None:
    if "move" in mode:
        return moves(size, mode)
    from rpds import HashTrieMap

    keys = [(("objectid", i * 7919 % 1000003), i) for i in range(size)]
    mapping = HashTrieMap({key: (key, 0) for key in keys})
    rng = random.Random(1)
    chosen = [rng.sample(keys, BATCH) for _ in range(BATCHES)]
    junk, sink = bytearray(64 * 1024), []
    for n, batch in enumerate(chosen):
        pending = {}
        for key in batch:
            sink.append(bytes(junk))
            sink.pop()
            if mode == "one":
                mapping = mapping.insert(key, (key, n))
            elif mode == "update":
                pending[key] = (key, n)
        if pending:
            mapping = mapping.update(pending)
    print(len(mapping))


def summary(directory: Path) -> None:
    counts = {}
    for dump in directory.glob("cg.*.*"):
        _, size, mode = dump.name.split(".", 2)
        text = dump.read_text()
        names = re.search(r"^events:\s*(.*)$", text, re.M).group(1).split()  # type: ignore[union-attr]
        values = [int(v) for v in re.search(r"^summary:\s*(.*)$", text, re.M).group(1).split()]  # type: ignore[union-attr]
        counts[int(size), mode] = dict(zip(names, values, strict=False))
    for size in sorted({size for size, _ in counts}):
        for mode, setup in (("one", "setup"), ("update", "setup"), ("move", "setup-move"), ("move-same", "setup-move-same")):
            if (size, mode) not in counts or (size, setup) not in counts:
                continue
            base = counts[size, setup]
            d = {k: (v - base[k]) / (BATCHES * BATCH) for k, v in counts[size, mode].items()}
            print(f"{size:>7,} {mode:>9}: {d['Ir']:8,.0f} instructions, {d['D1mr'] + d['D1mw']:6.1f} D1 misses, "
                  f"{d['DLmr'] + d['DLmw']:5.2f} LL misses a key")


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(Path(sys.argv[2]))
    else:
        run(int(sys.argv[1]), sys.argv[2])
