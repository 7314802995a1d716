"""collMod (l): validators, validation level and action, and index options changed in place,
with mongod's refusals and codes."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._support import BAD_VALUE, COMMAND_NOT_FOUND, NAMESPACE_NOT_FOUND, failure

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
# * changeStreamPreAndPostImages: {enabled} is kept in the collection's options
#   (listed only when enabled), which the change history reads at each write.
# Not supported (refused with 72): views, capped/clustered/time-series options,
# dryRun, forceNonUnique. prepareUnique does not
# make the index refuse new duplicates before the conversion.
_TYPE_MISMATCH = 14
_INVALID_OPTIONS = 72
_INDEX_NOT_FOUND = 27
_UNKNOWN_FIELD = 40415
_CANNOT_CONVERT_TO_UNIQUE = 359
_NOT_SUPPORTED_IN_TRANSACTION = 263
_COLL_MOD_GENERIC = frozenset(
    {"writeConcern", "comment", "maxTimeMS", "apiVersion", "apiStrict", "apiDeprecationErrors", "$db"}
)
_COLL_MOD_UNSUPPORTED = frozenset(
    {"viewOn", "pipeline", "expireAfterSeconds", "timeseries",
     "dryRun", "cappedSize", "cappedMax", "collectionUUID"}
)
_COLL_MOD_INDEX_FIELDS = frozenset({"name", "keyPattern", "expireAfterSeconds", "hidden", "unique", "prepareUnique"})
_ENUMS = {"validationLevel": ("off", "strict", "moderate"), "validationAction": ("error", "warn")}


def _unknown_field(path: str) -> Exception:
    return failure(f"BSON field '{path}' is an unknown field.", _UNKNOWN_FIELD, f"Location{_UNKNOWN_FIELD}")


def _coll_mod_value(path: str, value: object, kind: str) -> Any:
    """An IDL field as mongod parses it: 14 TypeMismatch, or the value as Python."""
    raw: Any = getattr(value, "value", value)  # wire Int64
    number = isinstance(raw, (int, float)) and not isinstance(raw, bool)
    if kind == "bool" and (isinstance(raw, bool) or number):  # safeBool takes numbers too
        return bool(raw)
    if kind == "int" and number:
        return int(raw)
    if (kind == "string" and isinstance(raw, str)) or (kind == "object" and isinstance(raw, dict)):
        return raw
    raise failure(
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
            raise failure(
                f"collMod option '{key}' is not supported by mongoshift's embedded server",
                _INVALID_OPTIONS,
                "InvalidOptions",
            )
        if key == "validator":
            options[key] = _coll_mod_value("collMod.validator", value, "object")
        elif key == "changeStreamPreAndPostImages":
            setting = _coll_mod_value(f"collMod.{key}", value, "object")
            for field in setting:
                if field != "enabled":
                    raise _unknown_field(f"collMod.{key}.{field}")
            if "enabled" not in setting:
                raise failure(
                    f"BSON field 'collMod.{key}.enabled' is missing but a required field", 40414, "Location40414"
                )
            options[key] = {"enabled": _coll_mod_value(f"collMod.{key}.enabled", setting["enabled"], "bool")}
        elif key in _ENUMS:
            text = _coll_mod_value(f"collMod.{key}", value, "string")
            if text not in _ENUMS[key]:
                raise failure(
                    f"Enumeration value '{text}' for field 'collMod.{key}' is not a valid value.",
                    BAD_VALUE,
                    "BadValue",
                )
            options[key] = text
        elif key == "index":
            index = {}
            for field, item in _coll_mod_value("collMod.index", value, "object").items():
                if field == "forceNonUnique":
                    raise failure(
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


def patch_coll_mod() -> None:
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
            raise failure("Cannot specify both key pattern and name.", _INVALID_OPTIONS, "InvalidOptions")
        if "name" not in request and "keyPattern" not in request:
            raise failure("Must specify either index name or key pattern.", _INVALID_OPTIONS, "InvalidOptions")
        if not {"expireAfterSeconds", "hidden", "unique", "prepareUnique"} & set(request):
            raise failure(
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
        raise failure(f"cannot find index {shown} for ns {namespace}", _INDEX_NOT_FOUND, "IndexNotFound")

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
                raise failure(message, _INVALID_OPTIONS, "InvalidOptions")
            if not 0 <= seconds <= 2**31 - 1:
                raise failure(
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
                raise failure("Cannot make index non-unique", BAD_VALUE, "BadValue")
            if not record.unique:
                if not prepared:
                    raise failure(
                        "Cannot make index unique with 'prepareUnique=false'. Run collMod to set it first.",
                        _INVALID_OPTIONS,
                        "InvalidOptions",
                    )
                changes["unique"] = True
        if "hidden" in request:
            if is_id:
                raise failure("can't hide _id index", BAD_VALUE, "BadValue")
            if record.hidden != request["hidden"]:
                changes["hidden"] = request["hidden"]
        if "prepareUnique" in request and prepared != request["prepareUnique"] and not record.unique:
            if modifications > 1:
                raise failure(
                    "prepareUnique cannot be combined with any other modification.", _INVALID_OPTIONS, "InvalidOptions"
                )
            changes["prepare_unique"] = request["prepareUnique"]
        if memory.special_index_directions(record.key) and (changes.get("unique") or changes.get("prepare_unique")):
            raise failure("special indexes do not support unique", _INVALID_OPTIONS, "InvalidOptions")
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
            raise failure("no such command: 'collMod'", COMMAND_NOT_FOUND, "CommandNotFound")
        if session is not None and session.transaction_active:
            raise failure(
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
                raise failure("ns does not exist", NAMESPACE_NOT_FOUND, "NamespaceNotFound")
            current = option_store.get(db_name, {}).get(name, {})
            if "viewOn" in current and (options or request is not None):
                field = "index" if request is not None else next(iter(options))
                raise failure(f"option not supported on a view: {field}", _INVALID_OPTIONS, "InvalidOptions")
            new_options = {**current, **options}
            if "validator" in options:
                compile_collection_validation_semantics(new_options, dialect=admin._mongodb_dialect)
                if not options["validator"]:
                    new_options.pop("validator")  # mongod does not list an empty validator
            if options.get("changeStreamPreAndPostImages") == {"enabled": False}:
                new_options.pop("changeStreamPreAndPostImages")  # mongod lists the option only when enabled
            records = indexes.get(db_name, {}).get(name, [])
            position, record = -1, None
            changes: dict[str, Any] = {}
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

    def wire_check(indexes: object) -> list[Any]:
        return original_wire_check(without_prepare_unique(indexes))

    original_supports = WireSurface.supports_command

    def supports_command(self: Any, command_name: str) -> bool:
        return command_name == "collMod" or original_supports(self, command_name)

    WireSurface.supports_command = supports_command
    AsyncDatabaseCommandService._DELEGATED_COMMAND_HANDLERS["collMod"] = AsyncDatabaseCommandService.Route(
        "_mongoshift_coll_mod"
    )
    DatabaseAdminRoutingService._mongoshift_coll_mod = coll_mod  # type: ignore[attr-defined]  # a new handler, found by the route's name
    memory.MemoryEngine.list_indexes = list_indexes
    write_commands.DatabaseAdminWriteCommandService.command_create_indexes = command_create_indexes
    wire_validation.normalize_index_models_from_command = wire_check
