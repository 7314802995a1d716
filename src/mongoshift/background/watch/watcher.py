"""The live watcher: old shapes written after a migration completed are upgraded as they land.

``background verify`` looks once; the watcher keeps looking. Per collection, one process
leads (the ``watch:<collection>`` lease lock); the others follow and take over when the
leader's lease expires. The leader opens a change stream of the collection filtered to
inserts, replaces and updates whose document (``fullDocument: updateLookup``, so no
``updateDescription`` is needed) has a version below the newest completed migration's
``to_version``, or none; it reads only ``documentKey`` from each event. Each group of
events is upgraded through :func:`.batch.apply_batch`, the engine's one write path (in a
transaction when the migration is), guard by guard, so a document takes every completed
step of a chain. Nothing is done twice: a document that moved on no longer matches. A
document no guard takes whose version no migration upgrades (``stranded``) is reported.

The resume token is saved, fenced by the leader's lock nonce, every ``save_seconds``
(also while idle) and only after the events before it were upgraded, so a leader killed
with ``kill -9`` costs a replay, never a gap. Without a saved position (first start, a
lost history: codes 286, 280, 136) the stream is opened from now *before* a verify probe
reopens what may have been written meanwhile. A stream the server refuses for lack of
privilege (13) falls back to polling the old-shape query. A leader lagging more than
``max_lag_seconds`` reopens its migrations (their passes do the backlog) and starts
over from now. While a revert of the collection is under way it stands aside.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pymongo.errors import OperationFailure, PyMongoError

from ...errors import ConfigInvalidError
from ...project.lock import LeaseLock
from ...project.server_errors import error_code
from ...project.wording import plural
from ...schema.background import Background
from ..inspect.drift import reopen, stranded_match, verify
from ..lanes.engine import Engine
from ..lanes.throttle import sleep
from ..state.model import TERMINAL, WATCH_COUNTERS, State, WatchRecord
from ..write.batch import BatchFailed, BatchResult, DocumentError, apply_batch, id_key
from ..write.job import Job
from ..write.transaction import Skip, TransactionalBatchSize, run_batch

log = logging.getLogger("mongoshift.background.watch")

#: The server lost the stream's place: the oplog moved past it (286), the token is unusable (280, 136).
HISTORY_LOST = frozenset({286, 280, 136})
UNAUTHORIZED = 13
#: "The $changeStream stage is only supported on replica sets": a standalone server.
NO_CHANGE_STREAMS = 40573

#: What the stream carries past the filter: the token, the key, the kind and the time (never a document).
EVENT_FIELDS = {"documentKey": 1, "operationType": 1, "clusterTime": 1}


@dataclass(frozen=True)
class WatchOptions:
    """How the watcher runs; the defaults suit production, tests shorten them."""

    #: Only these collections (None: every collection with a completed migration, found again every refresh).
    collections: tuple[str, ...] | None = None
    #: How often the leader saves its position (and says it is alive), idle or not.
    save_seconds: float = 5.0
    #: How often it reads the migrations again (new completions, reverts, reopens).
    refresh_seconds: float = 30.0
    #: Events older than this (the server's cluster time against this host's clock) reopen the migrations.
    max_lag_seconds: float = 60.0
    #: How long one read of the stream waits for an event: also how soon a stop is noticed.
    max_await_ms: int = 1000
    #: Events upgraded together at most.
    batch_events: int = 100

    def check(self) -> WatchOptions:
        if self.collections is not None:
            if isinstance(self.collections, str) or not all(isinstance(c, str) and c for c in self.collections):
                raise ConfigInvalidError("watch collections must be a list of collection names")
        for name in ("save_seconds", "refresh_seconds", "max_lag_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
                raise ConfigInvalidError(f"watch {name} must be a number of seconds above 0 (at most 86400), not {value!r}")
        for name, top in (("max_await_ms", 60_000), ("batch_events", 10_000)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ConfigInvalidError(f"watch {name} must be an integer from 1 to {top}, not {value!r}")
        return self


@dataclass(frozen=True)
class Guard:
    """A completed forward migration the watcher keeps true, with its file's code."""

    state: State
    spec: Background

    @property
    def job(self) -> Job:
        """Its job, with the shard key its last pass was planned on (so the watcher's writes carry it
        and a transform that moves a document is ``shard-key-changed``, as in a lane)."""
        job = Job.of(self.state, self.spec)
        layout = (self.state.plan or {}).get("layout") or {}
        job.shard_key = tuple(f for f, _ in layout.get("key") or ())
        return job


