"""Benchmark: the background engine against the baselines of a client-side rewrite.

Run from the repository root::

    python bench/background.py                       # own embedded server, 20k and 100k docs
    python bench/background.py --sizes 20000 --json out.json
    python bench/background.py --uri mongodb://host/?replicaSet=rs   # a throwaway db, dropped

It is a script, not a timed test: it prints a table and verdicts and stops by itself.

What is compared (the protocol and the results are in ``docs/performance.md``):

* **B0**  one server-side ``update_many`` with a pipeline: no data leaves the server.
* **B1**  the raw client loop: keyset ``find`` of 500 documents through the version index,
  the transform, one unordered ``bulk_write`` of ``UpdateOne({_id}, {$set/$unset/$inc})``, w:1.
* **B3**  B1 with the optimistic guard ``{_id, __v, __rev}`` and ``w: "majority"``: the
  same write path as the engine minus leases, checkpoints and planning.
* **engine** ``max_parallel`` 1 and 4, throttling off (``pause_ms=0, adaptive=False``),
  with and without an application writer (random ``update_one`` at a bounded rate).
* **engine txn** ``max_parallel`` 1 in transactional mode (``transaction=True``): each batch of
  500, its guarded writes and its checkpoint in one snapshot transaction; compared with B3 of
  the same run like the other engine rows, but not held to the engine's targets.
* **engine pipeline** the engine's server-side form (``pipeline=ENGINE_PIPELINE``, B0's minus the
  stamp the engine adds itself): lanes read one ``_id`` per range of 500 (its end) and the server
  rewrites the range with one guarded ``update_many`` in a transaction with its checkpoint.

Why every scenario runs in a fresh child process: ``getrusage(RUSAGE_SELF)`` and
``ru_maxrss`` are per process and only ever grow, so a shared process would add up
CPU and hide a memory regression behind the previous scenario's high-water mark.

Why the data is re-seeded before each scenario (drop the database, insert again):
every scenario then starts from byte-identical documents with deterministic
ObjectIds, a fresh version index and no engine state. Re-seeding costs more than
resetting ``__v``/``__rev`` in place, but an in-place reset would reorder fields
and leave the server's per-collection structures in a different state.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import inspect
import json
import os
import random
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from bson import ObjectId
from pymongo import AsyncMongoClient, MongoClient, UpdateOne
from pymongo.write_concern import WriteConcern

from _server import embedded_pid, process_cpu_s, server_uri  # bench/_server.py (scripts run from bench/)

# ---------------------------------------------------------------------------------------------
# Fixed parameters: the same for every scenario, so that only the write path differs.
# ---------------------------------------------------------------------------------------------

COLLECTION = "docs"
BATCH_SIZE = 500
SEED_BATCH = 1_000
#: B0 runs one update_many per 20,000 documents (an ``_id`` range): a single 100k-document
#: command keeps the embedded server's only event loop busy for minutes, past pymongo's
#: monitor timeout, which then cancels the operation. Still one round trip per 20k documents.
B0_CHUNK = 20_000
WRITER_RATE = 200.0  # application updates per second (an upper bound: never bursts to catch up)
VERSION_INDEX = [("__v", 1), ("_id", 1)]
#: The embedded server runs every connection on one event loop; a long command stalls
#: pymongo's monitor, which would then cancel operations in flight (docs/embedded.md).
CLIENT_OPTIONS: dict[str, int] = {
    "connectTimeoutMS": 120_000,
    "socketTimeoutMS": 300_000,
    "heartbeatFrequencyMS": 60_000,
    "serverSelectionTimeoutMS": 60_000,
}
CHILD_TIMEOUT_S = 3 * 3600  # one scenario; far above the slowest expected (about 4 min at 100k)
WRITER_MAX_S = 4 * 3600  # the writer stops by itself even if nobody tells it to
TARGET_RSS_GROWTH = 1.2  # "flat": peak RSS at the largest size within 20 % of the smallest


@dataclass(frozen=True)
class Target:
    """One bound on a row's ratio to B3 of the same run: ``speed`` (docs/s, at least) or ``cpu``
    (client CPU per document, at most); ``source`` names the issues that set it (docs/performance.md, "Targets")."""

    measure: str  # speed | cpu
    bound: float
    source: str

    def met(self, ratio: float) -> bool:
        return ratio >= self.bound if self.measure == "speed" else ratio <= self.bound

    def describe(self) -> str:
        return f"{'throughput' if self.measure == 'speed' else 'CPU/doc'} target {'≥' if self.measure == 'speed' else '≤'} {self.bound:g}, {self.source}"


#: Each engine row's targets, as docs/performance.md's table gives them; a row not named has none
#: (the writer rows are compared with B3 +writer, but held to nothing).
TARGETS: dict[str, tuple[Target, ...]] = {
    "engine p=1": (Target("speed", 1.0, "issue 27"), Target("cpu", 1.3, "issues 4, 11, 27")),
    "engine p=4": (Target("speed", 0.9, "issue 4"),),
    "engine txn p=1": (Target("cpu", 1.6, "issue 27"),),
    "engine pipeline p=1": (Target("speed", 1.5, "issues 11, 27"),),
    "engine pipeline p=4": (Target("speed", 1.5, "issue 11"),),
}


@dataclass(frozen=True)
class Scenario:
    name: str
    kind: str  # b0 | b1 | b3 | engine
    parallel: int = 1
    writer: bool = False
    pipeline: bool = False  # the engine's server-side form: B0_PIPELINE instead of migrate
    transaction: bool = False  # each batch in one transaction (transaction=True)


SCENARIOS = [
    Scenario("B0 server update_many", "b0"),
    Scenario("B1 keyset+bulk w:1", "b1"),
    Scenario("B3 B1+guard+majority", "b3"),
    Scenario("engine p=1", "engine", 1),
    Scenario("engine p=4", "engine", 4),
    Scenario("engine txn p=1", "engine", 1, transaction=True),
    Scenario("engine pipeline p=1", "engine", 1, pipeline=True),
    Scenario("engine pipeline p=4", "engine", 4, pipeline=True),
    # The reference for the writer rows: same load on the server, but the guard's misses are
    # simply left behind (B3 has no re-read), so it does less work than the engine.
    Scenario("B3 +writer", "b3", 1, True),
    Scenario("engine p=1 +writer", "engine", 1, True),
    Scenario("engine p=4 +writer", "engine", 4, True),
    Scenario("engine pipeline p=4 +writer", "engine", 4, True, pipeline=True),
]


# ---------------------------------------------------------------------------------------------
# Data and transform
# ---------------------------------------------------------------------------------------------

_WORDS = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut "
    "labore et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris"
).split()
_CITIES = ["Lyon", "Porto", "Turin", "Ghent", "Bergen", "Cork", "Graz", "Brno", "Malmo", "Split"]
_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def object_id(i: int) -> ObjectId:
    """The i-th document's ``_id``: deterministic, so every seeding is identical and the
    application writer can pick random documents without reading the ids first.
    Increasing like the ObjectIds of one inserting process (timestamp, fixed process part, counter)."""
    return ObjectId(f"{0x66000000 + i // 1000:08x}62656e6368{i:06x}")


def make_doc(i: int, rng: random.Random) -> dict[str, Any]:
    """About 1 KB of BSON in 10 fields plus ``_id``, ``__v`` and ``__rev``."""
    return {
        "_id": object_id(i),
        "name": f"{rng.choice(_WORDS).title()} {rng.choice(_WORDS).title()}-{i}",
        "email": f"user{i}@example{i % 50}.org",
        "age": rng.randrange(18, 90),
        "city": rng.choice(_CITIES),
        "country": "EU",
        "score": rng.random() * 100,
        "created": _EPOCH + timedelta(seconds=i),
        "tags": rng.sample(_WORDS, 5),
        "legacy": {"code": f"L{i:07d}", "flags": [rng.randrange(100) for _ in range(4)]},
        "bio": " ".join(rng.choices(_WORDS, k=120))[:760],
        "__v": 1,
        "__rev": 1,
    }


async def seed_docs(collection: Any, size: int) -> list[dict[str, Any]]:
    """``size`` of :func:`make_doc`'s documents, the same ones every time (seed 1), inserted 1,000 at a time."""
    rng = random.Random(1)
    docs = [make_doc(i, rng) for i in range(size)]
    for start in range(0, size, 1000):
        await collection.insert_many(docs[start : start + 1000])
    return docs


