"""``background dry-run --validate``: the previewed documents written for real, in a transaction that is always aborted.

Every previewed document goes through the engine's own guarded write (:func:`~.batch.write_planned`,
or :func:`~.batch.write_pipeline` for a ``pipeline`` migration) inside one snapshot transaction,
so the server's validator, unique indexes and size limit judge the very update a run sends.
The transaction is aborted in every case (success, error, cancel): nothing is left behind.

A write the server refuses aborts the transaction (mongod does, and so does the embedded
server), so the refused document's reason is kept, and the transaction starts again without
writing it: each attempt is one aborted transaction, and the last one validates all the
others. The transform runs in each attempt with ``ctx.db``/``ctx.client``/``ctx.session`` as
the sandbox's proxies (:mod:`.sandbox`); what it did is taken from the last attempt. A
transform whose own operation the server fails (a side write's duplicate key, caught or not)
has aborted the transaction too: its document is refused with that reason the same way, and is
shown as it was in the attempt that refused it (its transform does not run again).

A step migration is validated as ``steps`` calls of ``step(ctx)`` in one aborted transaction,
each getting the checkpoint the previous one returned. A step whose operation the server fails
ends the validation there, with that failure as the step's error: the transaction is gone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson import decode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference

from ...errors import ConfigInvalidError, ExecutionFailedError, TransactionsUnsupportedError
from ...project.redaction import describe_error, describe_write_error
from ...project.run import CancelSignal
from ...project.server_errors import transactions_unsupported, transient_transaction_error
from ...project.user_code import call, is_async
from ...schema.index_specs import as_json
from ..write.batch import DocumentError, PlannedUpdates, id_key, planned_updates, write_error_text, write_pipeline, write_planned
from ..write.job import Job
from .sandbox import SandboxRecord, sandbox

#: How often a transient transaction error (a conflict with a concurrent writer) starts an attempt again.
TRANSIENT_RETRIES = 3
#: How many step calls ``--validate`` may make, and how many by default.
MAX_STEPS = 100
DEFAULT_STEPS = 1


@dataclass(frozen=True)
class Validation:
    """What the server said of one document's write: ``ok``, ``failed`` (``reason``: its refusal) or ``skipped`` (why)."""

    status: str
    reason: str | None = None
    operations: list[dict[str, Any]] = field(default_factory=list)
    side_effects: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "operations": self.operations, "side_effects": self.side_effects}


def steps_count(steps: int | None) -> int:
    size = DEFAULT_STEPS if steps is None else steps
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_STEPS:
        raise ConfigInvalidError(f"--steps takes a number of step calls from 1 to {MAX_STEPS}, not {size!r}")
    return size


async def aborted[T](client: Any, body: Callable[[Any], Awaitable[T]]) -> T:
    """``body(session)`` inside a snapshot transaction on the primary that is always aborted.

    A server without transactions is :class:`~mongoshift.errors.TransactionsUnsupportedError` (exit 15)."""
    for attempt in range(TRANSIENT_RETRIES + 1):
        async with client.start_session() as session:
            try:
                await session.start_transaction(read_concern=ReadConcern("snapshot"), read_preference=ReadPreference.PRIMARY)
                return await body(session)
            except PyMongoError as exc:
                if transactions_unsupported(exc):
                    raise TransactionsUnsupportedError(
                        "background dry-run --validate writes inside a transaction that it aborts, and this server has no "
                        "transactions (a standalone mongod): run it against a replica set, or without --validate"
                    ) from None
                if not transient_transaction_error(exc) or attempt == TRANSIENT_RETRIES:
                    raise
            finally:
                if session.in_transaction:
                    try:
                        await session.abort_transaction()
                    except PyMongoError:
                        pass
    raise AssertionError("unreachable")


@dataclass
class _Attempt:
    """One aborted transaction's result: done, or the document the server refused (written again without it)."""

    refused: bytes | None = None
    reason: str | None = None
    value: Any = None


async def _excluding(client: Any, attempt: Callable[[Any, dict[bytes, str]], Awaitable[_Attempt]], limit: int) -> tuple[Any, dict[bytes, str]]:
    """Attempts until one writes every document not yet refused; each refused document is left out of the next."""
    excluded: dict[bytes, str] = {}
    for _ in range(limit + 1):
        outcome = await aborted(client, lambda session: attempt(session, excluded))
        if outcome.refused is None or outcome.refused in excluded:
            return outcome.value, excluded
        excluded[outcome.refused] = outcome.reason or "refused"
    raise AssertionError("every document was refused once: the loop ends before this")


