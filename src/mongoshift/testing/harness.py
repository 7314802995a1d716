"""What the ``mongoshift_project`` fixture hands a test: its project on a fresh database.

Each call goes through :mod:`mongoshift.api`, so a test exercises the same planning, lock,
changelog and background engine as ``mongoshift up`` in production. Every step is an async
method with a ``_sync`` twin (the convention of :mod:`mongoshift.versioning`): plain test
functions need no asyncio plugin. A twin runs its coroutine on a fresh event loop in a worker
thread, so it also works from inside a running loop (it blocks that loop meanwhile).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from mongoshift import api

if TYPE_CHECKING:
    from pymongo import MongoClient
    from pymongo.collection import Collection
    from pymongo.database import Database

    from mongoshift.api import BackgroundReport, RunReport, Settings, StatusRow


#: The embedded server runs one command at a time, so a request can wait behind long ones: be
#: patient with it, as the project's own suite is. (Its heartbeats are answered meanwhile,
#: docs/embedded.md fix (al): the driver does not take it for lost.)
CLIENT_OPTIONS: dict[str, Any] = {
    "connectTimeoutMS": 120_000,
    "socketTimeoutMS": 300_000,
    "serverSelectionTimeoutMS": 30_000,
}


def _blocking[T](call: Callable[[], Awaitable[T]]) -> T:
    """Run ``call()`` to its end on a loop of its own, whatever the calling thread is doing."""

    __tracebackhide__ = True

    async def main() -> T:
        return await call()

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="mongoshift-testing") as pool:
        try:
            return pool.submit(asyncio.run, main()).result()
        except (api.MongoshiftError, AssertionError) as exc:  # the thread hand-off is noise to the user
            raise exc.with_traceback(None)  # noqa: B904 - the same exception, its cause kept


def _frames_in(folder: Path, tb: TracebackType | None) -> TracebackType | None:
    """The frames of ``tb`` that run a file of ``folder``: the user's own lines, not mongoshift's."""
    kept: TracebackType | None = None
    frames = []
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).is_relative_to(folder):
            frames.append(tb)
        tb = tb.tb_next
    for frame in reversed(frames):
        kept = TracebackType(kept, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return kept


def _users_view[**P, T](method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """A failure shows where it happens to the user: their test line, the error, and their migration's lines.

    The error is mongoshift's own (``pytest.raises`` still catches it); only mongoshift's internal
    frames are left out of the traceback pytest prints.
    """

    @functools.wraps(method)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        __tracebackhide__ = True
        try:
            return await method(*args, **kwargs)
        except api.MongoshiftError as exc:
            harness = args[0]
            assert isinstance(harness, MigrationHarness)
            cause = exc.__cause__
            if cause is not None:
                cause.__traceback__ = _frames_in(harness.migrations_dir.resolve(), cause.__traceback__)
            raise exc.with_traceback(None) from cause

    return wrapper


def assert_documents_at_version(collection: Collection[Any], version: int, *, field: str = "__v") -> None:
    """Fail unless every document of ``collection`` has ``field == version`` (missing counts as 0).

    The message counts documents per version it found; it never shows a document or an id.
    """
    __tracebackhide__ = True
    counts = {
        row["_id"]: row["n"]
        for row in collection.aggregate([{"$group": {"_id": {"$ifNull": [f"${field}", 0]}, "n": {"$sum": 1}}}])
    }
    behind = {v: n for v, n in counts.items() if v != version}
    if behind:
        found = ", ".join(f"{n} at {v!r}" for v, n in sorted(behind.items(), key=lambda item: repr(item[0])))
        total = sum(counts.values())
        raise AssertionError(
            f"{sum(behind.values())} of {total} documents in {collection.name!r} are not at {field} {version}: {found}"
        )


@dataclass(repr=False)
class MigrationHarness:
    """The user's mongoshift project, pointed at one test's own database."""

    settings: Settings
    client: MongoClient[dict[str, Any]]

    def __repr__(self) -> str:
        # pytest prints fixture values in a traceback: never the URI (it may hold a password)
        return f"MigrationHarness(db={self.db_name!r}, migrations_dir={str(self.migrations_dir)!r})"

    @property
    def db_name(self) -> str:
        return str(self.settings.db)

    @property
    def db(self) -> Database[dict[str, Any]]:
        """The test's database, through pymongo's sync API (open your own AsyncMongoClient for async code)."""
        return self.client[self.db_name]

    @property
    def migrations_dir(self) -> Path:
        return Path(self.settings.migrations_dir)

    @_users_view
    async def migrate(self, to: str | None = None) -> RunReport:
        """``mongoshift up [--to NAME]``: apply pending migrations (up to NAME, inclusive) as one batch."""
        return await api.up(self.settings, to=to)

    @_users_view
    async def rollback(self, to: str | None = None) -> RunReport:
        """Roll back everything applied after NAME (``down --to NAME``); without NAME, everything applied."""
        async with api.connect(self.settings) as ms:  # the status and the rollback on one connection
            if to is not None:
                return await ms.down(to=to)
            applied = [row for row in await ms.status(checksums=False) if row.state == "applied"]
            if not applied:
                return api.RunReport("down", "", warnings=["nothing is applied: nothing to roll back"])
            return await ms.down(steps=len(applied))

    @_users_view
    async def run_background(self, name: str, *, concurrency: int = 1) -> BackgroundReport:
        """Run a registered background migration in this process until it ends; fail unless it completed."""
        __tracebackhide__ = True
        [report] = await api.run_background(self.settings, [name], concurrency=concurrency)
        if report.status != "completed":
            reasons = "; ".join(
                f"{c['count']} {c['reason']} {c.get('error_class') or c.get('code') or ''}".rstrip() for c in report.doc_error_counts
            )
            raise AssertionError(
                f"background migration {report.name} ended {report.status}, not completed"
                + (f": {report.last_error}" if report.last_error else "")
                + (f" (failed documents: {reasons})" if reasons else "")
            )
        return report

    async def status(self) -> list[StatusRow]:
        """``mongoshift status``: every file with its state."""
        return await api.status(self.settings)

    def migrate_sync(self, to: str | None = None) -> RunReport:
        __tracebackhide__ = True
        return _blocking(lambda: self.migrate(to))

    def rollback_sync(self, to: str | None = None) -> RunReport:
        __tracebackhide__ = True
        return _blocking(lambda: self.rollback(to))

    def run_background_sync(self, name: str, *, concurrency: int = 1) -> BackgroundReport:
        __tracebackhide__ = True
        return _blocking(lambda: self.run_background(name, concurrency=concurrency))

    def status_sync(self) -> list[StatusRow]:
        return _blocking(self.status)

    def assert_at_version(self, collection: str, version: int, *, field: str = "__v") -> None:
        """Every document of ``collection`` in the test's database reached ``version``."""
        __tracebackhide__ = True
        assert_documents_at_version(self.db[collection], version, field=field)
