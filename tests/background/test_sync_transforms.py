"""Sync transforms run in a worker thread, one call per batch, so the event loop keeps renewing leases."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event
from mongoshift.background.state.store import BackgroundStore
from mongoshift.background.write import batch

from ..conftest import TEST_CLIENT_OPTIONS, Project, until
from .conftest import background_file, seed

#: Short, so that a transform blocking the loop would lose it, yet long enough for a loaded machine's loop to renew
#: it in time (a third of it between renewals): with 1 s, one slow round of the loop could lose it for another reason.
LEASE_TTL_SECONDS = 3
DOCS, BATCH, SLEEP_PER_DOC = 20, 10, 0.35  # each batch blocks 3.5 s, the whole run 7 s


class RivalReaper:
    """Another runner's reaper, on its own thread and event loop (so nothing here can stall it):
    it frees every lease of ``migration`` that expired by the server's clock, as often as it can."""

    def __init__(self, uri: str, db_name: str, background_collection: str, migration: str) -> None:
        self.uri, self.db_name, self.collection, self.migration = uri, db_name, background_collection, migration
        self.reaped = 0
        self.rounds = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, name="rival-reaper", daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._reap_until_stopped())
        except BaseException as exc:  # re-raised in the test
            self.error = exc

    async def _reap_until_stopped(self) -> None:
        client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(self.uri, **TEST_CLIENT_OPTIONS)
        try:
            store = BackgroundStore(client[self.db_name], self.collection)
            while not self._stop.is_set():
                self.reaped += await store.reap(self.migration)
                self.rounds += 1
                await asyncio.sleep(0.1)
        finally:
            await client.close()

    def __enter__(self) -> RivalReaper:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        if self.error is not None and kind is None:
            raise self.error


async def test_a_sync_transform_blocking_past_the_lease_ttl_never_loses_its_lease(
    fast_project: Project, db: AsyncDatabase[dict[str, Any]]
) -> None:
    fast_project.write_config(background_lease_ttl_seconds=LEASE_TTL_SECONDS, background_poll_seconds=0.2)
    assert BATCH * SLEEP_PER_DOC > LEASE_TTL_SECONDS  # every batch alone outlasts the lease
    assert DOCS * SLEEP_PER_DOC > 2 * LEASE_TTL_SECONDS
    await seed(db.people, DOCS)
    source = background_file(batch_size=BATCH, extra="adaptive=False, slice_ms=1000,").replace(
        "def migrate(doc, ctx):", f"import time\n\ndef migrate(doc, ctx):\n    time.sleep({SLEEP_PER_DOC})"
    )
    fast_project.add("0001_slow.py", source)
    settings = fast_project.settings()
    await command.up(settings)
    events: list[Event] = []
    with RivalReaper(fast_project.uri, fast_project.db, settings.background_collection, "0001_slow.py") as rival:
        # It was looking the whole time: from before the run to after it, round after round (its own loop,
        # which ends only when stopped or on an error, raised here). How many rounds fit in the run's
        # 7 s depends on the machine's load (more than 10 were asked for).
        await until("the rival's first round", lambda: rival.rounds > 0 or rival.error)
        (result,) = await bg.run(settings, ["0001_slow.py"], observers=[events.append])
        ended = rival.rounds
        await until("a round of the rival's begun after the run", lambda: rival.rounds > ended + 1 or rival.error)
    assert result.status == "completed"
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == DOCS  # every document rewritten exactly once
    assert result.totals["migrated"] == DOCS
    # Never lost: nothing expired for the rival to reap, no lane learnt of a takeover.
    assert rival.reaped == 0
    assert [e.data for e in events if e.kind == "lease_lost"] == []
    assert [e.data["outcome"] for e in events if e.kind == "slice_end" and e.data["outcome"] == "lost"] == []
    partitions = db[f"{settings.background_collection}_partitions"]
    assert await partitions.count_documents({"reclaims": {"$gt": 0}}) == 0


#: A migration file's helper: whether the calling thread runs an event loop.
ON_LOOP = """
import asyncio, threading

def on_loop():
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
"""


