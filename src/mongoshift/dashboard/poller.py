"""One polling loop for every open page: N viewers never mean N× the database reads.

While at least one page listens (server-sent events), the loop reads the project once per
interval (the line's status, the lock, every background migration's report, and for each
migration a page is open on, its partitions and throughput samples; with ``[tenants]``, every
``TENANTS_EVERY`` polls, every tenant's status summarised) into one :class:`Snapshot`, and wakes
every listener with it. A page rendered without a stream takes the latest snapshot when it is
fresh, or makes the one read that every request arriving meanwhile shares.

A read that fails never makes a page claim what it does not know. The project's own reads (the
line, the lock, the background migrations) and the tenants' read fail apart: the part that failed
keeps what its last successful read found, with why it failed beside it, and what was never read
is marked unread (``read_at`` None), not shown as an empty project. The session itself opens on
the first read (an ``opener``): a server down or credentials refused at start are that read's
failure, and each later read tries to open it again.
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

#: The audit (the overview's verdict per migration) reads much more than a status: once every this many polls
#: while pages stream, and for reloads once it is this many poll intervals old.
AUDIT_EVERY = 30
#: The tenants view reads every tenant's status (thousands of databases): once every this many polls
#: while pages stream, and for reloads once they are this many poll intervals old (each page shows when).
TENANTS_EVERY = 10

#: Reads the tenants view (``status`` across every tenant, summarised).
TenantsReader = Callable[[], Awaitable[TenantsSummary]]
#: Opens the project's session (None: a project of tenants only, with no line of its own); raises why it could not.
Opener = Callable[[], Awaitable["api.Mongoshift | None"]]


@dataclass
class Detail:
    """What one background migration's page shows beyond its report."""

    partitions: list[api.PartitionRow]
    samples: list[dict[str, Any]]


