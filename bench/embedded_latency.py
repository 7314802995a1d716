"""Benchmark: how fast a server answers heartbeats while long commands run.

Run from the repository root::

    python bench/embedded_latency.py                     # own embedded server, 200,000 documents
    python bench/embedded_latency.py --docs 50000 --seconds 10 --json out.json
    python bench/embedded_latency.py --uri mongodb://host/?replicaSet=rs   # a throwaway db, dropped

It is a script, not a timed test: it prints a table and a verdict and stops by itself.

pymongo's monitor sends ``hello`` on a connection of its own every ``heartbeatFrequencyMS``
and waits for the answer at most ``connectTimeoutMS`` (20 s by default); a later answer makes
it take the server for lost, clear its pool and cancel the operations in flight. So the figure
that matters is how long a ``hello`` waits while other connections keep the server busy.

Two phases, one server, the same measuring client:

* **quiet**: ``hello`` round trips with nothing else running;
* **loaded**: the same, while two other connections run long scans back to back (a
  ``count_documents`` over every document, an unindexed ``find`` that matches none), so that
  a scan is always running.

The measuring client speaks the wire protocol itself (OP_MSG ``hello`` on one connection, as the
monitor does; no driver machinery between the clock and the socket) and sends one ``hello``
every ``--interval-ms``, or at once when the previous answer came later than that. It prints
p50/p90/p99/max of both phases and the ratio of the loaded p99 to the quiet p99; the exit status
is 1 when the loaded p99 reaches ``TARGET_P99_MS`` (100 ms).
"""

from __future__ import annotations

import argparse
import itertools
import json
import socket
import statistics
import struct
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import bson
from pymongo import MongoClient

from _server import server_uri  # bench/_server.py (scripts run from bench/)

TARGET_P99_MS = 100.0
COLLECTION = "scan"
SEED_BATCH = 5_000
LOAD_CONNECTIONS = 2
#: The load's own client must outlive a server that answers late (the old single-loop server
#: stalls its monitor too); only the measuring client's figures matter here.
LOAD_CLIENT_OPTIONS: dict[str, int] = {
    "connectTimeoutMS": 600_000,
    "heartbeatFrequencyMS": 600_000,
    "serverSelectionTimeoutMS": 600_000,
}
OP_MSG = 2013
HELLO_TIMEOUT_S = 600.0  # one answer; far above any figure this script reports


class HelloClient:
    """One connection sending ``{hello: 1}`` as OP_MSG and timing each round trip."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = socket.create_connection((host, port), timeout=HELLO_TIMEOUT_S)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.ids = itertools.count(1)

    def hello(self) -> float:
        """One round trip, in milliseconds."""
        body = bson.encode({"hello": 1, "$db": "admin"})
        payload = struct.pack("<I", 0) + b"\x00" + body
        message = struct.pack("<iiii", 16 + len(payload), next(self.ids), 0, OP_MSG) + payload
        started = time.perf_counter()
        self.sock.sendall(message)
        length = struct.unpack("<i", self._read(4))[0]
        reply = self._read(length - 4)
        elapsed = (time.perf_counter() - started) * 1000
        document = bson.decode(reply[12 + 4 + 1 :])
        if document.get("ok") != 1:
            raise RuntimeError(f"hello failed: {document.get('errmsg')}")
        return elapsed

    def _read(self, n: int) -> bytes:
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.sock.close()


def host_port(uri: str) -> tuple[str, int]:
    """The first host of a ``mongodb://`` URI (no SRV: the measuring client connects itself)."""
    netloc = urlsplit(uri).netloc.rsplit("@", 1)[-1].split(",")[0]
    if netloc.startswith("["):
        host, _, rest = netloc[1:].partition("]")
        return host, int(rest.lstrip(":") or 27017)
    host, _, port = netloc.partition(":")
    return host, int(port or 27017)


