"""The one write path: transform a batch and write it as guarded updates.

Lanes, the drift watcher and the dry-run sandbox all call :func:`apply_batch`; the
preview shows what :func:`planned_updates` (the part before the write) would send.
Each document is transformed on a copy and written as one ``UpdateOne`` in an
unordered bulk, filtered by its ``_id``, its exact old version and its exact
old revision. A write that matched nothing means someone wrote the document
since it was read: it is read again and, if it still has the old shape and
still matches, transformed again (up to ``max_conflict_retries`` rounds);
whatever is still in the way is left for the next pass.

``migrated`` counts the guarded writes that matched, which is exact: a
document's guard matches at most once, since the write bumps its revision.

A ``pipeline`` migration is the server-side fast path: the batch holds only
``_id``s (with the shard key's values when it is known), and one multi-document
update runs the pipeline on the server, filtered by those ``_id``s and the source
shape (and, for mongos to target it, the batch's shard keys: :func:`batch_keys`).
The server applies it to each document as it is at that moment, so an
application write made since the read is kept without any re-read; a document
that moved on is simply not matched, and the reply's match count is the exact
``migrated``. If that update fails
(a document the pipeline cannot evaluate, a refused command), the server does
not say which documents it had already rewritten (mongod reports nothing of a
failed multi-update, yet keeps what it wrote before the failing document), so
the batch's documents are read again: those now at the target version were
rewritten by it, those still in the source shape are written one by one as
guarded ``UpdateOne``s, so that the failing one is a document error of its own.
A transactional batch keeps the one-by-one form: a failed write aborts the
transaction, and the retry must know which document to leave out. When the shard
key is known, the pipeline runs inside a guard (:mod:`.pipeline_guard`) that makes
the server refuse a document whose key it would change; in the one-by-one form that
refusal is the document error ``shard-key-changed``, as for ``migrate``; each
one-by-one update carries its document's key as the ``migrate`` guards do (:func:`.document.keyed`).
"""

from __future__ import annotations

import asyncio
import copy as copy_module
import importlib
import inspect
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bson import Decimal128, decode, decode_all, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import BulkWriteError, PyMongoError, WriteConcernError
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from ...errors import RunAbortedError
from ...project.redaction import describe_transform_error, describe_write_error
from ...project.run import CancelSignal
from ...project.server_errors import (
    document_write_error,
    transient_transaction_error,
)
from ...project.user_code import call, failure_of, is_async
from ...project.wording import plural
from ...schema.background import MAX_BSON_INT
from ..plan.bson_order import same_value
from ..plan.planner import key_values
from .document import IMMUTABLE, MISSING, ShapeError, bson_problems, differ, guard, keyed, version_match
from .job import Job, TransformContext
from .pipeline_guard import guarded, key_changed_message, refused_by_guard

#: The operation kind pymongo's own ``UpdateOne`` adds to a bulk (see :class:`_GuardedUpdates`).
_UPDATE_OP: int | None = getattr(importlib.import_module("pymongo.message"), "_UPDATE", None)


class BatchFailed(Exception):
    """The batch cannot go on (a wrong ``migrate_batch`` result, a server error): fails the slice."""


class DocumentFailed(Exception):
    """Strict mode (a transaction): one document failed, so the batch aborts and is retried without it."""

    def __init__(self, error: DocumentError) -> None:
        super().__init__(error.error)
        self.document = error


class WriteConflict(Exception):
    """Strict mode: a document changed under the transaction; the retry reads it again."""


@dataclass
class DocumentError:
    """A document that could not be migrated; its id is stored, never logged."""

    id: Any
    reason: str
    error: str

    def to_document(self) -> dict[str, Any]:
        return {"reason": self.reason, "error": self.error[:500]}


@dataclass
class BatchResult:
    migrated: int = 0
    skipped: int = 0
    conflicts: int = 0
    retried: int = 0
    errors: list[DocumentError] = field(default_factory=list)
    #: The ids plural in ``conflicts``: read, still in the source shape, left for the next pass
    #: (a draining hash range steps over them, :mod:`..plan.hash_drain`).
    left: list[Any] = field(default_factory=list)