@pytest.mark.parametrize(
    ("kind", "body", "expect_on_loop"),
    [
        ("migrate", "def migrate(doc, ctx):\n    doc['on_loop'] = on_loop()\n    doc['thread'] = threading.get_ident()\n    return doc\n", False),
        ("migrate", "async def migrate(doc, ctx):\n    doc['on_loop'] = on_loop()\n    doc['thread'] = threading.get_ident()\n    return doc\n", True),
        (
            "migrate_batch",
            "def migrate_batch(docs, ctx):\n    for doc in docs:\n"
            "        doc['on_loop'] = on_loop()\n        doc['thread'] = threading.get_ident()\n    return docs\n",
            False,
        ),
    ],
    ids=["sync-migrate", "async-migrate", "sync-migrate_batch"],
)
async def test_sync_transforms_run_off_the_loop_one_thread_call_per_batch(
    fast_project: Project, db: AsyncDatabase[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, kind: str, body: str, expect_on_loop: bool
) -> None:
    calls: list[Callable[..., Any]] = []
    real_to_thread = asyncio.to_thread

    async def counting_to_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await real_to_thread(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", counting_to_thread)
    await seed(db.people, 25)
    fast_project.add(
        "0001_where.py",
        ON_LOOP
        + "from mongoshift import Background\n\n"
        + body
        + f"\nbackground = Background(collection='people', from_version=1, to_version=2, {kind}={kind}, batch_size=10, pause_ms=0, adaptive=False)\n",
    )
    settings = fast_project.settings()
    await command.up(settings)
    (result,) = await bg.run(settings, ["0001_where.py"])
    assert result.status == "completed" and result.totals["migrated"] == 25
    docs = [d async for d in db.people.find({}, sort=[("_id", 1)])]
    assert {d["on_loop"] for d in docs} == {expect_on_loop}
    transform_calls = [fn for fn in calls if fn is batch._each_in_thread or getattr(fn, "__name__", None) == kind]
    assert len(transform_calls) == (0 if expect_on_loop else 3)  # batches of 10, 10 and 5
    if not expect_on_loop:
        for first in (0, 10, 20):  # one worker-thread call covers a whole batch
            assert len({d["thread"] for d in docs[first : first + 10]}) == 1


async def test_a_sync_step_runs_off_the_loop(fast_project: Project, db: AsyncDatabase[dict[str, Any]]) -> None:
    fast_project.add(
        "0001_step.py",
        ON_LOOP
        + """
from mongoshift import Background

def step(ctx):
    seen = list((ctx.checkpoint or {}).get("on_loop", []))
    seen.append(on_loop())
    return {"checkpoint": {"on_loop": seen}, "done": len(seen) == 3}

background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0)
""",
    )
    settings = fast_project.settings()
    await command.up(settings)
    (result,) = await bg.run(settings, ["0001_step.py"])
    assert result.status == "completed"
    part = await db[f"{settings.background_collection}_partitions"].find_one({"background": "0001_step.py"})
    assert part is not None
    assert part["cursor"]["step"] == {"on_loop": [False, False, False]}


@pytest.mark.parametrize("kind", ["def", "async def"])
def test_if_ctx_cancelled_is_false_until_a_stop_is_asked(fast_project, sync_client, cli, kind: str) -> None:  # type: ignore[no-untyped-def]
    """``if ctx.cancelled:`` (the README's own words for a migration) was always true in a background transform:
    its ``ctx.cancelled`` was the engine's signal object, which has no truth value of its own, so a transform
    that stopped early on it failed every document of a run nobody stopped."""
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(20)])
    source = background_file(batch_size=10).replace(
        "def migrate(doc, ctx):\n", f'{kind} migrate(doc, ctx):\n    if ctx.cancelled:\n        raise RuntimeError("stopped early")\n'
    )
    fast_project.add("0001_names.py", source)
    assert cli(fast_project, "up").returncode == 0
    preview = cli(fast_project, "background", "dry-run", "0001_names", "--first", "2", "--json")  # the preview's too
    assert preview.returncode == 0 and json.loads(preview.stdout)["preview"]["failed"] == 0, preview.stdout[-2000:]
    result = cli(fast_project, "background", "run", "0001_names", "--json")
    assert result.returncode == 0, result.stdout[-2000:]
    (report,) = json.loads(result.stdout)["background"]
    assert report["totals"]["migrated"] == 20 and report["totals"]["failed"] == 0
