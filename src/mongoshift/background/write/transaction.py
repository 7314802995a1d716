"""A batch (or a step) inside one snapshot transaction, with its checkpoint as the last write.

The read, the transforms (which may write elsewhere through ``ctx.session``),
the guarded writes and the fenced checkpoint commit together or not at all.
So the counters are exact, a lane that lost its lease commits nothing (its
checkpoint matches nothing), and a side write happens once per migrated
document.

Retry rules: a document that fails aborts the batch, which is retried without
it (it is recorded as failed); a conflict aborts and the retry reads the
documents again; transient errors (label, 112, 251, 24) back off with full
jitter (at most min(2 s, 50 ms·2ⁿ)) up to ``max_retries``, halving the batch
after half of them, and a write conflict past ``max_retries`` until
:data:`CONFLICT_PATIENCE_S` after the first; time or size errors halve it at once. Alone in a batch, a
conflicting document is passed to the next pass and one too big or too slow
is a document error. An unknown commit result is committed again; clean
batches grow back ×1.5.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import decode, encode
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.errors import PyMongoError
from pymongo.read_concern import ReadConcern
from pymongo.read_preferences import ReadPreference
from pymongo.write_concern import WriteConcern

from ...project.server_errors import (
    error_code,
    transaction_too_big_or_slow,
    transactions_unsupported,
    transient_transaction_error,
    unknown_commit_result,
)
from ...schema.background import Background
from .batch import BatchResult, DocumentError, DocumentFailed, Lent, WriteConflict, as_read, id_key, lend, lend_decoded

log = logging.getLogger("mongoshift.background")

#: What one batch may read into a transaction, well under 16 MiB.
MAX_TRANSACTION_BYTES = 8 * 1024 * 1024
CLEAN_BATCHES_TO_GROW = 5
#: How long a batch keeps retrying write conflicts once ``max_retries`` is spent, from the first one.
#: Another transaction holds what the batch writes; the server aborts a transaction open longer than
#: ``transactionLifetimeLimitSeconds`` (60 s by default, on mongod and the embedded server). So a lane
#: killed in the middle of a transaction (kill -9: its transaction stays open, holding its documents and
#: its partition's checkpoint) blocks the partition's next holder for at most that long, and the next
#: holder waits it out instead of failing the partition three slices in a row.
CONFLICT_PATIENCE_S = 90.0


#: The server's WriteConflict: another transaction wrote a document this one writes.
WRITE_CONFLICT_CODE = 112


class TransactionsUnsupported(Exception):
    """The server refused to start a transaction (a standalone mongod)."""


def backoff_seconds(attempt: int, rng: random.Random) -> float:
    return rng.random() * min(2.0, 0.05 * 2.0**attempt)


def fitting(docs: list[Any], limit: int = MAX_TRANSACTION_BYTES) -> list[Any]:
    """The leading documents whose BSON fits in ``limit`` bytes: at least one (raw ones are measured, not encoded)."""
    total = 0
    for i, doc in enumerate(docs):
        total += len(doc.raw) if isinstance(doc, RawBSONDocument) else len(encode(doc))
        if total > limit and i > 0:
            return docs[:i]
    return docs


@dataclass(slots=True)
class Read:
    """A batch read into a transaction as whole replies (:func:`read_replies`): its documents decoded with
    them, this batch's alone, and the replies as read, whose lengths bound the documents' size.

    The size check costs nothing while the replies' total length is within the limit (the documents
    are inside them, so their total is less); past it, each document's exact size is read from the
    replies (:meth:`fit`), as a raw read measures it."""

    docs: list[dict[str, Any]]
    replies: list[RawBSONDocument] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.docs)

    def fit(self, limit: int = MAX_TRANSACTION_BYTES) -> list[dict[str, Any]]:
        """The leading documents whose BSON fits in ``limit`` bytes: at least one (see :func:`fitting`)."""
        if sum(len(reply.raw) for reply in self.replies) <= limit:
            return self.docs
        sizes = [len(doc.raw) for reply in self.replies for doc in _batch_of(reply["cursor"])]
        assert len(sizes) == len(self.docs)
        total = 0
        for i, size in enumerate(sizes):
            total += size
            if total > limit and i > 0:
                return self.docs[:i]
        return self.docs


def _batch_of(cursor: Mapping[str, Any]) -> Any:
    return cursor["firstBatch"] if "firstBatch" in cursor else cursor["nextBatch"]


async def read_replies(database: Any, command: dict[str, Any], *, session: Any, codec: CodecOptions[Any]) -> Read:
    """The documents a ``find`` ``command`` (with its ``limit``) returns, read in ``session``: each reply
    as one raw document, its cursor decoded in one C call (``codec``: dict documents), the rest of a
    batch cut short by the server's reply size fetched by ``getMore``, as a cursor would."""
    raw = codec.with_options(document_class=RawBSONDocument)
    limit: int = command["limit"]
    reply = await database.command(command, session=session, codec_options=raw)
    read = Read([], [reply])
    while True:
        cursor = decode(reply["cursor"].raw, codec)
        read.docs += _batch_of(cursor)
        if not cursor["id"]:
            return read
        if len(read.docs) >= limit:  # all the batch asked for: the cursor ends with the transaction, closed now all the same
            await database.command({"killCursors": command["find"], "cursors": [cursor["id"]]}, session=session)
            return read
        more = {"getMore": cursor["id"], "collection": command["find"], "batchSize": limit - len(read.docs)}
        reply = await database.command(more, session=session, codec_options=raw)
        read.replies.append(reply)


