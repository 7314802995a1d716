"""Wire-protocol fixes: bulk and single inserts (a, p), renames sent to admin (g), unknown
commands (h), 64-bit cursor ids (r), the change-stream shim's hook (q), cursor batches cut as
mongod cuts them (bo) and a TLS handshake refused at once (ci)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ._support import (
    COMMAND_NOT_FOUND,
    NAMESPACE_EXISTS,
    NAMESPACE_NOT_FOUND,
    as_int,
    failure,
)

log = logging.getLogger("mongoshift.embedded.server")


def patch_change_streams() -> None:
    # (q) No $changeStream over the wire: served from the server's change history
    # (embedded/change_streams.py, which holds the whole shim).
    from mongoshift.embedded import change_streams

    change_streams.patch_wire()
    change_streams.patch_update_events()
    change_streams.patch_pre_images()


def patch_int64_cursor_ids() -> None:
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
            cursor_id = as_int(cursor.get("id"))
            if cursor_id is not None and not isinstance(cursor.get("id"), Int64):
                cursor["id"] = Int64(cursor_id)
        return reply

    WireCommandExecutor.execute_prepared = execute_prepared


# (a) Wire `insert` is O(n·N).
# _database_admin_write_commands.command_insert calls insert_one per document; a
# single-document insert runs MemoryEngine._ensure_unique_indexes with
# scan_payload_id=True, which compares every stored _id. insert_many with more
# than one document skips that scan, so the command is routed to one
# insert_many call; its BulkWriteError is turned back into the command's
# `writeErrors` (index, code, errmsg, keyPattern, keyValue) and `n`. insert_many
# already implements ordered (stop at the first error) and unordered (go on)
# semantics. Single-document commands keep the original path.
def patch_insert() -> None:
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
        bypass = command_boolean(  # type: ignore[no-untyped-call]  # mongoeco leaves it unannotated
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
            details = error.details or {}  # type: ignore[attr-defined]  # pymongo's BulkWriteError base: mypy sees Exception
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
def patch_single_insert_id_scan() -> None:
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


# (g) Collection.rename fails: pymongo sends renameCollection to the admin
# database, and command_rename_collection (_database_admin_write_commands.py)
# only accepts namespaces of the database the command was sent to. A rename
# within one database sent to admin is now run on that database. Its
# CollectionInvalid errors, which have no code, get mongod's: 48 NamespaceExists
# for a target that exists (without dropTarget), 26 NamespaceNotFound for a
# missing source.
def patch_rename_from_admin() -> None:
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
                raise failure(message, NAMESPACE_EXISTS, "NamespaceExists") from error
            if message.endswith("does not exist"):
                raise failure(message, NAMESPACE_NOT_FOUND, "NamespaceNotFound") from error
            raise

    WireSpecialCommandHandlers.dispatch = dispatch


# (h) An unknown command fails without a code. _executor_support.build_request_context
# raises a bare OperationFailure("unsupported wire command: X"); drivers and
# mongoshift look for code 59 CommandNotFound (e.g. to detect replSetGetStatus).
def patch_unknown_command() -> None:
    from mongoeco.wire._executor_support import WIRE_INTERNAL_KEYS
    from mongoeco.wire.executor import WireCommandExecutor

    original = WireCommandExecutor._build_request_context

    def build_request_context(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        name = next((key for key in body if key not in WIRE_INTERNAL_KEYS), None)
        if isinstance(name, str) and name and not self._surface.supports_command(name):
            raise failure(f"no such command: '{name}'", COMMAND_NOT_FOUND, "CommandNotFound")
        return original(self, body, **kwargs)

    WireCommandExecutor._build_request_context = build_request_context


#: mongod's first batch of a ``find`` or an ``aggregate`` that names no ``batchSize``.
DEFAULT_FIRST_BATCH = 101
#: mongod ends a reply's batch before the document that would take it past 16 MiB (one document always goes).
MAX_BATCH_BYTES = 16 * 1024 * 1024


def patch_cursor_batches() -> None:
    # (bo) A cursor's batch as mongod cuts it. wire/cursors.WireCursorStore slices a result by
    # batchSize alone, and without one sends the whole result in the first reply: a plain find()
    # over 60,000 documents of 1 KB was one 62 MB reply, which the driver refuses (its limit is
    # 48 MB: ProtocolError), and a batch of three documents near 16 MiB failed the same way.
    # mongod's first batch of a find or an aggregate holds 101 documents unless the command names
    # its batchSize, and no batch holds more than 16 MiB of documents (at least one). Measuring a
    # document means encoding it: each one measured is swapped in its batch for its encoded bytes
    # (a RawBSONDocument, which the reply's encode copies as it is, (aj) passing it through), so
    # the reply encodes no document twice.
    from bson.raw_bson import RawBSONDocument
    from mongoeco.wire import bson_bridge, cursors, protocol

    store = cursors.WireCursorStore
    materialize, get_more = store.materialize_command_result, store.get_more

    def fitting(batch: list[Any], count: int) -> int:
        """How many of ``batch``'s first ``count`` documents one reply carries (16 MiB of them, at
        least one); each document measured is replaced in ``batch`` by its encoded form."""
        converted = bson_bridge.encode_wire_value(batch[:count])  # one pass over the batch: (aj)
        total = 0
        for index, doc in enumerate(converted):
            encoded = doc if type(doc) is RawBSONDocument else RawBSONDocument(protocol.BSON.encode(doc))
            batch[index] = encoded
            total += len(encoded.raw)
            if index and total > MAX_BATCH_BYTES:
                return index
        return count

    def materialize_command_result(self: Any, command_document: dict[str, Any], result: Any, **kwargs: Any) -> Any:
        cursor = result.get("cursor") if isinstance(result, dict) else None
        found = cursor.get("firstBatch") if isinstance(cursor, dict) else None
        if not isinstance(cursor, dict) or not isinstance(found, list) or not found:
            return materialize(self, command_document, result, **kwargs)
        requested = self._resolve_batch_size(command_document)  # a bad one raises here, as it did
        batch = cursor["firstBatch"] = list(found)
        if command_document.get("singleBatch") is True:  # one batch, then no cursor
            del batch[fitting(batch, min(requested or len(batch), len(batch))) :]
            return materialize(self, {k: v for k, v in command_document.items() if k != "batchSize"}, result, **kwargs)
        default = DEFAULT_FIRST_BATCH if next(iter(command_document), None) in ("find", "aggregate") else len(batch)
        count = fitting(batch, min(requested or default, len(batch)))
        return materialize(self, {**command_document, "batchSize": count}, result, **kwargs)

    def get_more_batch(self: Any, command_document: dict[str, Any], **kwargs: Any) -> Any:
        size = command_document.get("batchSize")
        state = self._state.get(command_document.get("getMore"))
        valid = size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 0)  # an Int64 too
        if state is None or not valid or not state.remaining_batch:
            return get_more(self, command_document, **kwargs)
        remaining = state.remaining_batch
        count = fitting(remaining, min(size or len(remaining), len(remaining)))
        return get_more(self, {**command_document, "batchSize": count}, **kwargs)

    store.materialize_command_result = materialize_command_result
    store.get_more = get_more_batch


#: The first bytes of a TLS connection: a handshake record (22) of TLS 1.x (major version 3).
TLS_HANDSHAKE = b"\x16\x03"


def patch_tls_refused() -> None:
    # (ci) A client asking for TLS (tls=true) hangs. The server reads the TLS ClientHello's first
    # 16 bytes as a message header whose length (0x16 0x03 0x01 0x02 ...: some 33 MB) is within the
    # maximum, and waits for a body that never comes, while the client waits for the server's
    # answer to its hello: the connection times out, with no word of TLS on either side. As mongod
    # without TLS ("SSL handshake received but server is started without SSL support"), a header
    # that starts like a TLS handshake and carries no opcode of the protocol closes the connection
    # at once (a wire message of 790 bytes starts with the same two bytes, but names its opcode).
    from mongoeco.wire import proxy
    from mongoeco.wire._framing import WireProtocolError
    from mongoeco.wire.protocol import OP_MSG, OP_QUERY

    original = proxy.parse_message_header
    known = {OP_MSG, OP_QUERY, 2012}  # 2012: OP_COMPRESSED

    said = [False]  # the first at WARNING; a driver tries again and again until its timeout

    def parse_message_header(data: bytes) -> Any:
        header = original(data)
        if data[:2] == TLS_HANDSHAKE and header.op_code not in known:
            level = logging.DEBUG if said[0] else logging.WARNING
            said[0] = True
            log.log(level, "a client started a TLS handshake, but this server does not speak TLS: connection closed (tls=true in its URI?)")
            raise WireProtocolError("TLS handshake received, but the server does not speak TLS", fatal=True)
        return header

    proxy.parse_message_header = parse_message_header
