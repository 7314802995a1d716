"""How a lane moves through its partition: one strategy per kind of migration, chosen once per slice.

* :class:`PlainBatches`: read a batch, move the fenced checkpoint (recording the batch in
  flight), then transform it and write it as guarded updates (``migrate``, ``migrate_batch``
  and ``pipeline`` migrations);
* :class:`TransactionalBatches`: all of that in one snapshot transaction (see :mod:`..write.transaction`);
* :class:`StepCalls`: one call of the user's ``step``, whose result is the checkpoint.

Each one takes the slice's :class:`PartitionWork` and the cursor to start from and answers with
:class:`Progress`; the lane around them handles controls, pauses and the slice's end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bson import Binary, decode, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from ...project.server_errors import (
    overloaded,
    transactions_unsupported,
    transient_transaction_error,
)
from ...project.user_code import call
from ...schema.background import MAX_CHECKPOINT_BYTES
from ..plan.hash_drain import drain_after, drain_read
from ..plan.planner import batch_filter, batch_sort, cursor_after, range_filter
from ..state.model import Checkpoint, Checkpointed, Lease, Partition
from ..write.batch import BatchFailed, BatchResult, DocumentError, Lent, apply_batch, as_read, at_version, id_key, lend_decoded, rewrite_range
from ..write.document import bson_problem
from ..write.job import Job
from ..write.transaction import (
    Read,
    Skip,
    TransactionalBatchSize,
    TransactionsUnsupported,
    backoff_seconds,
    commit,
    read_replies,
    run_batch,
    transaction_options,
)
from .context import EngineContext
from .throttle import AdaptiveController, ThrottleReport


@dataclass
class LeaseActivity:
    """What a lane's heartbeat reads: when a checkpoint last renewed the lease, and whether a transaction is open."""

    touched: float = float("-inf")
    in_transaction: bool = False


@dataclass(frozen=True)
class PartitionWork:
    """What every batch (or step) of one slice on a claimed partition works with and reports to."""

    engine: EngineContext
    job: Job
    lease: Lease
    partition: Partition
    collection: AsyncCollection[dict[str, Any]]
    match: dict[str, Any]
    hint: list[tuple[str, Any]] | None
    adaptive: AdaptiveController | None
    deadline: float
    counters: dict[str, int]
    activity: LeaseActivity
    throttle: ThrottleReport  # the lane's, across its slices

    @property
    def projection(self) -> dict[str, int] | None:
        """The job's projection, plus the shard key a targeted keyset cursor needs."""
        projection = self.job.projection
        if projection is None or not self.partition.scope.targeted:
            return projection
        return {**projection, **dict.fromkeys(self.partition.scope.key_fields, 1)}

    def find(self, collection: AsyncCollection[Any], cursor: Checkpoint, size: int, **options: Any) -> Any:
        """The cursor of the next batch from ``cursor``: a keyset (or ``_id``) range in its order, or a
        draining hash range through the index's bounds (:mod:`..plan.hash_drain`); None when nothing is left.

        The batch comes in one reply (``batch_size``): without it, mongod sends 101 documents first and
        the rest after a ``getMore``, a second round trip for every batch of more than 101."""
        scope = self.partition.scope
        if scope.drains:
            read = drain_read(scope, cursor, self.match, version_field=self.job.spec.version_field, source=self.job.source)
            if read is None:
                return None
            # The bounds as documents: the driver sends a list of pairs as it is given, a BSON array, which mongod refuses
            # for min and max (the embedded server took either).
            bounds = {"min": dict(read.min), "max": dict(read.max)}
            return collection.find(read.filter, self.projection, limit=size, batch_size=size, hint=read.hint, **bounds, **options)
        find = collection.find(batch_filter(self.match, scope, cursor), self.projection, sort=batch_sort(scope), limit=size, batch_size=size, **options)
        return find.hint(self.hint) if self.hint is not None else find

    def find_command(self, collection: str, cursor: Checkpoint, size: int, *, max_time_ms: int) -> dict[str, Any] | None:
        """:meth:`find`'s read as a ``find`` command (what the driver sends for that cursor), for a read
        that takes its replies whole (:func:`..write.transaction.read_replies`); None when nothing is left."""
        scope = self.partition.scope
        command: dict[str, Any] = {"find": collection}
        if scope.drains:
            read = drain_read(scope, cursor, self.match, version_field=self.job.spec.version_field, source=self.job.source)
            if read is None:
                return None
            command.update(filter=read.filter or {}, hint=dict(read.hint), min=dict(read.min), max=dict(read.max))
        else:
            command.update(filter=batch_filter(self.match, scope, cursor), sort=dict(batch_sort(scope)))
            if self.hint is not None:
                command["hint"] = dict(self.hint)
        if (projection := self.projection) is not None:
            command["projection"] = projection
        # A batch size one past the limit, as the driver sends it: the server closes the cursor with the
        # batch instead of leaving it open for a getMore. The index bounds go as documents (the driver
        # sends a list of pairs as it is given, an array).
        command.update(limit=size, batchSize=size + 1, maxTimeMS=max_time_ms)
        return command

    def after(self, cursor: Checkpoint, last: Any, *, read: int, limit: int, left: list[Any]) -> tuple[Checkpoint, bool]:
        """The cursor after a batch that read ``read`` documents (``last`` the last one, decoded) and
        left ``left`` in the source shape; and whether the partition is done."""
        scope = self.partition.scope
        if scope.drains:
            return drain_after(scope, cursor, read=read, limit=limit, left=left, source=self.job.source)
        return (cursor_after(scope, last) if last is not None else cursor), read < limit

    def renewed(self) -> None:
        """A checkpoint just renewed the lease: the heartbeat can rest."""
        self.activity.touched = self.engine.now()

    def throttled(self, change: str, *, waited_ms: float = 0.0, **state: int) -> None:
        """A change of pace: a ``throttle`` event when the lane's report is due (see :class:`ThrottleReport`).

        A change of the adaptive controller also carries why: its measures and targets (:meth:`.AdaptiveController.why`)."""
        adaptive = self.adaptive
        if adaptive is not None and change != "health":
            state = {**state, **adaptive.why()}
        data = self.throttle.note(change, waited_ms=waited_ms, **state)
        if data is not None:
            self.engine.events.emit("throttle", self.job.name, partition=self.partition.seq, **data)


