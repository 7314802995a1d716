"""Benchmark: the dashboard (issue 29, item 6): the overview's server time, and reads per second by open pages.

Run from the repository root::

    python bench/dashboard.py                      # own embedded server: 500 files, 20 migrations x 64 partitions
    python bench/dashboard.py --files 100 --migrations 5 --json out.json
    python bench/dashboard.py --uri mongodb://host/?replicaSet=rs   # a throwaway database, dropped

It is a script, not a timed test: it prints a table and verdicts and stops by itself.

The project: ``--files`` migration files, ``--migrations`` of them background migrations, each on its own
collection and planned into 64 partitions (16 lanes x 4), every other file a trivial one; all applied.

* **overview render**  ``GET /`` through the ASGI app in this process (httpx), while the poller's
  snapshot is fresh: the server time of rendering the page (target: under 100 ms), median of ``--repeat``.
* **overview poll**  one poll: the reads the page shows (the line's status, the lock, every background
  migration's report, the audit), beside the baseline measured in the same run: the same collections
  read with raw pymongo ``find`` calls (changelog, background states, their partitions).
* **reads/s by open pages**  1 and then 50 event streams open on the overview (and on one migration's
  page), the read commands the client sends counted with pymongo's command monitoring over ``--polls``
  polls: reads per second with 50 pages over those with 1 (target: at most 1.2).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pymongo import AsyncMongoClient, monitoring

from _server import server_uri  # bench/_server.py (scripts run from bench/)

TARGET_RENDER_MS = 100.0
TARGET_READS_RATIO = 1.2
PARTITIONS = 64  # max_parallel 16 x over_partition 4
DOCS_PER_COLLECTION = 640

BACKGROUND = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["done"] = True
    return doc

background = Background(collection="{collection}", from_version=1, to_version=2, migrate=migrate, max_parallel=16,
                        partitions={{"over_partition": 4, "min_partition_docs": 1}})
'''


class Reads(monitoring.CommandListener):
    READS = frozenset({"find", "aggregate", "count", "distinct", "getMore", "listIndexes", "listCollections"})

    def __init__(self) -> None:
        self.count = 0

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in self.READS:
            self.count += 1

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


async def build(root: Path, uri: str, db: str, files: int, migrations: int) -> Any:
    from mongoshift import api

    folder = root / "migrations"
    folder.mkdir()
    (root / "mongoshift.toml").write_text(f'uri = "{uri}"\ndb = "{db}"\nmigrations_dir = "migrations"\n')
    step = max(1, files // max(1, migrations))
    names = []
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri)
    for i in range(files):
        name = f"{i + 1:04d}_m{i}.py"
        if len(names) < migrations and i % step == step - 1:
            collection = f"c{len(names)}"
            await client[db][collection].insert_many([{"_id": k, "__v": 1, "__rev": 1} for k in range(DOCS_PER_COLLECTION)])
            await client[db][collection].create_index([("__v", 1), ("_id", 1)])
            (folder / name).write_text(BACKGROUND.format(collection=collection))
            names.append(name)
        else:
            (folder / name).write_text("def up(ctx):\n    pass\n")
    await client.close()
    (root / "mongoshift.toml").write_text(f'uri = "{uri}"\ndb = "{db}"\nmigrations_dir = "{folder}"\nsequential = true\n')
    settings = api.load_settings(config_path=root / "mongoshift.toml")
    async with api.connect(settings) as ms:
        await ms.up()
        for name in names:
            await ms.background.coordinate(name)  # plans the pass: 64 partitions, none worked
        parts = [len(await ms.background.partitions(n)) for n in names]
    print(f"project: {files} files, {len(names)} background migrations, partitions {min(parts)}-{max(parts)}", file=sys.stderr, flush=True)
    return settings


async def raw_reads(uri: str, db: str) -> float:
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri)
    try:
        started = time.perf_counter()
        await client[db]["_mongoshift_changelog"].find({}).to_list()
        await client[db]["_mongoshift_background"].find({}, {"samples": 0}).to_list()
        await client[db]["_mongoshift_background_partitions"].find({}).to_list()
        return (time.perf_counter() - started) * 1000
    finally:
        await client.close()


async def open_pages(app: Any, path: str, n: int) -> tuple[asyncio.Event, list[asyncio.Task[None]]]:
    stop = asyncio.Event()
    raw, _, query = path.partition("?")

    async def one(i: int) -> None:
        first = True

        async def receive() -> dict[str, Any]:
            nonlocal first
            if first:
                first = False
                return {"type": "http.request", "body": b"", "more_body": False}
            await stop.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            pass

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http", "path": raw,
                 "raw_path": raw.encode(), "query_string": query.encode(), "root_path": "", "headers": [(b"host", b"bench")],
                 "client": ("127.0.0.1", 50000 + i), "server": ("bench", 80)}
        await app(scope, receive, send)

    return stop, [asyncio.create_task(one(i)) for i in range(n)]


async def reads_per_second(app: Any, reads: Reads, path: str, pages: int, polls: int) -> tuple[float, float]:
    poller = await app.state.dashboard.poller()
    stop, tasks = await open_pages(app, path, pages)
    try:
        while poller.listeners < pages:
            await poller.next(poller.snapshot.tick)
        tick = (await poller.next(poller.snapshot.tick)).tick
        before, started = reads.count, time.perf_counter()
        while poller.snapshot.tick < tick + polls:
            await poller.next(poller.snapshot.tick)
        elapsed = time.perf_counter() - started
        return (reads.count - before) / elapsed, (reads.count - before) / polls
    finally:
        stop.set()
        await asyncio.gather(*tasks)


async def measure(args: argparse.Namespace, uri: str) -> dict[str, Any]:
    import httpx

    from mongoshift.dashboard import create_app

    db = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
    reads = Reads()
    client: AsyncMongoClient[Any] = AsyncMongoClient(uri, event_listeners=[reads])
    try:
        with tempfile.TemporaryDirectory() as tmp:
            settings = await build(Path(tmp), uri, db, args.files, args.migrations)
            app = create_app(settings, client=client, token="bench-token-0123456789", poll_seconds=args.poll_seconds)
            poller = await app.state.dashboard.poller()
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://bench") as web:
                polls = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    await poller.refresh()
                    polls.append((time.perf_counter() - started) * 1000)
                renders = []
                for _ in range(args.repeat):
                    await poller.refresh()  # fresh: the page renders what the loop read
                    started = time.perf_counter()
                    answer = await web.get("/")
                    renders.append((time.perf_counter() - started) * 1000)
                    assert answer.status_code == 200
                raw = [await raw_reads(uri, db) for _ in range(args.repeat)]
                name = (await poller.current()).reports[0].name
                rows = {}
                for label, path in (("overview", "/events"), ("migration page", f"/events?name={name}")):
                    one = await reads_per_second(app, reads, path, 1, args.polls)
                    fifty = await reads_per_second(app, reads, path, 50, args.polls)
                    rows[label] = {"1 page reads/s": round(one[0], 1), "50 pages reads/s": round(fifty[0], 1),
                                   "1 page reads/poll": one[1], "50 pages reads/poll": fifty[1], "ratio": round(fifty[0] / one[0], 2)}
            await app.state.dashboard.aclose()
    finally:
        await client.drop_database(db)
        await client.close()
    return {
        "files": args.files, "migrations": args.migrations, "partitions_each": PARTITIONS,
        "render_ms_median": round(statistics.median(renders), 1), "render_ms_max": round(max(renders), 1),
        "poll_ms_median": round(statistics.median(polls), 1), "raw_reads_ms_median": round(statistics.median(raw), 1),
        "poll_over_raw": round(statistics.median(polls) / statistics.median(raw), 2), "reads": rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--uri", help="a MongoDB to measure against (default: an embedded server started here)")
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--migrations", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--polls", type=int, default=5)
    parser.add_argument("--poll-seconds", type=float, default=1.0)
    parser.add_argument("--json", type=Path, help="write the results there too")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        result = asyncio.run(measure(args, uri))
    print(f"overview with {result['files']} files and {result['migrations']} migrations x {PARTITIONS} partitions:")
    print(f"  render (server time, fresh snapshot)  median {result['render_ms_median']} ms, max {result['render_ms_max']} ms"
          f"  -> {'ok' if result['render_ms_median'] < TARGET_RENDER_MS else 'OVER'} (target < {TARGET_RENDER_MS:g} ms)")
    print(f"  one poll (every read the page shows)  median {result['poll_ms_median']} ms; raw pymongo reads of the same collections"
          f" {result['raw_reads_ms_median']} ms: {result['poll_over_raw']}x")
    verdict = result["render_ms_median"] < TARGET_RENDER_MS
    for label, row in result["reads"].items():
        ok = row["ratio"] <= TARGET_READS_RATIO
        verdict = verdict and ok
        print(f"  {label}: reads/s 1 page {row['1 page reads/s']}, 50 pages {row['50 pages reads/s']}"
              f" (per poll {row['1 page reads/poll']} vs {row['50 pages reads/poll']}): {row['ratio']}x"
              f" -> {'ok' if ok else 'OVER'} (target <= {TARGET_READS_RATIO})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
