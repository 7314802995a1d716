"""A lane: claim a partition under a lease, work it batch by batch, checkpoint with each.

A slice works at least one batch and then yields at ``slice_ms``, so lanes
take turns and a paused, cancelled or replanned migration is noticed within
one batch. Every checkpoint is fenced by the lease token: a lane whose lease
was reaped (it stalled past the TTL) learns it at its next checkpoint and
stops without counting anything twice.

A batch spends one round trip on bookkeeping, its checkpoint. The lane reads
the migration's state before its first batch; after that, only when the
checkpoint comes back with a control stamp it has not seen: every change of
the state (pause, cancel, repin, failure, ...) stamps the open partitions
after it is made, so a change made before a checkpoint is read before the
next batch, as if the lane had read the state then.

What one batch is (plain, transactional, a step call) is the mode's business:
see :mod:`.modes`; the lane holds the lease, the controls and the pauses around it.
A partition claimed with a batch still in flight from a lane that died counts that batch
first (:func:`.modes.settle_left_batch`), and every slice ends with what its last batch
still owes the partition (``finish``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

import pymongo
from pymongo.errors import PyMongoError

from ...project.redaction import describe_error
from ...project.server_errors import connection_lost, connection_words
from ...project.wording import clipped
from ...schema.background import Adaptive, Background
from ..plan.key_filter import version_index_key
from ..plan.shard_pass import has_index
from ..state.failures import over_budget
from ..state.model import SAMPLE_COUNTERS, Lease, Partition, Scope, State, pace_override
from ..write.batch import BatchFailed
from ..write.job import Job
from ..write.transaction import TransactionsUnsupported
from .context import EngineContext
from .health import wait_while_unhealthy
from .modes import LeaseActivity, Mode, PartitionWork, PlainBatches, mode_for, settle_left_batch
from .share import may_claim
from .throttle import AdaptiveController, ThrottleContext, ThrottleReport, before_batch

log = logging.getLogger("mongoshift.background")

#: After a wait this long (pause, throttle hook, health), the lane reads the control fields again before its batch.
CONTROL_RECHECK_AFTER_WAIT_S = 1.0
#: How long a slice that lost its connection tries to give its lease back before leaving it to lapse.
RELEASE_AFTER_LOSS_S = 1.0

Outcome = Literal[
    "exhausted", "busy", "yielded", "done", "paused", "cancelled", "failed", "stale", "stopped", "lost", "error", "disconnected"
]

#: Lanes free but nothing to claim: another runner's lanes hold every open partition. When that runner was
#: killed (``kill -9``) holding the pass's last partitions, nothing moves until their leases lapse.
LEASED_ELSEWHERE = (
    "every open partition is leased by another runner's lanes "
    "(a stopped or killed runner's lease lapses after background_lease_ttl_seconds; they go on from their checkpoints then)"
)

#: A migration's status that stops its lanes, as the slice's outcome.
HALTING: dict[str, Outcome] = {"paused": "paused", "cancelled": "cancelled", "failed": "failed"}


@dataclass
class SliceResult:
    outcome: Outcome
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    #: A ``busy`` slice's reason to tell the operator, when the wait may be long (a killed runner's leases).
    waiting: str | None = None


class Lane:
    def __init__(self, engine: EngineContext, lane_id: str) -> None:
        self.engine = engine
        self.id = lane_id
        self.activity = LeaseActivity()
        self.throttle = ThrottleReport(engine.now)
        #: The adaptive controller's state when this lane's last slice ended: where it starts on a
        #: partition that has none saved (a fresh one), instead of ``batch_size`` again.
        self.pace: dict[str, Any] | None = None
        #: The operator's pace (the throttle control) as last read with the control fields: it wins over the file's.
        self.override: dict[str, int] | None = None
        #: The slice's counters as last added to the throughput samples, and when (wall clock: the next sample goes
        #: to this time's bucket).
        self._sampled: dict[str, int] = {}
        self._sampled_at = engine.wall()

    async def _why_lost(self, state: State) -> dict[str, Any]:
        """``{"registered_anew": True}`` when the lease went with its registration (``down`` registered the revert, or
        ``up`` the migration again, while this lane worked), not to a lapse or another runner."""
        try:
            fresh = await self.engine.store.state(state.name)
        except PyMongoError:
            return {}
        return {"registered_anew": True} if fresh is None or fresh.registration != state.registration else {}

    async def run_slice(self, state: State, spec: Background, *, slice_ms: int | None = None) -> SliceResult:
        """One slice: reap, claim, work until the slice ends; never raises for a batch failure.

        A lost connection (:func:`~mongoshift.project.server_errors.connection_lost`) is raised, after
        ``slice_end``, for the runner to ride out: it says nothing about the partition."""
        engine = self.engine
        job = Job.of(state, spec)
        await engine.reap(state.name)
        async with engine.claiming:
            if not await may_claim(engine.store, state.name, engine.runner, spec.max_parallel):
                return SliceResult("busy")  # this runner holds its share while another waits
            claimed = await self._claim(state, spec)
            # Nothing open, or every slot taken: while another runner holds leases, those of one that died on this host
            # (kill -9, OOM) are freed now and claimed again, not waited out for their TTL. The common end of a lane
            # (nothing open, no lease elsewhere) costs no more than it did.
            held_elsewhere = claimed is False or (claimed is None and await self._held_elsewhere(state))
            if held_elsewhere and await engine.free_gone(state.name):
                claimed = await self._claim(state, spec)
                held_elsewhere = claimed is False or (claimed is None and await self._held_elsewhere(state))
        if claimed is None:
            # No open partition. While another runner's lanes hold some, they come back open at their
            # slice ends: ask for a share of them, or that runner re-claims them for ever.
            return SliceResult("busy", waiting=LEASED_ELSEWHERE) if held_elsewhere else SliceResult("exhausted")
        if claimed is False:
            return SliceResult("busy")
        lease, partition = claimed
        start = engine.events.emit("slice_start", state.name, partition=partition.seq, slot=lease.slot, lane=self.id, runner=engine.runner)
        with engine.events.slice_scope(start):  # a tracer's slice span is current for the slice's own requests
            return await self._slice(state, spec, job, lease, partition, slice_ms)

    async def _held_elsewhere(self, state: State) -> bool:
        """Whether another runner's lanes hold leases of this migration."""
        held = await self.engine.store.leases_by_runner(state.name)
        return any(count for runner, count in held.items() if runner != self.engine.runner)

    async def _claim(self, state: State, spec: Background) -> tuple[Lease, Partition] | Literal[False] | None:
        """:meth:`BackgroundStore.claim` from a random slot on, so that lanes starting together spread over the slots."""
        engine = self.engine
        slots = list(range(spec.max_parallel))
        offset = engine.rng.randrange(len(slots))
        return await engine.store.claim(
            state, slots=slots[offset:] + slots[:offset], owner=self.id, ttl_ms=engine.lease_ttl_ms, runner=engine.runner,
            shard_concurrency=spec.shard_concurrency,
        )

    async def _slice(self, state: State, spec: Background, job: Job, lease: Lease, partition: Partition, slice_ms: int | None) -> SliceResult:
        """The slice on a claimed partition, from the claim to ``slice_end``."""
        engine = self.engine
        started = engine.now()
        lost = asyncio.Event()
        self.activity.touched = started  # the claim renewed the lease
        heartbeat = asyncio.create_task(self._heartbeat(lease, lost, stall_s=spec.slice_ms / 1000 + 3 * engine.lease_ttl_ms / 1000))
        counters: dict[str, int] = {}
        self._sampled, self._sampled_at = {}, engine.wall()
        outcome: SliceResult
        disconnected: PyMongoError | None = None
        try:
            outcome = await self._work(job, state, spec, lease, partition, lost, counters, slice_ms or spec.slice_ms)
        except Exception as exc:
            message = describe_error(exc)  # a bulk write error carries whole documents
            if isinstance(exc, PyMongoError) and connection_lost(exc):
                message = connection_words(exc)
                # Not the partition's failure: the runner waits the outage out, and the slice is
                # not counted towards max_slice_failures. The release is tried for a moment only (a
                # server that is gone would hold it for the whole server selection, and the runner's
                # give-up with it); if it fails too, the lease lapses.
                log.warning("%s: a slice lost the connection: %s", state.name, message)
                disconnected = exc
                with contextlib.suppress(PyMongoError), pymongo.timeout(RELEASE_AFTER_LOSS_S):
                    await engine.store.release(lease)
                outcome = SliceResult("disconnected", counters, message)
            else:
                log.warning("%s: a slice failed: %s", state.name, message)
                await engine.store.release(lease, failure=message, max_failures=spec.max_slice_failures)
                outcome = SliceResult("error", counters, message)
        finally:
            heartbeat.cancel()
            try:
                await heartbeat
            except asyncio.CancelledError:
                pass
        if outcome.outcome == "lost":
            engine.events.emit("lease_lost", state.name, partition=partition.seq, lane=self.id, **await self._why_lost(state))
        elif outcome.outcome not in ("done", "error", "disconnected"):
            await engine.store.release(lease)
        if disconnected is None:
            await self._sample(state, counters, force=True)
        failure = {"error": outcome.error} if outcome.error else {}  # redacted by describe_error
        duration_ms = round((engine.now() - started) * 1000, 1)
        engine.events.emit("slice_end", state.name, partition=partition.seq, outcome=outcome.outcome, duration_ms=duration_ms, **counters, **failure)
        if disconnected is not None:
            raise disconnected  # the runner's to ride out (see .outage), after the slice is told ended
        return outcome

    async def _heartbeat(self, lease: Lease, lost: asyncio.Event, *, stall_s: float) -> None:
        """Renew the lease between checkpoints; a checkpoint renews it too, so skip when one just did.

        Skipping matters in transaction mode: every extra write is a chance of a commit conflict.
        A lane that has not checkpointed for ``stall_s`` (a slice and three TTLs) is stuck, say
        on a request that never returns: it stops renewing, so that another lane can reap the
        lease and go on, and its own late checkpoint will be fenced off.
        """
        while True:
            await asyncio.sleep(lease.ttl_ms / 3000)
            idle = self.engine.now() - self.activity.touched
            if idle < lease.ttl_ms / 4000:
                continue
            if self.activity.in_transaction and idle < lease.ttl_ms * 0.6 / 1000:
                continue  # the transaction's checkpoint renews it; a write now would only make it conflict
            if idle > stall_s:
                log.warning("a lane made no progress for %.0fs: letting its lease expire", idle)
                return
            try:
                # A renewal that cannot reach a server within the lease's TTL would come too late anyway.
                with pymongo.timeout(lease.ttl_ms / 1000):
                    renewed = await self.engine.store.renew(lease)
                if not renewed:
                    lost.set()
                    return
            except Exception as exc:  # a blip: the fenced checkpoint is the real guard
                log.debug("lease renewal failed: %s", type(exc).__name__)

    async def _sample(self, state: State, counters: dict[str, int], *, force: bool = False) -> None:
        """Add what the slice did since the last sample to the migration's throughput buckets, once the wall clock has
        entered another bucket (and at the slice's end): the chart of a migration is drawn from these, long after it ran.

        The documents go to the bucket of the last sample (where they were done, up to the batch that crossed the
        bucket's end), not the bucket of this write: stamped at their write, a sample taken just after a bucket began
        and the next one just before it ended both fell in it, two buckets' documents in one (a spike on the chart
        beside an empty bucket)."""
        engine = self.engine
        now = engine.wall()
        if not force and now.timestamp() // engine.sample_seconds == self._sampled_at.timestamp() // engine.sample_seconds:
            return
        delta = {k: counters.get(k, 0) - self._sampled.get(k, 0) for k in SAMPLE_COUNTERS}
        at, self._sampled, self._sampled_at = self._sampled_at, dict(counters), now
        if not any(delta.values()):
            return
        try:
            await engine.store.add_sample(state.name, state.registration, at, delta)
        except PyMongoError as exc:  # a missed sample leaves a gap in a chart; the work itself is checkpointed
            log.debug("%s: a throughput sample was not saved: %s", state.name, type(exc).__name__)

    async def _control(self, state: State, partition: Partition) -> Outcome | None:
        doc = await self.engine.store.control_fields(state.name)
        if doc is None or doc.get("registration") != state.registration:
            return "stale"
        self.override = pace_override(doc.get("throttle"))
        status = doc.get("status")
        if status in HALTING:
            return HALTING[status]
        if status != "running" or doc.get("generation") != partition.generation or (doc.get("plan") or {}).get("token") != partition.plan:
            return "stale"
        return None

    async def _hint(self, spec: Background, scope: Scope) -> list[tuple[str, Any]] | None:
        """The version index (``{version, ...shard key, _id}`` on a targeted partition), when it exists; otherwise warn once and scan."""
        key = version_index_key(spec.version_field, scope.key if scope.targeted else ())
        if await has_index(self.engine.db[spec.collection], key):
            return key
        if scope.drains:  # a hash range has no filter: its index's bounds are the only way to read it
            raise BatchFailed(
                f"{spec.collection} has no index {{{', '.join(f'{f}: {d!r}' for f, d in key)}}} any more: "
                "a hash-range partition is read through it; create it again"
            )
        if scope.targeted:
            return None  # the planner checked it: dropped since, the read goes on without a hint
        if spec.collection not in self.engine.version_index_warned:
            self.engine.version_index_warned.add(spec.collection)
            log.warning(
                "%s has no index {%s: 1, _id: 1}: batches scan the collection; create it for speed",
                spec.collection,
                spec.version_field,
            )
        return None

    async def _work(
        self,
        job: Job,
        state: State,
        spec: Background,
        lease: Lease,
        partition: Partition,
        lost: asyncio.Event,
        counters: dict[str, int],
        slice_ms: int,
    ) -> SliceResult:
        engine = self.engine
        deadline = engine.now() + slice_ms / 1000
        mode = mode_for(job)
        job.shard_key = partition.scope.key_fields
        # Only plain batches are sized by the controller: a transaction's batch is halved and grown
        # back by its own rules (see ..write.transaction), and a step has no batch.
        options = spec.adaptive if isinstance(mode, PlainBatches) else False
        adaptive = AdaptiveController(options, spec.batch_size, partition.throttle or self.pace) if isinstance(options, Adaptive) else None
        work = PartitionWork(
            engine=engine,
            job=job,
            lease=lease,
            partition=partition,
            collection=engine.db[spec.collection],
            match=job.match(),
            hint=await self._hint(spec, partition.scope) if mode.reads_documents else None,
            adaptive=adaptive,
            deadline=deadline,
            counters=counters,
            activity=self.activity,
            throttle=self.throttle,
        )
        await settle_left_batch(work)
        try:
            outcome = await self._batches(job, state, spec, partition, lost, counters, mode, work, adaptive)
        finally:
            await mode.drop_ahead()
            if adaptive is not None:
                self.pace = adaptive.state()
        if outcome.outcome != "lost" and not await mode.finish(work):
            return SliceResult("lost", counters)
        return outcome

    async def _batches(
        self,
        job: Job,
        state: State,
        spec: Background,
        partition: Partition,
        lost: asyncio.Event,
        counters: dict[str, int],
        mode: Mode,
        work: PartitionWork,
        adaptive: AdaptiveController | None,
    ) -> SliceResult:
        """Batch after batch until the slice ends (its deadline, a control, a stop, the partition done)."""
        engine = self.engine
        deadline = work.deadline
        health = engine.health_signals(spec)
        cursor = partition.cursor
        batches = 0
        seen = partition.control  # the stamp as claimed; the state is read below, after the claim
        look = True
        while True:
            if (halt := _interrupted(engine, lost)) is not None:
                return SliceResult(halt, counters)
            if batches > 0 and engine.now() >= deadline:
                return SliceResult("yielded", counters)
            cycle_started = engine.now()  # the adaptive controller's cycle: these reads and waits, then the batch
            if look:
                control = await self._control(state, partition)
                if control is not None:
                    return SliceResult(control, counters)
                look = False
            override = self.override or {}
            size = override.get("batch_size") or (adaptive.batch_size() if adaptive else spec.batch_size)
            wait_started = engine.now()
            await before_batch(
                pause_ms=override.get("pause_ms", spec.pause_ms),
                hook=spec.throttle,
                context=ThrottleContext(state.name, spec.collection, state.generation, str(partition.seq), size, engine.cancel),
                adaptive_pause_ms=adaptive.pause_ms() if adaptive else 0,
                first=batches == 0,
                cancel=engine.cancel,
            )
            waited = await wait_while_unhealthy(health, cancelled=engine.cancel.is_set) if health else 0.0
            if waited:
                work.throttled("health", waited_ms=waited)
            # A stop (or a lost lease) during the waits above ends the slice before its batch:
            # the wait was cut short for that, not to write one more batch sooner.
            if (halt := _interrupted(engine, lost)) is not None:
                return SliceResult(halt, counters)
            # A pause or cancel given during a long wait is honoured before the batch, not after it:
            # one read of the control fields, only when the wait was long enough for one to come.
            if engine.now() - wait_started >= CONTROL_RECHECK_AFTER_WAIT_S and (control := await self._control(state, partition)) is not None:
                return SliceResult(control, counters)
            if adaptive is not None:
                adaptive.waited((engine.now() - cycle_started) * 1000, health_ms=waited)
            failed_before = counters.get("failed", 0)
            # Unpaced (no pause or hook between batches, and the health signals let this one go at once),
            # the next batch follows at once: the mode may read it while this one is written. Paced, a batch
            # read ahead before the pace changed is dropped: it went stale in the wait, which was room left
            # for the application (or asked for by a health signal), not for reads.
            paced = override.get("pause_ms", spec.pause_ms) > 0 or spec.throttle is not None or bool(waited) or bool(adaptive and adaptive.pause_ms())
            if paced:
                await mode.drop_ahead()
            try:
                progress = await mode.advance(work, cursor, size, ahead=not paced)
            except TransactionsUnsupported:
                await self._fail(state, f"{state.name} asks for transactions, but this server does not support them; run it without transaction")
                return SliceResult("failed", counters)
            if not progress.lease_held:
                return SliceResult("lost", counters)
            cursor = progress.cursor
            batches += 1
            await self._sample(state, counters)
            if progress.control != seen:  # the state changed since the lane last read it
                seen, look = progress.control, True
            # judged before "done": the batch that closes a partition may be the one over the budget
            if counters.get("failed", 0) > failed_before and await self._over_budget(state, spec):
                return SliceResult("failed", counters)
            if progress.done:
                return SliceResult("done", counters)

    async def _over_budget(self, state: State, spec: Background) -> bool:
        """More distinct failed documents than ``max_document_errors``: fail the migration now."""
        fresh = await self.engine.store.state(state.name)
        if fresh is None:
            return False
        total = await self.engine.store.bad_id_count(fresh)
        if total <= spec.max_document_errors:
            return False
        await self._fail(state, over_budget(state.name, total, spec.max_document_errors))
        return True

    async def _fail(self, state: State, message: str) -> None:
        if await self.engine.store.transition(
            state.name, allowed=("running",), to="failed", action="fail", reason=clipped(message, 200), set_={"last_error": message}, now_fields=("failed_at",)
        ):
            self.engine.events.emit("failed", state.name, reason=message)


def _interrupted(engine: EngineContext, lost: asyncio.Event) -> Outcome | None:
    """Whether the slice must end now: this process stops, or another lane took the lease."""
    if engine.cancel.is_set():
        return "stopped"
    if lost.is_set():
        return "lost"
    return None