@dataclass(frozen=True)
class Progress:
    """Where one batch (or step) left the partition."""

    done: bool
    cursor: Checkpoint
    lease_held: bool  # False: the checkpoint was fenced off, another lane holds the partition now
    #: The partition's control stamp its checkpoint returned: the lane compares it with the last one it saw.
    control: Any = None

    @classmethod
    def after(cls, done: bool, cursor: Checkpoint, checkpointed: Checkpointed | None) -> Progress:
        """Where a batch left the partition, from its checkpoint's answer (None: fenced off)."""
        return cls(done, cursor, checkpointed is not None, checkpointed.control if checkpointed else None)


class Mode(Protocol):
    #: Whether it reads the collection in batches (and so wants the version index as a hint).
    reads_documents: bool

    async def advance(self, work: PartitionWork, cursor: Checkpoint, size: int, *, ahead: bool = False) -> Progress:
        """One batch (or step) from ``cursor``; ``size`` is the batch size the throttle settled on.

        ``ahead``: the lane will start its next batch at once (no pause, hook or health wait between
        them), so a mode may read that batch while this one is written (only :class:`PlainBatches` does)."""
        ...

    async def finish(self, work: PartitionWork) -> bool:
        """At the slice's end: what the last batch still owes the partition; False when fenced off."""
        ...

    async def drop_ahead(self) -> None:
        """Drop what was read ahead: at the slice's end, whatever it ends with (done, yielded, stopped,
        lost, failed), and when the lane waited before the next batch (the read is stale by then)."""
        ...


def mode_for(job: Job) -> Mode:
    if job.step is not None:
        return StepCalls(job.step)
    if job.spec.transaction is not None:
        return TransactionalBatches(TransactionalBatchSize(job.spec.batch_size))
    if job.pipeline is not None:
        return PipelineRanges()
    return PlainBatches()


def counts_of(result: BatchResult, scanned: int) -> dict[str, int]:
    return {
        "scanned": scanned,
        "migrated": result.migrated,
        "skipped": result.skipped,
        "conflicts": result.conflicts,
        "failed": len(result.errors),
        "retried": result.retried,
        "batches": 1,
    }


def add_counts(into: dict[str, int], counts: dict[str, int]) -> None:
    for key, value in counts.items():
        into[key] = into.get(key, 0) + value


@dataclass
class _Owed:
    """A written batch's checkpoint, not sent yet: the next batch's checkpoint carries it."""

    cursor: Checkpoint
    counts: dict[str, int]
    bad_ids: list[Any]
    doc_errors: list[dict[str, Any]]
    throttle: dict[str, Any] | None

    def after(self, earlier: _Owed | None) -> _Owed:
        """This batch's checkpoint carrying ``earlier``'s too, when that one is still owed."""
        if earlier is None:
            return self
        counts = dict(earlier.counts)
        add_counts(counts, self.counts)
        return _Owed(self.cursor, counts, [*earlier.bad_ids, *self.bad_ids], [*earlier.doc_errors, *self.doc_errors], self.throttle)


#: The name of a lane's read of its next batch (:meth:`PlainBatches._read_ahead`), for a reader of ``asyncio.all_tasks()``.
READ_AHEAD_TASK = "mongoshift read-ahead"


