"""Version-pinned fixes for the wire server of mongoeco 4.11.0.

mongoeco serves the MongoDB wire protocol from Python. Probed through the real
pymongo driver, version 4.11.0 has a handful of gaps that would break or mislead
mongoshift's tests (docs/embedded.md lists each one with its cause and its test).
Every fix below replaces or wraps one private function of mongoeco, so it is only
valid for the exact version it was written against: :func:`apply` refuses to run
on any other version instead of patching code it has never seen.

The fixes only make mongoeco answer the way a MongoDB replica set does; none
adds a feature mongod lacks (the added commands, collMod and $changeStream, are mongod's). They
are process-wide and idempotent; call :func:`apply` before building the server
(``mongoshift.embedded.server`` does).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any

PINNED_VERSION = "4.11.0"

log = logging.getLogger(__name__)

_applied = False

# MongoDB error codes the fixes produce.
_WRITE_CONFLICT = 112
_NO_SUCH_TRANSACTION = 251
_COMMAND_NOT_FOUND = 59
_NAMESPACE_EXISTS = 48
_NAMESPACE_NOT_FOUND = 26
_BAD_VALUE = 2
_CANNOT_CREATE_INDEX = 67
_TRANSIENT = "TransientTransactionError"


class UnsupportedMongoecoVersion(RuntimeError):
    """The installed mongoeco is not the version these patches were written for."""


def check_version(version: str | None = None) -> None:
    """Raise unless ``version`` (default: the installed mongoeco's) is the pinned one."""
    if version is None:
        import mongoeco

        version = str(getattr(mongoeco, "__version__", "unknown"))
    if version != PINNED_VERSION:
        raise UnsupportedMongoecoVersion(
            f"mongoshift's embedded server needs mongoeco=={PINNED_VERSION}, found {version}: "
            f"its fixes patch private mongoeco code and are only valid for that version "
            f'(pip install "mongoeco=={PINNED_VERSION}", or "mongoshift[embedded]")'
        )


def apply() -> None:
    """Check the mongoeco version, then install every fix once per process."""
    global _applied
    check_version()
    if _applied:
        return
    _patch_insert()
    _patch_single_insert_id_scan()
    _patch_transactions()
    _patch_errors_abort_transaction()
    _patch_fail_points_on_transaction_commands()
    _patch_rename_from_admin()
    _patch_unknown_command()
    _patch_bson_size()
    _patch_in_object_ids()
    _patch_coll_mod()
    _patch_decimal_set()
    _patch_in_membership_once()
    _patch_transaction_conflicts()
    _patch_change_streams()
    _patch_compound_hashed_indexes()
    _patch_find_min_max()  # before (r): its replies' cursor ids are widened there too
    _patch_int64_cursor_ids()
    _applied = True
    log.debug("mongoeco %s patched", PINNED_VERSION)


def _patch_change_streams() -> None:
    # (q) No $changeStream over the wire: served from the server's change history
    # (embedded/change_streams.py, which holds the whole shim).
    from mongoshift.embedded import change_streams

    change_streams.patch_wire()
    change_streams.patch_update_events()


def _patch_int64_cursor_ids() -> None:
    # (r) Cursor ids go out as 32-bit integers. mongoeco's cursor stores number
    # their cursors 1, 2, ... and reply with plain ints, which encode as BSON
    # int32; mongod always sends cursor.id as int64, and the Node, Go and Java
    # drivers refuse anything else (Node: 'BSON element "id" is missing').
    # Every reply passes through WireCommandExecutor.execute_prepared (OP_MSG
    # and legacy OP_QUERY alike), so the id is widened there, once, for every
    # cursor command (find, aggregate, getMore, listCollections, listIndexes...).
    from bson.int64 import Int64
    from mongoeco.wire.executor import WireCommandExecutor

    original = WireCommandExecutor.execute_prepared

    async def execute_prepared(self: Any, context: Any) -> dict[str, Any]:
        reply = await original(self, context)
        cursor = reply.get("cursor") if isinstance(reply, dict) else None
        if isinstance(cursor, dict):
            cursor_id = _as_int(cursor.get("id"))
            if cursor_id is not None and not isinstance(cursor.get("id"), Int64):
                cursor["id"] = Int64(cursor_id)
        return reply

    WireCommandExecutor.execute_prepared = execute_prepared


# (s) A compound index with a hashed field is refused ("special index types currently
# require a single-field key pattern"); mongod (4.4+) creates {a: 1, b: "hashed", c: 1}, with
# at most one hashed field and never unique, and a sharded collection's version index is one
# when its shard key is hashed. MemoryEngine.create_index asks special_index_directions (its
# module's name, used nowhere else) whether the key is special: for such a key the answer is
# now "not special", so the index is recorded like any index whose key is not plain 1/-1:
# listed, hintable by fix (t), never used by the planner (no index data is built for it).
# Two hashed fields, or unique, keep mongod's refusals.
def _patch_compound_hashed_indexes() -> None:
    from mongoeco.engines import memory

    original = memory.special_index_directions
    create = memory.MemoryEngine.create_index

    def compound_hashed(keys: Any) -> bool:
        directions = [direction for _field, direction in keys]
        hashed = sum(1 for d in directions if d == "hashed")
        ordered = all(d in (1, -1) and not isinstance(d, bool) for d in directions if d != "hashed")
        return len(directions) > 1 and hashed == 1 and ordered

    def special_index_directions(keys: Any) -> Any:
        return () if compound_hashed(keys) else original(keys)

    async def create_index(self: Any, db_name: str, coll_name: str, keys: Any, **options: Any) -> str:
        normalized = memory.normalize_index_keys(keys)
        if len(normalized) > 1 and sum(1 for _f, d in normalized if d == "hashed") > 1:
            raise _failure("A maximum of one index field is allowed to be hashed", _CANNOT_CREATE_INDEX, "CannotCreateIndex")
        if compound_hashed(normalized) and options.get("unique"):
            raise _failure("Currently hashed indexes cannot guarantee uniqueness. Use a regular index.", _CANNOT_CREATE_INDEX, "CannotCreateIndex")
        return str(await create(self, db_name, coll_name, keys, **options))

    memory.special_index_directions = special_index_directions
    memory.MemoryEngine.create_index = create_index  # type: ignore[method-assign]


# (t) A find's min/max are ignored: every matching document comes back, so a read bounded
# to one range of an index (the background engine's hash-range partitions) would silently
# read them all. A find with min or max is now answered here, as mongod answers it: the
# hint is required (51173) and must name an existing index (2), the bounds must have the
# index's fields in order (2); the documents matching the filter whose index key
# (index_bounds.index_key: hashed fields hashed as mongod hashes them) is >= min and < max
# come back in index order, then skip and limit, then the projection. One batch, cursor
# id 0. Not handled (an error, never a silently different answer): a sort, an array on an
# indexed path.
def _patch_find_min_max() -> None:
    from mongoeco.core.expression_context import execution_now_scope
    from mongoeco.wire.executor import WireCommandExecutor

    from mongoshift.embedded import index_bounds

    original = WireCommandExecutor.execute_prepared
    build = WireCommandExecutor._build_request_context

    def bounded(body: dict[str, Any]) -> bool:
        return "find" in body and ("min" in body or "max" in body)

    def build_request_context(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        # mongoeco checks a hint as a sort (1/-1 only) while it builds the request: the hint of
        # a bounded find (a hashed field is "hashed") is checked by _bounded_find instead.
        if not isinstance(body, dict) or not bounded(body) or "hint" not in body:
            return build(self, body, **kwargs)
        context = build(self, {k: v for k, v in body.items() if k != "hint"}, **kwargs)
        return dataclasses.replace(context, command_document={**context.command_document, "hint": body["hint"]}, raw_body=body)

    async def execute_prepared(self: Any, context: Any) -> dict[str, Any]:
        body = context.command_document
        if context.command_name != "find" or not bounded(body):
            return await original(self, context)
        with execution_now_scope(context.execution_context.now):
            try:
                return await _bounded_find(self._client, context, index_bounds)
            except index_bounds.UnsupportedKey as error:
                raise _failure(str(error), _BAD_VALUE, "BadValue") from error

    WireCommandExecutor._build_request_context = build_request_context
    WireCommandExecutor.execute_prepared = execute_prepared


async def _bounded_find(client: Any, context: Any, index_bounds: Any) -> dict[str, Any]:
    body = context.command_document
    name = str(body["find"])
    collection = client[context.db_name][name]
    hint = body.get("hint")
    if hint is None:
        raise _failure("When using min()/max() a hint of which index to use must be provided", 51173, "Location51173")
    if body.get("sort"):
        raise _failure("the embedded server does not sort a min/max find (fix (t)): leave the sort out", _BAD_VALUE, "BadValue")
    wanted = index_bounds.pairs(hint) if not isinstance(hint, str) else None
    pattern = None
    async for index in await collection.list_indexes():
        key = index_bounds.pairs(index["key"])
        if (wanted is None and index.get("name") == hint) or key == wanted:
            pattern = key
    if pattern is None:
        raise _failure("hint provided does not correspond to an existing index", _BAD_VALUE, "BadValue")
    order = index_bounds.sort_key(pattern)
    low = index_bounds.bound(body["min"], pattern, "min") if "min" in body else None
    high = index_bounds.bound(body["max"], pattern, "max") if "max" in body else None
    keyed = []
    async for doc in collection.find(body.get("filter") or {}, session=context.session):
        key = index_bounds.index_key(doc, pattern)
        if low is not None and index_bounds.compare(key, low, pattern) < 0:
            continue
        if high is not None and index_bounds.compare(key, high, pattern) >= 0:
            continue
        keyed.append((key, doc))
    keyed.sort(key=lambda pair: order(pair[0]))  # stable: equal keys keep the scan's (natural) order
    docs = [doc for _key, doc in keyed][int(index_bounds.plain(body.get("skip") or 0)) :]
    limit = abs(int(index_bounds.plain(body.get("limit") or 0)))
    if limit:
        docs = docs[:limit]
    projection = body.get("projection")
    if projection and docs:
        ids = [doc["_id"] for doc in docs]
        projected = [d async for d in collection.find({"_id": {"$in": ids}}, projection, session=context.session)]
        at = {_id_key(d["_id"]): d for d in projected}
        docs = [at[_id_key(i)] for i in ids if _id_key(i) in at]
    return {"cursor": {"firstBatch": docs, "id": 0, "ns": f"{context.db_name}.{name}"}, "ok": 1.0}


def _id_key(value: Any) -> bytes:
    from bson import encode

    return encode({"k": value})


def _failure(message: str, code: int, code_name: str, labels: tuple[str, ...] = ()) -> Exception:
    from mongoeco.errors import OperationFailure

    return OperationFailure(message, code=code, details={"codeName": code_name}, error_labels=labels)


def _as_int(value: object) -> int | None:
    # Wire Int64 values arrive as mongoeco BsonInt64 (a wrapper with .value).
    value = getattr(value, "value", value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


# (a) Wire `insert` is O(n·N).
# _database_admin_write_commands.command_insert calls insert_one per document; a
# single-document insert runs MemoryEngine._ensure_unique_indexes with
# scan_payload_id=True, which compares every stored _id. insert_many with more
# than one document skips that scan, so the command is routed to one
# insert_many call; its BulkWriteError is turned back into the command's
# `writeErrors` (index, code, errmsg, keyPattern, keyValue) and `n`. insert_many
# already implements ordered (stop at the first error) and unordered (go on)
# semantics. Single-document commands keep the original path.
def _patch_insert() -> None:
    from mongoeco.api._async import _database_admin_write_commands as module
    from mongoeco.api._command_bson import command_boolean
    from mongoeco.errors import BulkWriteError
    from mongoeco.types import WriteCommandResult, WriteErrorEntry

    service = module.DatabaseAdminWriteCommandService
    original = service.command_insert

    async def command_insert(self: Any, spec: dict[str, Any], *, session: Any = None) -> object:
        documents = spec.get("documents")
        if not isinstance(documents, list) or len(documents) < 2:
            return await original(self, spec, session=session)
        admin = self._admin
        collection_name = admin._require_collection_name(spec.get("insert"), "insert")
        documents = admin._normalize_insert_documents(documents)
        ordered = admin._normalize_ordered_from_command(spec.get("ordered"))
        bypass = command_boolean(
            spec.get("bypassDocumentValidation", False), "bypassDocumentValidation", numeric=True
        )
        acknowledged = module.write_command_acknowledged(spec, dialect=admin._mongodb_dialect.key)
        collection = admin._database.get_collection(collection_name)
        write_errors: list[Any] = []
        try:
            result = await collection.insert_many(
                documents, ordered=ordered, bypass_document_validation=bypass, session=session
            )
            inserted = len(result.inserted_ids)
        except BulkWriteError as error:
            details = error.details or {}
            inserted = int(details.get("nInserted", 0))
            for entry in details.get("writeErrors", []):
                # The server reply carries no "op": pymongo adds it on its side.
                extra = {k: v for k, v in entry.items() if k not in {"index", "code", "errmsg", "op"}}
                write_errors.append(
                    WriteErrorEntry(
                        index=entry["index"],
                        errmsg=entry.get("errmsg", ""),
                        code=entry.get("code"),
                        details=extra or None,
                    )
                )
        return module._write_command_result(
            WriteCommandResult(count=inserted, write_errors=write_errors or None),
            acknowledged=acknowledged,
        )

    service.command_insert = command_insert


# (p) A single-document insert is O(N) too: _insert_documents_impl (and
# merge_document) call MemoryEngine._ensure_unique_indexes with
# scan_payload_id=True, which decodes every stored document and compares
# bson_equality_key(_id), to catch an _id equal to a stored one under another
# storage key. That can only happen for values whose storage key
# (bson_engine_key) is finer than BSON equality: numbers (1, 1.0, Int64(1)),
# containers of them, bytes vs Binary. For an ObjectId or a string both keys are
# the same, so the storage-key lookup the function makes just before the scan
# already gives its answer: the scan is skipped for those _ids only. Every
# other _id keeps it.
def _patch_single_insert_id_scan() -> None:
    from mongoeco.engines import memory
    from mongoeco.types import is_object_id_like

    original = memory.MemoryEngine._ensure_unique_indexes

    def ensure_unique_indexes(self: Any, db_name: str, coll_name: str, candidate: Any, **options: Any) -> None:
        if options.get("scan_payload_id") and options.get("check_id_storage") and isinstance(candidate, dict):
            value = candidate.get("_id")
            if type(value) is str or is_object_id_like(value):
                options["scan_payload_id"] = False
        original(self, db_name, coll_name, candidate, **options)

    memory.MemoryEngine._ensure_unique_indexes = ensure_unique_indexes


def _remember(session: Any, *, state: str, number: int | None = None) -> None:
    # The wire txnNumber of the session's open (or last) transaction and its fate.
    current = getattr(session, "_mongoshift_txn", None)
    if number is None and current is not None:
        number = current[0]
    session._mongoshift_txn = (number, state)


def _abort_open_transaction(session: Any) -> None:
    try:
        if session.transaction_active:
            session.abort_transaction()
    except Exception:  # pragma: no cover - best effort, the snapshot is dropped anyway
        log.exception("could not abort a transaction")
    _remember(session, state="aborted")


def _no_such_transaction(number: int | None) -> Exception:
    return _failure(
        f"Transaction {number} has been aborted or does not exist",
        _NO_SUCH_TRANSACTION,
        "NoSuchTransaction",
        (_TRANSIENT,),
    )


# (b) Zombie transaction after a failed commit, (c) commit-time conflict without
# code or label, (e) commit of an unknown txnNumber returns ok.
# wire/sessions.WireSessionStore.commit_transaction lets ClientSession's failure
# propagate while the session stays in its transaction: pymongo pools the lsid
# and reuses it for implicit sessions, so every later operation of that client
# runs inside a transaction nobody commits. The fix aborts it on any commit
# failure, and aborts an open transaction when a new startTransaction arrives
# or when a command outside any transaction (no autocommit field) uses the
# session, as mongod does when a session moves on. A command that continues a
# transaction (autocommit: false) which is no longer open gets 251 instead of
# silently running outside any transaction.
# MemoryEngine._commit_session_transaction raises a bare OperationFailure("Write
# conflict during transaction commit") when anything committed after the
# transaction started; it becomes 112 WriteConflict + TransientTransactionError
# so that drivers' with_transaction and mongoshift's retry loop retry it.
# The store never looks at txnNumber: the wire number of the open (or last)
# transaction is remembered on the session, and a commit for another number,
# for an aborted one, or on an unknown session gets 251 NoSuchTransaction.
# Retrying the commit of a committed transaction still answers ok, as in mongod.
def _patch_transactions() -> None:
    from mongoeco.errors import OperationFailure
    from mongoeco.wire.sessions import WireSessionStore

    original_apply = WireSessionStore._apply_transaction_metadata
    original_commit = WireSessionStore.commit_transaction
    original_abort = WireSessionStore.abort_transaction

    def apply_transaction_metadata(session: Any, body: dict[str, Any]) -> None:
        starts = body.get("startTransaction") is True
        if session.transaction_active and (starts or "autocommit" not in body):
            _abort_open_transaction(session)
        if (
            body.get("autocommit") is False
            and not starts
            and not session.transaction_active
            and "commitTransaction" not in body
            and "abortTransaction" not in body
        ):
            raise _no_such_transaction(_as_int(body.get("txnNumber")))
        original_apply(session, body)
        if starts and session.transaction_active:
            _remember(session, number=_as_int(body.get("txnNumber")), state="open")

    def commit_transaction(self: Any, body: dict[str, Any]) -> dict[str, Any]:
        number = _as_int(body.get("txnNumber"))
        try:
            session = self._require_session(body)
        except OperationFailure:
            if number is None:
                raise
            raise _no_such_transaction(number) from None
        known = getattr(session, "_mongoshift_txn", None)
        if number is not None:
            same = known is not None and known[0] == number
            if session.transaction_active and known is not None and not same:
                raise _no_such_transaction(number)
            if not session.transaction_active:
                if same and known[1] == "committed":
                    return {"ok": 1.0}
                raise _no_such_transaction(number)
        try:
            result = original_commit(self, body)
        except Exception as error:
            _abort_open_transaction(session)
            if isinstance(error, OperationFailure) and error.code is None and "conflict" in str(error).lower():
                raise _failure(
                    f"WriteConflict error: this operation conflicted with another operation ({error})",
                    _WRITE_CONFLICT,
                    "WriteConflict",
                    (_TRANSIENT,),
                ) from error
            raise
        _remember(session, state="committed")
        return result

    def abort_transaction(self: Any, body: dict[str, Any]) -> dict[str, Any]:
        result = original_abort(self, body)
        _remember(self._require_session(body), state="aborted")
        return result

    WireSessionStore._apply_transaction_metadata = staticmethod(apply_transaction_metadata)
    WireSessionStore.commit_transaction = commit_transaction
    WireSessionStore.abort_transaction = abort_transaction


# (j) A failed statement leaves its transaction open: mongoeco commits the
# statements before and after a duplicate key inside a transaction, where mongod
# aborts the whole transaction on any error (write errors included) and answers
# the commit with 251 NoSuchTransaction. The wire handlers now abort the
# session's transaction when a command inside it raises or reports writeErrors.
def _patch_errors_abort_transaction() -> None:
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers

    original = WireSpecialCommandHandlers.dispatch
    transaction_commands = {"commitTransaction", "abortTransaction"}

    async def dispatch(self: Any, context: Any) -> dict[str, object]:
        session = context.session
        if (
            session is None
            or context.raw_body.get("autocommit") is not False
            or context.command_name in transaction_commands
        ):
            return await original(self, context)
        try:
            result = await original(self, context)
        except Exception:
            _abort_open_transaction(session)
            raise
        if isinstance(result, dict) and result.get("writeErrors"):
            _abort_open_transaction(session)
        return result

    WireSpecialCommandHandlers.dispatch = dispatch


# (d) failCommand fail points ignored on commitTransaction/abortTransaction.
# The fail point is consumed in AsyncDatabaseCommandService.execute_document,
# which commit/abort never reach: wire/_executor_handlers.py sends them straight
# to the session store. The handlers now consume the same fail point state
# (engine._command_failpoint_state) first and fail the same way; a
# writeConcernError fail point lets the commit happen and reports the error with
# ok:1, as mongod does.
def _patch_fail_points_on_transaction_commands() -> None:
    from mongoeco.errors import ConnectionFailure, OperationFailure
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers

    async def fire(handlers: Any, context: Any) -> dict[str, Any] | None:
        state = getattr(handlers._client._engine, "_command_failpoint_state", None)
        if state is None:
            return None
        name = context.command_name
        injected = state.consume_fail_command(name, namespace=f"{context.db_name}.$cmd")
        if injected is None:
            return None
        if injected.block_time_ms > 0:
            await asyncio.sleep(injected.block_time_ms / 1000.0)
        if injected.close_connection:
            raise ConnectionFailure(injected.error_message, error_labels=injected.error_labels)
        if injected.write_concern_error is not None:
            return dict(injected.write_concern_error)
        raise OperationFailure(
            injected.error_message,
            code=injected.error_code,
            details={"failPoint": "failCommand", "commandName": name},
            error_labels=injected.error_labels,
        )

    def wrap(original: Any) -> Any:
        async def handler(self: Any, context: Any) -> dict[str, Any]:
            write_concern_error = await fire(self, context)
            result = await original(self, context)
            if write_concern_error is not None:
                result = {**result, "writeConcernError": write_concern_error}
            return result

        return handler

    cls = WireSpecialCommandHandlers
    cls._handle_commit_transaction = wrap(cls._handle_commit_transaction)
    cls._handle_abort_transaction = wrap(cls._handle_abort_transaction)


# (g) Collection.rename fails: pymongo sends renameCollection to the admin
# database, and command_rename_collection (_database_admin_write_commands.py)
# only accepts namespaces of the database the command was sent to. A rename
# within one database sent to admin is now run on that database. Its
# CollectionInvalid errors, which have no code, get mongod's: 48 NamespaceExists
# for a target that exists (without dropTarget), 26 NamespaceNotFound for a
# missing source.
def _patch_rename_from_admin() -> None:
    from mongoeco.errors import CollectionInvalid
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers

    original = WireSpecialCommandHandlers.dispatch

    async def dispatch(self: Any, context: Any) -> dict[str, object]:
        if context.command_name != "renameCollection":
            return await original(self, context)
        source = context.command_document.get("renameCollection")
        target = context.command_document.get("to")
        if context.db_name == "admin" and isinstance(source, str) and isinstance(target, str):
            source_db = source.partition(".")[0]
            if source_db and source_db == target.partition(".")[0]:
                context = dataclasses.replace(context, db_name=source_db)
        try:
            return await original(self, context)
        except CollectionInvalid as error:
            message = str(error)
            if message.endswith("already exists"):
                raise _failure(message, _NAMESPACE_EXISTS, "NamespaceExists") from error
            if message.endswith("does not exist"):
                raise _failure(message, _NAMESPACE_NOT_FOUND, "NamespaceNotFound") from error
            raise

    WireSpecialCommandHandlers.dispatch = dispatch


# (h) An unknown command fails without a code. _executor_support.build_request_context
# raises a bare OperationFailure("unsupported wire command: X"); drivers and
# mongoshift look for code 59 CommandNotFound (e.g. to detect replSetGetStatus).
def _patch_unknown_command() -> None:
    from mongoeco.wire._executor_support import WIRE_INTERNAL_KEYS
    from mongoeco.wire.executor import WireCommandExecutor

    original = WireCommandExecutor._build_request_context

    def build_request_context(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        name = next((key for key in body if key not in WIRE_INTERNAL_KEYS), None)
        if isinstance(name, str) and name and not self._surface.supports_command(name):
            raise _failure(f"no such command: '{name}'", _COMMAND_NOT_FOUND, "CommandNotFound")
        return original(self, body, **kwargs)

    WireCommandExecutor._build_request_context = build_request_context


# (i) collStats/dbStats fail on Decimal128 (and other values mongoeco's $bsonSize
# does not know): core/aggregation/runtime._bson_value_size raises "cannot encode
# value of type ...". Sizes of the types it knows are kept; others are measured
# by encoding them with the bson package, as the wire layer would send them.
def _patch_bson_size() -> None:
    import bson
    from mongoeco.core.aggregation import runtime
    from mongoeco.errors import OperationFailure
    from mongoeco.types import Decimal128
    from mongoeco.wire.bson_bridge import encode_wire_value

    original = runtime._bson_value_size

    def bson_value_size(value: Any) -> int:
        if isinstance(value, Decimal128):
            return 16
        try:
            return original(value)
        except OperationFailure as error:
            if "cannot encode value of type" not in str(error):
                raise
            try:
                # document = int32 length + type byte + "" key NUL + value + NUL.
                return len(bson.encode({"": encode_wire_value(value)})) - 7
            except Exception:
                raise error from None

    runtime._bson_value_size = bson_value_size


# (k) `{field: {$in: [...]}}` costs O(documents x values): the compiled matcher of
# core/compiled_query.CompiledQuery compares every candidate with every listed
# value through QueryEngine._in_item_matches_candidate, so re-reading the 500
# documents of a batch by `_id` on 3,000 documents takes ~10 s. When every
# listed value is an ObjectId (no collation, null or array semantics apply to
# them), membership is a set lookup: same result, O(documents). Any other list
# keeps the original matcher.
def _patch_in_object_ids() -> None:
    from bson import ObjectId
    from mongoeco.core.compiled_query import CompiledQuery
    from mongoeco.core.query_plan import InCondition

    original = CompiledQuery._node_to_code

    def node_to_code(self: Any, node: Any, depth: int) -> str:
        if (
            isinstance(node, InCondition)
            and node.values
            and all(isinstance(value, ObjectId) for value in node.values)
        ):
            field_key = self._field(node.field)
            members = self._store("values", frozenset(node.values))
            kind = self._store("kind", ObjectId)
            return (
                f"any(isinstance(candidate, {kind}) and candidate in {members}"
                f" for candidate in (_extract(doc, {field_key}) or ()))"
            )
        return original(self, node, depth)

    CompiledQuery._node_to_code = node_to_code


# (l) No collMod. mongoeco has no such command (the wire surface refuses it, and
# AsyncDatabaseCommandService has no route for it), so a validator or an index
# option cannot change on an existing collection. The fix adds the command to the
# wire surface and routes it, like mongoeco's own delegated commands (so fail
# points and profiling apply), to a handler that parses it as mongod 7.0 does
# (unknown field 40415, wrong type 14, bad enum 2, 72 InvalidOptions for the
# refusals, 26 NamespaceNotFound, 27 IndexNotFound, 263 in a transaction) and
# edits the MemoryEngine catalog under the collection lock, inside mongoeco's own
# rollback and publication scope (as create_index does):
# * validator / validationLevel / validationAction replace those keys of the
#   collection's options, which every write re-reads and compiles;
# * index: expireAfterSeconds, hidden and unique replace the frozen
#   EngineIndexRecord; a TTL change rebuilds the index data that holds each
#   document's expiry, then purges as create_index does. prepareUnique is kept on
#   a subclass of the record and reported by listIndexes (createIndexes accepts it
#   too, so a snapshot that holds it loads again); unique: true needs it, fails
#   with 359 CannotConvertIndexToUnique (and the duplicate _ids) when documents
#   share a key, and resets it. The reply carries mongod's *_old / *_new fields.
# Not supported (refused with 72): views, capped/clustered/time-series options,
# changeStreamPreAndPostImages, dryRun, forceNonUnique. prepareUnique does not
# make the index refuse new duplicates before the conversion.
_TYPE_MISMATCH = 14
_BAD_VALUE = 2
_INVALID_OPTIONS = 72
_INDEX_NOT_FOUND = 27
_UNKNOWN_FIELD = 40415
_CANNOT_CONVERT_TO_UNIQUE = 359
_NOT_SUPPORTED_IN_TRANSACTION = 263
_COLL_MOD_GENERIC = frozenset(
    {"writeConcern", "comment", "maxTimeMS", "apiVersion", "apiStrict", "apiDeprecationErrors", "$db"}
)
_COLL_MOD_UNSUPPORTED = frozenset(
    {"viewOn", "pipeline", "changeStreamPreAndPostImages", "expireAfterSeconds", "timeseries",
     "dryRun", "cappedSize", "cappedMax", "collectionUUID"}
)
_COLL_MOD_INDEX_FIELDS = frozenset({"name", "keyPattern", "expireAfterSeconds", "hidden", "unique", "prepareUnique"})
_ENUMS = {"validationLevel": ("off", "strict", "moderate"), "validationAction": ("error", "warn")}


def _unknown_field(path: str) -> Exception:
    return _failure(f"BSON field '{path}' is an unknown field.", _UNKNOWN_FIELD, f"Location{_UNKNOWN_FIELD}")


def _coll_mod_value(path: str, value: object, kind: str) -> Any:
    """An IDL field as mongod parses it: 14 TypeMismatch, or the value as Python."""
    raw = getattr(value, "value", value)  # wire Int64
    number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
    if kind == "bool" and (isinstance(raw, bool) or number):  # safeBool takes numbers too
        return bool(raw)
    if kind == "int" and number:
        return int(raw)
    if (kind == "string" and isinstance(raw, str)) or (kind == "object" and isinstance(raw, dict)):
        return raw
    raise _failure(
        f"BSON field '{path}' is the wrong type '{type(raw).__name__}', expected type '{kind}'",
        _TYPE_MISMATCH,
        "TypeMismatch",
    )


def _parse_coll_mod(spec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The collection options and the index request of a collMod, parsed as mongod's IDL does."""
    options: dict[str, Any] = {}
    index: dict[str, Any] | None = None
    for key, value in spec.items():
        if key == "collMod" or key in _COLL_MOD_GENERIC:
            continue
        if key in _COLL_MOD_UNSUPPORTED:
            raise _failure(
                f"collMod option '{key}' is not supported by mongoshift's embedded server",
                _INVALID_OPTIONS,
                "InvalidOptions",
            )
        if key == "validator":
            options[key] = _coll_mod_value("collMod.validator", value, "object")
        elif key in _ENUMS:
            text = _coll_mod_value(f"collMod.{key}", value, "string")
            if text not in _ENUMS[key]:
                raise _failure(
                    f"Enumeration value '{text}' for field 'collMod.{key}' is not a valid value.",
                    _BAD_VALUE,
                    "BadValue",
                )
            options[key] = text
        elif key == "index":
            index = {}
            for field, item in _coll_mod_value("collMod.index", value, "object").items():
                if field == "forceNonUnique":
                    raise _failure(
                        "collMod index option 'forceNonUnique' is not supported by mongoshift's embedded server",
                        _INVALID_OPTIONS,
                        "InvalidOptions",
                    )
                if field not in _COLL_MOD_INDEX_FIELDS:
                    raise _unknown_field(f"collMod.index.{field}")
                kind = {"name": "string", "keyPattern": "object", "expireAfterSeconds": "int"}.get(field, "bool")
                index[field] = _coll_mod_value(f"collMod.index.{field}", item, kind)
        else:
            raise _unknown_field(f"collMod.{key}")
    return options, index


def _patch_coll_mod() -> None:
    from mongoeco._types.documents import EngineIndexRecord
    from mongoeco.api._async import _database_admin_write_commands as write_commands
    from mongoeco.api._async._database_admin_routing import DatabaseAdminRoutingService
    from mongoeco.api._async.database_commands import AsyncDatabaseCommandService
    from mongoeco.engines import memory
    from mongoeco.engines.semantic_core import compile_collection_validation_semantics
    from mongoeco.errors import OperationFailure
    from mongoeco.wire import _executor_validation as wire_validation
    from mongoeco.wire.surface import WireSurface

    @dataclasses.dataclass(frozen=True, slots=True)
    class PreparedIndexRecord(EngineIndexRecord):
        prepare_unique: bool = True

    base_fields = [field.name for field in dataclasses.fields(EngineIndexRecord)]

    def rebuilt(record: Any, **changes: Any) -> Any:
        prepare = changes.pop("prepare_unique", getattr(record, "prepare_unique", False))
        values = {name: getattr(record, name) for name in base_fields} | changes
        return PreparedIndexRecord(**values) if prepare else EngineIndexRecord(**values)

    def duplicates(engine: Any, stored: dict[Any, Any], record: Any) -> list[dict[str, list[Any]]]:
        groups: dict[Any, list[Any]] = {}
        pairs: list[tuple[Any, list[Any]]] = []  # with a collation keys compare pairwise
        for data in stored.values():
            document = engine._borrow_storage_document(data)
            if not memory.document_in_virtual_index(document, record):
                continue
            if record.collation is None:
                for key in engine._unique_index_keys(document, record.fields):
                    groups.setdefault(key, []).append(document.get("_id"))
                continue
            for other, ids in pairs:
                if engine._unique_index_conflict(document, other, record) is not None:
                    ids.append(document.get("_id"))
                    break
            else:
                pairs.append((document, [document.get("_id")]))
        found = list(groups.values()) + [ids for _, ids in pairs]
        return [{"ids": ids} for ids in found if len(ids) > 1]

    def find_index(records: list[Any], request: dict[str, Any], namespace: str) -> tuple[int, Any]:
        if "name" in request and "keyPattern" in request:
            raise _failure("Cannot specify both key pattern and name.", _INVALID_OPTIONS, "InvalidOptions")
        if "name" not in request and "keyPattern" not in request:
            raise _failure("Must specify either index name or key pattern.", _INVALID_OPTIONS, "InvalidOptions")
        if not {"expireAfterSeconds", "hidden", "unique", "prepareUnique"} & set(request):
            raise _failure(
                "no expireAfterSeconds, hidden, unique, or prepareUnique field", _INVALID_OPTIONS, "InvalidOptions"
            )
        wanted = request.get("name")
        keys = memory.normalize_index_keys(request["keyPattern"]) if wanted is None else None
        if wanted == "_id_" or keys == [("_id", 1)]:  # mongoeco keeps no record for it
            return -1, EngineIndexRecord(name="_id_", fields=["_id"], key=[("_id", 1)], unique=True)
        for position, record in enumerate(records):
            if record.name == wanted or (keys is not None and record.key == keys):
                return position, record
        shown = wanted if wanted is not None else request["keyPattern"]
        raise _failure(f"cannot find index {shown} for ns {namespace}", _INDEX_NOT_FOUND, "IndexNotFound")

    def modify_index(record: Any, request: dict[str, Any], modifications: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """The record's changes and the reply's fields (mongod's coll_mod.cpp rules)."""
        changes: dict[str, Any] = {}
        reply: dict[str, Any] = {}
        is_id = record.name == "_id_"
        if "expireAfterSeconds" in request:
            seconds = request["expireAfterSeconds"]
            if record.expire_after_seconds is None and (is_id or len(record.fields) != 1):
                message = ("the _id field does not support TTL indexes" if is_id
                           else "TTL indexes are single-field indexes, compound indexes do not support TTL")
                raise _failure(message, _INVALID_OPTIONS, "InvalidOptions")
            if not 0 <= seconds <= 2**31 - 1:
                raise _failure(
                    f"TTL index 'expireAfterSeconds' option must be within an acceptable range, got {seconds}",
                    _INVALID_OPTIONS,
                    "InvalidOptions",
                )
            if record.expire_after_seconds is not None:
                reply["expireAfterSeconds_old"] = record.expire_after_seconds
            reply["expireAfterSeconds_new"] = seconds
            changes["expire_after_seconds"] = seconds
        prepared = bool(getattr(record, "prepare_unique", False))
        if "unique" in request:
            if not request["unique"]:
                raise _failure("Cannot make index non-unique", _BAD_VALUE, "BadValue")
            if not record.unique:
                if not prepared:
                    raise _failure(
                        "Cannot make index unique with 'prepareUnique=false'. Run collMod to set it first.",
                        _INVALID_OPTIONS,
                        "InvalidOptions",
                    )
                changes["unique"] = True
        if "hidden" in request:
            if is_id:
                raise _failure("can't hide _id index", _BAD_VALUE, "BadValue")
            if record.hidden != request["hidden"]:
                changes["hidden"] = request["hidden"]
        if "prepareUnique" in request and prepared != request["prepareUnique"] and not record.unique:
            if modifications > 1:
                raise _failure(
                    "prepareUnique cannot be combined with any other modification.", _INVALID_OPTIONS, "InvalidOptions"
                )
            changes["prepare_unique"] = request["prepareUnique"]
        if memory.special_index_directions(record.key) and (changes.get("unique") or changes.get("prepare_unique")):
            raise _failure("special indexes do not support unique", _INVALID_OPTIONS, "InvalidOptions")
        if "hidden" in changes:
            reply |= {"hidden_old": record.hidden, "hidden_new": changes["hidden"]}
        if changes.get("unique"):
            reply["unique_new"] = True
            changes["prepare_unique"] = False  # as mongod: reset once unique
        elif "prepare_unique" in changes:
            reply |= {"prepareUnique_old": prepared, "prepareUnique_new": changes["prepare_unique"]}
        return changes, reply

    async def coll_mod(self: Any, spec: dict[str, Any], *, session: Any = None) -> dict[str, Any]:
        admin = self._admin
        engine = admin._engine
        if not isinstance(engine, memory.MemoryEngine):
            raise _failure("no such command: 'collMod'", _COMMAND_NOT_FOUND, "CommandNotFound")
        if session is not None and session.transaction_active:
            raise _failure(
                "Cannot run 'collMod' in a multi-document transaction.",
                _NOT_SUPPORTED_IN_TRANSACTION,
                "OperationNotSupportedInTransaction",
            )
        name = admin._require_collection_name(spec.get("collMod"), "collMod")
        db_name = admin._db_name
        namespace = f"{db_name}.{name}"
        options, request = _parse_coll_mod(spec)
        modifications = len(options) + len(set(request or ()) - {"name", "keyPattern"})
        reply: dict[str, Any] = {}
        async with engine._get_lock(db_name, name):
            storage = engine._storage_view(session)
            indexes = engine._indexes_view(session)
            index_data = engine._index_data_view(session)
            collections = engine._collections_view(session)
            option_store = engine._collection_options_view(session)
            if name not in collections.get(db_name, set()) and name not in storage.get(db_name, {}):
                raise _failure("ns does not exist", _NAMESPACE_NOT_FOUND, "NamespaceNotFound")
            current = option_store.get(db_name, {}).get(name, {})
            if "viewOn" in current and (options or request is not None):
                field = "index" if request is not None else next(iter(options))
                raise _failure(f"option not supported on a view: {field}", _INVALID_OPTIONS, "InvalidOptions")
            new_options = {**current, **options}
            if "validator" in options:
                compile_collection_validation_semantics(new_options, dialect=admin._mongodb_dialect)
                if not options["validator"]:
                    new_options.pop("validator")  # mongod does not list an empty validator
            records = indexes.get(db_name, {}).get(name, [])
            position, record, changes = -1, None, {}
            if request is not None:
                position, record = find_index(records, request, namespace)
                changes, reply = modify_index(record, request, modifications)
                if changes.get("unique"):
                    stored = storage.get(db_name, {}).get(name, {})
                    violations = duplicates(engine, stored, record)
                    if violations:
                        raise OperationFailure(
                            "Cannot convert the index to unique. Please resolve conflicting documents "
                            "before running collMod again.",
                            code=_CANNOT_CONVERT_TO_UNIQUE,
                            details={"codeName": "CannotConvertIndexToUnique", "violations": violations},
                        )
            with engine._collection_state_rollback_locked(
                db_name,
                name,
                storage=storage,
                indexes=indexes,
                index_data=index_data,
                search_indexes=engine._search_indexes_view(session),
                collections=collections,
                options=option_store,
            ):
                if options:
                    option_store.setdefault(db_name, {})[name] = new_options
                if changes and position >= 0:
                    new_record = rebuilt(record, **changes)
                    records[position] = new_record
                    if "expire_after_seconds" in changes:
                        if memory.is_ordered_index_spec(new_record.key):
                            engine._rebuild_index_data_locked(
                                db_name, name, new_record, index_data_view=index_data, storage_view=storage
                            )
                        engine._purge_expired_documents_locked(
                            db_name,
                            name,
                            context=session,
                            indexes_view=indexes,
                            index_data_view=index_data,
                            storage_view=storage,
                            now=engine._ttl_now(),
                        )
        return {**reply, "ok": 1.0}

    original_list_indexes = memory.MemoryEngine.list_indexes

    async def list_indexes(self: Any, db_name: str, coll_name: str, *, context: Any = None) -> Any:
        documents = await original_list_indexes(self, db_name, coll_name, context=context)
        records = self._indexes_view(context).get(db_name, {}).get(coll_name, [])
        prepared = {record.name for record in records if getattr(record, "prepare_unique", False)}
        for document in documents if prepared else ():
            if document.get("name") in prepared:
                document["prepareUnique"] = True
        return documents

    def without_prepare_unique(indexes: object) -> object:
        if not isinstance(indexes, list):
            return indexes
        return [
            {key: value for key, value in index.items() if key != "prepareUnique"} if isinstance(index, dict) else index
            for index in indexes
        ]

    original_create_indexes = write_commands.DatabaseAdminWriteCommandService.command_create_indexes

    async def command_create_indexes(self: Any, spec: dict[str, Any], *, session: Any = None) -> object:
        # createIndexes takes prepareUnique (mongod 6.0+); listIndexes reports it, so snapshots hold it.
        indexes = spec.get("indexes")
        if not isinstance(indexes, list) or not any(isinstance(i, dict) and "prepareUnique" in i for i in indexes):
            return await original_create_indexes(self, spec, session=session)
        prepared = [
            index
            for index in indexes
            if isinstance(index, dict) and "key" in index
            and _coll_mod_value("createIndexes.indexes.prepareUnique", index.get("prepareUnique", False), "bool")
        ]
        stripped = {**spec, "indexes": without_prepare_unique(indexes)}
        result = await original_create_indexes(self, stripped, session=session)
        for index in prepared:
            wanted = index.get("name") or memory.default_index_name(memory.normalize_index_keys(index["key"]))
            request = {"collMod": spec["createIndexes"], "index": {"name": wanted, "prepareUnique": True}}
            await coll_mod(self._admin._routing, request, session=session)
        return result

    original_wire_check = wire_validation.normalize_index_models_from_command

    def wire_check(indexes: object) -> object:
        return original_wire_check(without_prepare_unique(indexes))

    original_supports = WireSurface.supports_command

    def supports_command(self: Any, command_name: str) -> bool:
        return command_name == "collMod" or original_supports(self, command_name)

    WireSurface.supports_command = supports_command
    AsyncDatabaseCommandService._DELEGATED_COMMAND_HANDLERS["collMod"] = AsyncDatabaseCommandService.Route(
        "_mongoshift_coll_mod"
    )
    DatabaseAdminRoutingService._mongoshift_coll_mod = coll_mod
    memory.MemoryEngine.list_indexes = list_indexes
    write_commands.DatabaseAdminWriteCommandService.command_create_indexes = command_create_indexes
    wire_validation.normalize_index_models_from_command = wire_check


# (m) `$set` of a Decimal128 equal in value but not in digits is a no-op: setting
# 1.00 over a stored 1.0 (or -0 over 0) keeps 1.0 and reports nModified 0.
# core/paths._same_value_for_update decides whether a $set changes anything and
# compares with mongoeco's Decimal128.__eq__, which is by value (right for
# queries). mongod's no-op check is binary equality, so the new digits are
# stored. Decimals are compared by their digits and exponent here; every other
# value keeps the original check (which the nested comparison calls back into).
def _patch_decimal_set() -> None:
    from mongoeco.core import paths, update_array_operators
    from mongoeco.types import Decimal128

    original = paths._same_value_for_update

    def same_value_for_update(left: Any, right: Any) -> bool:
        if type(left) is Decimal128 and type(right) is Decimal128:
            return bool(left.value.as_tuple() == right.value.as_tuple())
        return bool(original(left, right))

    paths._same_value_for_update = same_value_for_update
    update_array_operators._same_value_for_update = same_value_for_update


# (n) A multi-document update costs O(matched x listed) on a `$in` filter:
# _collection_modify.update_many finds the matching documents, then updates each
# one with the whole filter as `selector_filter`, parsed again for each document
# and re-checked by the interpreted matcher, whose _evaluate_in calls
# FilteringMatchingMixin._prepare_membership_values: the lookup set of every
# listed value is built again for every document. An update_many of a batch of
# 500 `_id`s spent a third of its time there. Each parse lists the very same value
# objects (those of the command's filter), and what is prepared from them depends
# only on them and on the null and collation rules (callers only read it), so the
# last few preparations are kept, keyed by the identity of the values (the entry
# holds them, so no other object can take their ids): built once per command.
# Lists of fewer than 16 values, with a document or an array among them (mutable),
# or under a collation keep the original path.
_MEMBERSHIP_KEPT = 8


def _patch_in_membership_once() -> None:
    from collections import OrderedDict

    from mongoeco.core._filtering_matching import FilteringMatchingMixin

    original = vars(FilteringMatchingMixin)["_prepare_membership_values"].__func__
    kept: OrderedDict[Any, Any] = OrderedDict()

    def prepare_membership_values(
        cls: Any, values: tuple[Any, ...], *, null_matches_undefined: bool, collation: Any = None
    ) -> Any:
        if collation is not None or len(values) < 16:
            return original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
        if any(isinstance(value, (dict, list)) for value in values):
            return original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
        key = (tuple(map(id, values)), bool(null_matches_undefined))
        entry = kept.get(key)
        if entry is None:
            prepared = original(cls, values, null_matches_undefined=null_matches_undefined, collation=collation)
            # The entry holds the values themselves: while it is kept, no other object can have their ids.
            kept[key] = (tuple(values), prepared)
            if len(kept) > _MEMBERSHIP_KEPT:
                kept.popitem(last=False)
            return prepared
        kept.move_to_end(key)
        return entry[1]

    FilteringMatchingMixin._prepare_membership_values = classmethod(prepare_membership_values)


# (o) Transaction conflicts are global: MemoryEngine._commit_session_transaction
# fails a commit when the engine's single version counter (_mvcc_version, bumped
# by every write anywhere) moved since the transaction began, then installs the
# transaction's copy of every namespace it touched over the live one. So a
# transaction conflicts with any write to any document, and only a commit with
# nothing written since its start can succeed.
# mongod conflicts per document. The fix records, for each document a
# transaction writes (every engine write goes through
# _set_storage_document_locked / _delete_storage_document_locked), its stored
# value in the transaction's snapshot. At commit, a document whose live value is
# no longer that one (updated, replaced, deleted or inserted since) is a write
# conflict (the message mapped to 112 + TransientTransactionError by (c)); else
# the transaction's documents are applied one by one to the live collections
# with mongoeco's own write steps (index maintenance, TTL data, rollback
# journal), so concurrent writes to other documents survive. A secondary unique
# key taken meanwhile by another document is a write conflict too, as in mongod
# where the index key is what conflicts. A collection the transaction created is
# installed as mongoeco does, unless it appeared meanwhile. Anything else (a
# transaction that changed indexes, options or databases, a namespace whose
# collection was replaced, a document whose _id type a replacement changed) keeps
# the original global rule. Snapshot reads are untouched: each transaction
# still reads its own copy taken at start.
_ABSENT = object()


@dataclasses.dataclass
class _TransactionWrites:
    """What one open transaction wrote, by namespace: storage key -> value in its snapshot."""

    state: Any
    started: dict[tuple[str, str], Any]  # the live collection objects when it began
    base: dict[tuple[str, str], dict[Any, Any]] = dataclasses.field(default_factory=dict)
    collections: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)
    sizes: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)
    untracked: bool = False


def _transaction_table(engine: Any) -> dict[int, _TransactionWrites]:
    table = getattr(engine, "_mongoshift_transaction_writes", None)
    if table is None:
        table = {}
        engine._mongoshift_transaction_writes = table
    return table


def _write_conflict(detail: str) -> Exception:
    from mongoeco.errors import OperationFailure

    # (c) turns this into 112 WriteConflict + TransientTransactionError.
    return OperationFailure(f"Write conflict during transaction commit: {detail}")


def _patch_transaction_conflicts() -> None:
    import contextlib
    from types import SimpleNamespace

    from mongoeco.engines import memory
    from mongoeco.engines._memory_collection import MemoryCollection
    from mongoeco.errors import DuplicateKeyError

    engine_class = memory.MemoryEngine
    original_start = engine_class._start_session_transaction
    original_commit = engine_class._commit_session_transaction
    original_abort = engine_class._abort_session_transaction
    original_set = engine_class._set_storage_document_locked
    original_delete = engine_class._delete_storage_document_locked
    original_replace_key = MemoryCollection.replace_key

    def start(self: Any, session: Any) -> None:
        with self._meta_lock:
            original_start(self, session)
            table = _transaction_table(self)
            open_states = {id(state) for state in self._mvcc_states.values()}
            for key in [key for key in table if key not in open_states]:
                del table[key]  # ended without passing through commit/abort (engine reset)
            state = self._mvcc_states.get(session.session_id)
            if state is not None:
                table[id(state)] = _TransactionWrites(
                    state,
                    {(db, name): coll for db, colls in self._storage.items() for name, coll in colls.items()},
                )

    def note(self: Any, collection: Any, key: Any) -> None:
        stack = self._publication_stack
        state = stack[-1].state if stack else None
        if state is None:
            return
        entry = _transaction_table(self).get(id(state))
        if entry is None or entry.state is not state:
            return  # not tracked: its commit keeps the global rule
        namespace = next((ns for ns, coll in entry.collections.items() if coll is collection), None)
        if namespace is None:
            namespace = next(
                ((db, name) for db, colls in state.storage.items() for name, coll in colls.items() if coll is collection),
                None,
            )
            if namespace is None or namespace in entry.collections:
                entry.untracked = True
                return
            entry.collections[namespace] = collection
            entry.sizes[namespace] = len(collection)
        entry.base.setdefault(namespace, {}).setdefault(key, collection.get(key, _ABSENT))

    def set_document(self: Any, collection: Any, storage_key: Any, document: Any) -> None:
        note(self, collection, storage_key)
        original_set(self, collection, storage_key, document)

    def delete_document(self: Any, collection: Any, storage_key: Any) -> None:
        note(self, collection, storage_key)
        original_delete(self, collection, storage_key)

    def replace_key(self: Any, key: Any, replacement: Any) -> None:
        original_replace_key(self, key, replacement)
        self._mongoshift_rekeyed = True  # a write outside note(): that transaction keeps the global rule

    def namespace_unchanged(self: Any, state: Any, db: str, name: str) -> bool:
        def same(live: dict[str, dict[str, Any]], mine: dict[str, dict[str, Any]]) -> bool:
            return live.get(db, {}).get(name) == mine.get(db, {}).get(name)

        return (
            same(self._indexes, state.indexes)
            and same(self._collection_options, state.collection_options)
            and same(self._search_indexes, state.search_indexes)
            and (name in self._collections.get(db, set())) == (name in state.collections.get(db, set()))
        )

    def plan(self: Any, state: Any, entry: _TransactionWrites, concurrent: bool) -> tuple[list[Any], list[Any]] | None:
        """(namespaces to merge, namespaces to install) or None: the global rule applies."""
        if entry.untracked or state.touched_databases or not state.touched_namespaces <= set(entry.base):
            return None
        merged, created = [], []
        for (db, name), written in entry.base.items():
            mine = state.storage.get(db, {}).get(name)
            if (
                mine is not entry.collections[(db, name)]
                or not isinstance(mine, MemoryCollection)
                or getattr(mine, "_mongoshift_rekeyed", False)
            ):
                return None
            size = entry.sizes[(db, name)]
            inserted = sum(1 for k, b in written.items() if b is _ABSENT and k in mine)
            deleted = sum(1 for k, b in written.items() if b is not _ABSENT and k not in mine)
            if len(mine) != size + inserted - deleted:
                return None  # a change that note() did not see
            live = self._storage.get(db, {}).get(name)
            if (db, name) not in entry.started:
                if live is not None or name in self._collections.get(db, set()):
                    return None  # created meanwhile: the global rule reports the conflict
                created.append((db, name))
                continue
            if live is not entry.started[(db, name)] or not namespace_unchanged(self, state, db, name):
                return None
            merged.append(((db, name), written, mine, live))
        return merged, created

    def merge(self: Any, merged: list[Any], concurrent: bool) -> None:
        views = {
            "storage": self._storage,
            "indexes": self._indexes,
            "index_data": self._index_data,
            "search_indexes": self._search_indexes,
            "collections": self._collections,
            "options": self._collection_options,
        }
        with contextlib.ExitStack() as scopes:
            for (db, name), _, _, _ in merged:
                scopes.enter_context(self._document_state_rollback_locked(db, name, **views))
            for (db, name), written, mine, live in merged:
                self._invalidate_search_runtime_cache(db, name)
                for key, before in written.items():
                    after = mine.get(key, _ABSENT)
                    if after is before:
                        continue
                    if before is not _ABSENT:
                        document = self._borrow_storage_document(before)
                        self._update_indexes_locked(db, name, key, document, action="delete")
                        if after is _ABSENT:
                            self._delete_storage_document_locked(live, key)
                    if after is not _ABSENT:
                        self._set_storage_document_locked(live, key, after)
                        document = self._borrow_storage_document(after)
                        self._update_indexes_locked(db, name, key, document, action="insert")
            if not concurrent:
                return  # the live collections were the snapshot: the transaction's own checks hold
            for (db, name), written, mine, _ in merged:
                for key, before in written.items():
                    after = mine.get(key, _ABSENT)
                    if after is _ABSENT or after is before:
                        continue
                    document = self._borrow_storage_document(after)
                    inserted = before is _ABSENT
                    try:
                        self._ensure_unique_indexes(
                            db,
                            name,
                            document,
                            exclude_storage_key=key,
                            check_id_storage=inserted,
                            # _id 1 and 1.0 are one key for mongod, two storage keys here: scanned as on insert
                            scan_payload_id=inserted and memory.id_contains_numeric_value(document.get("_id")),
                        )
                    except DuplicateKeyError as error:
                        raise _write_conflict(f"a unique key of {db}.{name} was taken meanwhile ({error})") from None

    def commit(self: Any, session: Any) -> None:
        with self._meta_lock:
            state = self._mvcc_states.get(session.session_id)
            table = _transaction_table(self)
            entry = table.get(id(state)) if state is not None else None
            if entry is None or entry.state is not state or not state.has_writes:
                table.pop(id(state), None)
                return original_commit(self, session)
            self._ensure_publication_boundary()
            concurrent = state.snapshot_version != self._mvcc_version
            steps = plan(self, state, entry, concurrent)
            if steps is None:
                original_commit(self, session)
                table.pop(id(state), None)
                return None
            merged, created = steps
            for (db, name), written, _, live in merged:
                for key, before in written.items():
                    if live.get(key, _ABSENT) is not before:
                        raise _write_conflict(f"a document of {db}.{name} that it wrote was written meanwhile")
            sequence, changes, pruned_through = self._prepare_committed_changes_locked(state.pending_changes)
            merge(self, merged, concurrent)
            if created:
                scope = SimpleNamespace(
                    storage=state.storage,
                    indexes=state.indexes,
                    index_data=state.index_data,
                    search_indexes=state.search_indexes,
                    collections=state.collections,
                    collection_options=state.collection_options,
                    touched_namespaces=set(created),
                    touched_databases=set(),
                )
                (
                    self._storage,
                    self._indexes,
                    self._index_data,
                    self._search_indexes,
                    self._collections,
                    self._collection_options,
                ) = self._prepare_transaction_write_set_locked(scope)
            self._mvcc_states.pop(session.session_id, None)
            table.pop(id(state), None)
            self._commit_sequence = sequence
            self._committed_changes = changes
            self._change_pruned_through = pruned_through
            self._mvcc_version += 1
            self._invalidate_transaction_search_runtime_cache(state)
        self._sync_session_state(session, transaction_active=False, snapshot_version=self._mvcc_version)
        return None

    def abort(self: Any, session: Any) -> None:
        with self._meta_lock:
            state = self._mvcc_states.get(session.session_id)
            if state is not None:
                _transaction_table(self).pop(id(state), None)
        original_abort(self, session)

    engine_class._start_session_transaction = start
    engine_class._commit_session_transaction = commit
    engine_class._abort_session_transaction = abort
    engine_class._set_storage_document_locked = set_document
    engine_class._delete_storage_document_locked = delete_document
    MemoryCollection.replace_key = replace_key
