"""The sandbox of ``background dry-run --validate``: allow-list proxies for ``ctx.db``, ``ctx.client`` and ``ctx.session``.

A validated transform runs against these instead of the driver's objects. They are fail-closed:
only what is listed here goes through (CRUD, ``find`` and ``aggregate`` on the ordinary
collections of the migration's own database, always inside the sandbox's one transaction,
whatever ``session=`` the caller passed); anything else (DDL, commands, another database, a
session of its own, ``$out``/``$merge``, mongoshift's own or a ``system.*`` collection, a read
or write concern or read preference of its own, ``bypass_document_validation``, an attribute
not listed) raises :class:`~mongoshift.errors.SandboxRefusedError` *and* is recorded, so a
transform that catches the exception is reported all the same (exit 34). So is an operation
the server itself refuses inside a transaction (code 263).

The server aborts the transaction on an operation's error: the record keeps the first such
error and whose code caused it (:attr:`SandboxRecord.failure`), so the validation reports it
as that document's (or that step's) failure, even when the code caught it.

This is a guard rail against mistakes, not a security boundary: the transform is ordinary
Python in this process and can reach the driver by other means. The record keeps operation
names, collection names and counts, never a value or an ``_id``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import encode
from pymongo.errors import PyMongoError

from ...errors import SandboxRefusedError
from ...project.redaction import describe_write_error
from ...project.server_errors import NOT_IN_TRANSACTION, error_code, transient_transaction_error

#: Collection methods the sandbox lets through: reads (whose result is a document, a count or a cursor) and writes.
READS = frozenset({"find_one", "count_documents", "distinct"})
CURSORS = frozenset({"find"})
WRITES = frozenset(
    {
        "insert_one",
        "insert_many",
        "update_one",
        "update_many",
        "replace_one",
        "delete_one",
        "delete_many",
        "bulk_write",
        "find_one_and_update",
        "find_one_and_replace",
        "find_one_and_delete",
    }
)
#: The writes whose documents a step's validation shows before and after (``bulk_write`` only counts).
IMAGED = WRITES - {"bulk_write"}
#: Document images kept per write.
MAX_IMAGES = 20
#: Aggregation stages that write, or read another database: refused in a sandboxed ``aggregate``.
WRITING_STAGES = frozenset({"$out", "$merge"})
#: Stages that read another collection by name: that name is checked as a collection access.
LOOKUP_STAGES = {"$lookup": "from", "$unionWith": "coll", "$graphLookup": "from"}
#: Keyword arguments that would change where or how an operation reads or writes.
OVERRIDES = frozenset({"read_preference", "read_concern", "write_concern", "codec_options"})
#: A keyword argument that would skip the validator the validation is for (and that a transaction refuses).
BYPASS = "bypass_document_validation"
#: Cursor methods a sandboxed cursor keeps (paging, reading, closing).
CURSOR_METHODS = frozenset({"to_list", "next", "try_next", "close", "sort", "limit", "skip", "batch_size", "hint", "alive"})


@dataclass(frozen=True)
class Refusal:
    """One refused operation: what was asked, on what (a collection or database name), and why."""

    operation: str
    target: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"operation": self.operation, "target": self.target, "reason": self.reason}


@dataclass
class SandboxRecord:
    """What the sandboxed code did: its operations by owner (a document key, or None), side effects, refusals, cursors."""

    protected: frozenset[str]
    refusals: list[Refusal] = field(default_factory=list)
    operations: dict[bytes | None, Counter[tuple[str, str]]] = field(default_factory=dict)
    effects: dict[bytes | None, Counter[str]] = field(default_factory=dict)
    cursors: list[SandboxCursor] = field(default_factory=list)
    #: Before/after images of the documents each write touched (a step's validation keeps them; None: not kept).
    images: list[tuple[bytes | None, dict[str, Any]]] | None = None
    #: The document whose transform is running (see :func:`for_each_document`); None outside a per-document call.
    owner: bytes | None = None
    #: The first operation the server failed since the attempt began (it aborted the transaction): its
    #: owner and what failed, in words without a value. Transient errors are not kept: the attempt is retried.
    failure: tuple[bytes | None, str] | None = None

    def refuse(self, operation: str, target: str, reason: str) -> SandboxRefusedError:
        refusal = Refusal(operation, target, reason)
        self.refusals.append(refusal)
        return SandboxRefusedError(f"the validation sandbox refused {operation} on {target}: {reason}", operation=operation, target=target)

    def failed(self, operation: str, collection: str, exc: PyMongoError) -> None:
        """The server failed an operation of the sandboxed code: a refusal inside a transaction is
        recorded as one, and the first failure is kept (the server aborted the transaction on it)."""
        if error_code(exc) == NOT_IN_TRANSACTION:
            self.refuse(operation, collection, f"the server refuses it inside a transaction ({NOT_IN_TRANSACTION})")
        if self.failure is None and not transient_transaction_error(exc):
            self.failure = (self.owner, f"{operation} on {collection} failed: {server_failure(exc)}")

    def did(self, operation: str, collection: str) -> None:
        self.operations.setdefault(self.owner, Counter())[(operation, collection)] += 1

    def affected(self, collection: str, counts: Mapping[str, int]) -> None:
        effects = self.effects.setdefault(self.owner, Counter())
        for kind, n in counts.items():
            if n:
                effects[f"{collection}.{kind}"] += n

    def reset(self) -> None:
        """A new attempt of the transaction: what the aborted one did is gone (refusals stay: they were asked)."""
        self.operations.clear()
        self.effects.clear()
        self.cursors.clear()
        self.failure = None
        if self.images is not None:
            self.images.clear()

    def images_of(self, owner: bytes | None) -> list[dict[str, Any]]:
        return [image for who, image in self.images or [] if who == owner]

    def operations_of(self, owner: bytes | None) -> list[dict[str, Any]]:
        """``[{operation, collection, count}]`` of one owner, in a stable order."""
        ops = self.operations.get(owner, Counter())
        return [{"operation": op, "collection": coll, "count": n} for (op, coll), n in sorted(ops.items())]

    def effects_of(self, owner: bytes | None) -> dict[str, int]:
        return dict(sorted(self.effects.get(owner, Counter()).items()))

    def open_cursors(self) -> int:
        return sum(cursor.open for cursor in self.cursors)


def server_failure(exc: PyMongoError) -> str:
    """A server error by its code (a write error's index, for a duplicate key), never the message: it may quote a value."""
    details = getattr(exc, "details", None)
    details = details if isinstance(details, Mapping) else {}
    errors = details.get("writeErrors")
    if isinstance(errors, list) and errors and isinstance(errors[0], Mapping):
        return describe_write_error(errors[0])
    code = error_code(exc)
    if code is None:
        return type(exc).__name__
    return describe_write_error({**details, "code": code}).replace("write error", "server error")


def document_key(id_: Any) -> bytes:
    return encode({"k": id_})


class _Proxy:
    """Fail-closed base: any attribute not defined on the proxy class is refused and recorded."""

    _record: SandboxRecord
    _what: str

    def _bind(self, **attrs: Any) -> None:
        """Set the proxy's own ``_name`` attributes without going through the refusing ``__getattr__``."""
        for key, value in attrs.items():
            object.__setattr__(self, f"_{key}", value)

    @property
    def name(self) -> str:
        return str(self._real.name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._record.refuse(name, self._what, "not on the sandbox's allow-list")


class SandboxSession(_Proxy):
    """``ctx.session``: the sandbox's one transaction. It can be passed to operations; it cannot end or commit."""

    def __init__(self, real: Any, record: SandboxRecord) -> None:
        self._bind(real=real, record=record, what="the session")

    @property
    def in_transaction(self) -> bool:
        return True


class SandboxClient(_Proxy):
    """``ctx.client``: only the migration's own database can be reached through it."""

    _db: SandboxDatabase

    def __init__(self, db: SandboxDatabase) -> None:
        self._bind(db=db, record=db._record, what="the client")

    def __getitem__(self, name: str) -> SandboxDatabase:
        return self.get_database(name)

    def get_database(self, name: str, **options: Any) -> SandboxDatabase:
        if name != self._db.name:
            raise self._record.refuse("get_database", name, "another database than the migration's")
        _no_overrides(self._record, "get_database", name, options)
        return self._db

    def __getattr__(self, name: str) -> Any:
        if name == self._db.name:
            return self._db
        return super().__getattr__(name)


class SandboxDatabase(_Proxy):
    """``ctx.db``: the migration's database; its ordinary collections, nothing else."""

    def __init__(self, real: Any, session: SandboxSession, record: SandboxRecord) -> None:
        self._bind(real=real, session=session, record=record, what=f"the database {real.name}")

    @property
    def client(self) -> SandboxClient:
        return SandboxClient(self)

    def __getitem__(self, name: str) -> SandboxCollection:
        return self.get_collection(name)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name in _DATABASE_REFUSED:
            return super().__getattr__(name)
        return self.get_collection(name)

    def get_collection(self, name: str, **options: Any) -> SandboxCollection:
        _check_collection(self._record, "get_collection", name)
        _no_overrides(self._record, "get_collection", name, options)
        return SandboxCollection(self._real[name], self)


#: Database methods that are never a collection name in ``ctx.db.<name>``: refused by name, not taken as a collection.
_DATABASE_REFUSED = frozenset(
    {
        "command",
        "cursor_command",
        "create_collection",
        "drop_collection",
        "rename_collection",
        "list_collections",
        "list_collection_names",
        "validate_collection",
        "dereference",
        "watch",
        "aggregate",
        "with_options",
        "codec_options",
        "read_preference",
        "read_concern",
        "write_concern",
    }
)


def _check_collection(record: SandboxRecord, operation: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise record.refuse(operation, repr(type(name).__name__), "a collection name must be a text")
    if name.startswith("system."):
        raise record.refuse(operation, name, "a system collection")
    if name in record.protected:
        raise record.refuse(operation, name, "one of mongoshift's own collections")


def _no_overrides(record: SandboxRecord, operation: str, target: str, options: Mapping[str, Any]) -> None:
    """A read/write concern, read preference (a secondary read) or codec of its own is refused."""
    asked = sorted(set(options) & OVERRIDES) or sorted(set(options))
    if asked:
        raise record.refuse(operation, target, f"{', '.join(asked)} cannot be changed in the sandbox")


class SandboxCollection(_Proxy):
    """One ordinary collection of the migration's database: the allow-listed methods, in the sandbox's transaction."""

    _db: SandboxDatabase

    def __init__(self, real: Any, db: SandboxDatabase) -> None:
        self._bind(real=real, db=db, record=db._record, what=f"the collection {real.name}")

    @property
    def full_name(self) -> str:
        return str(self._real.full_name)

    @property
    def database(self) -> SandboxDatabase:
        return self._db

    def __getattr__(self, name: str) -> Any:
        if name in READS or name in WRITES:
            return self._operation(name)
        if name in CURSORS:
            return self._cursor(name)
        if name == "aggregate":
            return self._aggregate
        return super().__getattr__(name)

    def __getitem__(self, name: str) -> Any:
        raise self._record.refuse("subcollection", f"{self.name}.{name}", "not on the sandbox's allow-list")

    def _session(self, operation: str, kwargs: dict[str, Any]) -> None:
        """Every operation runs in the sandbox's transaction; a session of the caller's own is refused."""
        given = kwargs.pop("session", None)
        if given is not None and given is not self._db._session and given is not self._db._session._real:
            raise self._record.refuse(operation, self.name, "a session other than ctx.session")
        _no_overrides(self._record, operation, self.name, {k: v for k, v in kwargs.items() if k in OVERRIDES})
        if kwargs.get(BYPASS):
            raise self._record.refuse(operation, self.name, f"{BYPASS} would skip the validator being checked (and a transaction refuses it)")
        kwargs["session"] = self._db._session._real

    def _operation(self, operation: str) -> Any:
        async def run(*args: Any, **kwargs: Any) -> Any:
            self._session(operation, kwargs)
            self._record.did(operation, self.name)
            imaged = self._record.images is not None and operation in IMAGED
            before = await self._touched(operation, args, kwargs) if imaged else []
            try:
                result = await getattr(self._real, operation)(*args, **kwargs)
            except PyMongoError as exc:
                self._record.failed(operation, self.name, exc)
                raise
            if operation in WRITES:
                self._record.affected(self.name, _write_counts(result))
            if imaged:
                await self._image(operation, before, result, kwargs["session"])
            return result

        return run

    async def _touched(self, operation: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The documents a write is about to touch, as they are (at most :data:`MAX_IMAGES`; one for a ``*_one``)."""
        if operation.startswith("insert"):
            return []
        filter_ = args[0] if args else kwargs.get("filter", {})
        limit = 1 if operation.endswith("_one") or operation.startswith("find_one") else MAX_IMAGES
        images: list[Any] = await self._real.find(filter_, session=kwargs["session"], limit=limit).to_list(None)
        return images

    async def _image(self, operation: str, before: list[Any], result: Any, session: Any) -> None:
        ids = [doc["_id"] for doc in before]
        ids += list(getattr(result, "inserted_ids", None) or [])[:MAX_IMAGES]
        inserted = getattr(result, "inserted_id", None)
        upserted = getattr(result, "upserted_id", None)
        ids += [x for x in (inserted, upserted) if x is not None]
        after = {document_key(doc["_id"]): doc for doc in await self._real.find({"_id": {"$in": ids}}, session=session).to_list(None)}
        old = {document_key(doc["_id"]): doc for doc in before}
        for key in dict.fromkeys(document_key(id_) for id_ in ids):
            assert self._record.images is not None
            self._record.images.append(
                (self._record.owner, {"operation": operation, "collection": self.name, "before": old.get(key), "after": after.get(key)})
            )

    def _cursor(self, operation: str) -> Any:
        def run(*args: Any, **kwargs: Any) -> SandboxCursor:
            self._session(operation, kwargs)
            self._record.did(operation, self.name)
            cursor = SandboxCursor(getattr(self._real, operation)(*args, **kwargs), self._record, self.name)
            self._record.cursors.append(cursor)
            return cursor

        return run

    async def _aggregate(self, pipeline: list[Mapping[str, Any]], *args: Any, **kwargs: Any) -> SandboxCursor:
        self._session("aggregate", kwargs)
        _check_pipeline(self._record, self.name, pipeline)
        self._record.did("aggregate", self.name)
        try:
            real = await self._real.aggregate(pipeline, *args, **kwargs)
        except PyMongoError as exc:
            self._record.failed("aggregate", self.name, exc)
            raise
        cursor = SandboxCursor(real, self._record, self.name)
        self._record.cursors.append(cursor)
        return cursor


def _check_pipeline(record: SandboxRecord, collection: str, pipeline: Any) -> None:
    """``$out``/``$merge`` are refused at any depth (``$facet`` too); a ``$lookup``/``$unionWith``/``$graphLookup`` must name an allowed collection."""
    for stage in pipeline if isinstance(pipeline, list) else []:
        if not isinstance(stage, Mapping):
            continue
        for op, body in stage.items():
            if op in WRITING_STAGES:
                raise record.refuse(f"aggregate {op}", collection, "a stage that writes")
            if op == "$facet" and isinstance(body, Mapping):
                for inner in body.values():
                    _check_pipeline(record, collection, inner)
            if op in LOOKUP_STAGES:
                other = body if isinstance(body, str) else body.get(LOOKUP_STAGES[op]) if isinstance(body, Mapping) else None
                if isinstance(other, Mapping):  # {db, coll}: another database
                    raise record.refuse(f"aggregate {op}", collection, "another database than the migration's")
                if isinstance(other, str):
                    _check_collection(record, f"aggregate {op}", other)
                if isinstance(body, Mapping) and isinstance(body.get("pipeline"), list):
                    _check_pipeline(record, collection, body["pipeline"])


def _write_counts(result: Any) -> dict[str, int]:
    """What a write did, as counts: inserted, matched, modified, deleted, upserted."""
    counts: dict[str, int] = {}
    for kind, attr in (("matched", "matched_count"), ("modified", "modified_count"), ("deleted", "deleted_count"), ("upserted", "upserted_count")):
        value = getattr(result, attr, None)
        if isinstance(value, int):
            counts[kind] = value
    if hasattr(result, "inserted_ids"):
        counts["inserted"] = len(result.inserted_ids)
    elif hasattr(result, "inserted_id"):
        counts["inserted"] = 1
    elif hasattr(result, "inserted_count"):
        counts["inserted"] = result.inserted_count
    if getattr(result, "upserted_id", None) is not None:
        counts["upserted"] = 1
    return counts


class SandboxCursor(_Proxy):
    """A cursor opened in the sandbox: read, page or close it; whether it was left open is reported."""

    def __init__(self, real: Any, record: SandboxRecord, collection: str) -> None:
        self._bind(real=real, record=record, what=f"a cursor on {collection}", exhausted=False, closed=False)

    @property
    def open(self) -> bool:
        """Neither read to its end nor closed (what a step that returns mid-read leaves behind)."""
        return not (self._exhausted or self._closed)

    def __getattr__(self, name: str) -> Any:
        if name not in CURSOR_METHODS:
            return super().__getattr__(name)
        attr = getattr(self._real, name)
        if name in ("sort", "limit", "skip", "batch_size", "hint"):
            def chain(*args: Any, **kwargs: Any) -> SandboxCursor:
                attr(*args, **kwargs)
                return self

            return chain
        if name == "to_list":
            async def to_list(*args: Any, **kwargs: Any) -> Any:
                out = await attr(*args, **kwargs)
                if (not args and kwargs.get("length") is None) or not self._real.alive:
                    object.__setattr__(self, "_exhausted", True)
                return out

            return to_list
        if name == "close":
            async def close() -> None:
                object.__setattr__(self, "_closed", True)
                await attr()

            return close
        return attr

    def __aiter__(self) -> SandboxCursor:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._real.__anext__()
        except StopAsyncIteration:
            object.__setattr__(self, "_exhausted", True)
            raise


def sandbox(real_db: Any, real_session: Any, record: SandboxRecord) -> tuple[SandboxDatabase, SandboxClient, SandboxSession]:
    """``(ctx.db, ctx.client, ctx.session)`` for sandboxed code, all bound to ``real_session``'s transaction."""
    session = SandboxSession(real_session, record)
    db = SandboxDatabase(real_db, session, record)
    return db, db.client, session