@dataclass(frozen=True)
class _Read:
    """A batch as read: the documents, the batch handed to :func:`apply_batch` (a ``migrate`` batch lent,
    :func:`lend_decoded`; a pipeline's raw documents as they are) and its last document as read (None: empty)."""

    docs: list[Any]
    batch: list[Any] | Lent
    last: Any

    def cut(self, size: int, codec: CodecOptions[Any]) -> _Read:
        """The first ``size`` documents (lent anew: a lent batch is never cut)."""
        return _lent(self.docs[:size], codec)


def _lent(docs: list[dict[str, Any]], codec: CodecOptions[Any]) -> _Read:
    """A ``migrate`` batch read decoded by the driver (one C decode, no object per raw document): the
    decoded documents, this batch's alone, are lent to the transform as they are; the batch's ids and
    revisions come from the lent tops, and the last document as read is copied before the transforms,
    for the cursor."""
    if not docs:
        return _Read(docs, docs, None)
    batch = lend_decoded(docs, codec)
    return _Read(docs, batch, as_read(batch.tops[-1], codec))


async def _read(find: Any, codec: CodecOptions[Any], *, raw: CodecOptions[Any] | None) -> _Read:
    """The batch ``find`` reads (None: nothing is left), lent (``raw`` None), or raw documents (a pipeline's
    ``_id`` path: ``raw`` the collection's codec, the last one decoded with it)."""
    docs: list[Any] = await find.to_list(None) if find is not None else []
    if raw is None:
        return _lent(docs, codec)
    return _Read(docs, docs, decode(docs[-1].raw, raw) if docs else None)


@dataclass
class _Ahead:
    """The next batch's read, started while the current batch is transformed and written; lent as it
    comes in, while the server works on the current batch's write."""

    cursor: Checkpoint  # the cursor it reads from: the next batch's, as the lane will pass it (the same object)
    size: int
    read: asyncio.Future[_Read]

    async def drop(self) -> None:
        """Cancel the read if it is still in flight; its answer or error is of no use any more."""
        self.read.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.read

    async def take(self, cursor: Checkpoint, size: int, codec: CodecOptions[Any]) -> tuple[_Read, int] | None:
        """The batch read ahead and the batch size it was read at, when it is the batch ``advance`` asks
        for (the same cursor); None otherwise, or when the read failed (the batch is then read again,
        where a lasting error is raised as any read's)."""
        if cursor is not self.cursor:
            await self.drop()
            return None
        try:
            read = await self.read  # a stop of the lane meanwhile cancels the read with it
        except Exception:
            return None
        if len(read.docs) > size:  # the throttle settled on a smaller batch since: the rest is read again next time
            return read.cut(size, codec), size
        return read, self.size


