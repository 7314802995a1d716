"""A lease lock: one document, taken atomically, kept alive by a heartbeat.

It is the migration lock (``_id`` ``migration_lock``) that a writing run
holds, and the ``background:<name>`` lock of a background migration's lanes.
The lock is a single document with a fixed ``_id``. Taking it is one upsert
that only matches an *expired* lock, judged by the server's clock, so a holder
killed with ``kill -9`` is replaced once its TTL has passed and clients with
skewed clocks cannot steal a live lock. While a live lock exists the upsert
tries to insert a second document with the same ``_id`` and the server refuses
it (duplicate key): that refusal is the "held" answer. One exception: a holder
that provably died on *this* host (its pid gone, or reused by a process started
later) is replaced at once, by an update scoped to that holder's owner and
nonce; a holder on another host is only ever replaced once its TTL has passed.
Every renewal and the release are scoped to this run's owner id and a private nonce.

A run of the migration line notes on its lock the bodies it is about to run (``working_on``). The
write that takes over a lock its holder never released (expired, or left by a dead process) moves
that note to ``left_unfinished``: with the changelog, it names the body the holder had reached, which
may have done part of its work.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, PyMongoError

from ..errors import LockHeldError, LockReleaseFailedError, RunAbortedError
from .run import CancelSignal, RunInfo

LOCK_ID = "migration_lock"
#: Share of the TTL kept in reserve: renewal is given up this long before the lock could expire,
#: so that the run is told to stop while nobody else can have taken the lock yet.
SAFETY_MARGIN = 0.25
log = logging.getLogger("mongoshift.lock")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as file:
            return file.read().strip()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time (clock ticks since boot) from ``/proc`` (Linux), else None."""
    text = _read(f"/proc/{pid}/stat")
    if not text or ")" not in text:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the name in parentheses may hold spaces
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def process_identity() -> dict[str, Any]:
    """What tells this process apart from a later one with the same pid on this host (Linux:
    the boot, the pid namespace and the start time); empty where ``/proc`` says nothing."""
    identity: dict[str, Any] = {}
    boot_id = _read("/proc/sys/kernel/random/boot_id")
    if boot_id:
        identity["boot_id"] = boot_id
    try:
        identity["pid_ns"] = os.readlink("/proc/self/ns/pid")
    except OSError:
        pass
    stat = _stat(os.getpid())
    if stat is not None:
        identity["started"] = stat[1]
    return identity


def process_gone(host: object, pid: object, process: object) -> bool:
    """Whether the process that wrote ``host``, ``pid`` and ``process`` (its :func:`process_identity`) provably no
    longer runs: it ran on this host and its pid is gone, a zombie, or now another process (a later start time).
    One of another host, boot or pid namespace (a container) is never judged gone: only a TTL ends what it holds."""
    if host != socket.gethostname() or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    recorded = process if isinstance(process, dict) else {}
    mine = process_identity()
    if any(key in recorded and recorded[key] != mine.get(key) for key in ("boot_id", "pid_ns")):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, owned by another user
        pass
    stat = _stat(pid)
    if stat is None:
        return False
    state, started = stat
    return state == "Z" or (isinstance(recorded.get("started"), int) and recorded["started"] != started)