def guarded(states: Sequence[State], collection: str) -> list[State]:
    """The completed forward document migrations of ``collection``, in chain order (lowest source first)."""
    found = [
        s for s in states
        if s.collection == collection and s.direction == "forward" and s.mode != "step" and s.status == "completed"
    ]
    return sorted(found, key=lambda s: (int(s.spec.get("from_version", 0)), s.name))


def reverting(states: Sequence[State], collection: str) -> str | None:
    """A revert of ``collection`` under way (its name): the watcher stands aside, it would undo the revert."""
    for s in states:
        if s.collection == collection and s.direction == "revert" and s.status not in TERMINAL:
            return s.name
    return None


def stream_filter(guards: Sequence[State]) -> list[dict[str, Any]]:
    """The change stream's pipeline: writes that leave a document below its newest version, without one, or with
    one that is not a number (``"1"``: no valid version, stranded as audit and verify count it)."""
    targets: dict[str, int] = {}
    for s in guards:
        version_field = str(s.spec["version_field"])
        targets[version_field] = max(targets.get(version_field, 0), int(s.spec["to_version"]))
    old = [
        cond
        for version_field, target in targets.items()
        for cond in (
            {f"fullDocument.{version_field}": {"$lt": target}},
            {f"fullDocument.{version_field}": None},
            {f"fullDocument.{version_field}": {"$exists": True, "$not": {"$type": ["number", "null"]}}},
        )
    ]
    return [
        # A deleted document's update event has a null fullDocument, whose version would read as missing.
        {"$match": {"operationType": {"$in": ["insert", "replace", "update"]}, "fullDocument": {"$ne": None}, "$or": old}},
        {"$project": EVENT_FIELDS},
    ]