class Lent:
    """A batch lent to its transform, and how to tell afterwards what each document was as read.

    The transform gets the one decoded copy of each document (``copies``: one C decode for the
    whole batch). A shallow copy of each one's top level (``tops``) keeps the values it was read
    with: an immutable value (:data:`IMMUTABLE`) cannot change, and the mutable ones (arrays,
    subdocuments, ...) of the whole batch, in one flat list (``nested``: no container per
    document), are encoded together before the transforms (``encoded``) and again after them
    (:meth:`originals`). If the bytes match, ``tops`` are the documents as read; if not, each
    document's nested values are checked on their own, by their bytes before and after, and the
    documents a transform altered in place are decoded again from ``raws``. So a transform that
    leaves nested values alone costs no second decode and no per-document encode, and one that
    edits them in place cannot alter the originals the diff compares with.

    ``tops`` may be read before the transforms (the lane records the batch's ids and revisions
    from them); after, only through :meth:`originals`. They are never lent, so each one's nested
    values (its values of a mutable type, in order) are the ones ``nested`` holds for it.

    Without ``raws`` (:func:`lend_decoded`: documents the driver decoded for this batch alone), an
    altered document's original is its top with the nested values decoded again from the bytes
    encoded before the transforms: the same values a decode of the document's own bytes gives, since
    a value decoded once is encoded and decoded back to an equal value of the same types. Should
    those values not encode at all, deep copies made before the transforms are the originals.
    """

    __slots__ = ("copies", "encoded", "kept", "nested", "raws", "tops")

    def __init__(self, raws: list[bytes | memoryview] | None, copies: list[dict[str, Any]], codec: CodecOptions[Any]) -> None:
        self.raws = raws
        self.copies = copies
        self.tops = list(map(dict.copy, copies))  # a plain dict each, as ``dict(copy)`` makes, without a bytecode loop
        immutable = IMMUTABLE
        self.nested = [value for copy in copies for value in copy.values() if type(value) not in immutable]
        self.encoded: bytes | None
        self.kept: list[dict[str, Any]] | None = None
        try:
            self.encoded = encode({"m": self.nested}, codec_options=codec)
        except Exception:  # a value only the codec can decode: each original is decoded again instead
            self.encoded = None
            if raws is None:  # nothing to decode again: the originals are copies made now, before the transforms
                self.kept = copy_module.deepcopy(copies)

    def __len__(self) -> int:
        return len(self.copies)

    def subset(self, indices: Sequence[int], codec: CodecOptions[Any]) -> Lent:
        """Only the documents at ``indices`` (not lent yet: call before the transforms)."""
        part = Lent.__new__(Lent)
        part.raws = None if self.raws is None else [self.raws[i] for i in indices]
        part.copies = [self.copies[i] for i in indices]
        part.tops = [self.tops[i] for i in indices]
        immutable = IMMUTABLE
        part.nested = [value for i in indices for value in self.tops[i].values() if type(value) not in immutable]
        part.kept = None if self.kept is None else [self.kept[i] for i in indices]
        try:
            part.encoded = None if part.kept is not None else encode({"m": part.nested}, codec_options=codec)
        except Exception:
            part.encoded = None
        return part

    def originals(self, codec: CodecOptions[Any]) -> list[dict[str, Any]]:
        """The documents as read (call after the batch's transforms)."""
        if self.encoded is not None:
            try:
                if encode({"m": self.nested}, codec_options=codec) == self.encoded:
                    return self.tops
            except Exception:  # the transform put something unencodable inside a value read
                pass
            return self._each(self.encoded, codec)
        if self.raws is None:
            assert self.kept is not None
            return self.kept
        return [decode(raw, codec) for raw in self.raws]

    def _each(self, encoded: bytes, codec: CodecOptions[Any]) -> list[dict[str, Any]]:
        """Some transform altered a value read in place: find which documents, one by one, each by its
        own nested values' bytes before the transforms (its run of ``encoded``'s elements) and now."""
        before = array_elements(encoded)
        immutable = IMMUTABLE
        originals: list[dict[str, Any]] = []
        end = 0
        for index, top in enumerate(self.tops):
            keys = [key for key, value in top.items() if type(value) not in immutable]
            start, end = end, end + len(keys)
            if not keys:
                originals.append(top)
                continue
            try:
                unchanged = array_elements(encode({"m": [top[key] for key in keys]}, codec_options=codec)) == before[start:end]
            except Exception:  # the transform put something unencodable inside one of them
                unchanged = False
            if unchanged:
                originals.append(top)
            elif self.raws is None:  # the top as read, its nested values as encoded before the transforms
                rebuilt = dict(top)
                rebuilt.update(zip(keys, (element_value(element, codec) for element in before[start:end]), strict=True))
                originals.append(rebuilt)
            else:
                originals.append(decode(self.raws[index], codec))
        return originals


#: Lengths of the BSON values of a fixed size, by type byte (the others carry their length).
_FIXED_SIZES = {0x01: 8, 0x06: 0, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16, 0x7F: 0, 0xFF: 0}
_INT32 = struct.Struct("<i").unpack_from
_INT32_PACK = struct.Struct("<i").pack

#: One element of an array, without its key (its position): its type byte and its value's bytes.
Element = tuple[int, bytes]


