"""A preview of a background migration: a few old-shape documents, and what the engine would do to each.

It reads, never writes: no lock, no state, no index, no changelog record; so it works on any
server, for a file that is not registered yet. The update shown is the engine's own:
:func:`~.batch.planned_updates` builds it for the preview exactly as for a run (the same
transform call, BSON-exact diff and version/revision stamp). A ``pipeline`` migration is
evaluated by the server in an aggregation over the sampled documents (the pipeline and the
engine's stamp as stages: ``$set``, ``$addFields`` and ``$unset`` are aggregation stages too),
and its result is turned into the same update shape for display.

Documents are values: a preview returns them because the user asked to see them, and only in
its rows. Nothing else it produces (logs, events, errors) holds a value or an ``_id``; a
transform's error is redacted like every stored error.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from bson import Decimal128, Int64, decode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.errors import PyMongoError

from ...errors import ConfigInvalidError, ExecutionFailedError, IrreversibleMigrationError, MongoshiftError
from ...project.redaction import describe_error
from ...project.run import CancelSignal
from ...schema.background import Background
from ...schema.index_specs import as_json
from ..write.batch import BatchFailed, PlannedUpdates, id_key, pipeline_update, planned_updates
from ..write.document import ShapeError, stamped_diff
from ..write.job import Job
from .sandbox import Refusal
from .validate import StepRow, Validation, validate_pipeline, validate_steps, validate_transform

#: How many documents a preview may show, and how many it shows by default.
MAX_DOCUMENTS = 1000
DEFAULT_DOCUMENTS = 5

Method = Literal["sample", "first"]


@dataclass(frozen=True)
class PreviewRow:
    """One document: as read, the update the engine would send and the document it makes, or why it cannot.

    ``reason`` is ``transform`` (the function raised), ``shape`` (its result cannot be written),
    ``write`` (the server would refuse the update: a revision that is not a number) or ``server``
    (the server could not evaluate the pipeline on it); ``error`` is redacted."""

    id: Any
    before: dict[str, Any]
    update: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    reason: str | None = None
    error: str | None = None
    #: With ``--validate``: what the server said of its write, and what the transform did (:mod:`.validate`).
    validation: Validation | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        """Relaxed Extended JSON: ``{_id, before, update, after}`` or ``{_id, before, reason, error}``."""
        row: dict[str, Any] = {"_id": as_json({"v": self.id})["v"], "before": as_json(self.before)}
        if self.ok:
            row.update(update=as_json(self.update), after=as_json(self.after))
        else:
            row.update(reason=self.reason, error=self.error)
        if self.validation is not None:
            row["validation"] = self.validation.to_json()
        return row


@dataclass
class Preview:
    """What ``background dry-run`` shows: which documents, how they were chosen, and a row for each."""

    name: str
    collection: str
    direction: str
    from_version: int
    to_version: int
    method: Method
    requested: int
    rows: list[PreviewRow] = field(default_factory=list)
    #: The update pipeline a ``pipeline`` migration sends for each document (None for a transform).
    pipeline: list[dict[str, Any]] | None = None
    #: ``--validate``: the rows' writes were validated in an aborted transaction (see :mod:`.validate`).
    validated: bool = False
    #: Operations the sandbox refused (reported even when the migration's code caught them): exit 34.
    refusals: list[Refusal] = field(default_factory=list)
    #: A step migration's validated calls, and why they stopped.
    steps: list[StepRow] | None = None
    stopped: str | None = None

    @property
    def invalid(self) -> int:
        """Documents whose validated write the server refused."""
        return sum(row.validation is not None and row.validation.status == "failed" for row in self.rows)

    @property
    def found(self) -> int:
        return len(self.rows)

    @property
    def failed(self) -> int:
        return sum(not row.ok for row in self.rows)

    @property
    def migrated(self) -> int:
        return self.found - self.failed

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "collection": self.collection,
            "direction": self.direction,
            "from_version": self.from_version,
            "to_version": self.to_version,
            "method": self.method,
            "requested": self.requested,
            "found": self.found,
            "migrated": self.migrated,
            "failed": self.failed,
            "pipeline": as_json(self.pipeline),
            "documents": [row.to_json() for row in self.rows],
            **self._validation_json(),
        }

    def _validation_json(self) -> dict[str, Any]:
        if not self.validated:
            return {}
        out: dict[str, Any] = {"validated": True, "invalid": self.invalid, "refused": [r.to_json() for r in self.refusals]}
        if self.steps is not None:
            out.update(steps=[step.to_json() for step in self.steps], stopped=self.stopped)
        return out


def preview_size(sample: int | None, first: int | None) -> tuple[Method, int]:
    """How to choose the documents: ``sample`` (random, the default) or ``first`` (by ``_id``), and how many."""
    if sample is not None and first is not None:
        raise ConfigInvalidError("give --sample N or --first N, not both")
    method: Method = "first" if first is not None else "sample"
    size = first if first is not None else sample if sample is not None else DEFAULT_DOCUMENTS
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_DOCUMENTS:
        raise ConfigInvalidError(f"--{method} takes a number of documents from 1 to {MAX_DOCUMENTS}, not {size!r}")
    return method, size


def preview_job(name: str, spec: Background, *, revert: bool, validate: bool = False) -> Job:
    """The engine's job for the direction previewed; a step migration (unless validated), or a revert never declared, is refused."""
    if spec.mode == "step" and not validate:
        raise ConfigInvalidError(
            f"{name} is a step migration: step(ctx) does its own reads and writes, so it cannot be previewed without writing "
            "(--validate runs its steps in a transaction that is aborted)"
        )
    if revert and not spec.reversible:
        raise IrreversibleMigrationError(
            f"{name} declares no revert (revert, revert_batch or revert_pipeline): there is nothing to preview with --revert",
            file=name,
        )
    return Job.of_spec(name, spec, "revert" if revert else "forward")