@dataclass
class PlainBatches:
    """A batch read (decoded by the driver), written through :func:`apply_batch`, around one fenced checkpoint.

    The checkpoint goes between the read and the write: it records the batch about to be written
    (its ids and revisions as read: the partition's ``inflight``) and carries the previous batch's
    cursor, counters and failed documents. A lane killed between a write and its bookkeeping so
    leaves on the partition what it was writing, and the next lane to claim the partition counts
    what of it was rewritten (:func:`settle_left_batch`) before it goes on from the cursor
    before it: the counters stay exact, still at one bookkeeping round trip per batch. A batch
    that ends the partition or failed documents is checkpointed at once after its write (the
    document budget is judged on it), and the last one of a slice when the slice ends (:meth:`finish`).
    """

    reads_documents = True
    owed: _Owed | None = None
    #: The next batch's read, when one was started ahead (see :meth:`_read_ahead`).
    ahead: _Ahead | None = None
    #: How long the last batch took (engine clock): a read ahead is started only if the slice has that much left.
    last_batch_s: float = 0.0

    async def advance(self, work: PartitionWork, cursor: Checkpoint, size: int, *, ahead: bool = False) -> Progress:
        engine, job, collection, adaptive = work.engine, work.job, work.collection, work.adaptive
        began = engine.now()
        # A pipeline batch is read raw: only its ids are used.
        codec = collection.codec_options.with_options(document_class=dict if job.pipeline is None else RawBSONDocument)
        read: _Read | None = None
        wanted = size  # the size the lane asks for now: the next read ahead takes it, whatever this batch was read at
        if self.ahead is not None:
            taken, self.ahead = await self.ahead.take(cursor, size, codec), None
            if taken is not None:
                read, size = taken
        if read is None:
            find = work.find(collection.with_options(codec_options=codec), cursor, size)
            read = await _read(find, codec, raw=None if job.pipeline is None else collection.codec_options)
        read_ms = (engine.now() - began) * 1000
        docs, batch, last = read.docs, read.batch, read.last
        control: Any = None
        if docs:
            checkpointed = await self._checkpoint(
                work, cursor, intent=_intent(job, work.lease, batch.tops if isinstance(batch, Lent) else docs, collection.codec_options)
            )
            if checkpointed is None:
                return Progress(False, cursor, False)  # fenced off: this batch is not written
            control = checkpointed.control
            if ahead and len(docs) == size and job.pipeline is None:
                # At ``wanted``, not at the size this batch was read ahead at: the controller grows an unpaced lane's
                # batches only through the next read (read at the old size, each batch kept it for ever).
                self._read_ahead(work, collection.with_options(codec_options=codec), cursor_after(work.partition.scope, last), wanted)
        ctx = job.context(str(work.partition.seq), engine.cancel, engine.events)
        started = engine.now()
        try:
            result = await apply_batch(job, batch, collection, ctx) if docs else BatchResult()
        except BatchFailed:
            raise
        except Exception as exc:
            if adaptive is not None and overloaded(exc):
                change = adaptive.record((engine.now() - started) * 1000, overloaded=True)
                if change:
                    work.throttled(change, **adaptive.pace())
            raise
        latency_ms = (engine.now() - started) * 1000
        if adaptive is not None and docs:
            change = adaptive.record(
                read_ms + latency_ms, elapsed_ms=(engine.now() - began) * 1000, docs=len(docs), conflicts=result.retried + result.conflicts
            )
            if change:
                work.throttled(change, **adaptive.pace())
        next_cursor, done = work.after(cursor, last, read=len(docs), limit=size, left=[*(e.id for e in result.errors), *result.left])
        if self.ahead is not None:  # the same position (after the same last document), as the object the read ahead is taken by
            next_cursor = self.ahead.cursor
        batch_counts = counts_of(result, len(docs))
        add_counts(work.counters, batch_counts)
        self.owed = _Owed(
            next_cursor, batch_counts, [e.id for e in result.errors], [e.to_document() for e in result.errors], adaptive.state() if adaptive else None
        ).after(self.owed)  # a read that found nothing wrote no checkpoint: the batch before is still owed
        if done or result.errors or not docs:
            closed = await self._checkpoint(work, next_cursor, done=done)
            if closed is None:
                return Progress(done, next_cursor, False)
            control = closed.control
        engine.events.emit(
            "batch", job.name, partition=work.partition.seq, size=size, latency_ms=round(latency_ms, 1), duration_ms=_ms_since(engine, began), **batch_counts
        )
        self.last_batch_s = engine.now() - began
        return Progress(done, next_cursor, True, control)

    def _read_ahead(self, work: PartitionWork, collection: AsyncCollection[Any], cursor: Checkpoint, size: int) -> None:
        """Start reading the batch after this one, from ``cursor``, while this one is transformed and written.

        The server answers that ``find`` while the client transforms, as it would otherwise idle; B3's
        loop (read, write, read...) leaves the two to take turns. It is as safe as any read: a document
        the application changes after it is a conflict of the guarded write, as after any read. Only a
        keyset range reads ahead (a draining hash range's next read depends on what this batch leaves),
        only a full batch (a short one ends the partition), and not when the slice will have ended by the
        time this batch is written (a read for the next slice would be dropped). What is not taken by the
        next :meth:`advance` (a stop, a pause, a control, a lost lease, the slice's end) is dropped by :meth:`drop_ahead`."""
        engine = work.engine
        if work.partition.scope.drains or engine.cancel.is_set() or engine.now() + self.last_batch_s >= work.deadline:
            return
        find = work.find(collection, cursor, size)
        if find is not None:
            codec = collection.codec_options
            self.ahead = _Ahead(cursor, size, asyncio.get_running_loop().create_task(_read(find, codec, raw=None), name=READ_AHEAD_TASK))

    async def finish(self, work: PartitionWork) -> bool:
        """Checkpoint the slice's last written batch, if it is still owed; False when fenced off."""
        if self.owed is None:
            return True
        return await self._checkpoint(work, self.owed.cursor) is not None

    async def drop_ahead(self) -> None:
        if self.ahead is not None:
            ahead, self.ahead = self.ahead, None
            await ahead.drop()

    async def _checkpoint(
        self, work: PartitionWork, cursor: Checkpoint, *, intent: dict[str, Any] | None = None, done: bool = False
    ) -> Checkpointed | None:
        """The fenced checkpoint at ``cursor`` carrying the owed batch, recording ``intent`` (None: none in flight).

        Fenced off, the owed batch was written all the same, and its count is this lane's to add to
        the totals unless the partition's new holder counted it already (:meth:`.BackgroundStore.take_intent`)."""
        engine, owed = work.engine, self.owed
        checkpointed = await engine.store.checkpoint(
            work.lease,
            cursor=cursor.to_document(),
            counters=owed.counts if owed else {},
            done=done,
            bad_ids=owed.bad_ids if owed else (),
            doc_errors=owed.doc_errors if owed else (),
            throttle=owed.throttle if owed else None,
            clean=owed is not None,  # a batch written: a slice failing before its own write must count
            intent=intent,
        )
        self.owed = None
        if checkpointed is not None:
            work.renewed()
        elif owed is not None and await engine.store.take_intent(work.lease):
            await engine.store.add_to_totals(work.job.name, work.job.registration, owed.counts)
        return checkpointed