def array_elements(encoded: bytes) -> list[Element]:
    """The elements of the one array of ``encoded`` (``{"m": [...]}`` as encoded), in order, each as
    its type byte and value bytes: two equal elements are the same BSON value."""
    if encoded[4:7] != b"\x04m\x00":
        raise ValueError("not a document holding one array 'm'")
    elements: list[Element] = []
    at = 11  # past the document's length, the array's type byte, its key "m" and its length
    end = len(encoded) - 2  # the array's closing NUL, then the document's
    while at < end:
        kind = encoded[at]
        start = encoded.index(b"\x00", at + 1) + 1  # past the key (the position, as a string)
        size = _FIXED_SIZES.get(kind)
        if size is None:
            if kind in (0x03, 0x04, 0x0F):  # document, array, code with scope: their length includes itself
                size = _INT32(encoded, start)[0]
            elif kind in (0x02, 0x0D, 0x0E):  # string, code, symbol: a length, then the bytes
                size = 4 + _INT32(encoded, start)[0]
            elif kind == 0x05:  # binary: a length, the subtype, the bytes
                size = 5 + _INT32(encoded, start)[0]
            elif kind == 0x0B:  # regular expression: two C strings
                size = encoded.index(b"\x00", encoded.index(b"\x00", start) + 1) + 1 - start
            elif kind == 0x0C:  # DBPointer: a string, then an ObjectId
                size = 16 + _INT32(encoded, start)[0]
            else:
                raise ValueError(f"BSON type {kind:#04x}")
        at = start + size
        elements.append((kind, encoded[start:at]))
    if at != end:
        raise ValueError("the array's elements do not end where it does")
    return elements


def element_value(element: Element, codec: CodecOptions[Any]) -> Any:
    """The value of one of :func:`array_elements`, decoded."""
    kind, value = element
    body = bytes((kind,)) + b"v\x00" + value
    return decode(_INT32_PACK(len(body) + 5) + body + b"\x00", codec)["v"]


def lend(docs: Sequence[Mapping[str, Any]] | Lent, codec: CodecOptions[Any]) -> Lent:
    """``docs`` ready to be lent to the transform (see :class:`Lent`): one C decode for the batch.

    Documents read as raw BSON (what lanes do) are used as read; a decoded one (a re-read)
    is encoded first, so the caller's dict is never lent."""
    if isinstance(docs, Lent):
        return docs
    raws = [doc.raw if isinstance(doc, RawBSONDocument) else encode(doc, codec_options=codec) for doc in docs]
    copies: list[dict[str, Any]] = decode_all(b"".join(raws), codec) if raws else []
    return Lent(raws, copies, codec)


def lend_decoded(docs: list[dict[str, Any]], codec: CodecOptions[Any]) -> Lent:
    """Documents decoded for this batch alone (a lane's read, decoded by the driver with its reply),
    lent to the transform as they are: no raw document per document, no second decode.

    The caller hands them over: it reads them afterwards only through the :class:`Lent`."""
    return Lent(None, docs, codec)


def as_read(top: dict[str, Any], codec: CodecOptions[Any]) -> dict[str, Any]:
    """A copy of a lent document's top (:attr:`Lent.tops`, before the transforms) that no transform can
    reach, nested values included: what a batch's cursor is taken from (its ``_id`` and shard key may
    be subdocuments)."""
    try:
        kept: dict[str, Any] = decode(encode(top, codec_options=codec), codec)
    except Exception:  # a value only the codec can decode
        kept = copy_module.deepcopy(top)
    return kept


#: What a transform returns that is never awaitable (its new document; None when it raised).
_PLAIN_RESULTS = frozenset({dict, type(None)})


@dataclass(slots=True)
class Transformed:
    """What each document's transform gave, in batch order: ``results[i]`` (None when it raised) and,
    for the documents whose transform raised, their error by index (``failed``; empty when none did).

    Two flat containers for the batch, not a pair per document: fewer objects built and freed."""

    results: list[Any]
    failed: dict[int, BaseException] = field(default_factory=dict)


def _until(copies: list[dict[str, Any]], stop: CancelSignal) -> Iterator[dict[str, Any]]:
    """``copies`` one by one while ``stop`` is not set; raised out of the loop that takes them (outside
    its per-document ``try``) once it is, so the document in progress ends and no other starts."""
    for copy in copies:
        if stop.is_set():
            raise RunAbortedError(f"stopped ({stop.reason or 'cancelled'}) between two documents; nothing was written")
        yield copy


async def _transform(job: Job, copies: list[dict[str, Any]], ctx: TransformContext, stop: CancelSignal | None = None) -> Transformed:
    """Each document's new version or its error; a sync function runs off the loop (see :mod:`.job`).

    ``stop``: see :func:`planned_updates` (checked between documents; a ``migrate_batch`` is one call)."""
    if job.many is not None:
        out = await call(job.many, list(copies), ctx)
        if not isinstance(out, list) or len(out) != len(copies):
            got = plural(len(out), 'result') if isinstance(out, list) else type(out).__name__
            raise BatchFailed(
                f"{'migrate_batch' if job.direction == 'forward' else 'revert_batch'} returned {got} for {plural(len(copies), 'document')}; "
                "it must return one per document, in order"
            )
        failed = {i: r for i, r in enumerate(out) if isinstance(r, BaseException)}
        return Transformed([None if i in failed else r for i, r in enumerate(out)] if failed else out, failed)
    assert job.one is not None
    if not copies:
        return Transformed([])
    each: Iterable[dict[str, Any]] = copies if stop is None else _until(copies, stop)
    if is_async(job.one):
        return await _each_on_loop(job.one, each, ctx)
    done = await asyncio.to_thread(_each_in_thread, job.one, each, ctx)
    returned = set(map(type, done.results)) - _PLAIN_RESULTS  # isawaitable per document only if needed
    if returned and any(inspect.isawaitable(new) for new in done.results):
        await _settle(done)  # a sync function that returned awaitables
    return done