async def preview(
    db: AsyncDatabase[Any],
    name: str,
    spec: Background,
    *,
    method: Method,
    size: int,
    revert: bool = False,
    cancel: CancelSignal | None = None,
    validate: bool = False,
    steps: int = 1,
    protected: frozenset[str] = frozenset(),
) -> Preview:
    """Read ``size`` documents of the old shape and show what the engine would do to each; writes nothing.

    ``validate``: the writes are made in a transaction that is always aborted (:mod:`.validate`);
    ``protected`` names mongoshift's own collections, which the sandbox refuses; a step migration
    then makes up to ``steps`` calls."""
    job = preview_job(name, spec, revert=revert, validate=validate)
    cancel = cancel or CancelSignal()
    if job.step is not None:
        return await _step_preview(db, job, steps, protected, cancel, method=method, size=size)
    collection: AsyncCollection[dict[str, Any]] = db[spec.collection]
    codec = collection.codec_options.with_options(document_class=dict)
    docs = await _read(collection, job, method, size)
    result = Preview(
        name=name,
        collection=spec.collection,
        direction=job.direction,
        from_version=job.source,
        to_version=job.target,
        method=method,
        requested=size,
        pipeline=pipeline_update(job) if job.pipeline is not None else None,
    )
    befores = [decode(doc.raw, codec) for doc in docs]
    if validate:
        await _validated_rows(db, job, result, befores, protected, cancel, codec)
    elif job.pipeline is not None:
        result.rows = await _pipeline_rows(job, befores, collection)
    else:
        ctx = job.context("preview", cancel, extra={"preview": True})
        result.rows = _transform_rows(job, befores, await _planned(job, docs, ctx, codec, cancel))
    return result


async def _validated_rows(
    db: AsyncDatabase[Any], job: Job, result: Preview, befores: list[dict[str, Any]], protected: frozenset[str], cancel: CancelSignal, codec: CodecOptions[Any]
) -> None:
    """The rows, each with its validation: the transform runs in the sandbox, inside the aborted transaction."""
    result.validated = True
    ids = [before["_id"] for before in befores]
    if job.pipeline is not None:
        rows = await _pipeline_rows(job, befores, db[job.spec.collection])
        checked = await validate_pipeline(db, job, [row.id for row in rows if row.ok])
        skipped = Validation("skipped", "the pipeline failed on it: nothing to write")
        result.rows = [dataclasses.replace(row, validation=checked.get(id_key(row.id), skipped)) for row in rows]
        return
    with _whole_batch_errors(job):
        validated = await validate_transform(db, job, ids, protected=protected, cancel=cancel, codec=codec)
    rows = _transform_rows(job, validated.docs, validated.planned)
    result.rows = [dataclasses.replace(row, validation=validated.validations.get(id_key(row.id))) for row in rows]
    result.refusals = list(validated.record.refusals)


async def _step_preview(
    db: AsyncDatabase[Any], job: Job, steps: int, protected: frozenset[str], cancel: CancelSignal, *, method: Method, size: int
) -> Preview:
    validated = await validate_steps(db, job, steps, protected=protected, cancel=cancel)
    return Preview(
        name=job.name,
        collection=job.spec.collection,
        direction=job.direction,
        from_version=job.source,
        to_version=job.target,
        method=method,
        requested=size,
        validated=True,
        refusals=list(validated.record.refusals),
        steps=validated.steps,
        stopped=validated.stopped,
    )


async def _read(collection: AsyncCollection[dict[str, Any]], job: Job, method: Method, size: int) -> list[RawBSONDocument]:
    """The documents as stored (raw BSON, as lanes read them): a random sample, or the first by ``_id``."""
    raw = collection.with_options(codec_options=collection.codec_options.with_options(document_class=RawBSONDocument))
    match = job.match(exclude_bad=False)
    if method == "first":
        return await raw.find(match, sort=[("_id", 1)], limit=size, batch_size=size).to_list(None)
    cursor = await raw.aggregate([{"$match": match}, {"$sample": {"size": size}}])
    return await cursor.to_list(None)


async def _planned(job: Job, docs: Sequence[RawBSONDocument], ctx: Any, codec: CodecOptions[Any], cancel: CancelSignal) -> PlannedUpdates:
    """The documents' updates; a first Ctrl-C stops after the document in progress (exit 11), not after all of them."""
    with _whole_batch_errors(job):
        return await planned_updates(job, docs, ctx, codec, stop=cancel)


