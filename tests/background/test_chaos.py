"""Chaos: runner processes killed with kill -9 while an application writes as fast as it can.

20,000 documents, 3 runner processes with 2 lanes each, an application writer
updating random documents (bumping the revision, counting its writes in the
document itself), and a killer that kill -9s a random runner every few seconds
and starts a new one. At the end every document has the new shape, every
application write is there, and revision arithmetic proves that the engine
rewrote each document exactly once: ``__rev == 1 (seed) + app_writes + 1``.

The transactional run is the same storm (3 runners x 2 lanes, the writer at
full speed, 20,000 documents): the embedded server conflicts per document
(docs/embedded.md, fix o) like a real replica set (``MONGOSHIFT_TEST_URI``), so
batches commit while the application writes; there it uses batches of 50 and a
10 s lease (see the test).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import pytest
from pymongo import MongoClient

from ..conftest import REAL_URI
from .conftest import seed

#: Minutes each, on 2 cores: left out of the default run (``pytest -m slow`` runs them, CI does).
pytestmark = pytest.mark.slow

DOCS = int(os.environ.get("CHAOS_DOCS", 20_000))
#: The transactional run's documents: 20,000 on the embedded server too, since its batch reads walk
#: the _id order instead of scanning the collection (docs/embedded.md, fixes ae and af).
TXN_DOCS = int(os.environ.get("CHAOS_TXN_DOCS", DOCS))
#: The run fails when no partition moved for this long: a stall, not a slow machine (no budget for
#: the whole run, which on a loaded machine takes what it takes). A batch takes seconds even at load 10.
STALL_S = int(os.environ.get("CHAOS_STALL", "180"))
#: A lease expired this long ago (by the server's clock) and still not reaped while runners live: the
#: reclaim stalled. Every slice start and coordinator poll reaps, so a live runner does it within a batch.
UNREAPED_S = int(os.environ.get("CHAOS_UNREAPED", "90"))
#: Only a guard against a hung harness: the stall checks above are what fail a run.
TIMEOUT_S = 3600

PLAIN = """
from mongoshift import Background

def migrate(doc, ctx):
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate,
                        batch_size=200, pause_ms=0, max_parallel=6, max_conflict_retries=5,
                        partitions={"min_partition_docs": 200})
"""

TRANSACTIONAL = """
from mongoshift import Background

async def migrate(doc, ctx):
    await ctx.db.side.insert_one({"doc": doc["_id"]}, session=ctx.session)
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate,
                        batch_size=BATCH, pause_ms=0, max_parallel=MAX_PARALLEL, max_slice_failures=100,
                        transaction={"timeout_ms": 20000, "max_retries": 20},
                        partitions={"min_partition_docs": 200})
"""


class Writer(threading.Thread):
    """The application: random documents, revision bumped on every write, writes counted in the document."""

    def __init__(self, uri: str, db: str, delay: float, docs: int) -> None:
        super().__init__(daemon=True)
        self.docs = docs
        self.client: MongoClient = MongoClient(uri, socketTimeoutMS=300_000)
        self.people = self.client[db].people
        self.delay = delay
        self.writes = 0
        self.stop = threading.Event()

    def run(self) -> None:
        rng = random.Random(5)
        while not self.stop.is_set():
            result = self.people.update_one({"_id": rng.randrange(self.docs)}, {"$inc": {"__rev": 1, "app_writes": 1}})
            self.writes += result.modified_count
            if self.delay:
                time.sleep(self.delay)


def runner(project) -> subprocess.Popen[bytes]:  # type: ignore[no-untyped-def]
    """A runner process; its warnings go to a log file of its own, which a failure quotes."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONGOSHIFT_")}
    logs = project.root / "runner-logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"runner-{len(list(logs.iterdir())):03d}.log"
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "mongoshift", "background", "run", "--all", "--concurrency", "2", "-q"],
            cwd=project.root, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
        )


def runner_logs(project, lines: int = 6) -> str:  # type: ignore[no-untyped-def]
    """The last lines of every runner's log, for a failure's message."""
    return "\n".join(
        f"{log.name}: " + " | ".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
        for log in sorted((project.root / "runner-logs").iterdir())
    )