def _intent(job: Job, lease: Lease, docs: Sequence[Mapping[str, Any]], codec: CodecOptions[Any]) -> dict[str, Any]:
    """What the partition keeps of a batch while it is written: the lease's token, and the batch's ids
    and (with revisions, when the documents were read whole) each one's revision as read.

    ``docs`` as read: a ``migrate`` batch's lent tops (:class:`..write.batch.Lent`), before its transforms.
    The ids and revisions travel as one BSON binary value (``batch``, :func:`left_batch` reads it): only
    the lane that settles a dead lane's batch ever looks inside, and a server stores one value of some
    kilobytes for less than two arrays of a batch's length (on the embedded server, a checkpoint took
    about 1.3 ms instead of 3.9 with 500 ids: docs/performance.md)."""
    left: dict[str, Any] = {"ids": [doc["_id"] for doc in docs]}
    field = job.revision_field
    if field is not None and job.pipeline is None:
        left["revs"] = [doc.get(field) for doc in docs]
    return {"token": lease.token, "batch": Binary(encode(left, codec_options=codec))}


def left_batch(inflight: Mapping[str, Any], codec: CodecOptions[Any]) -> tuple[list[Any], list[Any] | None]:
    """The ids and revisions (None: not recorded) of a batch a partition keeps in flight (:func:`_intent`)."""
    left = decode(bytes(inflight["batch"]), codec)
    return list(left["ids"]), left.get("revs")


async def settle_left_batch(work: PartitionWork) -> None:
    """Count the batch a lane left in flight on the partition just claimed (it died, or failed,
    between a write and its bookkeeping): each of its documents now at the target version whose
    revision moved on from the one read was rewritten by it. Once, before this lane reads anything.

    Only what this lane will not read again is counted: a document of the batch that still matches
    (the lane died before writing it) is read again from the cursor before the batch, and counted
    then, so ``scanned`` stays ``migrated + skipped + conflicts + failed``. The rest of the batch,
    rewritten by someone else or deleted since, is ``skipped``, as a batch's guarded write counts it.
    ``batches`` counts it only when some of it was settled so: a batch that failed before any write is
    none (the slice that failed on it is counted towards ``max_slice_failures`` instead)."""
    left = work.partition.inflight
    if not left or left.get("token") == work.lease.token:
        return
    job = work.job
    ids, revs = left_batch(left, work.collection.codec_options)
    read_as = {id_key(i): rev for i, rev in zip(ids, revs, strict=False)} if revs is not None else None
    field, revision, target = job.spec.version_field, job.revision_field, job.target
    projection = {field: 1, **({revision: 1} if revision else {})}
    primary = work.collection.with_options(read_preference=ReadPreference.PRIMARY)
    rewritten = 0
    async for doc in primary.find({"_id": {"$in": ids}}, projection, batch_size=len(ids)):
        if not at_version(doc.get(field), target):
            continue
        if read_as is None or revision is None or doc.get(revision) != read_as.get(id_key(doc["_id"])):
            rewritten += 1
    again = await primary.count_documents({"$and": [work.match, {"_id": {"$in": ids}}]}) if len(ids) > rewritten else 0
    settled = max(rewritten, len(ids) - again)
    # A batch none of whose documents was settled (its transform failed, its write never came) is no
    # batch: counted one, three slices failing at one batch read "2 batches" with nothing written.
    counts = {"scanned": settled, "migrated": rewritten, "skipped": settled - rewritten, "batches": 1 if settled else 0}
    if await work.engine.store.settle_intent(work.lease, str(left.get("token")), counts):
        add_counts(work.counters, counts)


#: Conflicting attempts of one range's transaction before the range is written through the ``_id`` path.
RANGE_CONFLICT_ATTEMPTS = 3


