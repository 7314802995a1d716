"""Where the wall time of one engine run goes: before the first batch, the batches, after the last one.

Run from the repository root::

    python bench/engine_timeline.py                  # 20,000 documents, own embedded server
    python bench/engine_timeline.py --size 100000 --pipeline

It seeds the documents of ``bench/background.py``, registers its migration (one lane, throttling off) and
times ``background run`` by the engine's own events: when the pass was cut into partitions, when each batch
ended, when the lane's slice ended and when the migration completed. Three rounds by default, each on
freshly seeded data; the figures are seconds from the start of the run. A script, not a timed test.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pymongo import MongoClient

import background as bench  # bench/background.py (scripts run from bench/)
from _server import server_uri


def one_run(uri: str, size: int, pipeline: bool) -> dict[str, float]:
    from mongoshift.api import background as bg, migrations as command
    from mongoshift.project.settings import load_settings

    client: MongoClient[Any] = MongoClient(uri, **bench.CLIENT_OPTIONS)
    db_name = "mongoshift_timeline"
    bench.seed(client, db_name, size)
    client.close()
    with tempfile.TemporaryDirectory(prefix="mongoshift-timeline-") as tmp:
        project = bench.write_project(Path(tmp), uri, db_name, 1, pipeline, False)
        settings = load_settings({}, config_path=project / "mongoshift.toml", environ={})
        first: dict[str, float] = {}
        batches: list[float] = []

        async def run() -> float:
            await command.up(settings)
            started = time.perf_counter()

            def observe(event: Any) -> None:
                at = time.perf_counter() - started
                first.setdefault(event.kind, at)
                if event.kind == "batch":
                    batches.append(at)

            await bg.run(settings, ["0001_bench.py"], observers=[observe])
            return time.perf_counter() - started

        total = asyncio.run(run())
    gaps = [b - a for a, b in itertools.pairwise(batches)]
    return {
        "total": total,
        "before the first batch": batches[0] if batches else float("nan"),
        "batches": len(batches),
        "median batch": statistics.median(gaps) if gaps else float("nan"),
        "slowest batch": max(gaps) if gaps else float("nan"),
        "last batch to completed": first.get("completed", total) - (batches[-1] if batches else 0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipeline", action="store_true", help="the engine's pipeline= form instead of migrate=")
    parser.add_argument("--uri", help="a server to measure against (default: a fresh embedded server)")
    args = parser.parse_args()
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        rows = [one_run(uri, args.size, args.pipeline) for _ in range(args.rounds)]
    print(f"engine {'pipeline=' if args.pipeline else 'migrate='}, one lane, {args.size:,} documents, {args.rounds} round(s); seconds")
    for name in rows[0]:
        values = ", ".join(f"{row[name]:.3f}" if name != "batches" else str(row[name]) for row in rows)
        print(f"  {name:<24} {values}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