def sample(client: HelloClient, seconds: float, interval_ms: float) -> list[float]:
    """``hello`` latencies over ``seconds``: one every ``interval_ms`` (at once after a late one)."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        began = time.monotonic()
        latencies.append(client.hello())
        rest = interval_ms / 1000 - (time.monotonic() - began)
        if rest > 0:
            time.sleep(rest)
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "samples": len(values),
        "p50_ms": percentile(values, 50),
        "p90_ms": percentile(values, 90),
        "p99_ms": percentile(values, 99),
        "max_ms": max(values),
    }


class Load(threading.Thread):
    """One connection running long scans back to back until stopped."""

    def __init__(self, uri: str, db: str, which: int) -> None:
        super().__init__(daemon=True)
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri, **LOAD_CLIENT_OPTIONS)
        self.coll = self.client[db][COLLECTION]
        self.which = which
        self.stop = threading.Event()
        self.scans: list[float] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for turn in itertools.count(self.which):
                if self.stop.is_set():
                    return
                began = time.perf_counter()
                if turn % 2 == 0:
                    self.coll.count_documents({"n": {"$gte": 0}})
                else:
                    list(self.coll.find({"n": -1}))  # unindexed: every document is looked at
                self.scans.append(time.perf_counter() - began)
        except BaseException as error:  # reported by the main thread
            self.error = error
        finally:
            self.client.close()


def seed(uri: str, db: str, docs: int) -> float:
    began = time.perf_counter()
    with MongoClient(uri, **LOAD_CLIENT_OPTIONS) as client:
        coll = client[db][COLLECTION]
        for start in range(0, docs, SEED_BATCH):
            coll.insert_many([{"_id": i, "n": i, "name": f"name {i}", "group": i % 97} for i in range(start, min(docs, start + SEED_BATCH))])
    return time.perf_counter() - began


def run(args: argparse.Namespace) -> int:
    with ExitStack() as stack:
        uri = server_uri(stack, args.uri)
        db = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
        print(f"seeding {args.docs:,} documents", file=sys.stderr, flush=True)
        seeded = seed(uri, db, args.docs)
        client = HelloClient(*host_port(uri))
        try:
            quiet = sample(client, args.seconds, args.interval_ms)
            loads = [Load(uri, db, which) for which in range(LOAD_CONNECTIONS)]
            for load in loads:
                load.start()
            while not any(load.scans or load.error for load in loads):  # the first scan runs: the load is on
                time.sleep(0.05)
            loaded = sample(client, args.seconds, args.interval_ms)
            for load in loads:
                load.stop.set()
            for load in loads:
                load.join()
        finally:
            client.close()
            with MongoClient(uri, **LOAD_CLIENT_OPTIONS) as cleanup:
                cleanup.drop_database(db)
    errors = [load.error for load in loads if load.error is not None]
    if errors:
        print(f"the load failed: {errors[0]!r}", file=sys.stderr)
        return 1
    scans = [s for load in loads for s in load.scans]
    rows = {"quiet": summary(quiet), "loaded": summary(loaded)}
    print(f"hello latency, {args.docs:,} documents (seeded in {seeded:.1f} s), {LOAD_CONNECTIONS} connections scanning while loaded")
    print(f"  a scan took {statistics.median(scans):.2f} s (median of {len(scans)}, {min(scans):.2f}–{max(scans):.2f} s)")
    print(f"  {'phase':<8} {'samples':>8} {'p50 ms':>9} {'p90 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for name, row in rows.items():
        print(f"  {name:<8} {row['samples']:>8} {row['p50_ms']:>9.1f} {row['p90_ms']:>9.1f} {row['p99_ms']:>9.1f} {row['max_ms']:>9.1f}")
    ratio = rows["loaded"]["p99_ms"] / max(rows["quiet"]["p99_ms"], 0.001)
    met = rows["loaded"]["p99_ms"] < TARGET_P99_MS
    print(f"  loaded p99 / quiet p99 = {ratio:.1f}x; target loaded p99 < {TARGET_P99_MS:.0f} ms: {'met' if met else 'MISSED'}")
    if args.json:
        args.json.write_text(
            json.dumps({"docs": args.docs, "seconds": args.seconds, "interval_ms": args.interval_ms, "scan_s_median": statistics.median(scans),
                        "scans": len(scans), "phases": rows, "ratio_p99": ratio, "target_met": met}, indent=2) + "\n",
            encoding="utf-8",
        )
    return 0 if met else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", type=int, default=200_000, help="documents the scans read (default 200000)")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each phase (default 30)")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="time between two hellos (default 20)")
    parser.add_argument("--uri", help="use this server (a throwaway database, dropped at the end) instead of an embedded one")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(run(parse_args()))