@dataclass
class PipelineRanges:
    """A ``pipeline`` migration's partition rewritten by bounded ``_id`` ranges, none of its ``_id``s read.

    Per range: one read of a single ``_id``, the range's last (the ``size``-th document in the source
    shape after the cursor, through the version index); then, in one transaction, one ``update_many``
    of the source shape within ``(cursor, last]`` (:func:`.rewrite_range`) and the range's fenced
    checkpoint. Its match count is the exact ``migrated``; ``scanned`` is what the read found (or the
    match count, if the application brought more documents into the source shape since), ``skipped``
    the difference. When the read finds no ``size``-th document, the range is the rest of the
    partition (``scanned`` is then its match count) and its checkpoint closes the partition.
    The transaction makes the range all or nothing, which is what keeps the counts exact: a failed
    multi-document update does not say what it wrote before it stopped, while here it wrote nothing;
    a lane whose lease is lost mid-range commits nothing (its checkpoint is fenced off); a conflict
    with an application write aborts it and the range is tried again, from the documents as they
    are then.

    What this path does not take goes through :class:`PlainBatches` (``_id``s read, one multi-document
    update over them, an exact per-document fallback), whose batch is checkpointed at once: a range
    whose update failed (a document the pipeline cannot evaluate: each failure is then named on its
    own), a range still conflicting after :data:`RANGE_CONFLICT_ATTEMPTS` attempts or too big or slow
    for a transaction, every partition of a collection whose shard key is known (in shard-key order or
    a draining hash range, a range is no ``_id`` interval, and a transaction should stay on one shard),
    and every range once the server refused a transaction (a standalone ``mongod``).
    """

    reads_documents = True
    ids: PlainBatches = field(default_factory=lambda: PlainBatches())
    transactions: bool = True

    async def finish(self, work: PartitionWork) -> bool:
        return await self.ids.finish(work)

    async def drop_ahead(self) -> None:
        """Nothing: the ``_id`` path is never asked to read ahead here (a range may come next)."""

    async def advance(self, work: PartitionWork, cursor: Checkpoint, size: int, *, ahead: bool = False) -> Progress:
        scope = work.partition.scope
        if not self.transactions or scope.drains or scope.targeted or work.job.shard_key or size < 2:
            return await self.ids.advance(work, cursor, size)
        find = work.find(work.collection, cursor, 1, skip=size - 1)
        boundary = await find.to_list(None) if find is not None else []
        progress = await self._range(work, cursor, size, boundary[0] if boundary else None)
        return progress if progress is not None else await self._by_ids(work, cursor, size)

    async def _by_ids(self, work: PartitionWork, cursor: Checkpoint, size: int) -> Progress:
        """One batch through the ``_id`` path, its checkpoint written now (a range's carries no owed batch)."""
        progress = await self.ids.advance(work, cursor, size)
        if progress.lease_held and not await self.ids.finish(work):
            return Progress(progress.done, progress.cursor, False)
        return progress

    async def _range(self, work: PartitionWork, cursor: Checkpoint, size: int, last: dict[str, Any] | None) -> Progress | None:
        """The range ``(cursor, last]`` in one transaction with its checkpoint; None: take the ``_id`` path.

        ``last`` None: fewer than ``size`` documents are left, and the range is the rest of the
        partition, which its checkpoint closes (``scanned`` is then what it rewrote)."""
        engine, job, adaptive = work.engine, work.job, work.adaptive
        began = engine.now()
        scope = work.partition.scope
        filter_ = batch_filter(work.match, scope, cursor) if last is None else range_filter(work.match, scope, cursor, last["_id"])
        next_cursor, done = (cursor_after(work.partition.scope, last), False) if last is not None else (cursor, True)
        options: dict[str, Any] = {
            "read_concern": ReadConcern("snapshot"),
            "write_concern": WriteConcern(**job.spec.write_concern),
            "read_preference": ReadPreference.PRIMARY,
        }
        for attempt in range(RANGE_CONFLICT_ATTEMPTS):
            async with engine.client.start_session() as session:
                # The heartbeat leaves the lease alone meanwhile: its renewal would conflict with the checkpoint.
                work.activity.in_transaction = True
                try:
                    await session.start_transaction(**options)
                    started = engine.now()
                    matched = await rewrite_range(job, work.collection, filter_, hint=work.hint, session=session)
                    scanned = max(size, matched) if not done else matched
                    counts = {"scanned": scanned, "migrated": matched, "skipped": scanned - matched, "batches": 1}
                    checkpointed = await engine.store.checkpoint(
                        work.lease, cursor=next_cursor.to_document(), counters=counts, done=done, session=session,
                        throttle=adaptive.state() if adaptive is not None else None,  # the pace the range ran at, for status
                    )
                    if checkpointed is None:
                        await session.abort_transaction()
                        return Progress(False, cursor, False)  # fenced off: nothing of the range is written
                    await commit(session)
                except PyMongoError as exc:
                    await _abort(session)
                    if transactions_unsupported(exc):
                        self.transactions = False
                        return None
                    if transient_transaction_error(exc) and attempt + 1 < RANGE_CONFLICT_ATTEMPTS:
                        await asyncio.sleep(backoff_seconds(attempt + 1, engine.rng))
                        continue
                    # A document error, a lasting conflict, too big or slow: nothing was written, and the
                    # _id path names each failure. An error that is not the range's (a lost connection, a
                    # refused command) meets that path too, and fails the batch there. A commit whose
                    # error hid its success is safe as well: that path reads only what is still in the
                    # source shape, and counts only what it writes.
                    return None
                finally:
                    work.activity.in_transaction = False
            work.renewed()
            add_counts(work.counters, counts)
            latency_ms = (engine.now() - started) * 1000
            if adaptive is not None:
                # Work: the range's read and its transaction; a conflicting attempt counts as a conflict.
                change = adaptive.record(
                    (engine.now() - began) * 1000, elapsed_ms=(engine.now() - began) * 1000, docs=max(matched, 1), conflicts=attempt
                )
                if change:
                    work.throttled(change, **adaptive.pace())
            engine.events.emit(
                "batch", job.name, partition=work.partition.seq, size=size, latency_ms=round(latency_ms, 1),
                duration_ms=_ms_since(engine, began), range=True, **counts,
            )
            return Progress(done, next_cursor, True, checkpointed.control)
        return None


