"""Every read and write of the background collections, each one atomic on its own.

Nothing here keeps state in memory: any number of coordinators and lanes in
any number of processes stay correct because every decision is one
conditional write that only one of them can win (a claim, a fenced
checkpoint, a plan adoption, the once-per-generation roll-up).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, IndexModel, ReturnDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError

from ...errors import CollectionClashError
from ...project.lock import process_gone, process_identity
from .failures import count_key
from .model import COUNTERS, SAMPLE_COUNTERS, Checkpointed, LaneSigns, Lease, Partition, State, WatchRecord, aware, zero_counters

log = logging.getLogger("mongoshift.background")

HISTORY_LIMIT = 50
DOC_ERRORS_KEPT = 20
#: The statuses of a partition a lane may hold (or claim): the ones a control stamps.
OPEN = ("pending", "running")

STATE_INDEXES = [IndexModel([("status", ASCENDING), ("registered_at", ASCENDING)], name="status_registered_at")]
#: The cap on lanes across every process: one live lease per slot.
LEASE_SLOT = IndexModel(
    [("background", ASCENDING), ("lease.slot", ASCENDING)],
    name="lease_slot",
    unique=True,
    partialFilterExpression={"lease.slot": {"$exists": True}},
)
#: The cap on lanes per shard (``shard_concurrency``): one live lease per ``<shard>/<k>`` slot.
LEASE_SHARD_SLOT = IndexModel(
    [("background", ASCENDING), ("lease.shard_slot", ASCENDING)],
    name="lease_shard_slot",
    unique=True,
    partialFilterExpression={"lease.shard_slot": {"$exists": True}},
)
PARTITION_INDEXES = [
    IndexModel(
        [("background", ASCENDING), ("generation", ASCENDING), ("status", DESCENDING), ("seq", ASCENDING)],
        name="claim",
    ),
    LEASE_SLOT,
]


#: The throughput samples: one bucket of this many seconds per entry, summed over every lane of every runner.
SAMPLE_BUCKET_SECONDS = 10
#: The buckets a migration keeps, newest last (6 hours of work at one bucket each 10 s; about 100 bytes each).
SAMPLES_KEPT = 2160
#: The samples are read only by whoever charts them, never with the state the lanes read before each slice.
WITHOUT_SAMPLES: dict[str, Any] = {"samples": 0}


def _naive(at: Any) -> datetime:
    """A sort key for stored times (read back naive, written aware); entries without one sort first."""
    return at.replace(tzinfo=None) if isinstance(at, datetime) else datetime.min


def lock_id(name: str) -> str:
    """The ``_id`` of the lock document a coordinator of ``name`` holds in the lock collection."""
    return f"background:{name}"


def lease_expired() -> dict[str, Any]:
    """Judged by the server's clock, so a skewed client cannot reap a live lease."""
    return {"$expr": {"$lt": [{"$add": ["$lease.renewed_at", "$lease.ttl_ms"]}, "$$NOW"]}}