@dataclass
class Snapshot:
    """The project as one poll read it."""

    tick: int
    #: When this poll was made (its reads may have failed: see ``read_at`` and ``error``).
    at: datetime
    #: When the line, the lock and the background migrations shown were read; None: never yet (nothing of
    #: them is known, and a page says so rather than show an empty project).
    read_at: datetime | None = None
    rows: list[api.StatusRow] = field(default_factory=list)
    lock: api.LockHolder | None = None
    reports: list[api.BackgroundReport] = field(default_factory=list)
    audit: api.AuditReport | None = None
    #: The live watchers as last saved (read with the audit): a migration's page shows its collection's.
    watchers: list[api.WatchRecord] = field(default_factory=list)
    details: dict[str, Detail] = field(default_factory=dict)
    #: With ``[tenants]``: how many tenants are at each state (None: no tenants, or not read yet).
    tenants: TenantsSummary | None = None
    #: When ``tenants`` was read.
    tenants_at: datetime | None = None
    #: Why the last read of the project failed (a redacted one-line message naming its kind), with the data of
    #: the last successful read kept.
    error: str | None = None
    #: Why the last read of the tenants failed, with their last summary kept (if there is one).
    tenants_error: str | None = None

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
        opener: Opener | None = None,
    ) -> None:
        #: The project's own database (None: a project whose databases are only its tenants, or not open yet).
        self.ms = ms
        self.tenants = tenants
        #: Opens ``ms`` at the next read (None: open); kept until it succeeds, so each read tries again.
        self._opener = opener
        self.interval = interval
        self.clock = clock
        self.snapshot = Snapshot(tick=0, at=datetime.now(UTC))
        #: Polls made so far (what the read-counting test and the bench compare).
        self.polls = 0
        self._read_at: float | None = None
        self._tenants_read: float | None = None  # the clock at the last read of the tenants (tried or not)
        self._audited: float | None = None  # the clock at the last audit (tried or not)
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
            tick=previous.tick + 1, at=datetime.now(UTC), read_at=previous.read_at, rows=previous.rows, lock=previous.lock,
            reports=previous.reports, audit=previous.audit, watchers=previous.watchers, details=previous.details,
            tenants=previous.tenants, tenants_at=previous.tenants_at, tenants_error=previous.tenants_error,
        )
        if self._opener is not None:
            try:
                self.ms = await self._opener()
            except Exception as exc:  # whatever it is, the pages say it and the next read tries again
                # nothing can be read: both parts keep what they showed (nothing, at start), and say why
                snap.error = f"could not connect: {described(exc)}; trying again at each read"
                snap.tenants_error = snap.error if self.tenants is not None else None
                self._said(previous.error, snap.error, exc)
                return snap
            self._opener = None
        try:
            await self._read_project(snap, extra)
            snap.read_at, snap.error = snap.at, None
        except Exception as exc:  # ``snap`` keeps the previous poll's line, lock and reports
            snap.error = described(exc)
            self._said(previous.error, snap.error, exc)
        else:
            self._said(previous.error, None)
        # While pages stream, every TENANTS_EVERY-th poll of the loop; while none does, each reload that
        # finds the tenants older than TENANTS_EVERY intervals (a reload's read would never count up to it)
        stale = self._listeners == 0 and (self._tenants_read is None or self.clock() - self._tenants_read >= TENANTS_EVERY * self.interval)
        if self.tenants is not None and (snap.tenants is None or snap.tick % TENANTS_EVERY == 1 or stale):
            self._tenants_read = self.clock()
            # apart from the project's reads: the tenants' failing never hides the line, the lock or the background
            try:
                snap.tenants = await self.tenants()
                snap.tenants_at, snap.tenants_error = snap.at, None
            except Exception as exc:  # the previous summary (if any) is kept, marked as not current
                snap.tenants_error = described(exc)
                self._said(previous.tenants_error, snap.tenants_error, exc, what="the tenants' status")
            else:
                self._said(previous.tenants_error, None, what="the tenants' status")
        return snap

    async def _read_project(self, snap: Snapshot, extra: str | None) -> None:
        """The line, the lock, the background reports (the audit when due) and the open pages' details, into ``snap``
        all at once: a read that fails part way leaves ``snap`` as it was."""
        if self.ms is None:
            return
        names = {n for n, count in self._viewers.items() if count > 0}
        if extra is not None:
            names.add(extra)
        self.ms.rescan()  # files deployed since the last read are pending, as ``mongoshift status`` says
        rows = await self.ms.status(checksums=False)
        lock = await self.ms.lock_status()
        reports = await self.ms.background.status()
        audit, watchers = snap.audit, snap.watchers
        # as the tenants: while no page streams, each reload that finds the audit AUDIT_EVERY intervals old runs it
        stale = self._listeners == 0 and (self._audited is None or self.clock() - self._audited >= AUDIT_EVERY * self.interval)
        if audit is None or snap.tick % AUDIT_EVERY == 1 or stale:
            self._audited = self.clock()
            audit = await self.ms.audit()
            watchers = await self.ms.background.watch_status()
        known = {r.name for r in reports}
        details: dict[str, Detail] = {}
        for name in sorted(names & known):
            details[name] = Detail(await self.ms.background.partitions(name), await self.ms.background.samples(name))
        snap.rows, snap.lock, snap.reports, snap.audit, snap.watchers, snap.details = rows, lock, reports, audit, watchers, details

    @staticmethod
    def _said(before: str | None, now: str | None, exc: Exception | None = None, *, what: str = "the project") -> None:
        """Log a failure once when it starts (or changes), and the recovery once: not a line per poll while a server is down."""
        if now is not None and now != before:
            if isinstance(exc, MongoshiftError | PyMongoError):
                log.warning("the dashboard could not read %s: %s", what, now)
            else:  # its kind only: an unexpected error's message may carry a document's values
                log.error("the dashboard's read of %s failed unexpectedly (%s)", what, type(exc).__name__)
        elif now is None and before is not None:
            log.info("the dashboard reads %s again", what)

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


def described(exc: BaseException) -> str:
    """A failed read in one line, naming its kind: an expected error's redacted message (a driver error's starts with its
    type), an unexpected one's type only (its message may carry a document's values); never a secret."""
    if isinstance(exc, MongoshiftError):
        return f"{exc.message} ({exc.kind}, exit {int(exc.exit_code)})"
    if isinstance(exc, PyMongoError):
        return api.describe_error(exc)
    return f"an unexpected {type(exc).__name__}; see the server's log"