async def _each_on_loop(fn: Callable[..., Any], copies: Iterable[dict[str, Any]], ctx: TransformContext) -> Transformed:
    """An async ``migrate`` for each document in turn: one document's error is its own."""
    done = Transformed([])
    results, failed = done.results, done.failed
    for index, copy in enumerate(copies):
        try:
            try:
                results.append(await fn(copy, ctx))
            except Exception:
                raise
            except BaseException as exc:  # sys.exit, KeyboardInterrupt: that document's failure, not the runner's end
                raise failure_of(exc) from None  # (a cancel of this task from outside goes on as it is)
        except Exception as exc:
            if transient_transaction_error(exc):
                raise  # a side write's transaction error belongs to the batch: it is retried whole
            results.append(None)
            failed[index] = exc
    return done


def _each_in_thread(fn: Callable[..., Any], copies: Iterable[dict[str, Any]], ctx: TransformContext) -> Transformed:
    """A sync ``migrate`` for every document of the batch, in one worker-thread call; the same error rules.

    ``sys.exit`` inside it fails that document, as everywhere user code runs (:mod:`mongoshift.project.user_code`):
    what :func:`~mongoshift.project.user_code.guard_exit` makes of it, raised here, without a wrapper call per document.
    """
    done = Transformed([])
    results, failed = done.results, done.failed
    append = results.append
    for copy in copies:
        try:
            try:
                append(fn(copy, ctx))
            except Exception:
                raise
            except BaseException as exc:
                raise failure_of(exc) from None
        except Exception as exc:
            if transient_transaction_error(exc):
                raise
            failed[len(results)] = exc
            append(None)
    return done


async def _settle(done: Transformed) -> None:
    """Await, on the loop, what a sync function returned as an awaitable; its error is its document's."""
    results = done.results
    for index, new in enumerate(results):
        if inspect.isawaitable(new):
            try:
                try:
                    results[index] = await new
                except Exception:
                    raise
                except BaseException as exc:  # as in _each_on_loop
                    raise failure_of(exc) from None
            except Exception as exc:
                if transient_transaction_error(exc):
                    raise
                results[index] = None
                done.failed[index] = exc