class BackgroundStore:
    """The only code that reads or writes the engine's state collections (states, partitions).

    It also deletes a coordinator's lock document on ``unlock``. ``db`` is there for the
    user's collections (the ones being migrated), never for the engine's own."""

    def __init__(
        self, db: AsyncDatabase[dict[str, Any]], collection: str = "_mongoshift_background", *, create_indexes: bool = True
    ) -> None:
        self.db = db
        self.states: AsyncCollection[dict[str, Any]] = db[collection]
        self.partitions: AsyncCollection[dict[str, Any]] = db[f"{collection}_partitions"]
        #: One document per watched collection: the live watcher's leader, fence, position, state and counters.
        self.watches: AsyncCollection[dict[str, Any]] = db[f"{collection}_watch"]
        self.create_indexes = create_indexes
        self._indexed = False
        self._shard_slots = False

    async def ensure_indexes(self) -> None:
        """Every index, or (``ensure_indexes = false``) only the one the lanes' cap cannot do without.

        The others make the engine's queries faster; ``lease_slot`` is what refuses a lane a slot
        another process holds. Without it, it is looked for first and created only when missing, so
        a user without the privilege to create indexes runs once someone else made it."""
        if self._indexed:
            return
        if self.create_indexes:
            await self.states.create_indexes(STATE_INDEXES)
            await self.partitions.create_indexes(PARTITION_INDEXES)
        else:
            names = [index["name"] async for index in await self.partitions.list_indexes()]
            if LEASE_SLOT.document["name"] not in names:
                await self.partitions.create_indexes([LEASE_SLOT])
        self._indexed = True

    async def ensure_shard_slots(self) -> None:
        """The per-shard lane cap's index, made when a pass is first planned by shard (only sharded
        collections pay for it). Without the privilege to create it, the cap is checked by a count
        before each claim: a race can exceed it for a moment, never the global cap (``lease_slot``)."""
        if self._shard_slots:
            return
        names = [index["name"] async for index in await self.partitions.list_indexes()]
        if LEASE_SHARD_SLOT.document["name"] not in names:
            try:
                await self.partitions.create_indexes([LEASE_SHARD_SLOT])
            except OperationFailure as exc:
                log.warning("cannot create the index lease_shard_slot (%s): the per-shard lane cap is best effort", exc.code)
        self._shard_slots = True

    # -- state ----------------------------------------------------------------

    async def state(self, name: str) -> State | None:
        doc = await self.states.find_one({"_id": name}, WITHOUT_SAMPLES)
        return State.from_document(doc) if doc else None

    async def states_all(self) -> list[State]:
        return [State.from_document(d) async for d in self.states.find({}, WITHOUT_SAMPLES, sort=[("_id", ASCENDING)])]

    async def readable_states(self) -> tuple[list[State], list[str]]:
        """Every state that reads as one, and the names of the records that do not (a status, a
        registration or a collection missing: written by hand, or by a version that crashed mid-way)."""
        states: list[State] = []
        broken: list[str] = []
        async for doc in self.states.find({}, WITHOUT_SAMPLES, sort=[("_id", ASCENDING)]):
            try:
                states.append(State.from_document(doc))
            except CollectionClashError:
                broken.append(str(doc.get("_id")))
        return states, broken

    async def lane_signs(self, name: str) -> LaneSigns:
        """The leases on ``name``'s partitions and the latest trace of a lane or runner (read only, for ``audit``)."""
        leases: list[tuple[datetime, int]] = []
        seen: list[datetime] = []
        async for doc in self.partitions.find({"background": name}, {"lease.renewed_at": 1, "lease.ttl_ms": 1, "done_at": 1}):
            lease = doc.get("lease") or {}
            renewed = aware(lease.get("renewed_at"))
            if renewed is not None:
                leases.append((renewed, int(lease.get("ttl_ms") or 0)))
                seen.append(renewed)
            done = aware(doc.get("done_at"))
            if done is not None:
                seen.append(done)
        state = await self.states.find_one({"_id": name}, {"asking": 1})
        for ask in ((state or {}).get("asking") or {}).values():
            at = aware(ask.get("at")) if isinstance(ask, dict) else None
            if at is not None:
                seen.append(at)
        return LaneSigns(tuple(leases), max(seen, default=None))

    async def blocked_on(self, name: str) -> list[State]:
        """The migrations blocked while ``name`` is among what they require."""
        query = {"status": "blocked", "requires": name}
        return [State.from_document(d) async for d in self.states.find(query, WITHOUT_SAMPLES, sort=[("_id", ASCENDING)])]

    async def register(
        self,
        name: str,
        *,
        collection: str,
        spec: dict[str, Any],
        checksum: str,
        direction: str,
        by: str,
        reason: str | None = None,
        session: Any = None,
        requires: Sequence[str] = (),
        waits_for: Sequence[str] = (),
    ) -> State:
        """(Re)register: a new registration id, a fresh state (pending, or blocked on ``waits_for``), the old one kept as ``previous``.

        Fresh means the operator's throttle too: a new registration (a revert, a migration applied again) runs at
        its file's pace, as its totals start from zero; the old throttle stays in ``previous``."""
        await self.ensure_indexes()
        old = await self.state(name)
        registration = secrets.token_hex(8)
        status = "blocked" if waits_for else "pending"
        entry = {"action": "register", "from": old.status if old else None, "to": status, "by": by, "reason": reason}
        fields: dict[str, Any] = {
            "registration": registration,
            "status": status,
            "requires": list(requires),
            "waits_for": list(waits_for),
            "direction": direction,
            "collection": collection,
            "spec": spec,
            "checksum": checksum,
            "generation": 0,
            "rolled_generation": 0,
            "pass": 0,
            "plan": None,
            "totals": zero_counters(),
            "bad_ids": [],
            "doc_errors": [],
            "error_counts": {},
            "rate_base": 0,
            "last_error": None,
            "started_at": None,
            "completed_at": None,
            "throttle": None,
        }
        if old is not None:
            fields["previous"] = {
                "registration": old.registration,
                "status": old.status,
                "direction": old.direction,
                "totals": old.totals,
                "completed_at": old.completed_at,
                "throttle": old.throttle,
            }
            await self.partitions.delete_many({"background": name}, session=session)
        await self.states.update_one(
            {"_id": name},
            {
                "$set": fields,
                "$currentDate": {"registered_at": True, "updated_at": True},
                "$push": {"history": {"$each": [self._stamp(entry)], "$slice": -HISTORY_LIMIT}},
            },
            upsert=True,
            session=session,
        )
        state = await self.state(name)
        assert state is not None
        return state

    @staticmethod
    def _stamp(entry: dict[str, Any]) -> dict[str, Any]:
        from datetime import UTC, datetime

        return {"at": datetime.now(UTC), **entry}

    async def stamp_control(self, name: str) -> None:
        """Tell the lanes of ``name`` that its state changed: a fresh control stamp on its open partitions.

        A lane's fenced checkpoint returns the stamp, so a lane reads the state again only when it
        changed (see :meth:`checkpoint`). Always after the change itself: a lane whose checkpoint
        sees the new stamp then reads the new state.
        """
        await self.partitions.update_many(
            {"background": name, "status": {"$in": OPEN}}, {"$set": {"control": secrets.token_hex(8)}}
        )

    async def transition(
        self,
        name: str,
        *,
        allowed: Sequence[str],
        to: str,
        action: str,
        by: str = "mongoshift",
        reason: str | None = None,
        expect: dict[str, Any] | None = None,
        set_: dict[str, Any] | None = None,
        now_fields: Sequence[str] = (),
        current: State | None = None,
        stamp: bool = True,
    ) -> State | None:
        """Move the state to ``to`` only from an ``allowed`` status: the state as moved, or None when another move won.

        ``current``: the state as the caller just read it (or as its own write returned it), instead of
        reading it again. The move is conditional on the status and registration it was judged on, so a
        ``current`` that another process changed since makes it fail, as a fresh read would have.

        Every move stamps the migration's open partitions, so that the lanes working them learn it
        at their next checkpoint (a pause, a cancel, a repin, a failure, ...). ``stamp=False`` only
        where no lane can hold one of them (the coordinator's start of a plan it adopted while pending)."""
        state = current if current is not None else await self.state(name)
        if state is None or state.status not in allowed:
            return None
        entry = {"action": action, "from": state.status, "to": to, "by": by, "reason": reason}
        doc = await self.states.find_one_and_update(
            {"_id": name, "status": state.status, "registration": state.registration, **(expect or {})},
            {
                "$set": {"status": to, **(set_ or {})},
                "$currentDate": {"updated_at": True, **dict.fromkeys(now_fields, True)},
                "$push": {"history": {"$each": [self._stamp(entry)], "$slice": -HISTORY_LIMIT}},
            },
            projection=WITHOUT_SAMPLES,
            return_document=ReturnDocument.AFTER,
        )
        if doc is None:
            return None
        if stamp:
            try:
                await self.stamp_control(name)
            except PyMongoError as exc:  # the move is made: lanes read the state again at their next slice
                log.warning("%s: %s is done, but its lanes may notice it only at their next slice: %s", name, action, type(exc).__name__)
        return State.from_document(doc)

    async def set_fields(self, name: str, registration: str, fields: dict[str, Any]) -> None:
        await self.states.update_one(
            {"_id": name, "registration": registration}, {"$set": fields, "$currentDate": {"updated_at": True}}
        )

    async def control_fields(self, name: str) -> dict[str, Any] | None:
        """What a lane checks before its first batch and after a control stamp: status, generation, plan token,
        registration, and the operator's pace (``throttle``, set by the throttle control)."""
        return await self.states.find_one({"_id": name}, {"status": 1, "generation": 1, "plan.token": 1, "registration": 1, "throttle": 1})

    # -- throughput samples -----------------------------------------------------

    async def add_sample(self, name: str, registration: str, at: datetime, counters: dict[str, int]) -> None:
        """Add a lane's documents since its last sample into the bucket of ``at``, in one round trip: the newest
        bucket grows when it is ``at``'s, else a new one is appended and the oldest dropped past :data:`SAMPLES_KEPT`.

        Lanes of several runners write their buckets in any order: a reader sums entries of one bucket
        (:meth:`samples`), so a bucket appended twice is neither counted twice nor lost."""
        bucket = at.replace(microsecond=0) - timedelta(seconds=at.second % SAMPLE_BUCKET_SECONDS)
        counts = {k: int(counters.get(k, 0)) for k in SAMPLE_COUNTERS}
        have = {"$ifNull": ["$samples", []]}
        last = {"$arrayElemAt": [have, -1]}
        grown: dict[str, Any] = {"at": {"$literal": bucket}, **{k: {"$add": [{"$ifNull": [f"$$last.{k}", 0]}, n]} for k, n in counts.items()}}
        fresh = {"at": {"$literal": bucket}, **{k: {"$literal": n} for k, n in counts.items()}}
        samples = {
            "$let": {
                "vars": {"last": last},
                "in": {
                    "$cond": [
                        {"$eq": ["$$last.at", {"$literal": bucket}]},
                        {"$concatArrays": [
                            {"$cond": [{"$lte": [{"$size": have}, 1]}, [], {"$slice": [have, {"$subtract": [{"$size": have}, 1]}]}]},
                            [grown],
                        ]},
                        {"$slice": [{"$concatArrays": [have, [fresh]]}, -SAMPLES_KEPT]},
                    ]
                },
            }
        }
        await self.states.update_one({"_id": name, "registration": registration}, [{"$set": {"samples": samples}}])

    async def samples(self, name: str) -> list[dict[str, Any]]:
        """The throughput buckets of ``name``, oldest first, one entry per bucket (time as aware UTC)."""
        doc = await self.states.find_one({"_id": name}, {"samples": 1})
        merged: dict[datetime, dict[str, Any]] = {}
        for entry in (doc or {}).get("samples") or []:
            at = aware(entry.get("at"))
            if at is None:
                continue
            row = merged.setdefault(at, {"at": at, **dict.fromkeys(SAMPLE_COUNTERS, 0)})
            for key in SAMPLE_COUNTERS:
                row[key] += int(entry.get(key) or 0)
        return [merged[at] for at in sorted(merged)]

    async def withdraw(self, name: str, registration: str) -> None:
        """Forget a migration: its partitions, then its state (only while ``registration`` is the current one)."""
        await self.partitions.delete_many({"background": name})
        await self.states.delete_one({"_id": name, "registration": registration})

    async def unlock(self, name: str, lock_collection: str | None = None) -> int:
        """Free every lease of ``name``, and its coordinator's lock in ``lock_collection``; how many leases were held."""
        result = await self.partitions.update_many({"background": name, "lease": {"$exists": True}}, {"$unset": {"lease": ""}})
        if lock_collection:
            await self.db[lock_collection].delete_one({"_id": lock_id(name)})
        return result.modified_count

    # -- plans ----------------------------------------------------------------

    async def adopt_plan(
        self,
        state: State,
        partitions: list[dict[str, Any]],
        *,
        estimate: int,
        method: str,
        new_pass: bool,
        layout: dict[str, Any] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> State | None:
        """Insert a new generation's partitions and make it current: the state as adopted, or None when another plan won.

        ``layout``: the shard layout the plan follows (uuid, epoch, key), to notice a reshard; ``extra``:
        more counts of the plan (documents whose version is not a number)."""
        token = secrets.token_hex(8)
        generation = state.generation + 1
        for seq, doc in enumerate(partitions):
            doc.update(
                background=state.name,
                registration=state.registration,
                generation=generation,
                plan=token,
                seq=seq,
                status="pending",
                counters=zero_counters(),
                bad_ids=[],
                doc_errors=[],
                failures=0,
                claims=0,
                reclaims=0,
            )
        if partitions:
            await self.partitions.insert_many(partitions, ordered=False)
        plan = {"token": token, "generation": generation, "partitions": len(partitions), "estimate": estimate, "method": method}
        if layout is not None:
            plan["layout"] = layout
        plan.update(extra or {})
        adopted = await self.states.find_one_and_update(
            {"_id": state.name, "registration": state.registration, "generation": state.generation},
            {
                "$set": {"generation": generation, "plan": plan, "pass": state.pass_number + 1 if new_pass else max(state.pass_number, 1)},
                "$currentDate": {"updated_at": True, "planned_at": True},
            },
            projection=WITHOUT_SAMPLES,
            return_document=ReturnDocument.AFTER,
        )
        if adopted is None:
            await self.partitions.delete_many({"background": state.name, "plan": token})
            return None
        # Older generations are finished (or superseded); keep only the current plan. A planner
        # killed between its insert and its adoption leaves partitions under a token nobody adopted.
        await self.partitions.delete_many(
            {"background": state.name, "$or": [{"generation": {"$lt": generation}}, {"generation": generation, "plan": {"$ne": token}}]}
        )
        return State.from_document(adopted)

    @staticmethod
    def current(state: State) -> dict[str, Any]:
        """The partitions of the adopted plan (never those of a planner that died before adoption)."""
        return {"background": state.name, "generation": state.generation, "plan": (state.plan or {}).get("token")}

    async def partitions_of(self, state: State) -> list[Partition]:
        cursor = self.partitions.find(self.current(state), sort=[("seq", ASCENDING)])
        return [Partition.from_document(d) async for d in cursor]

    async def open_partitions(self, state: State) -> int:
        return await self.partitions.count_documents({**self.current(state), "status": {"$in": OPEN}})

    async def live_leases(self, name: str) -> int:
        return await self.partitions.count_documents({"background": name, "lease.slot": {"$exists": True}})

    async def started_partitions(self, name: str) -> int:
        """Partitions (of any plan) whose cursor moved: for a step migration, a sign that it changed something."""
        return await self.partitions.count_documents({"background": name, "cursor.last_id": {"$exists": True}})

    async def failed_partitions(self, state: State) -> tuple[int, str | None]:
        """How many partitions of the current plan failed, and the last error of one of them."""
        failed = await self.partitions.count_documents({**self.current(state), "status": "failed"})
        if not failed:
            return 0, None
        doc = await self.partitions.find_one({**self.current(state), "status": "failed"}, {"last_error": 1})
        return failed, (doc or {}).get("last_error")

    async def reopen_failed_partitions(self, state: State) -> None:
        """Give the current plan's failed partitions another go, from their checkpoints."""
        await self.partitions.update_many(
            {**self.current(state), "status": "failed"},
            {"$set": {"status": "pending", "failures": 0}},
        )

    async def supersede_open_partitions(self, state: State) -> None:
        """Close the current plan's open partitions (a replan cuts new ones) and free their leases; their counts stay."""
        await self.partitions.update_many(
            {**self.current(state), "status": {"$in": OPEN}},
            {"$set": {"status": "superseded"}, "$unset": {"lease": ""}},
        )

    async def plan_tokens(self, name: str) -> list[Any]:
        """The tokens of every plan whose partitions are still stored."""
        return list(await self.partitions.distinct("plan", {"background": name}))

    async def delete_plans(self, name: str, tokens: Sequence[Any]) -> None:
        """Delete the partitions of these plans only (a newer plan adopted meanwhile stays)."""
        await self.partitions.delete_many({"background": name, "plan": {"$in": list(tokens)}})

    # -- leases ---------------------------------------------------------------

    async def reap(self, name: str) -> int:
        """Free the leases of lanes that stopped renewing (crashed, killed, partitioned away).

        It looks before it writes: most of the time nothing has expired, and a write costs more.
        """
        expired = {"background": name, "lease.slot": {"$exists": True}, **lease_expired()}
        if not await self.partitions.count_documents(expired, limit=1):
            return 0
        result = await self.partitions.update_many(expired, {"$unset": {"lease": ""}, "$inc": {"reclaims": 1}})
        return result.modified_count

    async def claim(
        self,
        state: State,
        *,
        slots: Sequence[int],
        owner: str,
        ttl_ms: int,
        runner: str | None = None,
        shard_concurrency: int | None = None,
    ) -> tuple[Lease, Partition] | Literal[False] | None:
        """Claim an open partition in one free slot: (lease, partition), None if none is open, False if every slot is taken.

        ``runner`` is the claiming process's identity, kept on the lease: the fair share counts leases by it.
        ``shard_concurrency`` (a pass planned by shard): a lane also takes one of its shard's slots
        ``<shard>/0..n-1`` (unique, like the global slot), so no shard gets more lanes than that."""
        plan = state.plan or {}
        query = {
            "background": state.name,
            "generation": state.generation,
            "plan": plan.get("token"),
            "status": {"$in": OPEN},
            "lease": {"$exists": False},
        }
        by_shard = shard_concurrency is not None and plan.get("method") == "shard-key"
        shards = [s for s in await self.partitions.distinct("scope.shard", query) if isinstance(s, str)] if by_shard else []
        for slot in slots:
            if shards:
                assert shard_concurrency is not None
                claimed = await self._claim_by_shard(query, slot, shards, shard_concurrency, owner, ttl_ms, runner)
            else:
                claimed = await self._claim_one(query, slot, None, owner, ttl_ms, runner)
            if claimed == "slot":
                continue  # this slot is held by a live lane somewhere: try the next
            if claimed == "shard-slot":
                return False  # every shard with open partitions has its lanes: wait
            return claimed
        return False

    async def _claim_by_shard(
        self, query: dict[str, Any], slot: int, shards: list[str], cap: int, owner: str, ttl_ms: int, runner: str | None
    ) -> tuple[Lease, Partition] | Literal["slot", "shard-slot"] | None:
        """A claim in global ``slot`` and a free slot of some shard; "shard-slot" when every shard is at its cap."""
        live = {
            doc["_id"]: doc["n"]
            async for doc in await self.partitions.aggregate(
                [{"$match": {"background": query["background"], "lease.shard_slot": {"$exists": True}}}, {"$group": {"_id": "$scope.shard", "n": {"$sum": 1}}}]
            )
        }
        full = any(live.get(shard, 0) >= cap for shard in shards)
        for shard in (s for s in shards if live.get(s, 0) < cap):
            for k in range(cap):
                claimed = await self._claim_one({**query, "scope.shard": shard}, slot, f"{shard}/{k}", owner, ttl_ms, runner)
                if claimed == "shard-slot":
                    full = True
                    continue
                if claimed is None:
                    break  # nothing open on this shard: the next shard
                return claimed
        return "shard-slot" if full else None

    async def _claim_one(
        self, query: dict[str, Any], slot: int, shard_slot: str | None, owner: str, ttl_ms: int, runner: str | None
    ) -> tuple[Lease, Partition] | Literal["slot", "shard-slot"] | None:
        """One claim attempt; which slot was taken (a duplicate key) when it was refused."""
        token = secrets.token_hex(12)
        lease: dict[str, Any] = {
            "status": "running",
            "lease.slot": slot,
            "lease.token": token,
            "lease.owner": owner,
            "lease.runner": runner,
            "lease.host": socket.gethostname(),
            "lease.pid": os.getpid(),
            "lease.process": process_identity(),
            "lease.ttl_ms": ttl_ms,
        }
        if shard_slot is not None:
            lease["lease.shard_slot"] = shard_slot
        try:
            doc = await self.partitions.find_one_and_update(
                query,
                {
                    "$set": lease,
                    "$currentDate": {"lease.renewed_at": True, "lease.claimed_at": True},
                    "$inc": {"claims": 1},
                    "$addToSet": {"claimed_by": f"{socket.gethostname()}:{os.getpid()}"},
                },
                sort=[("status", DESCENDING), ("seq", ASCENDING)],
                return_document=ReturnDocument.AFTER,
            )
        except DuplicateKeyError as exc:
            return "shard-slot" if "shard_slot" in str(exc) or "shard_slot" in str((exc.details or {}).get("keyPattern")) else "slot"
        if doc is None:
            return None  # a free slot, and no open partition for it: the same for every slot
        return Lease(doc["_id"], token, slot, owner, ttl_ms), Partition.from_document(doc)

    async def free_gone(self, name: str) -> int:
        """Free the leases of ``name`` that a runner of this host left when it died (``kill -9``, the OOM killer):
        free now, not after their TTL; how many. Only a holder :func:`~mongoshift.project.lock.process_gone` judges
        provably dead loses its lease (one of another host or container keeps it until its TTL), and only the
        lease it held (its token): a lane that took the partition meanwhile keeps it."""
        host, freed = socket.gethostname(), 0
        held = {"background": name, "lease.slot": {"$exists": True}, "lease.host": host, "lease.pid": {"$ne": os.getpid()}}
        async for doc in self.partitions.find(held, {"lease.pid": 1, "lease.process": 1, "lease.token": 1}):
            lease = doc.get("lease") or {}
            if process_gone(host, lease.get("pid"), lease.get("process")):
                result = await self.partitions.update_one(
                    {"_id": doc["_id"], "lease.token": lease.get("token")}, {"$unset": {"lease": ""}, "$inc": {"reclaims": 1}}
                )
                freed += result.modified_count
        return freed

    async def leases_by_runner(self, name: str) -> Counter[str | None]:
        """How many live leases each runner holds (None: a lease from a version that did not say)."""
        held: Counter[str | None] = Counter()
        async for doc in self.partitions.find({"background": name, "lease.slot": {"$exists": True}}, {"lease.runner": 1}):
            held[(doc.get("lease") or {}).get("runner")] += 1
        return held

    async def ask(self, name: str, runner: str, *, ttl_ms: int) -> None:
        """Say that ``runner`` waits for a lane of ``name``; the ask lapses ``ttl_ms`` after it, by the server's clock."""
        await self.states.update_one(
            {"_id": name}, {"$currentDate": {f"asking.{runner}.at": True}, "$set": {f"asking.{runner}.ttl_ms": ttl_ms}}
        )

    async def stop_asking(self, name: str, runner: str) -> None:
        await self.states.update_one({"_id": name, f"asking.{runner}": {"$exists": True}}, {"$unset": {f"asking.{runner}": ""}})

    async def asking(self, name: str, *, besides: str) -> list[str]:
        """The runners other than ``besides`` whose ask for a lane of ``name`` is still live.

        Lapsed asks (a runner that died while it waited) are removed on the way, each only if
        it was not renewed meanwhile."""
        live = {"$lt": ["$$NOW", {"$add": ["$$this.v.at", "$$this.v.ttl_ms"]}]}
        pipeline: list[dict[str, Any]] = [
            {"$match": {"_id": name, "asking": {"$exists": True}}},
            {"$project": {"asks": {"$map": {"input": {"$objectToArray": "$asking"}, "in": {"runner": "$$this.k", "at": "$$this.v.at", "live": live}}}}},
        ]
        asks = [ask async for row in await self.states.aggregate(pipeline) for ask in row.get("asks") or []]
        for ask in asks:
            if not ask["live"]:
                await self.states.update_one({"_id": name, f"asking.{ask['runner']}.at": ask["at"]}, {"$unset": {f"asking.{ask['runner']}": ""}})
        return [ask["runner"] for ask in asks if ask["live"] and ask["runner"] != besides]

    async def renew(self, lease: Lease) -> bool:
        result = await self.partitions.update_one(
            {"_id": lease.partition_id, "lease.token": lease.token}, {"$currentDate": {"lease.renewed_at": True}}
        )
        return result.matched_count == 1

    async def release(self, lease: Lease, *, failure: str | None = None, max_failures: int = 3) -> None:
        """Give the partition back; a failed slice is counted, and too many in a row fail the partition.

        A slice that failed is the partition's failure even when its lease lapsed meanwhile (reaped,
        or taken by another lane): the count is then added without touching the lease, while the
        partition is still ``running`` in this generation. A lapse alone is no failure (the reaper counts none)."""
        update: dict[str, Any] = {"$unset": {"lease": ""}}
        if failure is not None:
            update["$inc"] = {"failures": 1}
            update["$set"] = {"last_error": failure[:2000]}
        result = await self.partitions.find_one_and_update(
            {"_id": lease.partition_id, "lease.token": lease.token}, update, return_document=ReturnDocument.AFTER
        )
        if failure is not None and result is None:
            del update["$unset"]
            result = await self.partitions.find_one_and_update(
                {"_id": lease.partition_id, "status": "running"}, update, return_document=ReturnDocument.AFTER
            )
        if failure is not None and result is not None and result.get("failures", 0) >= max_failures:
            await self.partitions.update_one(
                {"_id": lease.partition_id, "status": "running"}, {"$set": {"status": "failed"}}
            )

    async def checkpoint(
        self,
        lease: Lease,
        *,
        cursor: dict[str, Any],
        counters: dict[str, int],
        done: bool,
        bad_ids: Sequence[Any] = (),
        doc_errors: Sequence[dict[str, Any]] = (),
        throttle: dict[str, Any] | None = None,
        clean: bool = True,
        intent: dict[str, Any] | None = None,
        session: Any = None,
    ) -> Checkpointed | None:
        """Move the cursor and add the counters, only while ``lease`` still holds the partition.

        None when it does not (the checkpoint was fenced off). Otherwise the partition's control
        stamp comes back with it: the one round trip a batch spends on bookkeeping also tells the
        lane whether a control changed the migration since it last looked.

        ``intent``: the batch about to be written (see :mod:`..lanes.modes`), kept as the partition's
        ``inflight`` until the next checkpoint, which replaces or clears it."""
        set_: dict[str, Any] = {"cursor": cursor}
        unset: dict[str, str] = {}
        if throttle is not None:
            set_["throttle"] = throttle
        if clean:
            set_["failures"] = 0
        if intent is not None:
            set_["inflight"] = intent
        else:
            unset["inflight"] = ""
        update: dict[str, Any] = {
            "$set": set_,
            "$unset": unset,
            "$inc": {f"counters.{k}": int(v) for k, v in counters.items() if v},
        }
        if done:
            set_["status"] = "done"
            unset["lease"] = ""
            update["$currentDate"] = {"done_at": True}
        else:
            update["$currentDate"] = {"lease.renewed_at": True}
        if bad_ids:
            update["$addToSet"] = {"bad_ids": {"$each": list(bad_ids)}}
        if doc_errors:
            stamped = [{**e, "at": e.get("at") or datetime.now(UTC)} for e in doc_errors]
            update["$push"] = {"doc_errors": {"$each": stamped, "$slice": -DOC_ERRORS_KEPT}}
            for entry in doc_errors:  # exact per reason, though only the last few texts are kept
                key = f"error_counts.{count_key(entry)}"
                update["$inc"][key] = update["$inc"].get(key, 0) + 1
        if not update["$inc"]:
            del update["$inc"]
        if not unset:
            del update["$unset"]
        doc = await self.partitions.find_one_and_update(
            {"_id": lease.partition_id, "lease.token": lease.token, "status": "running"},
            update,
            projection={"_id": 0, "control": 1},
            return_document=ReturnDocument.AFTER,
            session=session,
        )
        return None if doc is None else Checkpointed(doc.get("control"))

    async def take_intent(self, lease: Lease) -> bool:
        """Clear the batch ``lease`` left as the partition's ``inflight``; False when another lane counted it first.

        A lane fenced off after writing a batch counts it itself only if this wins (see :meth:`settle_intent`)."""
        result = await self.partitions.update_one({"_id": lease.partition_id, "inflight.token": lease.token}, {"$unset": {"inflight": ""}})
        return result.modified_count == 1

    async def settle_intent(self, lease: Lease, token: str, counters: dict[str, int]) -> bool:
        """Count the batch another lane (lease ``token``) left in flight on the partition ``lease`` now holds, once.

        Conditional on both leases, so that the lane that wrote it (:meth:`take_intent`) and the
        new holder never both count it."""
        result = await self.partitions.update_one(
            {"_id": lease.partition_id, "lease.token": lease.token, "inflight.token": token},
            {"$unset": {"inflight": ""}, "$inc": {f"counters.{k}": int(v) for k, v in counters.items() if v} or {"counters.migrated": 0}},
        )
        return result.modified_count == 1

    async def add_to_totals(self, name: str, registration: str, counters: dict[str, int]) -> None:
        """Counts of a batch whose checkpoint was fenced off (its lane lost the lease after writing)."""
        inc = {f"totals.{k}": int(v) for k, v in counters.items() if v and k != "batches"}
        if inc:
            await self.states.update_one({"_id": name, "registration": registration}, {"$inc": inc})

    async def bad_id_count(self, state: State) -> int:
        """Distinct failed documents: earlier generations' (rolled into the state) plus the current one's."""
        pipeline: list[dict[str, Any]] = [
            {"$match": self.current(state)},
            {"$project": {"n": {"$size": {"$ifNull": ["$bad_ids", []]}}}},
            {"$group": {"_id": None, "n": {"$sum": "$n"}}},
        ]
        rows = [row async for row in await self.partitions.aggregate(pipeline)]
        return len(state.bad_ids) + (int(rows[0]["n"]) if rows else 0)

    # -- finishing a pass -----------------------------------------------------

    async def rollup(self, state: State) -> State:
        """Add the generation's counters into the totals, once, even if two coordinators race or one crashes."""
        if state.rolled_generation >= state.generation:
            return state
        totals = zero_counters()
        bad_ids: list[Any] = []
        doc_errors: list[dict[str, Any]] = []
        error_counts: dict[str, int] = {}
        # One read of the generation's partitions, counters and failed documents together.
        fields = {"counters": 1, "bad_ids": 1, "doc_errors": 1, "error_counts": 1}
        async for doc in self.partitions.find(self.current(state), fields, sort=[("seq", ASCENDING)]):
            for key in COUNTERS:
                totals[key] += int((doc.get("counters") or {}).get(key, 0))
            bad_ids.extend(doc.get("bad_ids", []))
            doc_errors.extend(doc.get("doc_errors", []))
            for key, n in (doc.get("error_counts") or {}).items():
                error_counts[key] = error_counts.get(key, 0) + int(n)
        doc_errors.sort(key=lambda e: _naive(e.get("at")))
        update: dict[str, Any] = {
            "$set": {"rolled_generation": state.generation},
            "$inc": {**{f"totals.{k}": v for k, v in totals.items() if v}, **{f"error_counts.{k}": n for k, n in error_counts.items() if n}},
            "$currentDate": {"updated_at": True},
        }
        if not update["$inc"]:
            del update["$inc"]
        if bad_ids:
            update["$addToSet"] = {"bad_ids": {"$each": bad_ids}}
        if doc_errors:
            update["$push"] = {"doc_errors": {"$each": doc_errors[-DOC_ERRORS_KEPT:], "$slice": -DOC_ERRORS_KEPT}}
        rolled = await self.states.find_one_and_update(
            {"_id": state.name, "registration": state.registration, "rolled_generation": {"$lt": state.generation}},
            update,
            projection=WITHOUT_SAMPLES,
            return_document=ReturnDocument.AFTER,
        )
        # Not ours to roll (another coordinator did, or the migration was registered anew): as it is now.
        fresh = State.from_document(rolled) if rolled is not None else await self.state(state.name)
        assert fresh is not None
        return fresh

    async def live_doc_errors(self, state: State) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Failed documents' reasons (oldest first) and counts per reason: rolled-up passes plus the current one."""
        entries = list(state.doc_errors)
        counts = dict(state.error_counts)
        if state.rolled_generation < state.generation:
            async for doc in self.partitions.find(self.current(state), {"doc_errors": 1, "error_counts": 1}):
                entries.extend(doc.get("doc_errors", []))
                for key, n in (doc.get("error_counts") or {}).items():
                    counts[key] = counts.get(key, 0) + int(n)
        entries.sort(key=lambda e: _naive(e.get("at")))
        return entries, counts

    async def failed_ids(self, state: State, limit: int) -> tuple[list[Any], int]:
        """Up to ``limit`` ids of documents that failed (rolled-up passes, then the current one) and how many there are.

        Only for someone who asked for them (the dashboard's token holder): nothing else shows or logs an id."""
        ids = list(state.bad_ids)
        if state.rolled_generation < state.generation:
            async for doc in self.partitions.find(self.current(state), {"bad_ids": 1}):
                ids.extend(doc.get("bad_ids", []))
        return ids[:limit], len(ids)

    async def live_counters(self, state: State) -> dict[str, int]:
        """Totals so far: rolled-up passes plus the current generation's partitions."""
        counters = dict(state.totals)
        if state.rolled_generation < state.generation:
            for part in await self.partitions_of(state):
                for key in COUNTERS:
                    counters[key] += part.counters.get(key, 0)
        return counters

    # -- the live watcher -----------------------------------------------------

    async def watch_lead(self, collection: str, fence: str, leader: dict[str, Any]) -> Any:
        """Make ``fence`` (the new leader's lock nonce) the only one whose saves count; the saved resume token.

        Called right after the ``watch:<collection>`` lock was taken: a former leader that still
        believes it leads finds its fenced saves matching nothing from here on."""
        doc = await self.watches.find_one_and_update(
            {"_id": collection},
            {
                "$set": {"fence": fence, "state": "leading", **{f"leader.{k}": v for k, v in leader.items()}},
                "$currentDate": {"updated_at": True, "leader.at": True},
                "$inc": {"term": 1},
            },
            upsert=True,
            return_document=ReturnDocument.AFTER,
        )
        return (doc or {}).get("resume_token")

    async def watch_save(
        self,
        collection: str,
        fence: str,
        *,
        state: str,
        guards: Sequence[str],
        token: Any,
        counters: dict[str, int] | None = None,
        event_seen: bool = False,
    ) -> bool:
        """Save the leader's state, position (None: start from now next time) and counters; False when fenced off."""
        update: dict[str, Any] = {
            "$set": {"state": state, "guards": list(guards)},
            "$currentDate": {"updated_at": True, "leader.at": True, **({"last_event_at": True} if event_seen else {})},
        }
        if token is None:
            update["$unset"] = {"resume_token": ""}
        else:
            update["$set"]["resume_token"] = token
        inc = {f"counters.{k}": int(v) for k, v in (counters or {}).items() if v}
        if inc:
            update["$inc"] = inc
        result = await self.watches.update_one({"_id": collection, "fence": fence}, update)
        return result.matched_count == 1

    async def watch_records(self) -> list[WatchRecord]:
        """Every collection's watcher record, without its resume token (``background status``, ``audit``)."""
        cursor = self.watches.find({}, {"resume_token": 0, "fence": 0}, sort=[("_id", ASCENDING)])
        records = [WatchRecord.from_document(d) async for d in cursor]
        # has_position comes from a second, token-free look: the token itself never leaves the store.
        positioned = set(await self.watches.distinct("_id", {"resume_token": {"$exists": True}}))
        return [replace(r, has_position=r.collection in positioned) for r in records]