def _first_failure(
    keys: Sequence[bytes], failed: dict[int, dict[str, Any]], describe: Callable[[int, dict[str, Any]], str] | None = None
) -> _Attempt | None:
    """The first refused write of a bulk (in a transaction only the first one counts: it aborted the rest);
    ``describe(index, error)`` words it as a run would (the guarded updates'), else as the server said it."""
    if not failed:
        return None
    index = min(failed)
    reason = describe(index, failed[index]) if describe is not None else describe_write_error(failed[index])
    return _Attempt(refused=keys[index], reason=reason)


def _owned(fn: Callable[..., Any], record: SandboxRecord) -> Callable[..., Any]:
    """``migrate`` with the record told whose transform runs, so each row gets its own operations."""
    if is_async(fn):
        async def each_async(doc: dict[str, Any], ctx: Any) -> Any:
            record.owner = id_key(doc.get("_id"))
            try:
                return await fn(doc, ctx)
            finally:
                record.owner = None

        return each_async

    def each(doc: dict[str, Any], ctx: Any) -> Any:
        record.owner = id_key(doc.get("_id"))
        try:
            return fn(doc, ctx)
        finally:
            record.owner = None

    return each


@dataclass
class ValidatedTransform:
    """The documents as read in the transaction, what the engine planned for them, and each one's validation."""

    docs: list[dict[str, Any]]
    planned: PlannedUpdates
    validations: dict[bytes, Validation]
    record: SandboxRecord


async def validate_transform(
    db: AsyncDatabase[Any], job: Job, ids: Sequence[Any], *, protected: frozenset[str], cancel: CancelSignal, codec: CodecOptions[Any]
) -> ValidatedTransform:
    """Transform and write the documents ``ids`` (still of the old shape) in aborted transactions; see the module docstring."""
    record = SandboxRecord(protected)
    collection: AsyncCollection[Any] = db[job.spec.collection]
    raw = collection.with_options(codec_options=collection.codec_options.with_options(document_class=RawBSONDocument))
    owned = dataclasses.replace(job, one=_owned(job.one, record)) if job.one is not None else job
    order = {id_key(id_): i for i, id_ in enumerate(ids)}
    #: Each refused document as transformed in the attempt that refused it: its planned part, operations, effects.
    refused_as: dict[bytes, tuple[PlannedUpdates, list[dict[str, Any]], dict[str, int]]] = {}

    def keep_refused(key: bytes, planned: PlannedUpdates) -> None:
        owners = [i for i, owner in enumerate(planned.owners) if id_key(owner["_id"]) == key]
        part = PlannedUpdates([planned.owners[i] for i in owners], [planned.updates[i] for i in owners], [e for e in planned.errors if id_key(e.id) == key])
        refused_as[key] = (part, record.operations_of(key), record.effects_of(key))

    async def attempt(session: Any, excluded: dict[bytes, str]) -> _Attempt:
        record.reset()
        found = await raw.find({"$and": [job.match(exclude_bad=False), {"_id": {"$in": list(ids)}}]}, session=session).to_list(None)
        found.sort(key=lambda doc: order.get(id_key(doc["_id"]), 0))
        sdb, sclient, ssession = sandbox(db, session, record)
        ctx = job.context("preview", cancel, db=sdb, client=sclient, session=ssession, extra={"preview": True, "validate": True})
        # A refused document's transform does not run again: its own failing write would abort this attempt too.
        todo = [doc for doc in found if id_key(doc["_id"]) not in excluded]
        try:
            planned = await planned_updates(owned, todo, ctx, codec, stop=cancel)
        except PyMongoError:  # a later transform's operation in the aborted transaction (NoSuchTransaction)
            if record.failure is None:
                raise
            planned = PlannedUpdates([], [], [])
        if record.failure is not None:  # the server failed the transform's own operation: the transaction is gone
            owner, what = record.failure
            reason = f"the transform's {what}"
            if owner is None:
                raise ExecutionFailedError(f"{job.name}: {reason} (the server aborted the transaction)", file=job.name)
            if not any(id_key(o["_id"]) == owner for o in planned.owners) and not any(id_key(e.id) == owner for e in planned.errors):
                planned.errors.extend(DocumentError(doc["_id"], "transform", reason) for doc in todo if id_key(doc["_id"]) == owner)
            keep_refused(owner, planned)
            return _Attempt(refused=owner, reason=reason)
        _, failed = await write_planned(job, PlannedUpdates(planned.owners, planned.updates, []), collection, session=session)
        owners, updates = planned.owners, planned.updates
        refused = _first_failure(
            [id_key(owner["_id"]) for owner in owners], failed, lambda i, error: write_error_text(job, owners[i], updates[i], error)
        )
        if refused is not None and refused.refused is not None:
            keep_refused(refused.refused, planned)
        return refused or _Attempt(value=(found, planned))

    (found, planned), excluded = await _excluding(db.client, attempt, len(ids))
    for part, _, _ in refused_as.values():
        planned = PlannedUpdates(planned.owners + part.owners, planned.updates + part.updates, planned.errors + part.errors)
    validations: dict[bytes, Validation] = {}
    for doc in found:
        key = id_key(doc["_id"])
        _, ops, effects = refused_as.get(key, (None, record.operations_of(key), record.effects_of(key)))
        validations[key] = Validation("failed", excluded[key], ops, effects) if key in excluded else Validation("ok", None, ops, effects)
    for error in planned.errors:
        key = id_key(error.id)
        if key in excluded:  # the transform failed on its own write: the server's reason says more
            continue
        validations[key] = Validation("skipped", f"the {error.reason} failed: nothing to write", record.operations_of(key), record.effects_of(key))
    return ValidatedTransform([decode(doc.raw, codec) for doc in found], planned, validations, record)


