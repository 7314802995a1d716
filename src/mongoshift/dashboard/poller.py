"""One polling loop for every open page: N viewers never mean N× the database reads.

While at least one page listens (server-sent events), the loop reads the project once per
interval (the line's status, the lock, every background migration's report, and for each
migration a page is open on, its partitions and throughput samples; with ``[tenants]``, every
``TENANTS_EVERY`` polls, every tenant's status summarised) into one :class:`Snapshot`, and wakes
every listener with it. A page rendered without a stream takes the latest snapshot when it is
fresh, or makes the one read that every request arriving meanwhile shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pymongo.errors import PyMongoError

from .. import api
from ..errors import MongoshiftError
from .views import TenantsSummary

log = logging.getLogger("mongoshift.dashboard")

#: The audit (the overview's verdict per migration) reads much more than a status: once every this many polls.
AUDIT_EVERY = 30
#: The tenants view reads every tenant's status (thousands of databases): once every this many polls.
TENANTS_EVERY = 10

#: Reads the tenants view (``status`` across every tenant, summarised).
TenantsReader = Callable[[], Awaitable[TenantsSummary]]


@dataclass
class Detail:
    """What one background migration's page shows beyond its report."""

    partitions: list[api.PartitionRow]
    samples: list[dict[str, Any]]


@dataclass
class Snapshot:
    """The project as one poll read it."""

    tick: int
    at: datetime
    rows: list[api.StatusRow] = field(default_factory=list)
    lock: api.LockHolder | None = None
    reports: list[api.BackgroundReport] = field(default_factory=list)
    audit: api.AuditReport | None = None
    #: The live watchers as last saved (read with the audit): a migration's page shows its collection's.
    watchers: list[api.WatchRecord] = field(default_factory=list)
    details: dict[str, Detail] = field(default_factory=dict)
    #: With ``[tenants]``: how many tenants are at each state (None: no tenants, or not read yet).
    tenants: TenantsSummary | None = None
    #: Why the last read failed (its redacted one-line message), with the previous data kept.
    error: str | None = None

    def report(self, name: str) -> api.BackgroundReport | None:
        return next((r for r in self.reports if r.name == name), None)


class Poller:
    """The shared reads of one dashboard (see the module's docstring)."""

    def __init__(
        self,
        ms: api.Mongoshift | None,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        tenants: TenantsReader | None = None,
    ) -> None:
        #: The project's own database (None: a project whose databases are only its tenants).
        self.ms = ms
        self.tenants = tenants
        self.interval = interval
        self.clock = clock
        self.snapshot = Snapshot(tick=0, at=datetime.now(UTC))
        #: Polls made so far (what the read-counting test and the bench compare).
        self.polls = 0
        self._read_at: float | None = None
        self._viewers: Counter[str] = Counter()
        self._listeners = 0
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def listeners(self) -> int:
        return self._listeners

    async def current(self, name: str | None = None) -> Snapshot:
        """The latest snapshot when it is fresh (and has ``name``'s detail), else one shared read now."""
        if name is not None:
            self._viewers[name] += 0  # known from now on: read with the next poll
        fresh = self._read_at is not None and self.clock() - self._read_at < self.interval
        if fresh and (name is None or name in self.snapshot.details):
            return self.snapshot
        return await self.refresh(extra=name)

    async def refresh(self, *, extra: str | None = None) -> Snapshot:
        """One read of everything the open pages show; concurrent callers share it."""
        started = self.polls
        async with self._lock:
            if self.polls != started and (extra is None or extra in self.snapshot.details):
                return self.snapshot  # another caller read while this one waited
            self.snapshot = await self._read(extra)
            self.polls += 1
            self._read_at = self.clock()
        async with self._changed:
            self._changed.notify_all()
        return self.snapshot

    async def _read(self, extra: str | None) -> Snapshot:
        previous = self.snapshot
        snap = Snapshot(
            tick=previous.tick + 1, at=datetime.now(UTC), audit=previous.audit, watchers=previous.watchers, tenants=previous.tenants
        )
        names = {n for n, count in self._viewers.items() if count > 0}
        if extra is not None:
            names.add(extra)
        try:
            if self.ms is not None:
                snap.rows = await self.ms.status(checksums=False)
                snap.lock = await self.ms.lock_status()
                snap.reports = await self.ms.background.status()
                if snap.audit is None or snap.tick % AUDIT_EVERY == 1:
                    snap.audit = await self.ms.audit()
                    snap.watchers = await self.ms.background.watch_status()
                known = {r.name for r in snap.reports}
                for name in sorted(names & known):
                    snap.details[name] = Detail(await self.ms.background.partitions(name), await self.ms.background.samples(name))
            if self.tenants is not None and (snap.tenants is None or snap.tick % TENANTS_EVERY == 1):
                snap.tenants = await self.tenants()
        except (MongoshiftError, PyMongoError) as exc:
            message = exc.message if isinstance(exc, MongoshiftError) else api.describe_error(exc)
            log.warning("the dashboard could not read the project: %s", message)
            previous.tick, previous.at, previous.error = snap.tick, snap.at, message
            return previous
        return snap

    @contextlib.asynccontextmanager
    async def listening(self, name: str | None = None) -> AsyncIterator[None]:
        """One open page (an event stream) while inside: the loop runs while there is any."""
        self._listeners += 1
        if name is not None:
            self._viewers[name] += 1
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="mongoshift-dashboard-poller")
        try:
            yield
        finally:
            self._listeners -= 1
            if name is not None:
                self._viewers[name] -= 1

    async def next(self, after: int) -> Snapshot | None:
        """The first snapshot newer than tick ``after`` (waits for the loop's next poll); None once closed."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.snapshot.tick > after or self._closed)
        return None if self._closed else self.snapshot

    async def _loop(self) -> None:
        """Poll once per interval while any page listens; end with the last one (a new listener starts it again)."""
        while self._listeners > 0 and not self._closed:
            try:
                await self.refresh()
            except Exception as exc:  # a defect in one read must not leave every open page waiting
                await self._failed(exc)
            await asyncio.sleep(self.interval)

    async def _failed(self, exc: Exception) -> None:
        """Tell the open pages that a poll failed unexpectedly (its kind only: an unexpected error's
        message may carry a document's values), keep the previous data, and poll again."""
        log.error("the dashboard's poll failed unexpectedly (%s); polling again", type(exc).__name__)
        self.snapshot.tick += 1
        self.snapshot.at = datetime.now(UTC)
        self.snapshot.error = f"the last read failed unexpectedly ({type(exc).__name__}); see the server's log"
        async with self._changed:
            self._changed.notify_all()

    async def close(self) -> None:
        """Stop the loop and end every open stream (the server is shutting down)."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