def migrate(doc, ctx):  # type: ignore[no-untyped-def]
    """Version 1 -> 2: rename two fields, compute one, drop one (the engine's transform)."""
    doc["full_name"] = doc.pop("name")
    doc["town"] = doc.pop("city")
    doc["email_domain"] = doc["email"].partition("@")[2]
    doc.pop("legacy", None)
    return doc


def raw_update(doc: dict[str, Any]) -> dict[str, Any]:
    """The same transform as ``migrate``, written the way a hand-rolled script writes it:
    straight to the update that the engine's generic diff produces for ``migrate``."""
    return {
        "$set": {"full_name": doc["name"], "town": doc["city"], "email_domain": doc["email"].partition("@")[2], "__v": 2},
        "$unset": {"name": "", "city": "", "legacy": ""},
        "$inc": {"__rev": 1},
    }


#: B0: the same transform as a server-side pipeline.
B0_PIPELINE: list[dict[str, Any]] = [
    {
        "$set": {
            "full_name": "$name",
            "town": "$city",
            "email_domain": {"$arrayElemAt": [{"$split": ["$email", "@"]}, 1]},
            "__v": 2,
            "__rev": {"$add": ["$__rev", 1]},
        }
    },
    {"$unset": ["name", "city", "legacy"]},
]

#: The engine's server-side form of the same transform: the engine adds the version and revision stamp.
ENGINE_PIPELINE: list[dict[str, Any]] = [
    {"$set": {k: v for k, v in B0_PIPELINE[0]["$set"].items() if k not in ("__v", "__rev")}},
    B0_PIPELINE[1],
]

MIGRATION_FILE = '''\
"""Written by bench/background.py for one scenario."""
from mongoshift import Background

{migrate}

background = Background(
    collection={collection!r},
    from_version=1,
    to_version=2,
    {transform},
    batch_size={batch_size},
    pause_ms=0,
    adaptive=False,
    max_parallel={parallel},
    transaction={transaction!r},
    partitions={{"min_partition_docs": {batch_size}}},
)
'''


def with_client_options(uri: str) -> str:
    """The URI with the generous timeouts, so that the engine's own client gets them too
    (mongoshift's ``connect()`` sets only the connect and selection timeouts)."""
    options = {k: v for k, v in CLIENT_OPTIONS.items() if k not in ("connectTimeoutMS", "serverSelectionTimeoutMS")}
    query = urlencode(options)
    if "?" in uri:
        return f"{uri}&{query}"
    return f"{uri}{'' if uri.endswith('/') else '/'}?{query}"


# ---------------------------------------------------------------------------------------------
# Child side: one scenario, measured in its own process
# ---------------------------------------------------------------------------------------------


@dataclass
class Measure:
    """What one child reports (RSS in MB; ``cpu_s`` = user + sys of the timed section; ``server_cpu_s`` the same of
    the embedded server's process, None for a server given by ``--uri``)."""

    wall_s: float = 0.0
    cpu_s: float = 0.0
    server_cpu_s: float | None = None
    rss_start_mb: float = 0.0
    rss_peak_mb: float = 0.0
    migrated: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def _rusage() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    scale = 1024 * 1024 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return usage.ru_utime + usage.ru_stime, usage.ru_maxrss / scale


