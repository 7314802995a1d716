"""The coordinator: one idempotent step that moves a migration along.

Each step starts from what MongoDB says, under the ``background:<name>``
lock so that only one coordinator acts at a time (another answers ``busy``),
and does the one thing due: plan a pass, hand out lanes, or finalize the
pass (roll the counters up once, count what is left, then complete, fail, or
plan the next pass over the leftovers).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pymongo.errors import PyMongoError

from ...project.lock import LeaseLock
from ...project.wording import clipped, plural
from ...schema.background import Background
from ..inspect.input_probe import not_a_version_count, not_a_version_words
from ..inspect.requires import Waiting, unmet
from ..plan.planner import PlannedPartition, batch_filter, plan_pass
from ..plan.shard_pass import plan_sharded_pass
from ..plan.shard_plan import resharded
from ..plan.shards import Detection, detect, read_identity
from ..state.events import Event
from ..state.failures import over_budget
from ..state.model import COUNTERS, TERMINAL, Checkpoint, Scope, State
from ..state.store import lock_id
from ..write.job import Job
from .context import EngineContext

log = logging.getLogger("mongoshift.background")

Next = Literal["process", "wait", "done", "busy"]


#: The statuses of a requirement that only a person moves on (``retry``, ``resume``, or ``up`` of an ordinary one).
NEEDS_A_PERSON = ("failed", "paused", "cancelled")


@dataclass
class Decision:
    next: Next
    state: State | None
    lanes: int = 0
    reason: str | None = None
    #: A blocked migration's requirements that wait for a person (:data:`NEEDS_A_PERSON`), as ``name (status)``:
    #: nothing a runner does moves them on, so ``background run`` stops waiting for it.
    held_by: tuple[str, ...] = ()


@dataclass
class Leftovers:
    """Why documents are still in the old shape after the last pass: counts only, never ids."""

    remaining: int
    source: int
    passes: int
    last_pass: dict[str, int]
    unread: int = 0
    unread_types: str = ""

    def message(self, name: str, max_conflict_retries: int) -> str:
        last = self.last_pass
        head = (
            f"{name}: {plural(self.remaining, 'document')} matching the filter still at version {self.source} after "
            f"{plural(self.passes, 'pass', 'passes')} (max_passes). The last pass read {last.get('scanned', 0)}, rewrote "
            f"{last.get('migrated', 0)} and met {plural(last.get('conflicts', 0), 'write conflict')}. "
        )
        retry = f"'mongoshift background retry {name}'"
        if self.unread:
            types = f" (_id types: {self.unread_types})" if self.unread_types else ""
            return head + (
                f"No partition covers {self.unread} of them{types}, so no pass can read them: "
                "please report this as a mongoshift bug."
            )
        if last.get("conflicts", 0):
            return head + (
                "The application kept writing documents between their read and their rewrite "
                f"(each was read again max_conflict_retries={max_conflict_retries} times): "
                f"{retry} at a quieter time, or raise max_conflict_retries or max_passes."
            )
        if last.get("migrated", 0):
            return head + (
                "Documents keep arriving in the old shape: is an old version of the application still writing them? "
                f"Stop it, then {retry}."
            )
        return head + (
            f"The last pass did not rewrite them: 'mongoshift background status {name} --partitions' shows what "
            f"each partition read; then {retry}."
        )


class Coordinator:
    def __init__(self, engine: EngineContext, new_lock: Callable[[str], LeaseLock]) -> None:
        """``new_lock(lock_id)``: a lease lock in the project's lock collection (:meth:`Session.new_lock`)."""
        self.engine = engine
        self.new_lock = new_lock

    async def step(self, name: str, spec: Background, *, state: State | None = None) -> Decision:
        """One step, inside the observers' ``coordinate_scope`` (a tracer's coordinate span).

        ``state``: the migration's state as the caller has just read it, which the step starts from
        instead of reading it again (the runner reads it before each step to check its file against it)."""
        events = self.engine.events
        with events.coordinate_scope(Event("coordinate", name, {}, events.run_id)):
            return await self._locked_step(name, spec, state)

    async def _locked_step(self, name: str, spec: Background, known: State | None = None) -> Decision:
        """Hand out lanes without writing anything while a pass is under way; lock for the rest.

        The fast path matters: polling runners would otherwise write the lock twice per poll,
        and on servers that judge transaction conflicts globally every such write makes a
        transactional batch retry. Only the fast path starts from ``known``: under the lock,
        the state is read again, as another coordinator may have moved it before it let go.
        """
        store = self.engine.store
        state = known if known is not None else await store.state(name)
        if state is not None and state.status == "running" and state.generation and not state.replan and not await self._resharded(state, spec):
            open_ = await store.open_partitions(state)
            if open_:
                await self.engine.reap(name)
                return await self._lanes(name, state, spec, open_)
        lock = self.new_lock(lock_id(name))
        if not await lock.try_acquire():
            return Decision("busy", await self.engine.store.state(name),
                reason="another runner holds its coordinator lock (a killed one's lapses after background_lease_ttl_seconds)")
        try:
            return await self._step(name, spec)
        finally:
            await lock.release()

    async def _step(self, name: str, spec: Background) -> Decision:
        store = self.engine.store
        state = await store.state(name)
        if state is None:
            return Decision("done", None, reason="not registered")
        if state.status in TERMINAL or state.status == "paused":
            return Decision("done", state, reason=state.status)
        if state.status == "blocked":
            waiting = await self._unblock(state)
            if waiting:
                held = tuple(w.describe() for w in waiting if w.status in NEEDS_A_PERSON or w.held)
                return Decision("wait", state, reason="blocked on " + ", ".join(w.describe() for w in waiting), held_by=held)
            state = await store.state(name)
            assert state is not None
        planned = False  # a plan adopted by this step, whose partitions no lease can have lapsed on yet
        if state.status == "pending":
            if state.generation == 0 or await store.open_partitions(state) == 0:
                adopted = await self._plan(state, spec, new_pass=True)
                if adopted is None:
                    return Decision("wait", await store.state(name), reason="another plan won")
                state, planned = adopted, True
            # While pending, no lane claims (a runner starts lanes on a running state only): a plan
            # adopted in this step has no lane to tell, so its start stamps nothing.
            started = await store.transition(
                name, allowed=("pending",), to="running", action="start", now_fields=() if state.started_at else ("started_at",),
                current=state, stamp=not planned,
            )
            state = started if started is not None else await store.state(name)
            assert state is not None
        if state.generation > 0 and state.status == "running" and await self._resharded(state, spec):
            log.warning("%s: %s was resharded since the pass was planned: re-splitting the pass", name, spec.collection)
            state = await self._replan(state, spec)
        elif state.replan and state.generation > 0:
            state = await self._replan(state, spec)
        if not planned:
            # After this step's own plan there is nothing to reap: the older plans' partitions are deleted,
            # and a lease on one of the new ones was taken since the start, live for a lease TTL.
            await self.engine.reap(name)
        open_ = await store.open_partitions(state)
        if open_:
            return await self._lanes(name, state, spec, open_)
        return await self._finalize(state, spec)

    async def _lanes(self, name: str, state: State, spec: Background, open_: int) -> Decision:
        """The lanes a runner may start: one per open partition, within ``max_parallel`` less the leases
        held. None free: the leases a runner of this host left when it died are freed first
        (:meth:`EngineContext.free_gone`); still none: the reason says so, and that a killed runner's lease
        lapses on its own, so that a run started right after a ``kill -9`` elsewhere does not sit silent
        for up to the lease TTL."""
        free = spec.max_parallel - await self.engine.store.live_leases(name)
        if free <= 0 < open_ and await self.engine.free_gone(name):  # leases of a runner of this host that died
            free = spec.max_parallel - await self.engine.store.live_leases(name)
        lanes = max(0, min(open_, free))
        reason = None if lanes else (
            f"{'the one lane is leased by another runner' if spec.max_parallel == 1 else f'all {spec.max_parallel} lanes are leased by other runners'} "
            "(a stopped or killed runner's lease lapses after background_lease_ttl_seconds; "
            "one of a process of this host that died is taken over at once)"
        )
        return Decision("process", state, lanes=lanes, reason=reason)

    async def _unblock(self, state: State) -> list[Waiting]:
        """Move a blocked migration to pending once all it requires is done; else record what it still waits for."""
        store = self.engine.store
        waiting = await unmet(store, state.requires, changelog=self.engine.changelog, reverting=state.direction == "revert")
        if waiting:
            await store.set_fields(state.name, state.registration, {"waits_for": [w.name for w in waiting]})
        elif await store.transition(state.name, allowed=("blocked",), to="pending", action="unblock", set_={"waits_for": []}):
            self.engine.events.emit("unblocked", state.name)
        return waiting

    async def _unblock_dependents(self, name: str) -> None:
        """Part of completing ``name``: the migrations blocked on it move on at once, not when a runner of theirs polls.

        Each move is conditional on the state still being blocked, so a coordinator of the
        dependent doing the same at the same moment is harmless."""
        for dependent in await self.engine.store.blocked_on(name):
            await self._unblock(dependent)

    async def _plan(self, state: State, spec: Background, *, new_pass: bool) -> State | None:
        """Plan a pass and adopt it: the state as adopted, or None when another plan won."""
        job = Job.of(state, spec)
        collection = self.engine.db[spec.collection]
        method = "step" if spec.mode == "step" else "id-range"
        layout: dict[str, Any] | None = None
        detection = await self._detect(spec) if spec.mode != "step" else None
        if spec.mode == "step":
            planned, estimate = [PlannedPartition(Scope(None), 0)], 0
        elif detection is not None and detection.layout is not None:
            sharded = await plan_sharded_pass(collection, job.match(), spec, detection.layout, warned=self.engine.shard_warned)
            planned, estimate, method, layout = sharded.partitions, sharded.estimate, sharded.method, sharded.layout
            if method == "shard-key":
                await self.engine.store.ensure_shard_slots()
        else:
            planned, estimate = await plan_pass(
                collection,
                job.match(),
                target=spec.partition_target,
                min_partition_docs=spec.min_partition_docs,
                sample_size=spec.sample_size,
            )
        # Documents whose version is not a number ("2"): the estimate above never counts them, no pass takes them,
        # and verify reports them stranded once it completes. Counted (bounded) per pass: the report's warning.
        odd, stopped = (0, None) if spec.mode == "step" else await not_a_version_count(collection, dict(spec.filter), spec.version_field)
        extra = {"not_a_version": odd, "not_a_version_stopped": stopped} if odd else None
        adopted = await self.engine.store.adopt_plan(
            state, [p.to_document() for p in planned], estimate=estimate, method=method, new_pass=new_pass, layout=layout, extra=extra
        )
        if adopted is not None:
            self.engine.events.emit("partitioned", state.name, partitions=len(planned), estimate=estimate, generation=state.generation + 1)
            if odd and state.pass_number == 0:  # said once, when the run starts; the report keeps saying it
                log.warning("%s", not_a_version_words(state.name, spec.collection, spec.version_field, odd, stopped))
        return adopted

    async def _detect(self, spec: Background) -> Detection:
        engine = self.engine
        return await detect(
            engine.db, spec.collection, mode=engine.shard_aware, configured=engine.shard_keys, warned=engine.shard_warned
        )

    async def _resharded(self, state: State, spec: Background) -> bool:
        """Whether the collection was resharded (new UUID or epoch) since this pass was planned."""
        planned = (state.plan or {}).get("layout")
        if spec.mode == "step" or not planned or planned.get("source") != "detected":
            return False
        return resharded(planned, await read_identity(self.engine.db, spec.collection))

    async def _replan(self, state: State, spec: Background) -> State:
        """A repin changed what the pass covers: supersede the open partitions, keep their counts, re-cut the same pass."""
        store = self.engine.store
        await store.supersede_open_partitions(state)
        state = await store.rollup(state)
        await self._plan(state, spec, new_pass=False)
        await store.set_fields(state.name, state.registration, {"replan": False})
        fresh = await store.state(state.name)
        assert fresh is not None
        return fresh

    async def _finalize(self, state: State, spec: Background) -> Decision:
        store = self.engine.store
        judged = state.status  # the roll-up reads the state again: a control may have moved it since
        failed, last_error = await store.failed_partitions(state)
        state = await store.rollup(state)
        if failed:
            message = f"a partition failed {plural(spec.max_slice_failures, 'slice')} in a row: {last_error}"
            return await self._fail(state, message, judged)
        if len(state.bad_ids) > spec.max_document_errors:
            return await self._fail(state, over_budget(state.name, len(state.bad_ids), spec.max_document_errors), judged)
        remaining = 0 if spec.mode == "step" else await self._remaining(state, spec)
        if remaining == 0:
            completed = await store.transition(
                state.name, allowed=("running",), to="completed", action="complete", now_fields=("completed_at",), current=state
            )
            if completed is None:
                return Decision("done", await store.state(state.name), reason="completed")
            if state.bad_ids:
                log.warning("%s completed, but %s could not be migrated", state.name, plural(len(state.bad_ids), "document"))
            self.engine.events.emit("completed", state.name, failed_documents=len(state.bad_ids), **completed.totals)
            await self._unblock_dependents(state.name)
            # As the move returned it: unblocking the dependents writes only theirs.
            return Decision("done", completed, reason="completed")
        if state.pass_number >= spec.max_passes:
            leftovers = await self._leftovers(state, spec, remaining)
            return await self._fail(state, leftovers.message(state.name, spec.max_conflict_retries), judged)
        self.engine.events.emit("pass", state.name, number=state.pass_number + 1, remaining=remaining)
        adopted = await self._plan(state, spec, new_pass=True)
        fresh = adopted if adopted is not None else await store.state(state.name)
        return Decision("process", fresh, lanes=spec.max_parallel)

    async def _remaining(self, state: State, spec: Background) -> int:
        job = Job.of(state, spec)
        return await self.engine.db[spec.collection].count_documents(job.match())

    async def _leftovers(self, state: State, spec: Background, remaining: int) -> Leftovers:
        """What the last pass did, and how many of the leftovers no partition of it covered."""
        job = Job.of(state, spec)
        parts = await self.engine.store.partitions_of(state)
        last = dict.fromkeys(COUNTERS, 0)
        for part in parts:
            for key in COUNTERS:
                last[key] += part.counters.get(key, 0)
        found = Leftovers(remaining, job.source, state.pass_number, last)
        scopes = [batch_filter({}, part.scope, Checkpoint()) for part in parts]
        if any(not scope for scope in scopes):
            return found  # a partition without bounds covers everything
        collection = self.engine.db[spec.collection]
        outside: dict[str, Any] = {"$and": [job.match(), {"$nor": scopes}]} if scopes else job.match()
        try:
            found.unread = await collection.count_documents(outside, limit=remaining or 1)
            if found.unread:
                pipeline: list[dict[str, Any]] = [{"$match": outside}, {"$limit": 10_000}, {"$group": {"_id": {"$type": "$_id"}, "n": {"$sum": 1}}}]
                kinds = [doc async for doc in await collection.aggregate(pipeline)]
                found.unread_types = ", ".join(f"{k['_id']} {k['n']}" for k in sorted(kinds, key=lambda k: -k["n"]))
        except PyMongoError as exc:  # a diagnosis only: the failure is reported either way
            log.debug("counting the documents no partition covers failed: %s", type(exc).__name__)
        return found

    async def _fail(self, state: State, message: str, judged: str) -> Decision:
        """Fail ``state`` only from the status ``judged`` that the verdict was made in: a migration
        failed by a lane and retried while this step closed the pass is the operator's again, not
        failed a second time on a verdict about the state before the retry."""
        if await self.engine.store.transition(
            state.name, allowed=(judged,), to="failed", action="fail", reason=clipped(message, 200), set_={"last_error": message}, now_fields=("failed_at",)
        ):
            self.engine.events.emit("failed", state.name, reason=message)
        return Decision("done", await self.engine.store.state(state.name), reason="failed")
