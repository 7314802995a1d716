"""A lane: claim a partition under a lease, work it batch by batch, checkpoint after each.

A slice works at least one batch and then yields at ``slice_ms``, so lanes
take turns and a paused, cancelled or replanned migration is noticed within
one batch. Every checkpoint is fenced by the lease token: a lane whose lease
was reaped (it stalled past the TTL) learns it at its next checkpoint and
stops without counting anything twice.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from bson import decode, encode
from bson.raw_bson import RawBSONDocument
from pymongo.errors import PyMongoError

from ..redaction import describe_error
from .batch import BatchFailed, BatchResult, apply_batch, is_transient
from .document import bson_problem
from .engine import EngineContext
from .job import Job
from .model import Checkpoint, Lease, Partition, State
from .planner import batch_filter
from .spec import MAX_CHECKPOINT_BYTES, Adaptive, Background
from .health import wait_while_unhealthy
from .throttle import AdaptiveController, ThrottleContext, before_batch
from .transaction import Skip, TransactionalBatchSize, TransactionsUnsupported, backoff_seconds, commit, run_batch, transaction_options, unsupported

log = logging.getLogger("mongoshift.background")

Outcome = Literal["exhausted", "busy", "yielded", "done", "paused", "cancelled", "failed", "stale", "stopped", "lost", "error"]

#: Errors that mean the server is overloaded, not that the data is wrong.
OVERLOAD_CODES = frozenset({50, 262, 64, 91, 189, 6, 7, 89, 9001, 10107, 11600, 11602, 13435, 13436})


@dataclass
class SliceResult:
    outcome: Outcome
    counters: dict[str, int] = field(default_factory=dict)
    error: str | None = None


def _overloaded(exc: BaseException) -> bool:
    has_label = getattr(exc, "has_error_label", None)
    if has_label is not None and (has_label("TransientTransactionError") or has_label("RetryableWriteError")):
        return True
    return getattr(exc, "code", None) in OVERLOAD_CODES


def _counts(result: BatchResult, scanned: int) -> dict[str, int]:
    return {
        "scanned": scanned,
        "migrated": result.migrated,
        "skipped": result.skipped,
        "conflicts": result.conflicts,
        "failed": len(result.errors),
        "retried": result.retried,
        "batches": 1,
    }


def _merge(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value


class Lane:
    def __init__(self, engine: EngineContext, lane_id: str) -> None:
        self.engine = engine
        self.id = lane_id
        self._touched = float("-inf")  # when a checkpoint last renewed the lease
        self._in_transaction = False

    async def run_slice(self, state: State, spec: Background, *, slice_ms: int | None = None) -> SliceResult:
        """One slice: reap, claim, work until the slice ends; never raises for a batch failure."""
        engine = self.engine
        job = Job.of(state, spec)
        await engine.store.reap(state.name)
        slots = list(range(spec.max_parallel))
        offset = engine.rng.randrange(len(slots))
        claimed = await engine.store.claim(state, slots=slots[offset:] + slots[:offset], owner=self.id, ttl_ms=engine.lease_ttl_ms)
        if claimed is None:
            return SliceResult("exhausted")
        if claimed is False:
            return SliceResult("busy")
        lease, partition = claimed
        engine.events.emit("slice_start", state.name, partition=partition.seq, slot=lease.slot, lane=self.id)
        lost = asyncio.Event()
        self._touched = engine.now()  # the claim renewed the lease
        heartbeat = asyncio.create_task(self._heartbeat(lease, lost, stall_s=spec.slice_ms / 1000 + 3 * engine.lease_ttl_ms / 1000))
        counters: dict[str, int] = {}
        outcome: SliceResult
        try:
            outcome = await self._work(job, state, spec, lease, partition, lost, counters, slice_ms or spec.slice_ms)
        except Exception as exc:
            message = describe_error(exc)  # a bulk write error carries whole documents
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
            engine.events.emit("lease_lost", state.name, partition=partition.seq, lane=self.id)
        elif outcome.outcome not in ("done", "error"):
            await engine.store.release(lease)
        engine.events.emit("slice_end", state.name, partition=partition.seq, outcome=outcome.outcome, **counters)
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
            idle = self.engine.now() - self._touched
            if idle < lease.ttl_ms / 4000:
                continue
            if self._in_transaction and idle < lease.ttl_ms * 0.6 / 1000:
                continue  # the transaction's checkpoint renews it; a write now would only make it conflict
            if idle > stall_s:
                log.warning("a lane made no progress for %.0fs: letting its lease expire", idle)
                return
            try:
                if not await self.engine.store.renew(lease):
                    lost.set()
                    return
            except Exception as exc:  # a blip: the fenced checkpoint is the real guard
                log.debug("lease renewal failed: %s", type(exc).__name__)

    async def _control(self, state: State, partition: Partition) -> Outcome | None:
        doc = await self.engine.store.states.find_one(
            {"_id": state.name}, {"status": 1, "generation": 1, "plan.token": 1, "registration": 1}
        )
        if doc is None or doc.get("registration") != state.registration:
            return "stale"
        status = doc.get("status")
        if status in ("paused", "cancelled", "failed"):
            return status  # type: ignore[no-any-return]
        if status != "running" or doc.get("generation") != partition.generation or (doc.get("plan") or {}).get("token") != partition.plan:
            return "stale"
        return None

    async def _hint(self, spec: Background) -> list[tuple[str, int]] | None:
        """The version index, when it exists; otherwise warn once and scan."""
        key = [(spec.version_field, 1), ("_id", 1)]
        async for index in await self.engine.db[spec.collection].list_indexes():
            if [(k, int(v)) for k, v in index["key"].items() if isinstance(v, (int, float))] == key:
                return key
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
        collection = engine.db[spec.collection]
        cursor = partition.cursor
        adaptive = AdaptiveController(spec.adaptive, spec.batch_size, partition.throttle) if isinstance(spec.adaptive, Adaptive) else None
        hint = await self._hint(spec) if job.step is None else None
        health = engine.health_signals(spec)
        match = job.match()
        sizing = TransactionalBatchSize(spec.batch_size)
        batches = 0
        while True:
            if engine.cancel.is_set():
                return SliceResult("stopped", counters)
            if lost.is_set():
                return SliceResult("lost", counters)
            if batches > 0 and engine.now() >= deadline:
                return SliceResult("yielded", counters)
            control = await self._control(state, partition)
            if control is not None:
                return SliceResult(control, counters)
            size = adaptive.batch_size() if adaptive else spec.batch_size
            await before_batch(
                pause_ms=spec.pause_ms,
                hook=spec.throttle,
                context=ThrottleContext(state.name, spec.collection, state.generation, str(partition.seq), size, engine.cancel),
                adaptive_pause_ms=adaptive.pause_ms() if adaptive else 0,
                first=batches == 0,
                cancel=engine.cancel,
            )
            if health:
                waited = await wait_while_unhealthy(health, cancelled=engine.cancel.is_set)
                if waited:
                    engine.events.emit("throttle", state.name, change="health", waited_ms=round(waited))
            failed_before = counters.get("failed", 0)
            try:
                if job.step is not None:
                    done, cursor, ok = await self._step(job, spec, lease, partition, cursor, deadline, counters)
                elif spec.transaction is not None:
                    done, cursor, ok = await self._transactional(job, spec, lease, partition, cursor, collection, match, hint, counters, sizing)
                else:
                    done, cursor, ok = await self._batch(job, spec, lease, partition, cursor, size, collection, match, hint, adaptive, counters)
            except TransactionsUnsupported:
                await self._fail(state, f"{state.name} asks for transactions, but this server does not support them; run it without transaction")
                return SliceResult("failed", counters)
            if not ok:
                return SliceResult("lost", counters)
            batches += 1
            if done:
                return SliceResult("done", counters)
            if counters.get("failed", 0) > failed_before and await self._over_budget(state, spec):
                return SliceResult("failed", counters)

    async def _batch(self, job, spec, lease, partition, cursor, size, collection, match, hint, adaptive, counters):  # type: ignore[no-untyped-def]
        engine = self.engine
        filter_ = batch_filter(match, partition.scope, cursor)
        # Raw BSON: apply_batch decodes each document twice (original and copy) instead of
        # decoding it here and copying it through an encode.
        raw = collection.with_options(codec_options=collection.codec_options.with_options(document_class=RawBSONDocument))
        find = raw.find(filter_, job.projection, sort=[("_id", 1)], limit=size)
        if hint is not None:
            find = find.hint(hint)
        docs = await find.to_list(None)
        ctx = job.context(str(partition.seq), engine.cancel)
        started = engine.now()
        try:
            result = await apply_batch(job, docs, collection, ctx) if docs else BatchResult()
        except BatchFailed:
            raise
        except Exception as exc:
            if adaptive is not None and _overloaded(exc):
                change = adaptive.record((engine.now() - started) * 1000, overloaded=True)
                if change:
                    engine.events.emit("throttle", job.name, change=change, **adaptive.state())
            raise
        latency_ms = (engine.now() - started) * 1000
        if adaptive is not None and docs:
            change = adaptive.record(latency_ms)
            if change:
                engine.events.emit("throttle", job.name, change=change, **adaptive.state())
        done = len(docs) < size
        next_cursor = Checkpoint(last_id=decode(docs[-1].raw, collection.codec_options)["_id"], started=True) if docs else cursor
        batch_counts = _counts(result, len(docs))
        _merge(counters, batch_counts)
        ok = await engine.store.checkpoint(
            lease,
            cursor=next_cursor.to_document(),
            counters=batch_counts,
            done=done,
            bad_ids=[e.id for e in result.errors],
            doc_errors=[e.to_document() for e in result.errors],
            throttle=adaptive.state() if adaptive else None,
        )
        if ok:
            self._touched = engine.now()
            engine.events.emit("batch", job.name, partition=partition.seq, size=size, latency_ms=round(latency_ms, 1), **batch_counts)
        else:
            # The lease was taken over, but these guarded writes did happen and nobody else will
            # count them (the next holder's read no longer matches them): count them on the state.
            await engine.store.add_to_totals(job.name, job.registration, batch_counts)
        return done, next_cursor, ok

    async def _transactional(self, job, spec, lease, partition, cursor, collection, match, hint, counters, sizing):  # type: ignore[no-untyped-def]
        """One batch in a transaction (see :mod:`.transaction`); counters are exact."""
        engine = self.engine

        async def read(session: Any, limit: int) -> list[dict[str, Any]]:
            assert spec.transaction is not None
            find = collection.find(
                batch_filter(match, partition.scope, cursor),
                job.projection,
                sort=[("_id", 1)],
                limit=limit,
                session=session,
                max_time_ms=spec.transaction.timeout_ms,
            )
            if hint is not None:
                find = find.hint(hint)
            return await find.to_list(None)

        async def write(session: Any, docs: list[dict[str, Any]]) -> BatchResult:
            ctx = job.context(str(partition.seq), engine.cancel, session=session, db=engine.db, client=engine.client)
            return await apply_batch(job, docs, collection, ctx, session=session, strict=True)

        async def checkpoint(session, docs, fetched, limit, result, excluded, retries):  # type: ignore[no-untyped-def]
            done = len(docs) == len(fetched) and len(fetched) < limit
            moved = Checkpoint(last_id=docs[-1]["_id"], started=True) if docs else cursor
            counts = _counts(result, len(docs))
            counts["txn_retries"] = retries
            return await engine.store.checkpoint(
                lease,
                cursor=moved.to_document(),
                counters=counts,
                done=done,
                bad_ids=[e.id for e in excluded],
                doc_errors=[e.to_document() for e in excluded],
                session=session,
            )

        self._in_transaction = True
        try:
            outcome = await run_batch(
                client=engine.client, collection=collection, spec=spec, read=read, write=write, checkpoint=checkpoint,
                sizing=sizing, rng=engine.rng,
            )
        except Skip as skip:  # alone and still in the way: the next pass takes it
            moved = Checkpoint(last_id=skip.doc["_id"], started=True)
            counts = {"scanned": 1, "conflicts": 1, "batches": 1, "txn_retries": skip.retries}
            _merge(counters, counts)
            return False, moved, await engine.store.checkpoint(lease, cursor=moved.to_document(), counters=counts, done=False)
        finally:
            self._in_transaction = False
        if outcome.lost:
            return False, cursor, False
        counts = _counts(outcome.result, len(outcome.docs))
        counts["txn_retries"] = outcome.retries
        _merge(counters, counts)
        self._touched = engine.now()
        engine.events.emit("batch", job.name, partition=partition.seq, size=len(outcome.docs), transaction=True, **counts)
        moved = Checkpoint(last_id=outcome.last_id, started=True) if outcome.docs else cursor
        return outcome.done, moved, True

    async def _step(self, job, spec, lease, partition, cursor, deadline, counters):  # type: ignore[no-untyped-def]
        """One call of a step migration; its checkpoint is what it returned (in a transaction if asked)."""
        engine = self.engine
        if spec.transaction is None:
            return await self._step_once(job, lease, partition, cursor, deadline, counters, session=None)
        for attempt in range(spec.transaction.max_retries + 1):
            async with engine.client.start_session() as session:
                try:
                    await session.start_transaction(**transaction_options(spec))
                    done, moved, ok = await self._step_once(job, lease, partition, cursor, deadline, counters, session=session)
                    if not ok:
                        await session.abort_transaction()
                        return done, moved, ok
                    await commit(session)
                    return done, moved, ok
                except PyMongoError as exc:
                    if session.in_transaction:
                        await session.abort_transaction()
                    if unsupported(exc):
                        raise TransactionsUnsupported(str(exc)) from None
                    if not is_transient(exc) or attempt == spec.transaction.max_retries:
                        raise
                    await asyncio.sleep(backoff_seconds(attempt + 1, engine.rng))
        raise AssertionError("unreachable")

    async def _step_once(self, job, lease, partition, cursor, deadline, counters, *, session):  # type: ignore[no-untyped-def]
        engine = self.engine
        ctx = job.context(
            str(partition.seq), engine.cancel, db=engine.db, client=engine.client, checkpoint=cursor.step, deadline=deadline, session=session
        )
        out = job.step(ctx)
        if inspect.isawaitable(out):
            out = await out
        if not isinstance(out, dict) or not isinstance(out.get("done"), bool):
            raise BatchFailed("step() must return a dict with 'done' (a bool) and 'checkpoint'")
        checkpoint = out.get("checkpoint")
        try:
            size = len(encode({"checkpoint": checkpoint}))
        except Exception:  # the encoder's own message quotes the value
            raise BatchFailed(f"step() returned a checkpoint that cannot be stored: {bson_problem({'checkpoint': checkpoint})}") from None
        if size > MAX_CHECKPOINT_BYTES:
            raise BatchFailed(f"step() returned a checkpoint larger than {MAX_CHECKPOINT_BYTES // 1024} KiB: keep a cursor in it, not data")
        step_counts = {"batches": 1}
        for key in ("scanned", "migrated"):
            value = out.get(key, out.get("processed") if key == "scanned" else None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                step_counts[key] = value
        next_cursor = Checkpoint(last_id=None, started=True, step=checkpoint)
        ok = await engine.store.checkpoint(lease, cursor=next_cursor.to_document(), counters=step_counts, done=out["done"], session=session)
        if ok:
            _merge(counters, step_counts)
            self._touched = engine.now()
        return out["done"], next_cursor, ok

    async def _over_budget(self, state: State, spec: Background) -> bool:
        """More distinct failed documents than ``max_document_errors``: fail the migration now."""
        fresh = await self.engine.store.state(state.name)
        if fresh is None:
            return False
        total = await self.engine.store.bad_id_count(fresh)
        if total <= spec.max_document_errors:
            return False
        await self._fail(
            state,
            f"{total} document(s) could not be migrated, more than max_document_errors "
            f"({spec.max_document_errors}); see 'mongoshift background status {state.name}'",
        )
        return True

    async def _fail(self, state: State, message: str) -> None:
        if await self.engine.store.transition(
            state.name, allowed=("running",), to="failed", action="fail", reason=message[:200], set_={"last_error": message}, now_fields=("failed_at",)
        ):
            self.engine.events.emit("failed", state.name, reason=message)