@contextmanager
def _whole_batch_errors(job: Job) -> Iterator[None]:
    """A transform that fails the whole batch (``migrate_batch`` raised or miscounted) fails the preview: exit 7."""
    try:
        yield
    except BatchFailed as exc:
        raise ExecutionFailedError(f"{job.name}: {exc}", file=job.name) from None
    except (PyMongoError, MongoshiftError):
        raise
    except Exception as exc:  # migrate_batch raised for the whole batch
        raise ExecutionFailedError(f"{job.name}: the transform raised for the whole batch: {describe_error(exc)}", file=job.name) from None


def _transform_rows(job: Job, befores: list[dict[str, Any]], planned: PlannedUpdates) -> list[PreviewRow]:
    updates = {id_key(owner["_id"]): update for owner, update in zip(planned.owners, planned.updates, strict=True)}
    errors = {id_key(error.id): error for error in planned.errors}
    rows = []
    for before in befores:
        key = id_key(before["_id"])
        if key in errors:
            rows.append(PreviewRow(before["_id"], before, reason=errors[key].reason, error=errors[key].error))
        else:
            rows.append(_update_row(before, updates[key]))
    return rows


def _update_row(before: dict[str, Any], update: dict[str, Any]) -> PreviewRow:
    try:
        return PreviewRow(before["_id"], before, update, updated(before, update))
    except TypeError:
        return PreviewRow(before["_id"], before, update, reason="write", error="the stored revision is not a number: the server would refuse its $inc")
    except OverflowError:
        return PreviewRow(
            before["_id"], before, update, reason="write",
            error="the stored revision is the largest 64-bit integer: the server would refuse its $inc (it overflows); make it smaller",
        )


async def _pipeline_rows(job: Job, befores: list[dict[str, Any]], collection: AsyncCollection[dict[str, Any]]) -> list[PreviewRow]:
    """The server evaluates the update pipeline on the sampled documents, in an aggregation that writes nothing."""
    stages = pipeline_update(job)
    match = job.match(exclude_bad=False)
    ids = [before["_id"] for before in befores]
    try:
        afters = {id_key(doc["_id"]): doc for doc in await _evaluate(collection, match, ids, stages)}
        failed: dict[bytes, str] = {}
    except PyMongoError:  # one document the pipeline cannot evaluate fails the aggregation: find which, one by one
        afters, failed = {}, {}
        for id_ in ids:
            try:
                afters.update((id_key(doc["_id"]), doc) for doc in await _evaluate(collection, match, [id_], stages))
            except PyMongoError as exc:
                failed[id_key(id_)] = describe_error(exc)
    rows = []
    for before in befores:
        key = id_key(before["_id"])
        if key in failed:
            rows.append(PreviewRow(before["_id"], before, reason="server", error=failed[key]))
        elif key not in afters:
            rows.append(PreviewRow(before["_id"], before, reason="server", error="the document left the old shape while it was previewed"))
        else:
            rows.append(_pipeline_row(job, before, afters[key]))
    return rows


async def _evaluate(collection: AsyncCollection[dict[str, Any]], match: dict[str, Any], ids: list[Any], stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    cursor = await collection.aggregate([{"$match": {"$and": [match, {"_id": {"$in": ids}}]}}, *stages])
    return await cursor.to_list(None)


def _pipeline_row(job: Job, before: dict[str, Any], after: dict[str, Any]) -> PreviewRow:
    """The server's result, and the update that makes it in the shape a transform's update has."""
    try:
        update = stamped_diff(before, after, version_field=job.spec.version_field, revision_field=job.revision_field, to_version=job.target)
    except ShapeError as exc:
        return PreviewRow(before["_id"], before, reason="shape", error=str(exc))
    return PreviewRow(before["_id"], before, update, after)


def updated(before: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """The document ``update`` makes of ``before`` (top-level ``$set``, ``$unset`` and ``$inc``, as the engine sends).

    A field that exists keeps its place; new fields are appended in name order, as MongoDB 5.0+
    applies an update's fields; ``$inc`` keeps the stored number type."""
    after = dict(before)
    for key in update.get("$unset", {}):
        after.pop(key, None)
    new: dict[str, Any] = {}
    for key, value in update.get("$set", {}).items():
        (after if key in after else new)[key] = value
    for key, by in update.get("$inc", {}).items():
        if key in after:
            after[key] = _add(after[key], by)
        else:
            new[key] = by
    for key in sorted(new):
        after[key] = new[key]
    return after


def _add(value: Any, by: int) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float, Decimal128)):
        raise TypeError(f"$inc of a {type(value).__name__}")
    if isinstance(value, Decimal128):
        return Decimal128(value.to_decimal() + by)
    total = value + by
    if isinstance(value, int) and not -(2**63) <= total < 2**63:  # mongod refuses it (an int32 grows into a long)
        raise OverflowError(f"$inc past the 64-bit range of a {type(value).__name__}")
    return Int64(total) if isinstance(value, Int64) else total