async def _timed(work: Any, profile: str | None, server_pid: int | None = None) -> Measure:
    """Run ``work()`` (a coroutine function returning (migrated, extra)) under the meters.

    ``server_pid``: the embedded server's, whose CPU over the same section is measured too. Against one server a
    rewrite that keeps it busy goes at its pace: what the server spends a document decides docs/s."""
    server0 = process_cpu_s(server_pid)
    cpu0, rss0 = _rusage()
    # The process's CPU clock: time a coroutine spends waiting for the server is not client CPU
    # (a wall clock would count it). One clock for every thread (the profiler sees them all, so
    # per-thread clocks would mix); the worker thread's transform also shows in ``epoll.poll``,
    # where the loop waited for it.
    profiler = cProfile.Profile(time.process_time) if profile else None
    if profiler:
        profiler.enable()
    t0 = time.perf_counter()
    migrated, extra = await work()
    wall = time.perf_counter() - t0
    if profiler:
        profiler.disable()
        profiler.dump_stats(profile)
    cpu1, rss1 = _rusage()
    server1 = process_cpu_s(server_pid)
    server = server1 - server0 if server0 is not None and server1 is not None else None
    return Measure(wall, cpu1 - cpu0, server, rss0, rss1, migrated, extra)


async def _b0(db: Any, size: int) -> tuple[int, dict[str, Any]]:
    """The server-side tier: the pipeline over ``_id`` ranges of ``B0_CHUNK`` documents."""
    modified = chunks = 0
    for start in range(0, size, B0_CHUNK):
        ids: dict[str, Any] = {"$gte": object_id(start)}
        if start + B0_CHUNK < size:
            ids["$lt"] = object_id(start + B0_CHUNK)
        result = await db[COLLECTION].update_many({"__v": 1, "_id": ids}, B0_PIPELINE)
        modified += result.modified_count
        chunks += 1
    return modified, {"commands": chunks}


