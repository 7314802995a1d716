"""Metrics of the migration line, and every instrument fed by the events it counts."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from mongoshift import api
from mongoshift.errors import ExecutionFailedError
from mongoshift.project.events import Event, Events
from mongoshift.telemetry import names

from .conftest import Telemetry
from .test_spans import ASYNC_BODY, FAILS, SYNC_BODY


async def test_an_up_records_its_run_its_migrations_and_its_lock(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", ASYNC_BODY % "first")
    project.add("0002_second.py", SYNC_BODY % "second")
    project.add("0003_fails.py", FAILS)

    with pytest.raises(ExecutionFailedError):
        await api.up(project.settings(), observers=[telemetry.observer])

    [run] = telemetry.points("mongoshift.run.duration")
    assert run.count == 1 and run.sum > 0
    assert dict(run.attributes) == {
        "db.namespace": project.db, "mongoshift.command": "up", "mongoshift.lock": "taken", "mongoshift.outcome": "failed", "error.type": "execution_failed",
    }
    migrations = {p.attributes["mongoshift.migration"]: p for p in telemetry.points("mongoshift.migration.duration")}
    assert sorted(migrations) == ["0001_first.py", "0002_second.py", "0003_fails.py"]
    assert all(p.count == 1 and p.attributes["db.namespace"] == project.db and p.attributes["mongoshift.direction"] == "up" for p in migrations.values())
    assert migrations["0001_first.py"].attributes["mongoshift.outcome"] == "applied" and "error.type" not in migrations["0001_first.py"].attributes
    assert (migrations["0003_fails.py"].attributes["mongoshift.outcome"], migrations["0003_fails.py"].attributes["error.type"]) == (
        "failed",
        "execution_failed",
    )
    [acquire] = telemetry.points("mongoshift.lock.acquire.duration")
    assert acquire.count == 1 and dict(acquire.attributes) == {"db.namespace": project.db, "mongoshift.outcome": "acquired"}
    assert telemetry.points("mongoshift.lock.wait.duration") == []  # it was free: no wait
    assert telemetry.points("mongoshift.lock.refused") == [] and telemetry.points("mongoshift.lock.lost") == []


async def test_a_wait_for_the_lock_is_timed(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", ASYNC_BODY % "first")
    held = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "x", "ttl_ms": 60_000}
    await db["_mongoshift_locks"].insert_one({**held, "expires_at": datetime.now(UTC) + timedelta(seconds=60)})
    # the holder lets go once the run says it waits (a lock expiring at a set time may be gone before a
    # run on a loaded machine asks for it: then there is no wait to time)
    waiting = asyncio.Event()

    def on_wait(event: Event) -> None:
        if event.kind == "lock_waited":
            waiting.set()

    def slow_observer(event: Event) -> None:
        # an observer ahead of telemetry's that takes its time (a busy log handler, a loaded machine): the wait is
        # timed by the run's clock, not by when the event reaches telemetry
        if event.kind == "lock_acquired":
            time.sleep(0.05)

    run = asyncio.create_task(api.up(project.settings(), observers=[slow_observer, telemetry.observer, on_wait], lock=api.Lock(wait=60)))
    await asyncio.wait_for(waiting.wait(), 30)
    await db["_mongoshift_locks"].update_one({"_id": "migration_lock"}, {"$set": {"expires_at": datetime.now(UTC) - timedelta(seconds=1)}})
    await run

    [wait] = telemetry.points("mongoshift.lock.wait.duration")
    [acquire] = telemetry.points("mongoshift.lock.acquire.duration")
    assert wait.count == 1 and wait.attributes["mongoshift.outcome"] == "acquired"
    assert 0 < wait.sum <= acquire.sum + 0.001  # a part of the acquisition (whose time is in whole milliseconds)


def test_each_engine_event_feeds_its_instrument(telemetry: Telemetry) -> None:
    """The counters a small embedded run rarely reaches (conflicts, retries, throttling, lost leases and locks)."""
    observer = telemetry.observer.bound("app")
    events = Events([observer], run_id="r1")
    events.emit("batch", "m.py", partition=1, size=10, duration_ms=12.5, migrated=7, failed=1, conflicts=2, txn_retries=3, batches=1)
    events.emit("batch", "m.py", partition=1, size=10, duration_ms=20.0, migrated=3, conflicts=0, batches=1)
    events.emit("throttle", "m.py", change="slow", batch_size=5, pause_ms=0, changes=4, overloads=0)
    events.emit("reclaimed", "m.py", leases=2)
    events.emit("lease_lost", "m.py", partition=1, lane="lane-1")
    events.emit("slice_end", "m.py", partition=1, outcome="yielded", duration_ms=1500.0, migrated=10)
    events.emit("lock_lost", None, reason="cleared by someone", policy="warn")

    expected = {
        "mongoshift.background.documents.migrated": 10,
        "mongoshift.background.documents.failed": 1,
        "mongoshift.background.documents.conflicts": 2,
        "mongoshift.transaction.retries": 3,
        "mongoshift.background.lanes.throttle.changes": 4,
        "mongoshift.background.reclaims": 2,
        "mongoshift.background.leases.lost": 1,
        "mongoshift.lock.lost": 1,
    }
    assert {name: telemetry.total(name) for name in expected} == expected
    [batch] = telemetry.points("mongoshift.background.write.batch.duration")
    assert (batch.count, batch.sum) == (2, pytest.approx(0.0325))
    [piece] = telemetry.points("mongoshift.background.slice.duration")
    assert (piece.sum, piece.attributes["mongoshift.outcome"]) == (pytest.approx(1.5), "yielded")
    [throttle] = telemetry.points("mongoshift.background.lanes.throttle.changes")
    assert throttle.attributes["mongoshift.background.lanes.throttle.change"] == "slow"
    assert "reason" not in str(telemetry.points("mongoshift.lock.lost")[0].attributes)  # free text stays out of the series
    for name in telemetry.metric_names():
        assert all(p.attributes["db.namespace"] == "app" for p in telemetry.points(name)), name
    assert telemetry.metric_names() <= {spec.name for spec in names.INSTRUMENTS}


FLAKY = """
from pymongo.errors import PyMongoError

use_transaction = True

{prefix}def up(ctx):
    {wait}ctx.db.items.insert_one({{"n": ctx.attempt}}, session=ctx.session)
    if ctx.attempt == 1:
        error = PyMongoError("a transient blip")
        error._add_error_label("TransientTransactionError")
        raise error
"""


async def test_a_transaction_run_again_is_a_retry_on_its_migration_span_and_counter(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_async.py", FLAKY.format(prefix="async ", wait="await "))
    project.add("0002_sync.py", FLAKY.format(prefix="", wait=""))  # the retry is seen from the worker thread

    await api.up(project.settings(), observers=[telemetry.observer])

    assert [d["n"] async for d in db.items.find()] == [2, 2]  # each first attempt was rolled back
    for span in telemetry.spans("mongoshift.migration"):
        assert [(e.name, e.attributes["mongoshift.attempt"]) for e in span.events] == [("retry", 2)]
    retries = {p.attributes["mongoshift.migration"]: p.value for p in telemetry.points("mongoshift.transaction.retries")}
    assert retries == {"0001_async.py": 1, "0002_sync.py": 1}
