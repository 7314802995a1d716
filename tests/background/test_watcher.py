"""The live watcher: old shapes written after completion are upgraded as they land.

One leader per collection (a lease lock), a resume token saved fenced by that lease, a
restart plus a verify when the history is lost, polling without the privilege to watch,
a reopen when it lags, and a long run beside an application writing at full speed.
Waits poll the database with a generous bound: nothing here asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from mongoshift.api import background as bg
from mongoshift.api import migrations as command
from mongoshift.background.connected import open_engine
from mongoshift.background.events import Event
from mongoshift.background.watcher import Watcher, WatchOptions
from mongoshift.project.run import CancelSignal

from ..conftest import REAL_URI, TEST_CLIENT_OPTIONS, Project
from .conftest import background_file, seed

NAME = "0001_names.py"
FAST = WatchOptions(save_seconds=0.2, refresh_seconds=0.5, max_await_ms=100)
#: An id no output may show.
SECRET_ID = "watch-id-5521"


def old_doc(_id: Any, **extra: Any) -> dict[str, Any]:
    return {"_id": _id, "first": "old", "last": "app", "__v": 1, "__rev": 1, **extra}


async def until(what: str, check: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    """Poll ``check`` until it gives something true; fail after ``timeout`` (a bound, not a measure)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def completed(project: Project, db: Any, n: int = 5, source: str | None = None) -> Any:
    await seed(db.people, n)
    project.add(NAME, source or background_file())
    s = project.settings()
    await command.up(s)
    (done,) = await bg.run(s, [NAME])
    assert done.status == "completed"
    return s


class Running:
    """A watcher in this process, as a task, with the events it emitted."""

    def __init__(self, settings: Any, options: WatchOptions = FAST, **watcher: Any) -> None:
        self.events: list[Event] = []
        self.cancel = CancelSignal()
        self.task = asyncio.create_task(self._run(settings, options, watcher))

    async def _run(self, settings: Any, options: WatchOptions, watcher: dict[str, Any]) -> Any:
        async with open_engine(settings, cancel=self.cancel, observers=[self.events.append]) as engine:
            return await Watcher(engine, options, **watcher).run()

    def states(self) -> list[str]:
        return [e.data["state"] for e in self.events if e.kind == "watch"]

    async def reached(self, state: str, after: int = 0) -> None:
        async def check() -> bool:
            if self.task.done():
                self.task.result()  # its error, if it failed
            return state in self.states()[after:]

        await until(f"state {state} (seen: {self.states()})", check)

    async def stop(self) -> Any:
        self.cancel.set("test over")
        return await self.task


async def watch_doc(db: Any) -> dict[str, Any] | None:
    return await db["_mongoshift_background_watch"].find_one({"_id": "people"})


async def upgraded(db: Any, *ids: Any) -> bool:
    return await db.people.count_documents({"_id": {"$in": list(ids)}, "__v": 2}) == len(ids)


async def test_an_old_shape_insert_is_upgraded_a_downgrade_undone_and_other_updates_ignored(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    s = await completed(fast_project, db)
    watcher = Running(s)
    try:
        await watcher.reached("streaming")
        await db.people.insert_one(old_doc(SECRET_ID))
        await until("the upgrade", lambda: upgraded(db, SECRET_ID))
        doc = await db.people.find_one({"_id": SECRET_ID})
        assert doc["full_name"] == "old app" and doc["__rev"] == 2  # the migration's own write: one revision more
        await db.people.update_one({"_id": 0}, {"$set": {"other": 1}})  # leaves the version alone: no event
        await db.people.update_one({"_id": 1}, {"$set": {"__v": 1, "first": "a", "last": "b"}, "$inc": {"__rev": 1}})
        await until("the downgrade undone", lambda: upgraded(db, 1))
        record = await until("the counters saved", lambda: _saved_with(db, upgraded=2))
    finally:
        records = await watcher.stop()
    assert record["counters"]["events"] == 2 and "skipped" not in record["counters"]
    assert record["guards"] == [NAME] and record["leader"]["pid"] == os.getpid()
    drift = [e for e in watcher.events if e.kind == "drift" and e.data.get("source") == "stream"]
    assert [(e.migration, e.data["action"]) for e in drift] == [(NAME, "upgraded"), (NAME, "upgraded")]
    assert SECRET_ID not in repr(watcher.events)
    assert [r.state for r in records] == ["stopped"]
    assert (await db["_mongoshift_background"].find_one({"_id": NAME}))["status"] == "completed"  # no reopen needed


async def _saved_with(db: Any, **counters: int) -> dict[str, Any] | None:
    record = await watch_doc(db)
    if record and all(record.get("counters", {}).get(k) == v for k, v in counters.items()):
        return record
    return None