async def _keyset(db: Any, size: int, *, guarded: bool) -> tuple[int, dict[str, Any]]:
    """B1 (``guarded=False``) and B3 (``guarded=True``): the loop every engine batch is made of."""
    collection = db[COLLECTION]
    if guarded:
        collection = collection.with_options(write_concern=WriteConcern(w="majority"))
    last: Any = None
    migrated = batches = 0
    for _ in range(size // BATCH_SIZE + 10):  # bounded: a keyset walk ends after size/batch batches
        filter_: dict[str, Any] = {"__v": 1} if last is None else {"__v": 1, "_id": {"$gt": last}}
        t0 = time.process_time()
        docs = await collection.find(filter_, sort=[("_id", 1)], limit=BATCH_SIZE, batch_size=BATCH_SIZE).hint(VERSION_INDEX).to_list(None)
        t1 = time.process_time()
        if not docs:
            break
        ops = []
        for doc in docs:
            where = {"_id": doc["_id"], "__v": doc["__v"], "__rev": doc["__rev"]} if guarded else {"_id": doc["_id"]}
            ops.append(UpdateOne(where, raw_update(doc)))
        t2 = time.process_time()
        result = await collection.bulk_write(ops, ordered=False)
        if CLOCKS is not None:  # B3's stages: its read (decode included), its update building, its write
            CLOCKS.add("read", t1 - t0)
            CLOCKS.add("build", t2 - t1)
            CLOCKS.add("write", time.process_time() - t2)
        migrated += result.matched_count
        batches += 1
        last = docs[-1]["_id"]
        if len(docs) < BATCH_SIZE:
            break
    return migrated, {"batches": batches}


async def _engine(project: Path, parallel: int) -> Any:
    """Register (untimed) and return the timed run of the engine, as ``mongoshift background run``."""
    from mongoshift.api import background as bg, migrations as command
    from mongoshift.project.settings import load_settings

    settings = load_settings({}, config_path=project / "mongoshift.toml", environ={})
    await command.up(settings)

    async def work() -> tuple[int, dict[str, Any]]:
        reports = await bg.run(settings, ["0001_bench.py"], concurrency=parallel)
        report = reports[0]
        totals = dict(report.totals)
        return int(totals.get("migrated", 0)), {"status": report.status, "totals": totals}

    return work


def b3_stages(clocks: StageClocks, total: float) -> dict[str, float]:
    """B3's stages: its read holds its decode (pymongo decodes the reply), its loop builds the guard and update."""
    c = clocks.seconds.get
    stages = dict.fromkeys(STAGE_NAMES, 0.0)
    stages[STAGE_NAMES[0]] = c("read", 0.0)
    stages[STAGE_NAMES[3]] = c("build", 0.0)
    stages[STAGE_NAMES[5]] = c("write", 0.0)
    stages[STAGE_NAMES[-1]] = max(0.0, total - sum(stages.values()))
    return stages


async def child_scenario(args: argparse.Namespace) -> Measure:
    global CLOCKS
    if args.stage_clocks:
        CLOCKS = StageClocks()
        if args.scenario == "engine":
            CLOCKS.instrument_engine()
    measure = await _child_scenario(args)
    if CLOCKS is not None:
        total = measure.cpu_s
        stages = CLOCKS.engine_stages(total) if args.scenario == "engine" else b3_stages(CLOCKS, total)
        measure.extra["stages"] = stages
        measure.extra["clocks"] = dict(CLOCKS.seconds)  # the raw clocks, in the JSON file
    return measure


async def _child_scenario(args: argparse.Namespace) -> Measure:
    if args.scenario == "engine":
        work = await _engine(Path(args.project), args.parallel)
        return await _timed(work, args.profile, args.server_pid)
    client: AsyncMongoClient[Any] = AsyncMongoClient(args.uri, **CLIENT_OPTIONS)
    try:
        await client.admin.command("ping")  # connect before the clock starts, as the engine's run
        db = client[args.db]
        if args.scenario == "b0":
            return await _timed(lambda: _b0(db, args.size), args.profile, args.server_pid)
        return await _timed(lambda: _keyset(db, args.size, guarded=args.scenario == "b3"), args.profile, args.server_pid)
    finally:
        await client.close()


def child_writer(args: argparse.Namespace) -> dict[str, Any]:
    """The application: ``update_one`` on random documents, bumping ``__rev`` as the contract asks.

    Paced at ``--rate`` at most (it never bursts to catch up, so a slow server sees less, not
    more); stops at SIGTERM or after ``WRITER_MAX_S``. Synchronous pymongo on purpose: a
    typical application thread, and independent of the engine's async driver."""
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    client: MongoClient[Any] = MongoClient(args.uri, **CLIENT_OPTIONS)
    collection = client[args.db][COLLECTION]
    rng = random.Random(7)
    client.admin.command("ping")
    print("ready", flush=True)
    interval = 1.0 / args.rate
    started = next_at = time.monotonic()
    writes = matched = 0
    while not stop and time.monotonic() - started < WRITER_MAX_S:
        result = collection.update_one(
            {"_id": object_id(rng.randrange(args.size))},
            {"$set": {"score": rng.random() * 100, "touched": writes}, "$inc": {"__rev": 1}},
        )
        writes += 1
        matched += result.matched_count
        next_at = max(next_at + interval, time.monotonic() - interval)  # no catch-up bursts
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    elapsed = time.monotonic() - started
    client.close()
    return {"writes": writes, "matched": matched, "seconds": round(elapsed, 2), "rate": round(writes / elapsed, 1) if elapsed else 0.0}


# ---------------------------------------------------------------------------------------------
# Parent side: server, data, children, table
# ---------------------------------------------------------------------------------------------


def seed(client: MongoClient[Any], db_name: str, size: int) -> float:
    """Drop the database and insert ``size`` identical documents; returns the seconds it took."""
    t0 = time.perf_counter()
    client.drop_database(db_name)
    collection = client[db_name][COLLECTION]
    rng = random.Random(42)
    for start in range(0, size, SEED_BATCH):
        collection.insert_many([make_doc(i, rng) for i in range(start, min(size, start + SEED_BATCH))], ordered=False)
    collection.create_index(VERSION_INDEX)
    return time.perf_counter() - t0


def verify(client: MongoClient[Any], db_name: str, size: int) -> tuple[int, int]:
    """How many documents reached version 2, and how many are not in the new shape.

    A scenario that leaves documents behind is not a result (except B3 with a writer,
    whose guard is expected to skip the documents the application wrote mid-batch)."""
    collection = client[db_name][COLLECTION]
    done = collection.count_documents({"__v": 2})
    left = collection.count_documents({"$or": [{"__v": {"$ne": 2}}, {"legacy": {"$exists": True}}, {"full_name": {"$exists": False}}]})
    return done, left


def write_project(root: Path, uri: str, db_name: str, parallel: int, pipeline: bool = False, transaction: bool = False) -> Path:
    """A throwaway mongoshift project: config plus the one background migration file."""
    project = root / f"project-p{parallel}-{uuid.uuid4().hex[:6]}"
    (project / "migrations").mkdir(parents=True)
    config = {
        "uri": with_client_options(uri),
        "db": db_name,
        "migrations_dir": str(project / "migrations"),
        "connect_timeout_seconds": CLIENT_OPTIONS["connectTimeoutMS"] / 1000,
        "background_poll_seconds": 0.2,
        "background_lease_ttl_seconds": 30,
    }
    lines = ["[mongoshift]", *(f"{k} = {json.dumps(v)}" for k, v in config.items())]
    (project / "mongoshift.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = MIGRATION_FILE.format(
        migrate=inspect.getsource(migrate),
        transform=f"pipeline={ENGINE_PIPELINE!r}" if pipeline else "migrate=migrate",
        collection=COLLECTION,
        batch_size=BATCH_SIZE,
        parallel=parallel,
        transaction=True if transaction else None,
    )
    (project / "migrations" / "0001_bench.py").write_text(source, encoding="utf-8")
    return project


def start_writer(uri: str, db_name: str, size: int) -> subprocess.Popen[str]:
    args = [sys.executable, __file__, "--writer", "--uri", uri, "--db", db_name, "--size", str(size), "--rate", str(WRITER_RATE)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError("the application writer did not start")
    return proc


def stop_writer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": "writer did not stop"}
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": f"writer exited {proc.returncode}"}


class ScenarioFailed(Exception):
    """A child gave no measurement; its row says why and the other scenarios still run."""


def run_child(
    scenario: Scenario, size: int, uri: str, db_name: str, project: Path | None, profile: str | None, stage_clocks: bool = False,
    server_pid: int | None = None,
) -> Measure:
    args = [sys.executable, __file__, "--scenario", scenario.kind, "--size", str(size), "--uri", uri, "--db", db_name]
    if server_pid is not None:
        args += ["--server-pid", str(server_pid)]
    if project is not None:
        args += ["--project", str(project), "--parallel", str(scenario.parallel)]
    if profile:
        args += ["--profile", profile]
    if stage_clocks:
        args += ["--stage-clocks"]
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise ScenarioFailed(f"no result within {CHILD_TIMEOUT_S} s") from None
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = done.stderr.strip().splitlines()[-12:]
        raise ScenarioFailed(f"exit {done.returncode}: " + " | ".join(line.strip() for line in tail)[-1500:])
    return Measure(**json.loads(lines[-1]))



@dataclass
class Row:
    size: int
    scenario: str
    kind: str
    parallel: int
    writer: bool
    seed_s: float
    measure: Measure
    writer_stats: dict[str, Any] | None = None
    error: str | None = None
    left: int = 0  # documents not in the new shape afterwards
    transaction: bool = False  # a transactional engine row
    profile: str | None = None  # its cProfile file (``--profile-dir``)
    round: int = 1  # which of ``--repeat``'s rounds measured it

    @property
    def measured(self) -> bool:
        """False when the child gave no numbers (a row that is only invalid still has them)."""
        return not (self.error or "").startswith("failed")

    @property
    def docs_per_s(self) -> float:
        return self.size / self.measure.wall_s if self.measure.wall_s else 0.0

    @property
    def cpu_per_1k(self) -> float:
        return self.measure.cpu_s / self.size * 1000

    @property
    def server_cpu_per_1k(self) -> float | None:
        server = self.measure.server_cpu_s
        return None if server is None else server / self.size * 1000


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rounds(scenarios: list[Scenario], repeat: int) -> list[tuple[int, Scenario]]:
    """``repeat`` rounds of ``scenarios``, numbered from 1, every even round in reverse order."""
    return [
        (n, scenario)
        for n in range(1, repeat + 1)
        for scenario in (scenarios if n % 2 else scenarios[::-1])
    ]


def run_all(
    uri: str,
    sizes: list[int],
    writer_sizes: set[int],
    only: list[str] | None,
    profile_dir: Path | None,
    json_path: Path | None,
    stages: bool = False,
    repeat: int = 1,
) -> list[Row]:
    """Every scenario at every size, each on freshly seeded data; writer scenarios only at ``writer_sizes``.

    With ``repeat`` above 1 each size runs that many rounds, the order of the scenarios reversed
    every other round (:func:`rounds`), so that a machine growing busier or quieter during the run
    weighs on B3 and on the rows compared with it alike.

    A failed scenario becomes a row marked failed instead of ending the run, and the JSON
    file is rewritten after every scenario, so a long run is never lost to its last step."""
    rows: list[Row] = []
    db_name = f"mongoshift_bench_{uuid.uuid4().hex[:8]}"
    server_pid = embedded_pid()  # None against a server given by --uri: no server column then
    client: MongoClient[Any] = MongoClient(uri, **CLIENT_OPTIONS)
    scenarios = [s for s in SCENARIOS if only is None or s.kind in only or s.name in only]
    with tempfile.TemporaryDirectory(prefix="mongoshift-bench-") as tmp:
        try:
            for size in sizes:
                for round_no, scenario in rounds(scenarios, repeat):
                    if scenario.writer and size not in writer_sizes:
                        if round_no == 1:
                            log(f"{size:>7} {scenario.name:<24} skipped (--writer-sizes)")
                        continue
                    seed_s = seed(client, db_name, size)
                    label = f"{size:>7} {scenario.name:<24}" + (f" round {round_no}" if repeat > 1 else "")
                    log(f"{label} seeded in {seed_s:.1f}s; running")
                    project = write_project(Path(tmp), uri, db_name, scenario.parallel, scenario.pipeline,
                        scenario.transaction) if scenario.kind == "engine" else None
                    profile = None
                    if profile_dir is not None:
                        slug = (
                            scenario.name.split()[0].lower() + ("-pipeline" if scenario.pipeline else "") + ("-txn" if scenario.transaction else "")
                            + (f"-p{scenario.parallel}" if scenario.kind == "engine" else "")
                        )
                        suffix = f"-r{round_no}" if repeat > 1 else ""
                        profile = str(profile_dir / f"{slug}{'-writer' if scenario.writer else ''}-{size}{suffix}.prof")
                    writer = start_writer(uri, db_name, size) if scenario.writer else None
                    failure = None
                    try:
                        measure = run_child(
                            scenario, size, uri, db_name, project, profile, stages and scenario.kind in ("b3", "engine"), server_pid
                        )
                    except ScenarioFailed as exc:
                        measure, failure = Measure(), f"failed: {exc}"
                    finally:
                        writer_stats = stop_writer(writer) if writer else None
                    row = Row(size, scenario.name, scenario.kind, scenario.parallel, scenario.writer, seed_s, measure, writer_stats,
                        transaction=scenario.transaction, profile=profile, round=round_no)
                    done, row.left = verify(client, db_name, size)
                    if failure:
                        row.error = failure
                    elif (done != size or row.left) and not (scenario.kind == "b3" and scenario.writer):
                        row.error = f"{done}/{size} at version 2, {row.left} not in the new shape"
                    rows.append(row)
                    if json_path is not None:
                        write_json(json_path, rows)
                    log(
                        f"{label} {measure.wall_s:7.1f} s {row.docs_per_s:6.0f} docs/s  {row.cpu_per_1k:6.3f} cpu-s/1k  "
                        f"{measure.rss_peak_mb:6.1f} MB" + (f"  INVALID: {row.error}" if row.error else "")
                    )
        finally:
            try:
                client.drop_database(db_name)
            except Exception as exc:  # never hide the error that got us here
                log(f"could not drop {db_name}: {type(exc).__name__}")
            client.close()
    return rows


def write_json(path: Path, rows: list[Row]) -> None:
    payload = [
        {**asdict(r.measure), **{k: v for k, v in asdict(r).items() if k != "measure"}, "docs_per_s": r.docs_per_s, "cpu_s_per_1k": r.cpu_per_1k}
        for r in rows
    ]
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")


def _b3(rows: list[Row], size: int, writer: bool = False, round_no: int = 1) -> Row | None:
    """The reference row at ``size`` of round ``round_no`` (with or without the writer), if it ran and verified."""
    return next(
        (
            r
            for r in rows
            if r.size == size and r.round == round_no and r.kind == "b3" and r.writer == writer
            and not r.error and r.docs_per_s and r.cpu_per_1k
        ),
        None,
    )


def paired_ratios(rows: list[Row], row_name: str, size: int) -> tuple[list[float], list[float]]:
    """Round by round, the named row's docs/s and client CPU per document each divided by B3's of the
    same round (B3 +writer for a writer row): a ratio of two measurements made minutes apart, not
    of two medians that may come from different moments of a run."""
    speeds: list[float] = []
    cpus: list[float] = []
    for r in sorted((r for r in rows if r.size == size and r.scenario == row_name and r.measured and not r.error), key=lambda r: r.round):
        b3 = _b3(rows, size, r.writer, r.round)
        if b3 is not None:
            speeds.append(r.docs_per_s / b3.docs_per_s)
            cpus.append(r.cpu_per_1k / b3.cpu_per_1k)
    return speeds, cpus


def render(rows: list[Row]) -> str:
    """The markdown table, RSS growth and verdicts (what goes into docs/performance.md)."""
    out: list[str] = []
    sizes = sorted({r.size for r in rows})
    repeated = max((r.round for r in rows), default=1) > 1
    header = (
        "| docs | " + ("round | " if repeated else "") + "scenario | wall s | docs/s | CPU s / 1k docs | peak RSS MB | RSS growth MB | "
        "docs/s ÷ B3 | CPU ÷ B3 | server CPU s / 1k docs | server ÷ B3 | conflicts (B3: left behind) | retried | app writes/s |"
    )
    out += [header, "|---:|" + ("---:|" if repeated else "") + "---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sizes:
        for r in (r for r in rows if r.size == size):
            b3 = _b3(rows, size, r.writer, r.round)
            lead = f"| {size:,} | " + (f"{r.round} | " if repeated else "")
            totals = r.measure.extra.get("totals", {})
            conflicts = totals.get("conflicts", "–") if r.kind == "engine" else (r.left if r.kind == "b3" and r.writer else "–")
            if not r.measured:
                out.append(f"{lead}{r.scenario} **(failed)** |" + " – |" * 12)
                continue
            speed = f"{r.docs_per_s / b3.docs_per_s:.2f}" if b3 else "–"
            cpu = f"{r.cpu_per_1k / b3.cpu_per_1k:.2f}" if b3 else "–"
            server = r.server_cpu_per_1k
            base = b3.server_cpu_per_1k if b3 else None
            server_cells = f"{server:.3f} | " + (f"{server / base:.2f}" if base else "–") if server is not None else "– | –"
            name = r.scenario + (" **(invalid)**" if r.error else "")
            out.append(
                f"{lead}{name} | {r.measure.wall_s:.1f} | {r.docs_per_s:,.0f} | {r.cpu_per_1k:.3f} | "
                f"{r.measure.rss_peak_mb:.1f} | {r.measure.rss_peak_mb - r.measure.rss_start_mb:.1f} | {speed} | {cpu} | {server_cells} | "
                f"{conflicts} | {totals.get('retried', '–') if r.kind == 'engine' else '–'} | "
                f"{r.writer_stats.get('rate', '–') if r.writer_stats else '–'} |"
            )
    out += ["", "Ratios are against B3 of the same size and round; rows with the writer against B3 +writer.", ""]
    verdicts: list[str] = []
    if len(sizes) > 1:
        small, large = sizes[0], sizes[-1]
        growth: list[str] = []
        for name in dict.fromkeys(r.scenario for r in rows):
            a = [r.measure.rss_peak_mb for r in rows if r.size == small and r.scenario == name and r.measured]
            b = [r.measure.rss_peak_mb for r in rows if r.size == large and r.scenario == name and r.measured]
            if a and b and min(a):
                ratio = max(b) / max(a)
                growth.append(f"* {name}: {max(a):.1f} → {max(b):.1f} MB = **{ratio:.2f}×**")
                if name.startswith("engine"):
                    ok = ratio <= TARGET_RSS_GROWTH
                    verdicts.append(f"* RSS flat ({name}, ≤ {TARGET_RSS_GROWTH}×): {'**meets**' if ok else '**misses**'} ({ratio:.2f}×)")
        if growth:
            out += [f"Peak client RSS (the highest of its rounds), {large:,} ÷ {small:,} documents:", "", *growth, ""]
    for size in sizes:
        for name, targets in TARGETS.items():
            speeds, cpus = paired_ratios(rows, name, size)
            if not speeds:
                continue
            parts = []
            for target in targets:
                ratios = speeds if target.measure == "speed" else cpus
                median = statistics.median(ratios)
                each = f"; round by round {', '.join(f'{x:.2f}' for x in ratios)}" if len(ratios) > 1 else ""
                parts.append(
                    f"{'throughput' if target.measure == 'speed' else 'CPU/doc'} **{median:.2f}×** B3"
                    + (f" (median of {len(ratios)} rounds{each})" if len(ratios) > 1 else "")
                    + f" ({target.describe()}) {'**meets**' if target.met(median) else '**misses**'}"
                )
            verdicts.append(f"* {size:,} {name}: " + "; ".join(parts))
    if verdicts:
        out += ["Verdicts (docs/performance.md, \"Targets\"; each ratio against B3 of the same size and round):", "", *verdicts, ""]
    for r in (r for r in rows if r.error):
        out.append(f"* {'FAILED' if not r.measured else 'INVALID'} {r.size:,} {r.scenario}" + (f" (round {r.round})" if repeated else "") + f": {r.error}")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------
# Stages (--stages): where each row's client CPU goes, by clocks around per-batch functions
# ---------------------------------------------------------------------------------------------
#
# cProfile times every call, C methods included, and its own cost per call is larger than the
# work of a dict lookup: a profile of the engine puts half its CPU in the diff's lookups. These
# clocks wrap functions that run once per batch (or per slice), so they cost nothing measurable,
# and each reads the process's CPU time (``time.process_time``: every thread, the transform's
# worker included). An async function's clock also holds what other tasks did while it awaited
# (a lease renewal); with one lane that is little. A clocked run reads no batch ahead
# (``PlainBatches._read_ahead``): that read overlaps the transform and the write, so each clock
# would hold the other's CPU. The work is the same, in turn instead of overlapped.

#: The stages, in table order; "other" is the rest of the timed section.
STAGE_NAMES = [
    "read (find: request and reply)",
    "decode (BSON to dicts)",
    "copy (private copy, in-place check)",
    "user function",
    "diff",
    "encode + write (guards, BSON check, bulk_write)",
    "bookkeeping (checkpoint, lease, counters; txn: its checkpoint and commit)",
    "events and telemetry",
    "rest of the batch (its other code; txn: session, start)",
    "other (per slice and per run: claims, planning, coordinator, event loop)",
]


class StageClocks:
    """CPU seconds accumulated per wrapped function (by label), reentrant-safe enough for one lane."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.batches_open = 0  # clocked advances under way (the events emitted inside one)

    def add(self, label: str, seconds: float) -> None:
        self.seconds[label] = self.seconds.get(label, 0.0) + seconds

    def wrap(self, owner: Any, attr: str, label: str) -> None:
        """Replace ``owner.attr`` by the same function under this clock."""
        fn = getattr(owner, attr)
        clocks = self
        if inspect.iscoroutinefunction(fn):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                t0 = time.process_time()
                batch = label == "advance"
                clocks.batches_open += batch
                try:
                    return await fn(*args, **kwargs)
                finally:
                    clocks.batches_open -= batch
                    clocks.add(label, time.process_time() - t0)

            setattr(owner, attr, timed_async)
        else:

            def timed(*args: Any, **kwargs: Any) -> Any:
                t0 = time.process_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    clocks.add(label, time.process_time() - t0)

            setattr(owner, attr, timed)

    def instrument_engine(self) -> None:
        from mongoshift.background.lanes import modes
        from mongoshift.background.write import batch, transaction
        from mongoshift.project.events import Events

        if hasattr(modes.PlainBatches, "_read_ahead"):  # the work in turn: see the note above
            modes.PlainBatches._read_ahead = lambda *args, **kwargs: None  # type: ignore[method-assign]
        self.wrap(modes.PlainBatches, "advance", "advance")
        self.wrap(modes.TransactionalBatches, "advance", "advance")
        self.wrap_lane_read()
        self.wrap(batch, "decode_all", "decode")  # lend's one decode of the batch (a transaction's; before, every batch's)
        for name in ("lend", "lend_decoded"):  # the lane lends what the driver decoded (lend_decoded); before, raw BSON (lend)
            if hasattr(modes, name):
                self.wrap(modes, name, "lend")
        self.wrap(transaction, "lend", "lend")
        if hasattr(transaction, "read_replies"):  # a transaction's read: its replies whole, decoded with them, lent as decoded
            self.wrap(modes, "read_replies", "find")
            self.wrap(transaction, "lend_decoded", "lend")
        self.wrap(transaction, "commit", "commit")
        self.wrap_transaction_checkpoint()
        self.wrap(batch.Lent, "originals", "originals")
        self.wrap(batch, "_transform", "user")
        self.wrap(batch, "_updates", "updates")
        self.wrap(batch, "bson_problems", "bson_check")
        self.wrap(batch, "write_planned", "write")
        self.wrap(modes.PlainBatches, "_checkpoint", "checkpoint")
        self.wrap(modes, "_intent", "intent")
        self.wrap(Events, "emit", "events")
        emit = Events.emit
        clocks = self

        def emit_in_batch(events: Any, *args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return emit(events, *args, **kwargs)
            finally:
                if clocks.batches_open:  # inside a clocked advance: taken out of the rest of the batch
                    clocks.add("events_in_batch", time.process_time() - t0)

        Events.emit = emit_in_batch  # type: ignore[method-assign]

    def wrap_transaction_checkpoint(self) -> None:
        """Clock a transactional batch's fenced checkpoint (the store's checkpoint in a session) as bookkeeping."""
        from mongoshift.background.state.store import BackgroundStore

        checkpoint = BackgroundStore.checkpoint
        clocks = self

        async def txn_checkpoint(store: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("session") is None:
                return await checkpoint(store, *args, **kwargs)
            t0 = time.process_time()
            try:
                return await checkpoint(store, *args, **kwargs)
            finally:
                clocks.add("txn_checkpoint", time.process_time() - t0)

        BackgroundStore.checkpoint = txn_checkpoint  # type: ignore[method-assign]

    def wrap_lane_read(self) -> None:
        """Clock the lanes' batch reads alone: ``to_list`` of a cursor made by ``PartitionWork.find`` (the
        batch's read, raw or decoded), so that the read row is the read and nothing else of the batch."""
        from pymongo.asynchronous.cursor import AsyncCursor

        from mongoshift.background.lanes import modes

        find = modes.PartitionWork.find

        def lane_find(work: Any, *args: Any, **kwargs: Any) -> Any:
            cursor = find(work, *args, **kwargs)
            if cursor is not None:
                cursor.bench_lane_read = True
            return cursor

        modes.PartitionWork.find = lane_find  # type: ignore[method-assign]
        to_list = AsyncCursor.to_list
        clocks = self

        async def lane_to_list(cursor: Any, length: int | None = None) -> Any:
            if not getattr(cursor, "bench_lane_read", False):
                return await to_list(cursor, length)
            t0 = time.process_time()
            try:
                return await to_list(cursor, length)
            finally:
                clocks.add("find", time.process_time() - t0)

        AsyncCursor.to_list = lane_to_list  # type: ignore[method-assign]

    def engine_stages(self, total: float) -> dict[str, float]:
        """The engine's stages from its clocks: nested clocks are taken out of the ones around them.

        The read is the lanes' ``to_list`` alone; what else ``advance`` spends outside the clocked
        functions (and outside the events it emits) is "rest of the batch": a transactional batch's
        session and start, which are not clocked on their own, land there (its checkpoint and commit
        are bookkeeping)."""
        c = self.seconds.get
        lend = c("lend", 0.0)
        decode = c("decode", 0.0)
        txn = c("txn_checkpoint", 0.0) + c("commit", 0.0)
        inside = lend + c("user", 0.0) + c("updates", 0.0) + c("write", 0.0) + c("originals", 0.0) + c("checkpoint", 0.0) + c("intent", 0.0) + txn
        stages = {
            STAGE_NAMES[0]: c("find", 0.0),
            STAGE_NAMES[1]: decode,
            STAGE_NAMES[2]: max(0.0, lend - decode) + c("originals", 0.0),
            STAGE_NAMES[3]: c("user", 0.0),
            STAGE_NAMES[4]: max(0.0, c("updates", 0.0) - c("bson_check", 0.0)),
            STAGE_NAMES[5]: c("bson_check", 0.0) + c("write", 0.0),
            STAGE_NAMES[6]: c("checkpoint", 0.0) + c("intent", 0.0) + txn,
            STAGE_NAMES[7]: c("events", 0.0),
            STAGE_NAMES[8]: max(0.0, c("advance", 0.0) - inside - c("find", 0.0) - c("events_in_batch", 0.0)),
        }
        stages[STAGE_NAMES[-1]] = max(0.0, total - sum(stages.values()))
        return stages


#: The clocks of this child, when ``--stages`` asked for them (B3's loop reads them too).
CLOCKS: StageClocks | None = None


def render_stages(rows: list[Row]) -> str:
    """One table per size: microseconds of client CPU per document and stage, each clocked row beside B3;
    with several rounds, each cell is the median of the rounds' (and so the shares need not add up)."""
    out: list[str] = []
    for size in sorted({r.size for r in rows}):
        clocked = [r for r in rows if r.size == size and not r.writer and r.measure.extra.get("stages")]
        if not clocked:
            continue
        names = list(dict.fromkeys(r.scenario for r in clocked))
        out += [
            f"Client CPU per document by stage, {size:,} documents, µs (share of the row's total in brackets; "
            "B3's read includes its decode, its loop building guard and update is its 'user function'; "
            "a clocked engine reads no batch ahead, so that no clock holds another stage's CPU):",
            "",
            "| stage | " + " | ".join(names) + " |",
            "|---|" + "---:|" * len(names),
        ]
        for stage in [*STAGE_NAMES, "total"]:
            cells = []
            for name in names:
                measured = [r for r in clocked if r.scenario == name and r.measure.cpu_s]
                if not measured:
                    cells.append("–")
                    continue
                seconds = statistics.median(
                    r.measure.cpu_s if stage == "total" else float(r.measure.extra["stages"].get(stage, 0.0)) for r in measured
                )
                total = statistics.median(r.measure.cpu_s for r in measured)
                cells.append(f"{seconds / size * 1e6:.1f} ({seconds / total:.0%})")
            out.append(f"| {stage} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="20000,100000", help="comma-separated document counts (default 20000,100000)")
    parser.add_argument("--uri", help="use this server (a throwaway database, dropped at the end) instead of an embedded one")
    parser.add_argument(
        "--writer-sizes",
        default="20000",
        help="sizes at which the scenarios with an application writer run (default 20000: on the embedded "
        "server a conflict costs a re-read that grows with the collection, see docs/performance.md)",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement to this file")
    parser.add_argument("--only", help="comma-separated scenario kinds (b0,b1,b3,engine) or names ('engine pipeline p=1') to run")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every scenario at each size, the order reversed every other round; the verdicts take the "
        "median of the ratios to B3 of the same round (default 1)",
    )
    parser.add_argument("--profile-dir", type=Path, help="cProfile each child into this directory (slows them down: not for the table)")
    parser.add_argument(
        "--stages",
        action="store_true",
        help="clock the stages of B3 and the engine rows (read, decode, copy, user function, diff, encode+write, "
        "bookkeeping, events, other) and print client CPU per document and stage, each beside B3",
    )
    # child modes (internal)
    parser.add_argument("--scenario", choices=["b0", "b1", "b3", "engine"], help=argparse.SUPPRESS)
    parser.add_argument("--writer", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--project", help=argparse.SUPPRESS)
    parser.add_argument("--parallel", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=WRITER_RATE, help=argparse.SUPPRESS)
    parser.add_argument("--profile", help=argparse.SUPPRESS)
    parser.add_argument("--stage-clocks", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.writer:
        print(json.dumps(child_writer(args)), flush=True)
        return 0
    if args.scenario:
        print(json.dumps(asdict(asyncio.run(child_scenario(args)))), flush=True)
        return 0

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    writer_sizes = {int(s) for s in args.writer_sizes.split(",") if s.strip()}
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    if args.repeat < 1:
        print("--repeat must be 1 or more", file=sys.stderr)
        return 2
    started = time.perf_counter()
    with ExitStack() as stack:
        if args.profile_dir:
            args.profile_dir.mkdir(parents=True, exist_ok=True)
        uri = server_uri(stack, args.uri)
        rows = run_all(uri, sizes, writer_sizes, only, args.profile_dir, args.json, args.stages, args.repeat)
        table = render(rows) + ("\n" + render_stages(rows) if args.stages else "")
    print(textwrap.dedent(f"""
        mongoshift background benchmark: batch {BATCH_SIZE}, ~1 KB documents, app writer ≤ {WRITER_RATE:.0f} updates/s,
        {'server ' + ('given by --uri' if args.uri else 'embedded (mongoeco)')}, {os.cpu_count()} CPUs, Python {sys.version.split()[0]},
        {time.perf_counter() - started:.0f} s in all
    """).strip())
    print()
    print(table)
    return 1 if any(r.error for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