@dataclass(frozen=True)
class LockHolder:
    owner: str
    host: str | None
    pid: int | None
    executed_by: str | None
    locked_at: datetime | None
    expires_at: datetime | None
    ttl_seconds: float | None
    #: :func:`process_identity` of the holder when it took the lock (None: an older lock, or no ``/proc``).
    process: dict[str, Any] | None = None
    #: Its lease ran out by the server's clock: the next run takes it over (None: not judged).
    expired: bool | None = None

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> LockHolder:
        ttl_ms = doc.get("ttl_ms")
        return cls(
            owner=str(doc.get("owner")),
            host=doc.get("host"),
            pid=doc.get("pid"),
            executed_by=doc.get("executed_by"),
            locked_at=doc.get("locked_at"),
            expires_at=doc.get("expires_at"),
            ttl_seconds=ttl_ms / 1000 if isinstance(ttl_ms, (int, float)) else None,
            process=doc.get("process") if isinstance(doc.get("process"), dict) else None,
            expired=doc.get("_expired") if isinstance(doc.get("_expired"), bool) else None,
        )

    def gone(self) -> bool:
        """Whether the holder provably no longer runs (:func:`process_gone`)."""
        return process_gone(self.host, self.pid, self.process)

    def describe(self) -> str:
        since = self.locked_at.isoformat(timespec="seconds") if self.locked_at else "?"
        said = f"{self.executed_by or '?'} on {self.host or '?'} (pid {self.pid}, since {since}, run {self.owner})"
        if self.expired:
            ended = self.expires_at.isoformat(timespec="seconds") if self.expires_at else "?"
            said += f"; its lease ran out at {ended} by the server's clock: the next run takes it over"
        return said


#: The taking write keeps the previous holder's note as ``left_unfinished`` (missing when it had none),
#: in the same atomic update, so that the run which took the lock can read it after.
_CARRY = {"left_unfinished": "$working_on"}


def _note(doc: dict[str, Any] | None, field: str) -> dict[str, Any] | None:
    note = doc.get(field) if doc is not None else None
    return note if isinstance(note, dict) else None