def _updates(
    job: Job,
    originals: list[dict[str, Any]],
    transformed: Transformed,
    codec: CodecOptions[Any],
    errors: list[DocumentError],
    *,
    check: bool = True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The documents to write and their updates, in batch order; each failure goes to ``errors``, in order.

    ``originals[i]`` is the i-th document as read, ``transformed.results[i]`` what its transform gave.
    A batch whose transforms all returned, with no shard key, is diffed in one pass; at the first
    shape error it is diffed again document by document (the diff has no effect of its own), so
    each failure is found and recorded as below.

    ``check=False`` leaves out the BSON check of the updates when no document failed otherwise (a
    failure keeps it, so that ``errors`` stays in batch order): the caller then owes it if the write
    fails (:func:`apply_batch` in strict mode, whose transaction the failure aborts)."""
    spec = job.spec
    shard_key = job.shard_key
    news, raised = transformed.results, transformed.failed
    diff = differ(spec.version_field, job.revision_field, job.target)  # the batch's settings, bound once
    owners: list[dict[str, Any]] = originals
    updates: list[dict[str, Any]] | None = None
    failures: list[tuple[int, DocumentError]] = []
    at: Sequence[int] = range(len(news))  # each update's index in the batch
    if not raised and not shard_key and len(news) == len(originals):
        try:
            updates = list(map(diff, originals, news))
        except ShapeError:
            updates = None
    if updates is None:
        positions: list[int] = []
        owners, updates, at = [], [], positions
        for index, (doc, new) in enumerate(zip(originals, news, strict=True)):
            error = raised.get(index)
            if error is not None:
                failures.append((index, DocumentError(doc["_id"], "transform", describe_transform_error(error, document=doc))))
                continue
            try:
                update = diff(doc, new)
            except ShapeError as exc:
                failures.append((index, DocumentError(doc["_id"], "shape", str(exc))))
                continue
            if shard_key and (moved := shard_key_change(doc, new, shard_key)):
                failures.append((index, DocumentError(doc["_id"], "shard-key-changed", moved)))
                continue
            owners.append(doc)
            updates.append(update)
            positions.append(index)
    problems = bson_problems(updates, codec) if check or failures else None  # one encode for the batch when all is well
    if problems:
        failures += [(at[i], DocumentError(owners[i]["_id"], "shape", problem)) for i, problem in problems.items()]
        failures.sort(key=lambda failure: failure[0])
        owners = [doc for i, doc in enumerate(owners) if i not in problems]
        updates = [update for i, update in enumerate(updates) if i not in problems]
    errors += [failure for _, failure in failures]
    return owners, updates


@dataclass
class PlannedUpdates:
    """What the engine would write for a batch: each document as read with its update, and the failures.

    ``owners[i]`` is the document as read that ``updates[i]`` rewrites; ``errors`` are the documents
    that cannot be written (transform or shape), in batch order."""

    owners: list[dict[str, Any]]
    updates: list[dict[str, Any]]
    errors: list[DocumentError]
    #: False: the updates were not checked for BSON (``check=False``); :func:`unstorable` says it after a failed write.
    checked: bool = True


async def planned_updates(
    job: Job,
    docs: Sequence[Mapping[str, Any]] | Lent,
    ctx: TransformContext,
    codec: CodecOptions[Any],
    *,
    check: bool = True,
    stop: CancelSignal | None = None,
) -> PlannedUpdates:
    """Transform ``docs`` and build their guarded updates, writing nothing.

    The one place a batch's updates come from: :func:`apply_batch` writes them, the preview
    (:mod:`..inspect.preview`) shows them, so what a preview shows is what a run sends.
    ``docs`` may come already lent (:func:`lend`: a lane that read the batch's ids from it).
    ``check=False``: see :func:`_updates`. ``stop`` (the preview): once it is set, no document's transform
    starts (the one in progress ends) and :class:`~mongoshift.errors.RunAbortedError` is raised; a lane's
    batch is never cut short (it finishes and checkpoints)."""
    errors: list[DocumentError] = []
    lent = lend(docs, codec)
    transformed = await _transform(job, lent.copies, ctx, stop)
    owners, updates = _updates(job, lent.originals(codec), transformed, codec, errors, check=check)
    return PlannedUpdates(owners, updates, errors, check or bool(errors))


def unstorable(planned: PlannedUpdates, codec: CodecOptions[Any]) -> DocumentError | None:
    """The first document whose update cannot be sent as BSON, as the check :func:`_updates` left out
    would have found it (the same words, never a value); None when every update can be."""
    problems = bson_problems(planned.updates, codec)
    if not problems:
        return None
    index = min(problems)
    return DocumentError(planned.owners[index]["_id"], "shape", problems[index])


def shard_key_change(old: Mapping[str, Any], new: Any, fields: Sequence[str]) -> str | None:
    """Why a rewrite would move a document to another chunk (a changed shard-key field), or None.

    Numbers compare by value (``1``, ``1.0`` and ``Int64(1)`` are the same key); the message
    names the fields, never their values."""
    if not isinstance(new, Mapping):
        return None  # not a document: the shape check says so
    before, after = key_values(old, fields), key_values(new, fields)
    changed = [f for f, a, b in zip(fields, before, after, strict=True) if not same_value(a, b)]
    if not changed:
        return None
    return f"the transform changed the shard key ({', '.join(changed)}): a background migration cannot move documents between chunks"


class _GuardedUpdates:
    """A batch's guarded updates as one request of ``bulk_write``: ``UpdateOne`` without its per-document cost.

    ``bulk_write`` takes any request that adds itself to the bulk (``_add_to_bulk``). This one
    adds ``{q: guard, u: update, multi: false, upsert: false}`` for each document, exactly what an ``UpdateOne``
    without options adds, straight to the bulk's operations, skipping the checks ``UpdateOne``
    and ``add_update`` make on each (the guard and the update are built here and always valid).
    A bulk that does not look as expected gets real ``UpdateOne`` requests instead.
    """

    __slots__ = ("owners", "revision_field", "shard_key", "updates", "version_field")

    def __init__(
        self, owners: list[dict[str, Any]], updates: list[dict[str, Any]], version_field: str, revision_field: str | None, shard_key: Sequence[str] = ()
    ) -> None:
        self.owners = owners
        self.updates = updates
        self.version_field = version_field
        self.revision_field = revision_field
        self.shard_key = tuple(shard_key)

    def _guards(self) -> list[dict[str, Any]]:
        """Each owner's guard; the shard key's values join it only on a sharded collection (a hot loop)."""
        version_field, revision_field, shard_key = self.version_field, self.revision_field, self.shard_key
        if not shard_key and revision_field is not None:  # :func:`.document.guard`, inlined: no call per document
            missing = MISSING
            return [
                {
                    "_id": doc["_id"],
                    version_field: {"$exists": False} if (version := doc.get(version_field, missing)) is missing else version,
                    revision_field: {"$exists": False} if (revision := doc.get(revision_field, missing)) is missing else revision,
                }
                for doc in self.owners
            ]
        if not shard_key:
            return [guard(doc, version_field, revision_field) for doc in self.owners]
        return [guard(doc, version_field, revision_field, key_of(doc, shard_key)) for doc in self.owners]

    def _add_to_bulk(self, bulk: Any) -> None:
        ops = getattr(bulk, "ops", None)
        if _UPDATE_OP is None or not isinstance(ops, list):
            for filter_, update in zip(self._guards(), self.updates, strict=True):
                UpdateOne(filter_, update)._add_to_bulk(bulk)
            return
        ops += [
            (_UPDATE_OP, {"q": filter_, "u": update, "multi": False, "upsert": False})
            for filter_, update in zip(self._guards(), self.updates, strict=True)
        ]


async def _write(
    collection: AsyncCollection[dict[str, Any]],
    ops: Sequence[Any],
    *,
    session: Any,
) -> tuple[int, dict[int, dict[str, Any]]]:
    """Matched count and the per-document failures by op index; anything else raises."""
    if not ops:
        return 0, {}
    try:
        result = await collection.bulk_write(ops, ordered=False, session=session)
        return result.matched_count, {}
    except BulkWriteError as exc:
        details = exc.details
        if details.get("writeConcernErrors"):
            raise
        failed: dict[int, dict[str, Any]] = {}
        for error in details.get("writeErrors", []):
            if not document_write_error(error.get("code")):
                raise
            failed[error["index"]] = error
        return int(details.get("nMatched", 0)), failed


async def write_planned(
    job: Job, planned: PlannedUpdates, collection: AsyncCollection[dict[str, Any]], *, session: Any
) -> tuple[int, dict[int, dict[str, Any]]]:
    """Send ``planned``'s guarded updates (one unordered bulk): the matched count and each refused document's error by index.

    The write of :func:`apply_batch`, also used by the validation sandbox (:mod:`..inspect.validate`) so
    that what it validates is the very update a run sends."""
    owners, updates = planned.owners, planned.updates
    ops = [_GuardedUpdates(owners, updates, job.spec.version_field, job.revision_field, job.shard_key)] if owners else []
    return await _write(collection, ops, session=session)


def write_error_text(job: Job, owner: Mapping[str, Any], update: Mapping[str, Any], error: Mapping[str, Any]) -> str:
    """A refused guarded update of ``owner`` (the document as read) in words, as the preview says them, so that a
    run's (and ``--validate``'s) words are the preview's. A type mismatch (14) of an update that increments the revision
    is the stored revision's: ``$set`` and ``$unset`` check no type. A bad value (2) of one whose stored revision is the
    largest 64-bit integer is its ``$inc`` overflowing (mongod: "Failed to apply $inc operations")."""
    code = error.get("code")
    if "$inc" in update and job.revision_field is not None:
        field = job.revision_field
        if code == 14:
            return f"the stored {field} is not a number, so it cannot be incremented: make it a whole number (TypeMismatch, 14)"
        stored = owner.get(field)
        if code == 2 and isinstance(stored, int) and stored == MAX_BSON_INT:
            return f"the stored {field} is the largest 64-bit integer, so incrementing it overflows: make it smaller (BadValue, 2)"
    return describe_write_error(error)


def key_of(doc: Mapping[str, Any], shard_key: Sequence[str]) -> dict[str, Any]:
    """A document's shard-key values as read, by field (a missing field is None): what its guard carries."""
    return dict(zip(shard_key, key_values(doc, shard_key), strict=True))


def batch_keys(docs: Sequence[Mapping[str, Any]], shard_key: Sequence[str]) -> dict[str, Any] | None:
    """The predicate that targets a batch's multi-document update: each distinct shard key of ``docs``
    as read (one equality, or an ``$or`` of them); None without a shard key.

    mongos sends a ``$or`` of full shard-key equalities to the shards owning those keys only, and
    each document as read matches its own branch, so the filter leaves out nothing the ``_id``s
    and the source shape would match, except a document whose key was changed since the read
    (the one-by-one guards leave it out too: it is plural skipped, and the next pass takes it)."""
    if not shard_key:
        return None
    distinct: dict[bytes, dict[str, Any]] = {}
    for doc in docs:
        key = key_of(doc, shard_key)
        distinct.setdefault(encode({"k": list(key.values())}), key)
    branches = list(distinct.values())
    return branches[0] if len(branches) == 1 else {"$or": branches}


def pipeline_ops(job: Job, docs: Sequence[Mapping[str, Any]]) -> list[UpdateOne]:
    """One guarded pipeline ``UpdateOne`` per document: the one-by-one form of a ``pipeline`` migration's write.

    Each filter is the source shape and the document's ``_id``, plus its shard-key values as read
    when the key is known (``docs`` then carry them: the lanes read them with the ``_id``)."""
    match = job.match(exclude_bad=False)
    update = pipeline_update(job)
    shard_key = job.shard_key
    return [
        UpdateOne({"$and": [match, keyed({"_id": doc["_id"]}, key_of(doc, shard_key) if shard_key else None)]}, update)
        for doc in docs
    ]


async def write_pipeline(
    job: Job, docs: Sequence[Mapping[str, Any]], collection: AsyncCollection[dict[str, Any]], *, session: Any
) -> tuple[int, dict[int, dict[str, Any]]]:
    """:func:`pipeline_ops` sent as one unordered bulk: the matched count and each refused document's error by index."""
    return await _write(collection, pipeline_ops(job, docs), session=session)


async def apply_batch(
    job: Job,
    docs: Sequence[Mapping[str, Any]] | Lent,
    collection: AsyncCollection[dict[str, Any]],
    ctx: TransformContext,
    *,
    session: Any = None,
    strict: bool = False,
) -> BatchResult:
    """Transform and write ``docs``; see the module docstring for the conflict rules.

    ``docs`` may come already lent (:func:`lend`).
    ``strict`` (a transactional batch): the first document error raises
    :class:`DocumentFailed` and a write that matched nothing raises
    :class:`WriteConflict`, so that nothing of the batch commits with them.
    """
    spec = job.spec
    if session is None:
        collection = collection.with_options(write_concern=WriteConcern(**spec.write_concern))
    if job.pipeline is not None:  # no transform here: a lent batch (a transaction's) is its documents as read
        return await _apply_pipeline(job, docs.tops if isinstance(docs, Lent) else docs, collection, session=session, strict=strict)
    result = BatchResult()
    codec = collection.codec_options.with_options(document_class=dict)
    pending: Sequence[Mapping[str, Any]] | Lent = docs
    for round_ in range(spec.max_conflict_retries + 1):
        # Strict mode writes without the BSON check of the updates (one encode of the batch's updates,
        # about a twelfth of a document's client CPU): the bulk write's own encode makes it, and the server
        # refuses an update over 16 MiB (mongod, and the embedded server since its fix (bv)). What the bulk
        # may have written before a failure goes with the transaction the failure aborts; the check then
        # names the document, as it would have before the write.
        planned = await planned_updates(job, pending, ctx, codec, check=not strict)
        owners = planned.owners
        result.errors += planned.errors
        if strict and result.errors:
            raise DocumentFailed(result.errors[0])
        try:
            matched, failed = await write_planned(job, planned, collection, session=session)
        except Exception:
            if not planned.checked and (bad := unstorable(planned, codec)) is not None:
                raise DocumentFailed(bad) from None
            raise
        if failed and not planned.checked and (bad := unstorable(planned, codec)) is not None:
            raise DocumentFailed(bad)  # the server refused a write, but the check finds a document it would have left out first
        for index, error in failed.items():
            owner = owners[index]
            result.errors.append(DocumentError(owner["_id"], "write", write_error_text(job, owner, planned.updates[index], error)))
        if strict and result.errors:
            raise DocumentFailed(result.errors[0])
        written = len(owners) - len(failed)
        result.migrated += matched  # each guarded write matches at most once: this count is exact
        if matched == written:
            return result
        if strict:
            raise WriteConflict(f"{plural(written - matched, 'document')} changed under the transaction")
        # Some guarded writes matched nothing: someone wrote those documents since they were read.
        # One read finds the ones still in the old shape and still matching; the others are gone
        # or moved on to another version, which is nothing left to do for this batch.
        candidates = [doc["_id"] for i, doc in enumerate(owners) if i not in failed]
        again = [
            d
            async for d in collection.find(
                {"$and": [job.match(exclude_bad=False), {"_id": {"$in": candidates}}]}, session=session, batch_size=len(candidates)
            )
        ]
        result.skipped += max(0, written - matched - len(again))
        if not again:
            return result
        if round_ == spec.max_conflict_retries:
            result.conflicts += len(again)  # still in the way: the next pass takes them
            result.left += [d["_id"] for d in again]
            return result
        result.retried += len(again)
        pending = again
    return result


async def _apply_pipeline(
    job: Job, docs: Sequence[Mapping[str, Any]], collection: AsyncCollection[dict[str, Any]], *, session: Any, strict: bool
) -> BatchResult:
    """The server runs the transform: one multi-document update per batch, guarded by the source shape.

    See the module docstring for what happens when that update fails."""
    assert job.pipeline is not None
    match = job.match(exclude_bad=False)
    update = pipeline_update(job)
    ids = [doc["_id"] for doc in docs]
    if strict:
        return await _pipeline_each(job, docs, collection, session=session, strict=True)
    if not ids:
        return BatchResult()
    keys = batch_keys(docs, job.shard_key)
    targeted = [match, {"_id": {"$in": ids}}] if keys is None else [match, {"_id": {"$in": ids}}, keys]
    try:
        written = await collection.update_many({"$and": targeted}, update, session=session)
    except WriteConcernError:
        raise  # the writes happened; like a write-concern error of the one-by-one form, the batch fails
    except PyMongoError:
        # Which documents it rewrote before it stopped is not in the reply (mongod says n: 0), so the
        # primary's documents say it, in one read that sees each document once: at the target version
        # (rewritten: the batch was read in the source shape, and only a rewrite leaves it), or still
        # in the source shape (not rewritten: written one by one now). Anything else moved on.
        # This read leaves the shard key out (it may go to every shard, only when a batch failed):
        # a document rewritten and then given another key by the application still counts as migrated.
        field, target = job.spec.version_field, job.target
        rewritten: set[bytes] = set()
        waiting: set[bytes] = set()
        primary = collection.with_options(read_preference=ReadPreference.PRIMARY)
        async for doc in primary.find(
            {"$and": [{"_id": {"$in": ids}}, {"$or": [match, version_match(field, target)]}]}, {field: 1}, session=session, batch_size=len(ids)
        ):
            (rewritten if at_version(doc.get(field), target) else waiting).add(id_key(doc["_id"]))
        pending = [doc for doc in docs if id_key(doc["_id"]) in waiting]
        result = await _pipeline_each(job, pending, collection, session=session, strict=False)
        result.migrated += len(rewritten)
        result.skipped += len(ids) - len(pending) - len(rewritten)
        return result
    return BatchResult(migrated=written.matched_count, skipped=len(ids) - written.matched_count)


async def _pipeline_each(
    job: Job, docs: Sequence[Mapping[str, Any]], collection: AsyncCollection[dict[str, Any]], *, session: Any, strict: bool
) -> BatchResult:
    """One guarded pipeline ``UpdateOne`` per document: each document's error is its own (the shard-key guard's is ``shard-key-changed``)."""
    matched, failed = await write_pipeline(job, docs, collection, session=session)
    result = BatchResult(migrated=matched, skipped=len(docs) - len(failed) - matched)
    for index, error in failed.items():
        if refused_by_guard(error, job.shard_key):
            result.errors.append(DocumentError(docs[index]["_id"], "shard-key-changed", key_changed_message(job.shard_key)))
        else:
            result.errors.append(DocumentError(docs[index]["_id"], "write", describe_write_error(error)))
    if strict and result.errors:
        raise DocumentFailed(result.errors[0])
    return result


async def rewrite_range(
    job: Job, collection: AsyncCollection[dict[str, Any]], filter_: dict[str, Any], *, hint: list[tuple[str, Any]] | None, session: Any
) -> int:
    """A ``pipeline`` migration's bounded range rewritten on the server by one ``update_many``: the count it matched.

    ``filter_`` is the range and the source shape, so each document's rewrite is atomic on the server and
    the match count is exact (a rewrite leaves the source shape: no document is matched twice). Nothing
    is read to the client. The caller runs it in a transaction with the range's fenced checkpoint, so a
    failure (a document the pipeline cannot evaluate, a conflict, a lost lease) leaves nothing written:
    the reply of a failed multi-document update does not say what it wrote (see :mod:`..lanes.modes`)."""
    written = await collection.update_many(filter_, pipeline_update(job), hint=hint, session=session)
    return written.matched_count


def at_version(value: Any, version: int) -> bool:
    """Whether a stored version ``value`` (None: missing) is one that ``version_match(field, version)`` matches.

    As on the server: any numeric type compares by value, a boolean is not a number."""
    if value is None:
        return version == 0
    if isinstance(value, bool):
        return False
    if isinstance(value, Decimal128):
        return value.to_decimal() == version
    return isinstance(value, (int, float)) and value == version


def pipeline_update(job: Job) -> list[dict[str, Any]]:
    """The update pipeline a ``pipeline`` migration sends: its own stages (inside the shard-key guard
    of :mod:`.pipeline_guard` when the key is known), then the version and revision stamp."""
    assert job.pipeline is not None
    stages = guarded(job.pipeline, job.shard_key) if job.shard_key else job.pipeline
    return [*stages, *stamp_stages(job.spec.version_field, job.revision_field, job.target)]


def stamp_stages(version_field: str, revision_field: str | None, to_version: int) -> list[dict[str, Any]]:
    """The pipeline stages that do what :func:`stamped_diff` does: set the version, bump the revision."""
    stages: list[dict[str, Any]] = []
    set_: dict[str, Any] = {}
    if to_version == 0:
        stages.append({"$unset": version_field})
    else:
        set_[version_field] = {"$literal": to_version}
    if revision_field is not None:
        set_[revision_field] = {"$add": [{"$ifNull": [f"${revision_field}", 0]}, 1]}
    if set_:
        stages.append({"$set": set_})
    return stages


def id_key(value: Any) -> bytes:
    """A hashable, type-exact key for any ``_id`` (``1`` and ``1.0`` stay apart)."""
    return encode({"k": value})