@dataclass
class Tally:
    """Counters not saved yet (added to the stored ones with the next fenced save)."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WATCH_COUNTERS, 0))
    event_seen: bool = False

    def add(self, key: str, n: int = 1) -> None:
        self.counts[key] += n

    def take(self) -> tuple[dict[str, int], bool]:
        counts, seen = self.counts, self.event_seen
        self.counts, self.event_seen = dict.fromkeys(WATCH_COUNTERS, 0), False
        return counts, seen


class Restart(Exception):
    """Start the stream over from now (after a verify probe)."""


def no_change_streams() -> ConfigInvalidError:
    return ConfigInvalidError(
        "the live watcher needs change streams, which a standalone server does not have: "
        "run it against a replica set (or use 'mongoshift background verify' from a cron job)"
    )


class Watcher:
    """Every watched collection of this process, one task each, until ``engine``'s cancel signal is set."""

    def __init__(
        self,
        engine: Engine,
        options: WatchOptions | None = None,
        *,
        clock: Callable[[], float] = time.time,
        watch: Callable[..., Any] | None = None,
    ) -> None:
        self.engine = engine
        self.options = (options or WatchOptions()).check()
        self.clock = clock
        #: Opens a change stream: ``collection.watch`` (a test injects a refusal).
        self.open_stream = watch or (lambda collection, **kw: collection.watch(**kw))
        self.rng = random.Random()
        self.watchers: dict[str, CollectionWatcher] = {}

    @property
    def cancel(self) -> Any:
        return self.engine.context.cancel

    async def run(self) -> list[WatchRecord]:
        """Watch until cancelled; the records of the collections it watched, as saved last.

        A standalone server is refused at once, before any collection is guarded (without this, a watcher
        started before the first migration completes would wait silently, and only refuse at its first stream)."""
        await self._refuse_a_standalone()
        await self._refuse_unknown_collections()
        tasks: dict[str, asyncio.Task[None]] = {}
        try:
            while not self.cancel.is_set():
                for collection in await self._collections():
                    if collection not in tasks:
                        self.watchers[collection] = CollectionWatcher(self, collection)
                        tasks[collection] = asyncio.create_task(self.watchers[collection].run(), name=f"mongoshift-watch-{collection}")
                for task in tasks.values():
                    failure = task.exception() if task.done() else None
                    if failure is not None:
                        raise failure
                await self._pause(list(tasks.values()))
        except BaseException:
            for task in tasks.values():
                task.cancel()
            raise
        finally:
            await asyncio.gather(*tasks.values(), return_exceptions=True)
        records = await self.engine.store.watch_records()
        return [r for r in records if r.collection in tasks]

    async def _refuse_a_standalone(self) -> None:
        """A server that answers ``hello`` without a replica set's name and is not a mongos has no change streams."""
        try:
            hello = await self.engine.session.client.admin.command("hello")
        except PyMongoError as exc:
            log.debug("watcher: hello failed (%s); the first stream says whether change streams exist", type(exc).__name__)
            return
        if "setName" not in hello and hello.get("msg") != "isdbgrid":
            raise no_change_streams()

    async def _refuse_unknown_collections(self) -> None:
        """A collection named (``--collections``) that no registered background migration rewrites is a typo:
        without this, the watcher sat idle on it forever. A registered migration not completed yet is fine
        (its collection is guarded once it completes); the names known are listed, never a document."""
        if self.options.collections is None:
            return
        for name in self.options.collections:
            name.encode()  # a name no BSON string holds is refused as such (UnicodeEncodeError: exit 6, "not UTF-8 text")
        known = sorted({s.collection for s in await self.engine.store.states_all()})
        unknown = [c for c in self.options.collections if c not in known]
        if not unknown:
            return
        shown = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
        raise ConfigInvalidError(
            f"--collections: no registered background migration rewrites {', '.join(unknown)} "
            + (f"(the collections that have one: {shown})" if known else "(no background migration is registered yet: 'mongoshift up' registers them)"),
            unknown=unknown,
        )

    async def _pause(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until the next refresh, a stop, or a collection's task ending: a refusal (a server without
        change streams) is raised at once, not a refresh later."""
        timer = asyncio.create_task(sleep(self.options.refresh_seconds * 1000, self.cancel))
        try:
            await asyncio.wait([timer, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()

    async def _collections(self) -> list[str]:
        if self.options.collections is not None:
            return list(self.options.collections)
        states = await self.engine.store.states_all()
        return sorted({s.collection for s in states if guarded(states, s.collection)})


class CollectionWatcher:
    """One collection: follow until the lease is free, then lead (stream, upgrade, save) until it is lost."""

    def __init__(self, watcher: Watcher, collection: str) -> None:
        self.watcher = watcher
        self.engine = watcher.engine
        self.collection = collection
        self.options = watcher.options
        self.state = "starting"
        self.tally = Tally()
        self.guards: list[Guard] = []
        #: The lease of the current leadership (None while following).
        self.lock: LeaseLock | None = None

    # -- leadership ------------------------------------------------------------

    def _set(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.engine.context.events.emit("watch", self.collection, collection=self.collection, state=state)

    async def run(self) -> None:
        settings = self.engine.settings
        cancel = self.watcher.cancel
        while not cancel.is_set():
            lock = self.engine.session.new_lock(f"watch:{self.collection}", ttl_seconds=settings.background_lease_ttl_seconds)
            try:
                if not await lock.try_acquire():
                    self._set("following")
                    await sleep(settings.background_poll_seconds * 1000, cancel)
                    continue
                lock.start_heartbeat()
                await self._lead(lock)
            except PyMongoError as exc:
                log.warning("watcher of %s: %s; trying again", self.collection, type(exc).__name__)
                await sleep(settings.background_poll_seconds * 1000 * (1 + self.watcher.rng.random()), cancel)
            finally:
                try:
                    await lock.release()
                except Exception:  # the lease expires on its own
                    log.warning("watcher of %s: its lease could not be released; it expires after its TTL", self.collection)
        self._set("stopped")

    async def _lead(self, lock: LeaseLock) -> None:
        run = self.engine.session.run
        store = self.engine.store
        self.lock = lock
        token = await store.watch_lead(self.collection, lock.nonce, {"host": run.host, "pid": os.getpid(), "runner": self.engine.context.runner})
        cancel = self.watcher.cancel
        try:
            while self._leading():
                states = await store.states_all()
                aside = reverting(states, self.collection)
                self.guards = self._load(guarded(states, self.collection))
                if aside is not None or not self.guards:
                    # Nothing to keep (or a revert to let through): no position kept, a probe on return.
                    token = None
                    self._set("suspended" if aside else "idle")
                    await self._save(None)
                    await sleep(self.options.refresh_seconds * 1000, cancel)
                    continue
                try:
                    token = await self._stream(token)
                except Restart:
                    token = None
                except OperationFailure as exc:
                    if error_code(exc) in HISTORY_LOST:
                        self._set("history_lost")
                        self.tally.add("restarts")
                        token = None
                        await self._save(None)
                    elif error_code(exc) == UNAUTHORIZED:
                        await self._poll()
                    elif error_code(exc) == NO_CHANGE_STREAMS:
                        raise no_change_streams() from None
                    else:
                        raise
        finally:
            # Tried even when the lease was marked lost: a renewal late past the TTL marks it so though nobody took
            # over, and the save is fenced (another leader's fence refuses it, and nothing changes).
            try:
                await self._save_as("stopped" if cancel.is_set() else self.state, token)
            except PyMongoError as exc:  # leaving anyway: the next leader resumes from the last save
                log.warning("watcher of %s: its last position could not be saved (%s)", self.collection, type(exc).__name__)
            self.lock = None

    def _leading(self) -> bool:
        return self.lock is not None and not self.watcher.cancel.is_set() and not self.lock.lost.is_set()

    def _load(self, states: list[State]) -> list[Guard]:
        """Each completed migration with its code; a file missing or changed is not guarded (runners wait for it too)."""
        guards = []
        for state in states:
            try:
                loaded = self.engine.present(state.name)
            except Exception as exc:  # one broken file does not stop the others' watch
                log.warning("watcher of %s: %s cannot be loaded (%s); not guarded", self.collection, state.name, type(exc).__name__)
                continue
            if loaded is None or (state.checksum and loaded[1] != state.checksum):
                log.warning("watcher of %s: %s is missing or differs from the registered file; not guarded", self.collection, state.name)
                continue
            guards.append(Guard(state, loaded[0]))
        return guards

    # -- saving ----------------------------------------------------------------

    async def _save(self, token: Any) -> None:
        await self._save_as(self.state, token)

    async def _save_as(self, state: str, token: Any) -> None:
        assert self.lock is not None
        counts, seen = self.tally.take()
        saved = await self.engine.store.watch_save(
            self.collection, self.lock.nonce, state=state, guards=[g.state.name for g in self.guards], token=token, counters=counts, event_seen=seen
        )
        if not saved:  # another leader's fence: this one stops leading at once
            self.lock.lost.set()

    # -- streaming -------------------------------------------------------------

    async def _stream(self, token: Any) -> Any:
        """Stream from ``token`` (None: from now, then a probe) until a refresh changes the guards; the position then."""
        collection = self.engine.context.db[self.collection]
        names = [g.state.name for g in self.guards]
        resume = {"resume_after": token} if token is not None else {}
        stream = await self.watcher.open_stream(
            collection,
            pipeline=stream_filter([g.state for g in self.guards]),
            full_document="updateLookup",
            max_await_time_ms=self.options.max_await_ms,
            **resume,
        )
        async with stream:
            if token is None:
                # Opened first, probed second: a write between the two is in the stream or in the probe.
                self._set("catching_up")
                probed = await verify(
                    self.engine.context.db, self.engine.store, names, self.engine.session.declarations(),
                    self.engine.context.events, reopen_found=True, by=f"watcher of {self.collection}",
                )
                reopened = sum(1 for v in probed if v.action == "reopened")
                if reopened:  # a runner's pass does those; the others are guarded again from now
                    self.tally.add("reopened", reopened)
                    raise Restart()
            self._set("streaming")
            await self._save(stream.resume_token)
            now = time.monotonic
            saved_at = refreshed_at = now()
            while self._leading():
                events: list[dict[str, Any]] = []
                while len(events) < self.options.batch_events:
                    event = await stream.try_next()
                    if event is None:
                        break
                    events.append(event)
                changed = False
                if events:
                    # The migrations as they are now, not as at the last refresh: a revert registered
                    # meanwhile must not have its first writes undone.
                    changed = await self._refresh(names)
                    await self._lagging(events[-1])
                    await self._upgrade([e["documentKey"]["_id"] for e in events])
                    self.tally.add("events", len(events))
                    self.tally.event_seen = True
                if now() - refreshed_at >= self.options.refresh_seconds:
                    refreshed_at = now()
                    changed = changed or await self._refresh(names)
                if changed or now() - saved_at >= self.options.save_seconds:
                    await self._save(stream.resume_token)
                    saved_at = now()
                if changed:  # a new filter (another newest version) from the same position
                    return stream.resume_token
            return stream.resume_token

    async def _refresh(self, names: list[str]) -> bool:
        """Read the migrations again: a revert under way restarts (to stand aside); True when the guards changed."""
        states = await self.engine.store.states_all()
        if reverting(states, self.collection) is not None:
            raise Restart()
        current = guarded(states, self.collection)
        if [s.name for s in current] == names:
            return False
        self.guards = self._load(current)
        return True

    async def _lagging(self, last: dict[str, Any]) -> None:
        """Past the bound, the passes do the backlog faster than events one by one: reopen and start over."""
        stamp = last.get("clusterTime")
        if stamp is None or self.watcher.clock() - stamp.time <= self.options.max_lag_seconds:
            return
        self._set("overloaded")
        for guard in self.guards:
            if await reopen(self.engine.store, guard.state.name, by=f"watcher of {self.collection}", reason="the live watcher fell behind"):
                self.tally.add("reopened")
        await self._save(None)
        raise Restart()

    async def _poll(self) -> None:
        """No privilege to watch: the old-shape query, every poll, until a refresh (then the stream is tried again)."""
        self._set("fallback")
        collection = self.engine.context.db[self.collection]
        started = time.monotonic()
        while self._leading() and time.monotonic() - started < self.options.refresh_seconds:
            for guard in self.guards:
                job = guard.job
                ids = [d["_id"] async for d in collection.find(job.match(), {"_id": 1}, limit=self.options.batch_events, batch_size=self.options.batch_events)]
                if ids:
                    await self._upgrade(ids)
            await self._save(None)
            await sleep(self.engine.settings.background_poll_seconds * 1000, self.watcher.cancel)

    # -- upgrading -------------------------------------------------------------

    async def _upgrade(self, ids: list[Any]) -> None:
        """Each guard in chain order takes the documents still in its old shape (one write each, through apply_batch)."""
        unique = list({id_key(i): i for i in ids}.values())
        collection = self.engine.context.db[self.collection]
        touched: set[bytes] = set()
        for guard in self.guards:
            job = guard.job
            if job.spec.transaction is not None:
                result, seen = await self._in_transactions(job, unique)
            else:
                docs = await collection.find({"$and": [job.match(), {"_id": {"$in": unique}}]}, batch_size=len(unique)).to_list(None)
                seen = [d["_id"] for d in docs]
                ctx = job.context("watch", self.watcher.cancel, db=self.engine.context.db, client=self.engine.client)
                try:
                    result = await apply_batch(job, docs, collection, ctx) if docs else BatchResult()
                except BatchFailed as exc:  # a wrong migrate_batch result: each document is the pass's to judge
                    result = BatchResult(errors=[DocumentError(d["_id"], "transform", str(exc)) for d in docs])
            touched.update(id_key(i) for i in seen)
            await self._count(guard, result)
        untouched = [i for i in unique if id_key(i) not in touched]
        stranded = await self._stranded(untouched) if untouched else 0
        self.tally.add("skipped", len(untouched) - stranded)

    async def _stranded(self, ids: list[Any]) -> int:
        """Of the documents no guard took, those at a version no migration upgrades (below the newest, at no
        ``from_version``): reported, as no pass can rewrite them and a reopen would not help."""
        states = await self.engine.store.states_all()
        found = [(g, m) for g in self.guards if (m := stranded_match(g.state, states)) is not None]
        if not found:
            return 0
        query = {"$and": [{"$or": [m for _, m in found]}, {"_id": {"$in": ids}}]}
        n = await self.engine.context.db[self.collection].count_documents(query)
        if n:
            self.tally.add("stranded", n)
            newest = found[0][0].state
            log.warning(
                "watcher of %s: %s below version %s at a version no migration upgrades: a migration from their version can",
                self.collection, plural(n, "document"), newest.spec["to_version"],
            )
            self.engine.context.events.emit(
                "drift", newest.name, collection=self.collection, found=False, stranded=True, action="reported", source="stream", documents=n
            )
        return n

    async def _count(self, guard: Guard, result: BatchResult) -> None:
        events = self.engine.context.events
        name = guard.state.name
        if result.migrated:
            self.tally.add("upgraded", result.migrated)
            events.emit("drift", name, collection=self.collection, found=True, action="upgraded", source="stream", documents=result.migrated)
        if result.errors:
            self.tally.add("failed", len(result.errors))
            events.emit("drift", name, collection=self.collection, found=True, action="failed", source="stream", documents=len(result.errors))
            # A pass records the failure the way it records every document error (and never retries it).
            if await reopen(self.engine.store, name, by=f"watcher of {self.collection}", reason="the live watcher could not upgrade a document"):
                self.tally.add("reopened")

    async def _in_transactions(self, job: Job, ids: list[Any]) -> tuple[BatchResult, list[Any]]:
        """A transactional migration: its documents in snapshot transactions, as its lanes write them."""
        collection = self.engine.context.db[self.collection]
        spec = job.spec
        total = BatchResult()
        seen: list[Any] = []
        pending = list(ids)

        async def read(session: Any, limit: int) -> list[dict[str, Any]]:
            """The documents still ``pending`` (read at each call: the loop below narrows it between batches)."""
            query = {"$and": [job.match(), {"_id": {"$in": pending}}]}
            return await collection.find(query, sort=[("_id", 1)], limit=limit, batch_size=limit, session=session).to_list(None)

        async def write(session: Any, docs: list[dict[str, Any]]) -> BatchResult:
            ctx = job.context("watch", self.watcher.cancel, session=session, db=self.engine.context.db, client=self.engine.client)
            return await apply_batch(job, docs, collection, ctx, session=session, strict=True)

        async def checkpoint(session: Any, docs: Any, fetched: Any, limit: int, result: BatchResult, excluded: list[DocumentError], retries: int) -> bool:
            return self._leading()

        while pending:
            try:
                outcome = await run_batch(
                    client=self.engine.client, collection=collection, spec=spec, read=read, write=write, checkpoint=checkpoint,
                    sizing=TransactionalBatchSize(spec.batch_size), rng=self.watcher.rng,
                )
            except Skip as skip:  # still in the way: the writer's own event brings it back
                done_ids = {id_key(skip.doc["_id"])}
            else:
                if outcome.lost:
                    break
                total.migrated += outcome.result.migrated
                total.errors += outcome.excluded
                done_ids = {id_key(d["_id"]) for d in outcome.docs}
                seen += [d["_id"] for d in outcome.docs]
                if not outcome.docs:
                    break
            pending = [i for i in pending if id_key(i) not in done_ids]
        return total, seen