async def _abort(session: Any) -> None:
    """Abort ``session``'s transaction if it is still open; an error doing so changes nothing (it ends anyway)."""
    if session.in_transaction:
        with contextlib.suppress(PyMongoError):
            await session.abort_transaction()


@dataclass
class TransactionalBatches:
    """One batch in a transaction (see :mod:`..write.transaction`); counters are exact.

    ``sizing`` carries the batch size from one batch to the next: halved on trouble, grown back.
    """

    sizing: TransactionalBatchSize
    reads_documents = True

    async def finish(self, work: PartitionWork) -> bool:
        """Nothing: each batch's checkpoint commits with it."""
        return True

    async def drop_ahead(self) -> None:
        """Nothing: a transaction's read is its own, never ahead."""

    async def advance(self, work: PartitionWork, cursor: Checkpoint, size: int, *, ahead: bool = False) -> Progress:
        engine, job, collection = work.engine, work.job, work.collection
        began = engine.now()
        spec = job.spec
        # The answer of the last checkpoint written: the one the committed transaction holds.
        checkpointed: Checkpointed | None = None

        # Where the committed batch left the partition (the last checkpoint written says it).
        moved, finished = cursor, False

        # The batch's replies as raw documents, their documents decoded with them in one C call each
        # (read_replies): run_batch lends them to the transform as they are and bounds their size by
        # the replies' length, so no raw document per document and no second decode.
        codec = collection.codec_options.with_options(document_class=dict)

        async def read(session: Any, limit: int) -> Read:
            assert spec.transaction is not None
            command = work.find_command(collection.name, cursor, limit, max_time_ms=spec.transaction.timeout_ms)
            return await read_replies(collection.database, command, session=session, codec=codec) if command is not None else Read([])

        async def write(session: Any, docs: Lent) -> BatchResult:
            ctx = job.context(str(work.partition.seq), engine.cancel, engine.events, session=session, db=engine.db, client=engine.client)
            return await apply_batch(job, docs, collection, ctx, session=session, strict=True)

        async def checkpoint(
            session: Any,
            docs: list[dict[str, Any]],
            fetched: Read,
            limit: int,
            result: BatchResult,
            excluded: list[DocumentError],
            retries: int,
        ) -> bool:
            # A batch cut to fit (fewer documents than were fetched) did not reach the end.
            read_ = len(fetched) if len(docs) == len(fetched) else limit
            nonlocal checkpointed, moved, finished
            last = docs[-1] if docs else None  # a copy as read (see run_batch)
            moved, done = work.after(cursor, last, read=read_, limit=limit, left=[e.id for e in excluded])
            finished = done
            counts = counts_of(result, len(docs))
            counts["txn_retries"] = retries
            checkpointed = await engine.store.checkpoint(
                work.lease,
                cursor=moved.to_document(),
                counters=counts,
                done=done,
                bad_ids=[e.id for e in excluded],
                doc_errors=[e.to_document() for e in excluded],
                session=session,
            )
            return checkpointed is not None

        work.activity.in_transaction = True
        try:
            outcome = await run_batch(
                client=engine.client, collection=collection, spec=spec, read=read, write=write, checkpoint=checkpoint,
                sizing=self.sizing, rng=engine.rng, now=engine.now,
            )
        except Skip as skip:  # alone and still in the way: the next pass takes it
            doc = skip.doc  # a copy as read (see run_batch)
            past, done = work.after(cursor, doc, read=1, limit=1, left=[doc["_id"]])
            counts = {"scanned": 1, "conflicts": 1, "batches": 1, "txn_retries": skip.retries}
            add_counts(work.counters, counts)
            skipped = await engine.store.checkpoint(work.lease, cursor=past.to_document(), counters=counts, done=done)
            return Progress.after(done, past, skipped)
        finally:
            work.activity.in_transaction = False
        if outcome.lost:
            return Progress(False, cursor, False)
        counts = counts_of(outcome.result, len(outcome.docs))
        counts["txn_retries"] = outcome.retries
        add_counts(work.counters, counts)
        work.renewed()
        engine.events.emit(
            "batch", job.name, partition=work.partition.seq, size=len(outcome.docs), transaction=True, duration_ms=_ms_since(engine, began), **counts
        )
        return Progress(finished, moved, True, checkpointed.control if checkpointed else None)


