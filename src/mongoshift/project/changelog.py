"""The changelog: one record per migration file, kept for good.

Records are upserted by name and never deleted: a rollback marks a record
``reverted``, a failure marks it ``failed`` (never over an ``applied`` one).
Times come from the server clock (``$$NOW``) so that machines with skewed
clocks still write a consistent history. Each write is built as a
``(filter, update)`` pair so that the same definition serves the async path
and the sync path that runs inside a migration's own transaction.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pymongo import ASCENDING, DESCENDING, IndexModel, MongoClient, UpdateOne
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import DuplicateKeyError, OperationFailure

from ..errors import CollectionClashError
from .redaction import redact
from .run import RunInfo

Status = Literal["applied", "reverted", "failed"]

INDEXES = [
    IndexModel([("name", ASCENDING)], name="name_unique", unique=True),
    IndexModel([("status", ASCENDING), ("batch", DESCENDING)], name="status_batch"),
    IndexModel([("batch", DESCENDING)], name="batch"),
    IndexModel(
        [("status", ASCENDING), ("applied_at", DESCENDING), ("name", DESCENDING)],
        name="status_applied_at_name",
    ),
]


@dataclass
class ChangelogRecord:
    name: str
    status: Status
    batch: int | None = None
    checksum: str | None = None
    applied_at: datetime | None = None
    first_applied_at: datetime | None = None
    reverted_at: datetime | None = None
    failed_at: datetime | None = None
    duration_ms: int | None = None
    run_id: str | None = None
    executed_by: str | None = None
    host: str | None = None
    environment: str | None = None
    description: str | None = None
    error: str | None = None
    kind: str = "migration"
    #: Who wrote the record when mongoshift did not run the file: ``baseline`` or the tool it was
    #: imported from (``migrate-mongo``...). Such records are forward-only (``down`` refuses them).
    origin: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_document(cls, doc: dict[str, Any], collection: str = "the changelog") -> ChangelogRecord:
        """A stored record; one whose fields have the wrong type (edited by hand, or another tool's) is refused
        naming the record and the field (exit 39), where it crashed later, exit 1 "please report it"."""
        known = set(cls.__dataclass_fields__) - {"extra"}
        values = {k: v for k, v in doc.items() if k in known}
        extra = {k: v for k, v in doc.items() if k not in known and k != "_id"}
        wrong = [key for key, kinds in _FIELD_TYPES.items() if values.get(key) is not None and not _is(values[key], kinds)]
        if not isinstance(values.get("name"), str) or values.get("status") not in ("applied", "reverted", "failed") or wrong:
            which = f"the record of {redact(values['name'], limit=200)}" if isinstance(values.get("name"), str) else "a record without a name"
            what = ", ".join(wrong) if wrong else ("name" if not isinstance(values.get("name"), str) else "status")
            raise CollectionClashError(
                f"{collection}: {which} is not one mongoshift writes ({what} of the wrong type or value); "
                "restore it, or delete it to have the file counted as never run",
                collection=collection,
                fields=what.split(", "),
            )
        return cls(**values, extra=extra)


def next_batch_after(records: Mapping[str, ChangelogRecord]) -> int:
    """One more than the highest batch of ``records`` (every record, reverted ones too), as
    :meth:`Changelog.next_batch` reads it from the collection: numbers never repeat."""
    return max((int(r.batch) for r in records.values() if r.batch is not None and math.isfinite(r.batch)), default=0) + 1


#: The type of each record field mongoshift computes with (None is allowed for all of them).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "batch": (int, float),  # a number typed in mongosh is a double
    "checksum": (str,),
    "applied_at": (datetime,),
    "first_applied_at": (datetime,),
    "reverted_at": (datetime,),
    "failed_at": (datetime,),
    "duration_ms": (int, float),
    "origin": (str,),
    "kind": (str,),
}


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    return isinstance(value, kinds) and not isinstance(value, bool)


def _literal(value: Any) -> Any:
    """Pipeline updates read ``"$x"`` as a field path; user text must stay text."""
    return {"$literal": value}


#: What a rollback or a failure wrote on a record: an applied record carries none of it (``first_applied_at`` keeps
#: when the file was first applied), so it never shows a failure time or a revert's run beside its applied time.
_NOT_APPLIED_FIELDS = ["reverted_at", "revert_duration_ms", "revert_run_id", "reverted_by", "error", "failed_checksum", "failed_at"]
#: What ``baseline`` and ``import`` write on a record mongoshift did not run (see :func:`adopted_update`).
_ADOPTED_FIELDS = ["origin", "source"]


def applied_update(
    name: str,
    *,
    batch: int,
    checksum: str,
    duration_ms: int,
    run: RunInfo,
    description: str | None,
    kind: str = "migration",
    at: datetime | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``at``: when it was applied, when that was before this write (a squash file recorded at a rollback
    of the files it replaced, as applied when the first of them was); default the server's now."""
    when: Any = "$$NOW" if at is None else at
    fields = {
        "name": _literal(name),
        "kind": kind,
        "status": "applied",
        "batch": batch,
        "checksum": _literal(checksum),
        "duration_ms": duration_ms,
        "run_id": _literal(run.run_id),
        "executed_by": _literal(run.executed_by),
        "host": _literal(run.host),
        "environment": _literal(run.environment),
        "description": _literal(description),
        "applied_at": when,
        "first_applied_at": {"$ifNull": ["$first_applied_at", when]},
    }
    # Applied by mongoshift now: a record ``baseline`` or ``import`` wrote (``up FILE --force`` of it) is no longer
    # one mongoshift never ran, which ``down`` would refuse.
    return {"name": name}, [{"$set": fields}, {"$unset": [*_NOT_APPLIED_FIELDS, *_ADOPTED_FIELDS]}]


def adopted_update(
    name: str,
    *,
    batch: int,
    checksum: str,
    applied_at: datetime | None,
    origin: str,
    run: RunInfo,
    source: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A file recorded applied without mongoshift running it (``import``, ``baseline``).

    ``applied_at`` keeps the other tool's time (the server's now when it has none); ``source``
    says where an imported record came from, so a re-import can recognise its own records.
    """
    when: Any = applied_at if applied_at is not None else "$$NOW"
    fields = {
        "name": _literal(name),
        "kind": "migration",
        "status": "applied",
        "origin": _literal(origin),
        "batch": batch,
        "checksum": _literal(checksum),
        "run_id": _literal(run.run_id),
        "executed_by": _literal(run.executed_by),
        "host": _literal(run.host),
        "environment": _literal(run.environment),
        "applied_at": when,
        "first_applied_at": {"$ifNull": ["$first_applied_at", when]},
        "recorded_at": "$$NOW",
    }
    if source is not None:
        fields["source"] = _literal(source)
    return {"name": name}, [
        {"$set": fields},
        {"$unset": _NOT_APPLIED_FIELDS},
    ]


def reverted_update(name: str, *, duration_ms: int, run: RunInfo) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    fields = {
        "status": "reverted",
        "reverted_at": "$$NOW",
        "revert_duration_ms": duration_ms,
        "revert_run_id": _literal(run.run_id),
        "reverted_by": _literal(run.executed_by),
    }
    return {"name": name, "status": "applied"}, [{"$set": fields}]


def failed_update(
    name: str, *, batch: int, checksum: str, error: str, run: RunInfo, description: str | None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    fields = {
        "name": _literal(name),
        "kind": "migration",
        "status": "failed",
        "batch": batch,
        "failed_checksum": _literal(checksum),
        "failed_at": "$$NOW",
        "error": _literal(redact(error, limit=2000)),  # whoever built it, nothing secret is stored
        "run_id": _literal(run.run_id),
        "executed_by": _literal(run.executed_by),
        "host": _literal(run.host),
        "environment": _literal(run.environment),
        "description": _literal(description),
    }
    return {"name": name, "status": {"$ne": "applied"}}, [{"$set": fields}]


@dataclass(frozen=True)
class RecordWrite:
    """One changelog write, built once so the async path and a migration's own sync transaction send the same."""

    filter: dict[str, Any]
    update: list[dict[str, Any]]
    upsert: bool


class Changelog:
    """The changelog collection; every writer (runner, background registration, repin) goes through it."""

    def __init__(self, collection: AsyncCollection[dict[str, Any]]) -> None:
        self.collection = collection

    async def ensure_indexes(self) -> None:
        try:
            await self.collection.create_indexes(INDEXES)
        except OperationFailure as exc:
            if exc.code == 11000:  # the unique index on name cannot be built over two records of one file
                await self.records()  # names them (39), where the server's refusal was exit 1
            raise

    async def records(self) -> dict[str, ChangelogRecord]:
        """Every record by file name; two records of one file (copied or restored twice, by hand) are refused (39):
        which of them tells what ran would be a guess, and a plain read kept whichever came last."""
        cursor = self.collection.find({}, sort=[("name", ASCENDING)])
        records = [ChangelogRecord.from_document(doc, self.collection.name) async for doc in cursor]
        named = {record.name: record for record in records}
        if len(named) < len(records):
            counts = Counter(record.name for record in records)
            twice = [redact(name, limit=200) for name, count in counts.items() if count > 1]
            raise CollectionClashError(
                f"{self.collection.name}: more than one record of {', '.join(twice)}, where mongoshift keeps one per "
                "file (records copied or restored twice?); keep the one that tells what ran and delete the others",
                collection=self.collection.name,
                duplicates=twice,
            )
        return named

    async def record(self, name: str) -> ChangelogRecord | None:
        doc = await self.collection.find_one({"name": name})
        return ChangelogRecord.from_document(doc, self.collection.name) if doc else None

    async def next_batch(self) -> int:
        """One more than the highest batch ever used, so numbers never repeat (:func:`next_batch_after`
        when the records were just read: a run plans and labels from one read)."""
        doc = await self.collection.find_one({"batch": {"$type": "number"}}, sort=[("batch", DESCENDING)])
        return int(doc["batch"]) + 1 if doc else 1

    @staticmethod
    def applied(name: str, **kwargs: Any) -> RecordWrite:
        """The write that records ``name`` applied (see :func:`applied_update` for the fields)."""
        filter_, update = applied_update(name, **kwargs)
        return RecordWrite(filter_, update, upsert=True)

    @staticmethod
    def adopted(name: str, **kwargs: Any) -> RecordWrite:
        """The write that records ``name`` applied without running it (see :func:`adopted_update`)."""
        filter_, update = adopted_update(name, **kwargs)
        return RecordWrite(filter_, update, upsert=True)

    @staticmethod
    def reverted(name: str, *, duration_ms: int, run: RunInfo) -> RecordWrite:
        """The write that records ``name`` reverted; it only turns an applied record."""
        filter_, update = reverted_update(name, duration_ms=duration_ms, run=run)
        return RecordWrite(filter_, update, upsert=False)

    async def write(self, entry: RecordWrite, *, session: Any = None) -> None:
        await self.collection.update_one(entry.filter, entry.update, upsert=entry.upsert, session=session)

    async def write_all(self, entries: Sequence[RecordWrite]) -> None:
        """``entries`` in one ordered bulk write: one command (up to the server's 100,000 writes a batch), so a
        process killed or stopped while it is on its way leaves all of them recorded or none (``import``,
        ``baseline``: a part recorded would let an ``up`` run a file the other tool had applied)."""
        if entries:
            await self.collection.bulk_write([UpdateOne(e.filter, e.update, upsert=e.upsert) for e in entries], ordered=True)

    def write_sync(self, client: MongoClient[Any], entry: RecordWrite, *, session: Any) -> None:
        """The same write through the sync driver, inside a sync migration's own transaction."""
        collection = client[self.collection.database.name][self.collection.name]
        collection.update_one(entry.filter, entry.update, upsert=entry.upsert, session=session)

    async def repin(self, name: str, checksum: str) -> None:
        """Record the checksum of the file as it is now (``background repin`` after a deploy changed it)."""
        await self.collection.update_one({"name": name}, {"$set": {"checksum": checksum}})

    async def mark_failed(self, **kwargs: Any) -> None:
        filter_, update = failed_update(**kwargs)
        try:
            await self.collection.update_one(filter_, update, upsert=True)
        except DuplicateKeyError:
            pass  # an applied record exists: a failed re-run must not overwrite it