def chaos(project, sync_client, *, writer_delay: float, docs: int, max_kills: int = 6) -> dict:  # type: ignore[no-untyped-def,type-arg]
    db = sync_client[project.db]
    writer = Writer(project.uri, project.db, writer_delay, docs)
    writer.start()
    procs = [runner(project) for _ in range(3)]
    rng = random.Random(3)
    kills = 0
    died: list[int] = []  # exit codes of runners that ended on their own (not by the killer)
    progress: object = None
    moved = time.monotonic()
    # The first kill as soon as a runner holds a lease (the run is under way), not after a set time: on a fast,
    # quiet machine the whole run can end within any fixed delay, and the storm would kill nothing.
    next_kill: float | None = None
    try:
        while True:
            state = db["_mongoshift_background"].find_one({"_id": "0001_names.py"}) or {}
            if state.get("status") in ("completed", "failed"):
                break
            partitions = db["_mongoshift_background_partitions"]
            now = (
                state.get("generation"),
                sorted((p.get("seq", 0), p.get("status"), repr(p.get("cursor"))) for p in partitions.find({}, {"seq": 1, "status": 1, "cursor": 1})),
            )
            if now != progress:
                progress, moved = now, time.monotonic()
            unreaped = list(
                partitions.find(
                    {"lease": {"$exists": True}, "$expr": {"$lt": [{"$add": ["$lease.renewed_at", "$lease.ttl_ms", UNREAPED_S * 1000]}, "$$NOW"]}},
                    {"seq": 1, "lease": 1},
                )
            )
            if unreaped or time.monotonic() - moved >= STALL_S:
                parts = list(partitions.find({}, {"status": 1, "lease": 1, "generation": 1, "failures": 1, "last_error": 1, "cursor": 1}))
                why = f"leases expired over {UNREAPED_S}s ago and not reaped: {unreaped}" if unreaped else f"no partition moved for {STALL_S}s"
                raise AssertionError(
                    f"{why}: {state.get('status')} gen {state.get('generation')}, "
                    f"{db.people.count_documents({'__v': 2})} migrated; partitions: {parts}; "
                    f"locks: {list(db['_mongoshift_locks'].find())}; runners that died: {died}; "
                    f"runner logs:\n{runner_logs(project)}"
                )
            if next_kill is None and partitions.find_one({"lease": {"$exists": True}, "status": {"$ne": "done"}}, {"_id": 1}):
                next_kill = time.monotonic()
            if next_kill is not None and time.monotonic() >= next_kill and kills < max_kills:
                victim = procs.pop(rng.randrange(len(procs)))
                victim.send_signal(signal.SIGKILL)
                victim.wait()
                kills += 1
                procs.append(runner(project))
                next_kill = time.monotonic() + rng.uniform(2, 4)
            died.extend(p.returncode for p in procs if p.poll() is not None and p.returncode != 0)
            procs = [p if p.poll() is None else runner(project) for p in procs]
            time.sleep(0.2 if kills else 0.02)  # until the first kill, look often: it must land while the run is under way
    finally:
        writer.stop.set()
        writer.join(30)
        for p in procs:
            p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    assert state["status"] == "completed", state.get("last_error")
    # A slow server is ridden out (docs/background.md, "Riding out a lost connection"): only the killer ends a runner.
    assert died == [], f"runners died on their own: {died}; runner logs:\n{runner_logs(project)}"
    assert kills >= 1
    return {"state": state, "app_writes": writer.writes, "kills": kills}


def check_documents(sync_client, project, app_writes: int, docs: int) -> None:  # type: ignore[no-untyped-def]
    people = sync_client[project.db].people
    assert people.count_documents({}) == docs
    assert people.count_documents({"__v": 2}) == docs  # every document has the new shape
    stored_writes = next(people.aggregate([{"$group": {"_id": None, "n": {"$sum": {"$ifNull": ["$app_writes", 0]}}}}]))["n"]
    assert stored_writes == app_writes  # every application write is there
    # Rewritten exactly once by the engine: revision = 1 (seed) + application writes + 1.
    twice = people.count_documents({"$expr": {"$ne": ["$__rev", {"$add": [2, {"$ifNull": ["$app_writes", 0]}]}]}})
    assert twice == 0


@pytest.mark.timeout(TIMEOUT_S)
async def test_chaos_plain(fast_project, db, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, DOCS)
    fast_project.add("0001_names.py", PLAIN)
    assert cli(fast_project, "up", "-q").returncode == 0
    # In a thread: minutes of a blocked event loop would starve the async client's monitor (of the ``db``
    # fixture), whose late heartbeat then clears its pool and cancels the teardown's drop_database.
    result = await asyncio.to_thread(chaos, fast_project, sync_client, writer_delay=0.0, docs=DOCS)
    check_documents(sync_client, fast_project, result["app_writes"], DOCS)
    totals = result["state"]["totals"]
    # A kill between a batch's writes and its bookkeeping leaves the batch on its partition, and the
    # next lane to claim it counts it: the totals are exact.
    assert totals["migrated"] == DOCS and totals["scanned"] >= totals["migrated"]
    assert result["app_writes"] > 0


@pytest.mark.timeout(TIMEOUT_S)
async def test_chaos_transactional(fast_project, db, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, TXN_DOCS)
    # The embedded server is about 100 times slower than mongod: a batch there takes about as many
    # application writes as a batch of 200 on mongod, and seconds where mongod takes milliseconds.
    # So it uses batches of 50 (a conflict grows with the square of the batch) and a 10 s lease,
    # which a transaction's checkpoint renews (a heartbeat renewal mid-transaction conflicts with it).
    real = REAL_URI is not None
    fast_project.add("0001_names.py", TRANSACTIONAL.replace("MAX_PARALLEL", "6").replace("BATCH", "200" if real else "50"))
    fast_project.write_config(background_lease_ttl_seconds=2 if real else 10, background_poll_seconds=0.2)
    assert cli(fast_project, "up", "-q").returncode == 0
    result = await asyncio.to_thread(chaos, fast_project, sync_client, writer_delay=0.0, docs=TXN_DOCS)  # in a thread: see test_chaos_plain
    check_documents(sync_client, fast_project, result["app_writes"], TXN_DOCS)
    totals = result["state"]["totals"]
    assert totals["migrated"] == TXN_DOCS  # exact: counters commit with the writes
    side = sync_client[fast_project.db].side
    # One side write per document ($group: distinct over 20,000 values stalled the embedded server past the timeouts).
    distinct = next(side.aggregate([{"$group": {"_id": "$doc"}}, {"$count": "n"}]))["n"]
    assert side.count_documents({}) == TXN_DOCS and distinct == TXN_DOCS
    print(json.dumps({"kills": result["kills"], "app_writes": result["app_writes"], "txn_retries": totals.get("txn_retries")}))