@dataclass
class StepCalls:
    """One call of a step migration; its checkpoint is what it returned (in a transaction if asked)."""

    step: Callable[..., Any]
    reads_documents = False

    async def finish(self, work: PartitionWork) -> bool:
        """Nothing: each step's checkpoint is written with it."""
        return True

    async def drop_ahead(self) -> None:
        """Nothing: a step reads nothing of the engine's."""

    async def advance(self, work: PartitionWork, cursor: Checkpoint, size: int, *, ahead: bool = False) -> Progress:
        engine = work.engine
        began = engine.now()
        progress, counts = await self._advance(work, cursor)
        if progress.lease_held:  # counted once its checkpoint holds (committed, with a transaction)
            add_counts(work.counters, counts)
            engine.events.emit("batch", work.job.name, partition=work.partition.seq, step=True, duration_ms=_ms_since(engine, began), **counts)
        return progress

    async def _advance(self, work: PartitionWork, cursor: Checkpoint) -> tuple[Progress, dict[str, int]]:
        engine, spec = work.engine, work.job.spec
        if spec.transaction is None:
            return await self._once(work, cursor, session=None)
        for attempt in range(spec.transaction.max_retries + 1):
            async with engine.client.start_session() as session:
                try:
                    await session.start_transaction(**transaction_options(spec))
                    progress, counts = await self._once(work, cursor, session=session)
                    if not progress.lease_held:
                        await session.abort_transaction()
                        return progress, counts
                    await commit(session)
                    return progress, counts
                except PyMongoError as exc:
                    if session.in_transaction:
                        await session.abort_transaction()
                    if transactions_unsupported(exc):
                        raise TransactionsUnsupported(str(exc)) from None
                    if not transient_transaction_error(exc) or attempt == spec.transaction.max_retries:
                        raise
                    await asyncio.sleep(backoff_seconds(attempt + 1, engine.rng))
        raise AssertionError("unreachable")

    async def _once(self, work: PartitionWork, cursor: Checkpoint, *, session: Any) -> tuple[Progress, dict[str, int]]:
        """One call and its checkpoint; the counts it reports (added by :meth:`advance` once they hold)."""
        engine = work.engine
        ctx = work.job.context(
            str(work.partition.seq), engine.cancel, engine.events, db=engine.db, client=engine.client, checkpoint=cursor.step, deadline=work.deadline,
                session=session
        )
        out = await call(self.step, ctx)
        if not isinstance(out, dict) or not isinstance(out.get("done"), bool):
            raise BatchFailed("step() must return a dict with 'done' (a bool) and 'checkpoint'")
        checkpoint = out.get("checkpoint")
        try:
            encoded_size = len(encode({"checkpoint": checkpoint}))
        except Exception:  # the encoder's own message quotes the value
            raise BatchFailed(f"step() returned a checkpoint that cannot be stored: {bson_problem({'checkpoint': checkpoint})}") from None
        if encoded_size > MAX_CHECKPOINT_BYTES:
            raise BatchFailed(f"step() returned a checkpoint larger than {MAX_CHECKPOINT_BYTES // 1024} KiB: keep a cursor in it, not data")
        step_counts = {"batches": 1}
        for key in ("scanned", "migrated"):
            value = out.get(key, out.get("processed") if key == "scanned" else None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                step_counts[key] = value
        if "migrated" in step_counts and not ("scanned" in out or "processed" in out):
            # A step that says only what it migrated went through at least that: the progress, the rate and
            # the ETA count ``scanned``, and would otherwise read 0 documents at 0 docs/s while it works.
            step_counts["scanned"] = step_counts["migrated"]
        next_cursor = Checkpoint(last_id=None, started=True, step=checkpoint)
        done: bool = out["done"]
        checkpointed = await engine.store.checkpoint(work.lease, cursor=next_cursor.to_document(), counters=step_counts, done=done, session=session)
        if checkpointed is not None:
            work.renewed()
        return Progress.after(done, next_cursor, checkpointed), step_counts


def _ms_since(engine: EngineContext, began: float) -> float:
    """Milliseconds on the engine's clock since ``began``, to a tenth: a ``batch`` event's ``duration_ms``."""
    return round((engine.now() - began) * 1000, 1)