def transaction_options(spec: Background) -> dict[str, Any]:
    assert spec.transaction is not None
    return {
        "read_concern": ReadConcern("snapshot"),
        "write_concern": WriteConcern(**spec.write_concern),
        "read_preference": ReadPreference.PRIMARY,
        "max_commit_time_ms": spec.transaction.timeout_ms,
    }


async def commit(session: Any) -> None:
    for attempt in range(3):
        try:
            await session.commit_transaction()
            return
        except PyMongoError as exc:
            if not unknown_commit_result(exc) or attempt == 2:
                raise


@dataclass
class TransactionalBatchSize:
    """The lane's current batch size in transaction mode: halved on trouble, grown back ×1.5."""

    size: int
    clean: int = 0

    def succeeded(self, used: int, maximum: int) -> None:
        self.clean += 1
        if self.clean >= CLEAN_BATCHES_TO_GROW and used < maximum:
            self.size, self.clean = min(maximum, -(-used * 3 // 2)), 0
        else:
            self.size = used


@dataclass
class Outcome:
    """What a committed transactional batch did, for the lane's events and checkpoint bookkeeping."""

    result: BatchResult
    docs: list[dict[str, Any]]
    done: bool
    last_id: Any
    retries: int
    excluded: list[DocumentError] = field(default_factory=list)
    lost: bool = False


async def run_batch(
    *,
    client: Any,
    collection: Any,
    spec: Background,
    read: Any,
    write: Any,
    checkpoint: Any,
    sizing: TransactionalBatchSize,
    rng: random.Random,
    now: Callable[[], float] = time.monotonic,
) -> Outcome:
    """One transactional batch with its retries.

    ``read(session, limit)`` returns the batch's documents: a :class:`Read` (as lanes read them:
    decoded with their replies, lent as they are, :func:`.batch.lend_decoded`), or a list of raw
    BSON or decoded documents (lent by :func:`.batch.lend`: decoded once, their ids taken from
    that decode). ``write(session, lent)`` runs the shared write path in strict mode on them,
    without the documents left out; ``checkpoint(session, docs, fetched, limit, result, excluded,
    retries)`` writes the fenced checkpoint (False: lease lost). ``docs`` (there and in the
    :class:`Outcome`) are the batch's documents that fit; of a :class:`Read`, their lent tops with
    the last one (the cursor is taken from it, and a lone document skipped) a copy as read that no
    transform reaches: only their number and that last one are as read.
    """
    assert spec.transaction is not None
    size = min(sizing.size, spec.batch_size)
    codec = collection.codec_options.with_options(document_class=dict)
    excluded: dict[bytes, DocumentError] = {}
    attempts = retries = 0
    first_conflict: float | None = None
    while True:
        docs: list[Any] = []
        ids: list[Any] = []
        lone: bytes | None = None  # the key of a batch's only document, as read
        async with client.start_session() as session:
            try:
                await session.start_transaction(**transaction_options(spec))
                fetched = await read(session, size)
                if isinstance(fetched, Read):
                    lent = lend_decoded(fetched.fit(), codec)
                    docs = [*lent.tops[:-1], as_read(lent.tops[-1], codec)] if len(lent) else []
                else:
                    docs = fitting(fetched)
                    lent = lend(docs, codec)
                ids = [doc["_id"] for doc in lent.tops]  # as read: before the transforms
                # Ids are keyed (an encode each) only when some document was left out, and a lone
                # document's, which the retry rules below may leave out.
                lone = id_key(ids[0]) if len(ids) == 1 else None
                work: Lent = lent
                failed_here: list[DocumentError] = []
                if excluded:
                    keys = [id_key(i) for i in ids]
                    kept = [i for i, key in enumerate(keys) if key not in excluded]
                    work = lent if len(kept) == len(keys) else lent.subset(kept, codec)
                    # Only the left-out documents this batch holds: a smaller retry (halved, or cut to
                    # fit) may end before one, and the batch that reaches it again counts it then.
                    failed_here = [excluded[key] for key in keys if key in excluded]
                result = await write(session, work) if len(work) else BatchResult()
                result.errors = failed_here
                ok = await checkpoint(session, docs, fetched, size, result, failed_here, retries)
                if not ok:
                    await session.abort_transaction()
                    return Outcome(result, docs, False, None, retries, lost=True)
                await commit(session)
                sizing.succeeded(size, spec.batch_size)
                done = len(docs) == len(fetched) and len(fetched) < size
                return Outcome(result, docs, done, ids[-1] if ids else None, retries, failed_here)
            except DocumentFailed as failed:
                await _abort(session)
                excluded[id_key(failed.document.id)] = failed.document
                continue
            except (WriteConflict, PyMongoError) as exc:
                await _abort(session)
                if transactions_unsupported(exc):
                    raise TransactionsUnsupported(str(exc)) from None
                conflict = isinstance(exc, WriteConflict)
                time_or_size = transaction_too_big_or_slow(exc)
                if not (conflict or time_or_size or transient_transaction_error(exc)):
                    raise
                retries += 1
                sizing.clean = 0
                if lone is not None and size == 1:  # one document, alone in the batch
                    if time_or_size:
                        # Its id decoded from its key: as read, whatever a transform did to ids[0] in place.
                        excluded[lone] = DocumentError(decode(lone, codec)["k"], "transaction", f"too big or too slow for a transaction ({error_code(exc)})")
                        continue
                    if conflict:
                        raise Skip(docs[0], retries) from None
                if time_or_size and size > 1:
                    size = max(1, size // 2)
                    continue
                attempts += 1
                if conflict or error_code(exc) == WRITE_CONFLICT_CODE:
                    first_conflict = now() if first_conflict is None else first_conflict
                    patient = now() - first_conflict < CONFLICT_PATIENCE_S
                else:
                    patient = False
                if attempts > spec.transaction.max_retries and not patient:
                    raise
                if attempts == spec.transaction.max_retries + 1 and patient:  # once a batch: the wait that follows is not a stall
                    log.info(
                        "a transactional batch on %s meets write conflicts past max_retries and waits them out for up to %.0f s: "
                        "another transaction holds what it writes (one left open by a runner that was killed lasts until the server "
                        "aborts it, 60 s by default)", spec.collection, CONFLICT_PATIENCE_S,
                    )
                if attempts > spec.transaction.max_retries / 2:
                    size = max(1, size // 2)
                await asyncio.sleep(backoff_seconds(attempts, rng))


class Skip(Exception):
    """A lone document still in the way: the caller moves the cursor past it (the next pass takes it).

    ``doc`` is as read: a copy no transform reached (a lane's :class:`Read`), or raw BSON when read so."""

    def __init__(self, doc: Mapping[str, Any], retries: int) -> None:
        super().__init__("conflict")
        self.doc = doc
        self.retries = retries



async def _abort(session: Any) -> None:
    try:
        if session.in_transaction:
            await session.abort_transaction()
    except PyMongoError:
        pass