async def validate_pipeline(db: AsyncDatabase[Any], job: Job, ids: Sequence[Any]) -> dict[bytes, Validation]:
    """The pipeline's guarded one-by-one updates of ``ids`` in aborted transactions: each document's validation."""
    collection: AsyncCollection[Any] = db[job.spec.collection]

    async def attempt(session: Any, excluded: dict[bytes, str]) -> _Attempt:
        # A preview's job has no shard key (see docs/background.md), so the ``_id`` is all a filter needs.
        writing = [{"_id": id_} for id_ in ids if id_key(id_) not in excluded]
        _, failed = await write_pipeline(job, writing, collection, session=session)
        return _first_failure([id_key(doc["_id"]) for doc in writing], failed) or _Attempt()

    _, excluded = await _excluding(db.client, attempt, len(ids))
    return {id_key(id_): Validation("failed", excluded[id_key(id_)]) if id_key(id_) in excluded else Validation("ok") for id_ in ids}


@dataclass
class StepRow:
    """One validated ``step(ctx)`` call: what it returned, did and wrote, and the cursors it left open."""

    index: int
    done: bool | None = None
    checkpoint: Any = None
    error: str | None = None
    operations: list[dict[str, Any]] = field(default_factory=list)
    side_effects: dict[str, int] = field(default_factory=dict)
    images: list[dict[str, Any]] = field(default_factory=list)
    open_cursors: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.index,
            "done": self.done,
            "checkpoint": as_json({"v": self.checkpoint})["v"],
            "error": self.error,
            "operations": self.operations,
            "side_effects": self.side_effects,
            "images": [as_json(image) for image in self.images],
            "open_cursors": self.open_cursors,
        }


@dataclass
class ValidatedSteps:
    steps: list[StepRow]
    stopped: str
    record: SandboxRecord


async def validate_steps(db: AsyncDatabase[Any], job: Job, count: int, *, protected: frozenset[str], cancel: CancelSignal) -> ValidatedSteps:
    """Up to ``count`` calls of ``step(ctx)`` from the start, in one aborted transaction; why they stopped.

    ``stopped``: ``done`` (a step returned ``done: True``), ``steps`` (``count`` calls made), ``error``
    (a step raised or returned something a run refuses) or ``cancelled``."""
    step = job.step
    assert step is not None
    record = SandboxRecord(protected, images=[])

    async def body(session: Any) -> ValidatedSteps:
        record.reset()
        sdb, sclient, ssession = sandbox(db, session, record)
        rows: list[StepRow] = []
        checkpoint: Any = None
        for index in range(count):
            if cancel.is_set():
                return ValidatedSteps(rows, "cancelled", record)
            record.owner = id_key(index)
            open_before = record.open_cursors()
            ctx = job.context("preview", cancel, db=sdb, client=sclient, session=ssession, checkpoint=checkpoint, extra={"preview": True, "validate": True})
            row = StepRow(index)
            rows.append(row)
            try:
                out = await call(step, ctx)
            except PyMongoError:
                if record.failure is None:  # not the sandboxed code's operation (or transient: the attempt is retried)
                    raise
            except Exception as exc:
                row.error = describe_error(exc)
            finally:
                row.operations, row.side_effects = record.operations_of(record.owner), record.effects_of(record.owner)
                row.images = record.images_of(record.owner)
                row.open_cursors = record.open_cursors() - open_before
            if record.failure is not None:  # caught or not, the server aborted the transaction: no step can follow
                row.error = f"the step's {record.failure[1]} (the server aborted the transaction)"
            if row.error is None and not (isinstance(out, dict) and isinstance(out.get("done"), bool)):
                row.error = "step() must return a dict with 'done' (a bool) and 'checkpoint'"
            if row.error is not None:
                return ValidatedSteps(rows, "error", record)
            row.done, row.checkpoint = out["done"], out.get("checkpoint")
            checkpoint = row.checkpoint
            if row.done:
                return ValidatedSteps(rows, "done", record)
        return ValidatedSteps(rows, "steps", record)

    return await aborted(db.client, body)
