"""Load: two runner processes and an application writing 200 times a second, with the driver's defaults.

The embedded server once ran every connection on one event loop: a long command kept pymongo's
monitor waiting for its ``hello`` past ``connectTimeoutMS``; the driver then took the server for
lost, cancelled the operations in flight ("operation cancelled") and failed the next ones
(ServerSelectionTimeoutError). Two runners and a writer at 50 writes/s on the URI ``mongoshift
init`` writes died within a minute. The engine now computes on a thread of its own and heartbeats
are answered meanwhile (docs/embedded.md, fix (al)); without it this test fails within minutes:
the application's writes end with "operation cancelled" (the runners' slices meet it too).

Here, for ``LOAD_SECONDS`` (10 minutes; CI runs them all), on the URI exactly as ``mongoshift init
--uri`` writes it into ``mongoshift.toml`` (no timeout added anywhere: the application's client is
``MongoClient(uri)``, the runners use the project's defaults):

* two ``mongoshift background run --all --concurrency 2`` processes migrate ``DOCS`` documents in
  batches of ``BATCH`` (``max_parallel=4``, so both work; each batch's read and guarded bulk write
  is a command of seconds on the embedded server); when they complete, the next migration of the
  chain is registered (``up``) and two new runners start, round after round, until the time is up;
* the application updates random documents at 200 writes/s from ``WRITER_THREADS`` threads
  (bumping the revision, counting its writes in the document, as the versioning contract asks);
  the server's one engine sets the rate it reaches.

Then: no write of the application failed (a cancelled operation would), no runner exited other
than 0 or said it lost the connection, every document is at the last round's version, holds
every application write, and was rewritten exactly once per round (revision arithmetic). No
timing assertion: a slower machine makes fewer rounds and fewer writes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import PyMongoError

from ..conftest import cli_env

pytestmark = pytest.mark.slow

#: How long the application writes and the runners run (rounds start until then; the last one
#: ends after). Shorten it for a local run: ``MONGOSHIFT_TEST_LOAD_SECONDS=60``.
LOAD_SECONDS = float(os.environ.get("MONGOSHIFT_TEST_LOAD_SECONDS", "600"))
#: Documents each round rewrites: a batch for each of the four lanes.
DOCS = int(os.environ.get("MONGOSHIFT_TEST_LOAD_DOCS", "20000"))
WRITES_PER_SECOND = 200
WRITER_THREADS = 8
#: Large batches, at a fixed size: on the embedded server each lane's read and guarded bulk write of
#: a batch is a command of seconds, the kind of long command that stalled the heartbeats.
BATCH = 5_000
#: Only a guard against a hung harness (a round's runners never ending): no assertion on time.
TIMEOUT_S = LOAD_SECONDS + 3 * 3600
#: What a runner says when the driver failed a request for the connection (outage.py, lane.py).
LOST = "lost the connection"

ROUND = '''
from mongoshift import Background


def migrate(doc, ctx):
    doc["round"] = {round}
    return doc


background = Background(collection="people", from_version={round}, to_version={next}, migrate=migrate,
                        batch_size=BATCH, adaptive=False, max_parallel=4, partitions={{"min_partition_docs": BATCH}})
'''


class Writer:
    """The application: the driver's defaults, random documents updated at ``WRITES_PER_SECOND`` in
    all, from ``WRITER_THREADS`` threads (an application's requests do not wait for each other),
    never a burst to catch up. The first failed write stops it (whether it was applied is unknown,
    so the count would be off), and is kept."""

    def __init__(self, uri: str, db: str) -> None:
        self.client: MongoClient[dict[str, Any]] = MongoClient(uri)  # nothing added to what init wrote
        self.people = self.client[db].people
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.writes = 0
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._write, args=(n,), daemon=True, name=f"application-{n}") for n in range(WRITER_THREADS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.client.close()

    def _write(self, n: int) -> None:
        rng = random.Random(n)
        period = WRITER_THREADS / WRITES_PER_SECOND
        due = time.monotonic()
        while not self.stop.is_set():
            try:
                result = self.people.update_one({"_id": rng.randrange(DOCS)}, {"$inc": {"__rev": 1, "app_writes": 1}})
            except PyMongoError as exc:
                with self.lock:
                    self.errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
                self.stop.set()
                return
            with self.lock:
                self.writes += result.modified_count
            due = max(due + period, time.monotonic())
            self.stop.wait(due - time.monotonic())


def start_runner(root: Path, logs: list[Path]) -> subprocess.Popen[bytes]:
    """``mongoshift background run --all`` as its own process; its stderr goes to a log file of its own."""
    log = root / f"runner-{len(logs):03d}.log"
    logs.append(log)
    with log.open("wb") as stderr:
        return subprocess.Popen(
            [sys.executable, "-m", "mongoshift", "background", "run", "--all", "--concurrency", "2"],
            cwd=root, env=cli_env(), stdout=subprocess.DEVNULL, stderr=stderr,
        )


def mongoshift(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mongoshift", *args], cwd=root, env=cli_env(), capture_output=True, text=True, timeout=600)


def seed(uri: str, db: str) -> None:
    with MongoClient(uri) as client:
        people = client[db].people
        for start in range(0, DOCS, 5_000):
            people.insert_many([{"_id": i, "name": f"N{i}", "__v": 1, "__rev": 1} for i in range(start, min(DOCS, start + 5_000))])
        people.create_index([("__v", 1), ("_id", 1)])


@pytest.mark.timeout(TIMEOUT_S)
def test_two_runners_and_a_writer_at_200_per_second_with_default_driver_settings_lose_nothing(
    tmp_path: Path, mongo_uri: str, db_name: str, sync_client: MongoClient[dict[str, Any]]
) -> None:
    initialized = mongoshift(tmp_path, "init", "--uri", mongo_uri, "--db", db_name)
    assert initialized.returncode == 0, initialized.stderr
    uri = tomllib.loads((tmp_path / "mongoshift.toml").read_text(encoding="utf-8"))["mongoshift"]["uri"]
    if uri != mongo_uri:
        pytest.skip("init keeps credentials out of the file; this test needs a URI without them")
    seed(uri, db_name)
    writer = Writer(uri, db_name)
    logs: list[Path] = []
    deaths: list[str] = []
    rounds = 0
    ends = time.monotonic() + LOAD_SECONDS
    writer.start()
    try:
        while (not rounds or time.monotonic() < ends) and not deaths and not writer.errors:
            rounds += 1
            source = ROUND.format(round=rounds, next=rounds + 1).replace("BATCH", str(BATCH))
            (tmp_path / "migrations" / f"{rounds:04d}_round.py").write_text(source, encoding="utf-8")
            registered = mongoshift(tmp_path, "up", "-q")
            assert registered.returncode == 0, registered.stderr[-2000:]
            runners = [start_runner(tmp_path, logs) for _ in range(2)]
            while any(runner.poll() is None for runner in runners) and not writer.errors:
                time.sleep(0.5)  # polling the processes' states, not a time budget
            for runner, log in zip(runners, logs[-2:], strict=True):
                if runner.poll() is None:  # the writer failed, so has the test: end the round (exit 11)
                    runner.send_signal(signal.SIGINT)
                    runner.wait()
                elif runner.returncode != 0:
                    deaths.append(f"{log.name} exited {runner.returncode}")
    finally:
        writer.join()
    said = {log.name: log.read_text(encoding="utf-8", errors="replace") for log in logs}
    lost = {name: [line for line in text.splitlines() if LOST in line or "cancelled" in line.lower()][:3] for name, text in said.items()}
    assert not writer.errors, f"an application write failed after {writer.writes} writes: {writer.errors}"
    assert deaths == [], f"runners died: {deaths}; their last lines: {[said[d.split()[0]].splitlines()[-5:] for d in deaths]}"
    assert not any(lost.values()), f"runners lost the connection: { {n: lines for n, lines in lost.items() if lines} }"
    db = sync_client[db_name]
    people = db.people
    assert people.count_documents({}) == DOCS
    assert people.count_documents({"__v": rounds + 1, "round": rounds}) == DOCS  # every document took every round
    stored = next(people.aggregate([{"$group": {"_id": None, "n": {"$sum": {"$ifNull": ["$app_writes", 0]}}}}]))["n"]
    assert stored == writer.writes  # every application write is there
    # Rewritten exactly once per round: revision = 1 (seed) + application writes + rounds.
    assert people.count_documents({"$expr": {"$ne": ["$__rev", {"$add": [1 + rounds, {"$ifNull": ["$app_writes", 0]}]}]}}) == 0
    for state in db["_mongoshift_background"].find():
        assert state["status"] == "completed" and state["totals"]["migrated"] == DOCS, (state["_id"], state["status"], state.get("totals"))
    print(f"load: {rounds} round(s) of {DOCS} documents, {writer.writes} application writes, {len(logs)} runner processes")