class LeaseLock:
    """A lock held from start to end of a run (or a lane set), renewed before its lease runs out."""

    def __init__(
        self,
        collection: AsyncCollection[dict[str, Any]],
        run: RunInfo,
        *,
        ttl_seconds: float,
        lock_id: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.collection = collection
        self.run = run
        self.ttl_ms = int(ttl_seconds * 1000)
        self.lock_id = lock_id or LOCK_ID
        self.nonce = secrets.token_hex(16)
        self.lost = asyncio.Event()
        self.lost_reason: str | None = None
        self._monotonic = monotonic
        self._on_lost = on_lost
        self._heartbeat: asyncio.Task[None] | None = None
        self._held = False
        #: When the last acquire or renewal that succeeded was *sent*: the server's expiry is later.
        self._renewed_at = 0.0
        #: The ``working_on`` note of a holder this run took the lock over from (it never released it):
        #: the plan that holder was running, which the changelog tells how far it got. None: no note.
        self.left_unfinished: dict[str, Any] | None = None

    def _scope(self) -> dict[str, Any]:
        return {"_id": self.lock_id, "owner": self.run.run_id, "nonce": self.nonce}

    def _fresh_until(self) -> dict[str, Any]:
        return {"$add": ["$$NOW", self.ttl_ms]}

    async def try_acquire(self) -> bool:
        """Take the lock if free, expired, or left by a dead process of this host; False if a live holder has it."""
        fields = {
            "owner": {"$literal": self.run.run_id},
            "nonce": {"$literal": self.nonce},
            "host": {"$literal": self.run.host},
            "pid": os.getpid(),
            "process": {"$literal": process_identity()},
            "executed_by": {"$literal": self.run.executed_by},
            "ttl_ms": self.ttl_ms,
            "locked_at": "$$NOW",
            "renewed_at": "$$NOW",
            "expires_at": self._fresh_until(),
        }
        sent = self._monotonic()
        try:
            result = await self.collection.update_one(
                {"_id": self.lock_id, "$expr": {"$lt": ["$expires_at", "$$NOW"]}},
                [{"$set": {**fields, **_CARRY}}, {"$unset": "working_on"}],
                upsert=True,
            )
        except DuplicateKeyError:
            return await self._take_over_dead(fields, sent)
        if result.upserted_id is None and result.modified_count == 0:
            return False
        self._held = True
        self._renewed_at = sent
        if result.upserted_id is None:  # an expired lock its holder never released: what was it running?
            log.warning(
                "took over the lock %s: its holder left it unrenewed past its time-to-live (that process died, hung, "
                "or lost the server); should it still run, it finds the lock gone and stops", self.lock_id,
            )
            self.left_unfinished = _note(await self.collection.find_one(self._scope(), {"left_unfinished": 1}), "left_unfinished")
        return True

    async def _take_over_dead(self, fields: dict[str, Any], sent: float) -> bool:
        """A live-looking lock whose holder died on this host (``kill -9``, OOM) is taken now, not after its TTL.

        The update matches that holder's owner and nonce only: a run that took the lock
        meanwhile keeps it.
        """
        doc = await self.collection.find_one({"_id": self.lock_id})
        if doc is None:
            return False  # released meanwhile: the next attempt takes it
        holder = LockHolder.from_document(doc)
        if holder.owner == self.run.run_id or not holder.gone():
            return False
        result = await self.collection.update_one(
            {"_id": self.lock_id, "owner": doc.get("owner"), "nonce": doc.get("nonce")},
            [{"$set": {**fields, **_CARRY}}, {"$unset": "working_on"}],
        )
        if result.modified_count == 0:
            return False
        log.warning("took over the lock %s of %s: that process no longer runs on this host", self.lock_id, holder.describe())
        self.left_unfinished = _note(doc, "working_on")
        self._held = True
        self._renewed_at = sent
        return True

    async def acquire(
        self,
        wait_seconds: float | None = None,
        poll_seconds: float = 0.5,
        on_wait: Callable[[], object] | None = None,
        cancel: CancelSignal | None = None,
    ) -> None:
        """Take the lock, waiting up to ``wait_seconds`` (None: do not wait); ``on_wait`` is called once when it has to wait.

        A stop asked while it waits (``cancel``: Ctrl-C, SIGTERM) ends the wait within a fifth of a second:
        :class:`RunAbortedError`, nothing having run."""
        deadline = None if wait_seconds is None else self._monotonic() + wait_seconds
        delay = poll_seconds
        waited = False
        while not await self.try_acquire():
            if cancel is not None and cancel.is_set():
                raise RunAbortedError(
                    f"stopped ({cancel.reason or 'cancelled'}) while waiting for the migration lock; nothing ran", reason="cancelled"
                )
            if deadline is None or self._monotonic() >= deadline:
                holder = await self.holder()
                who = holder.describe() if holder else "another run"
                waited_for = "" if wait_seconds is None else f" (still, after waiting {wait_seconds:g} s)"
                advice = f"wait{' longer' if wait_seconds is not None else ''} with --wait (Lock(wait=...) in the Python API)"
                raise LockHeldError(
                    f"the migration lock is held by {who}{waited_for}; {advice}, or clear a stuck lock "
                    "with 'mongoshift unlock'",
                    holder={**holder.__dict__, "gone": holder.gone()} if holder else None,  # as `lock --json` shows it
                )
            if not waited:
                holder = await self.holder()  # said once, so a wait of minutes is not silence
                log.info("the migration lock is held by %s: waiting up to %g s for it", holder.describe() if holder else "another run", wait_seconds)
                if on_wait is not None:
                    on_wait()
            waited = True
            pause = min(delay, max(0.0, deadline - self._monotonic()))
            slices = max(1, math.ceil(pause / 0.2))  # the stop is a thread's flag, not awaitable: looked at every slice
            for _ in range(slices):
                if cancel is not None and cancel.is_set():
                    break
                await asyncio.sleep(pause / slices)
            delay = min(delay * 2, 5.0)

    async def note_working_on(self, note: dict[str, Any]) -> None:
        """Note on the lock what this run is about to do (the line's plan), for a run that may take the
        lock over should this one die (the changelog then says how far it got).
        Best effort: a note that cannot be written is only logged."""
        try:
            await self.collection.update_one(self._scope(), {"$set": {"working_on": note}})
        except PyMongoError as exc:
            log.debug("could not note the running migration on the lock: %s", type(exc).__name__)

    async def renew(self) -> bool:
        sent = self._monotonic()
        result = await self.collection.update_one(
            self._scope(), [{"$set": {"renewed_at": "$$NOW", "expires_at": self._fresh_until()}}]
        )
        if result.matched_count == 1:
            self._renewed_at = sent
            return True
        return False

    def _give_up_at(self) -> float:
        """The monotonic time after which this run must assume the lock is gone."""
        return self._renewed_at + self.ttl_ms / 1000 * (1 - SAFETY_MARGIN)

    async def confirm(self) -> bool:
        """Whether the lock is still this run's, read on the server now (right before a record is written).

        A read, not a renewal: it must not write next to a migration's own
        transaction. A lock document that is gone, another run's, or expired
        marks the lock lost at once; a read that fails is judged by the
        give-up time, as the heartbeat does.
        """
        if self.lost.is_set():
            return False
        remaining = self._give_up_at() - self._monotonic()
        if remaining <= 0:
            self._mark_lost("the lock could not be renewed before its TTL ran out")
            return False
        live = {**self._scope(), "$expr": {"$gt": ["$expires_at", "$$NOW"]}}
        try:
            doc = await asyncio.wait_for(self.collection.find_one(live, {"_id": 1}), remaining)
        except (PyMongoError, TimeoutError) as exc:
            log.warning("lock check failed: %s", type(exc).__name__)
            if self._monotonic() >= self._give_up_at():
                self._mark_lost("the lock could not be renewed before its TTL ran out")
                return False
            return True
        if doc is None:
            self._mark_lost("the lock was cleared or taken over by another run")
            return False
        return True

    async def holder(self) -> LockHolder | None:
        """Who holds the lock, and whether its lease ran out by the server's clock (judged in the same read)."""
        expired = {"$and": [{"$ne": [{"$type": "$expires_at"}, "missing"]}, {"$lt": ["$expires_at", "$$NOW"]}]}
        async for doc in await self.collection.aggregate([{"$match": {"_id": self.lock_id}}, {"$set": {"_expired": expired}}]):
            return LockHolder.from_document(doc)
        return None

    def start_heartbeat(self) -> None:
        self._heartbeat = asyncio.create_task(self._beat(), name="mongoshift-lock-heartbeat")

    async def _beat(self) -> None:
        interval = self.ttl_ms / 3000
        # A renewal that fails is retried until the give-up time, which falls a safety
        # margin before the lock could expire; no attempt may run past it.
        delay = interval
        while True:
            await asyncio.sleep(max(0.0, min(delay, self._give_up_at() - self._monotonic())))
            remaining = self._give_up_at() - self._monotonic()
            if remaining <= 0:
                self._mark_lost("the lock could not be renewed before its TTL ran out")
                return
            try:
                held = await asyncio.wait_for(self.renew(), remaining)
            except (PyMongoError, TimeoutError) as exc:
                log.warning("lock renewal failed: %s", type(exc).__name__)
                delay = interval / 3
                continue
            if not held:
                self._mark_lost("the lock was cleared or taken over by another run")
                return
            delay = interval

    def _what(self) -> str:
        """This lock in a user's words: the run's migration lock, a live watcher's lease, a coordinator's lock."""
        if self.lock_id == LOCK_ID:
            return "migration lock"
        kind, _, name = self.lock_id.partition(":")
        if kind == "watch" and name:
            return f"the live watcher's lease of {name}"
        if kind == "background" and name:
            return f"the coordinator lock of {name}"
        return f"lock {self.lock_id}"

    def _mark_lost(self, reason: str) -> None:
        if self.lost.is_set():
            return
        self.lost_reason = reason
        self.lost.set()
        log.error("%s lost: %s", self._what(), reason)
        if self._on_lost is not None:
            self._on_lost(reason)

    async def release(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            try:
                await self._heartbeat
            except (asyncio.CancelledError, Exception):
                pass
            self._heartbeat = None
        if not self._held:
            return
        try:
            await self.collection.delete_one(self._scope())
        except PyMongoError as exc:
            raise LockReleaseFailedError(
                f"could not release the migration lock ({type(exc).__name__}); it expires after its TTL"
            ) from None
        finally:
            self._held = False

    async def force_release(self) -> bool:
        """Delete the lock whoever holds it (``mongoshift unlock``)."""
        result = await self.collection.delete_one({"_id": self.lock_id})
        return result.deleted_count == 1
