"""Aggregation fixes: ``$out`` and database-level ``aggregate`` (ac); a missing value left out of ``$push`` and
``$addToSet`` (cw)."""

from __future__ import annotations

import datetime
import hashlib
import uuid
from typing import Any

from ._support import BAD_VALUE, failure

# The stand-in collection of a database-level aggregate: mongod's namespace for its
# cursor, and a name no collection has, so the pipeline starts with no documents.
WHOLE_DATABASE = "$cmd.aggregate"
# First stages that need no collection (mongod's "{aggregate: 1}" sources).
_SOURCE_STAGES = frozenset({"$documents", "$currentOp", "$listLocalSessions", "$changeStream"})
_INVALID_NAMESPACE = 73
_OPERATION_NOT_SUPPORTED_IN_TRANSACTION = 263
_NO_USER = hashlib.sha256(b"").digest()  # the uid of a session without authentication
_FORWARDED = {"collation": "collation", "hint": "hint", "let": "let", "comment": "comment"}


def _stage_name(stage: object) -> str | None:
    return next(iter(stage)) if isinstance(stage, dict) and len(stage) == 1 else None


def _local_sessions(sessions: Any) -> list[dict[str, Any]]:
    """``$listLocalSessions``' documents: every session this server has seen and not ended."""
    from bson import Binary

    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return [
        {"_id": {"id": lsid.get("id"), "uid": Binary(_NO_USER)}, "lastUse": last_use or now}
        for lsid, last_use in sessions.listed()
    ]


# (ac) Database-level aggregate: {aggregate: 1} (a pipeline that starts with a
# stage producing its own documents: $documents, $currentOp, $listLocalSessions)
# fails mongoeco's wire validation ("wire aggregate requires a non-empty collection
# name"); only $changeStream had a way through (q). The request now names a
# collection no database has (mongod's namespace for such a cursor, db.$cmd.aggregate),
# so mongoeco's own aggregate runs the pipeline from its first stage;
# $listLocalSessions (which mongoeco lacks) becomes the $documents of the sessions
# the server has seen (the replica-set layer keeps them). A first stage that needs a
# collection is refused with mongod's 73 InvalidNamespace.
def patch_database_aggregate() -> None:
    from mongoeco.wire.executor import WireCommandExecutor

    from mongoshift.embedded import replica_set

    original = WireCommandExecutor._build_request_context

    def build_request_context(self: Any, body: dict[str, Any], **kwargs: Any) -> Any:
        if body.get("aggregate") == 1 and isinstance(body.get("pipeline"), list):
            pipeline = list(body["pipeline"])
            first = _stage_name(pipeline[0]) if pipeline else None
            if first not in _SOURCE_STAGES:
                raise failure(
                    f"{{aggregate: 1}} is not valid for '{first or 'an empty pipeline'}'; a collection is required.",
                    _INVALID_NAMESPACE,
                    "InvalidNamespace",
                )
            state = replica_set.state_of(self._client)
            if first == "$listLocalSessions" and state is not None:
                pipeline[0] = {"$documents": _local_sessions(state.sessions)}
            body = {**body, "aggregate": WHOLE_DATABASE, "pipeline": pipeline}
        return original(self, body, **kwargs)

    WireCommandExecutor._build_request_context = build_request_context


def _out_target(spec: object, db_name: str) -> tuple[str, str]:
    if isinstance(spec, str) and spec:
        return db_name, spec
    if isinstance(spec, dict) and set(spec) <= {"db", "coll"}:
        db, coll = spec.get("db", db_name), spec.get("coll")
        if isinstance(db, str) and db and isinstance(coll, str) and coll:
            return db, coll
    raise failure("$out needs a collection name, or a document with 'db' and 'coll'", BAD_VALUE, "BadValue")


async def _replace_collection(client: Any, db_name: str, name: str, documents: list[Any], bypass: bool) -> None:
    """Write ``documents`` to a new collection, then put it in place of ``name`` in one rename.

    The existing collection's options (validator...) and indexes are carried over, as
    mongod's $out does; on any failure the new collection is dropped and the old one is
    left as it was."""
    database = client.get_database(db_name)
    temporary = f"tmp.agg_out.{uuid.uuid4().hex}"
    listed = await (await database.list_collections(filter={"name": name})).to_list()
    options = dict(listed[0].get("options") or {}) if listed else {}
    if "viewOn" in options:
        raise failure(f"Cannot write to view {db_name}.{name} with $out", 166, "CommandNotSupportedOnView")
    await database.command({"create": temporary, **options})
    try:
        if listed:
            indexes = [index for index in await database.get_collection(name).list_indexes().to_list() if index.get("name") != "_id_"]
            if indexes:
                specs = [{key: value for key, value in index.items() if key not in ("v", "ns")} for index in indexes]
                await database.command({"createIndexes": temporary, "indexes": specs})
        if documents:
            reply = await database.command(
                {"insert": temporary, "documents": documents, "ordered": True, "bypassDocumentValidation": bypass}
            )
            errors = reply.get("writeErrors") if isinstance(reply, dict) else None
            if errors:
                first = errors[0]
                raise failure(str(first.get("errmsg", "")), int(first.get("code", 8)), str(first.get("codeName", "")) or "UnknownError")
        # mongoeco takes a rename within one database on that database (not admin, as mongod)
        await database.command({"renameCollection": f"{db_name}.{temporary}", "to": f"{db_name}.{name}", "dropTarget": True})
    except BaseException:
        await database.command({"drop": temporary})
        raise


# (ac) No $out: mongoeco refuses the stage ("Unsupported aggregation stage: $out").
# An aggregate whose last stage is $out now runs the stages before it with
# mongoeco's aggregate, then replaces the target collection (a name, or {db, coll})
# with the results as mongod does: written to a temporary collection made with the
# target's options and indexes, renamed over the target in one step, so a failed
# write (a duplicate _id, a validator) leaves the target as it was. The reply is an
# exhausted cursor with no documents. Refused inside a transaction (263), as by mongod.
def patch_out_stage() -> None:
    from bson import Int64
    from mongoeco.wire._executor_handlers import WireSpecialCommandHandlers

    original = WireSpecialCommandHandlers.dispatch

    async def dispatch(self: Any, context: Any) -> dict[str, object]:
        command = context.command_document
        pipeline = command.get("pipeline")
        if (
            context.command_name != "aggregate"
            or not isinstance(pipeline, list)
            or not pipeline
            or _stage_name(pipeline[-1]) != "$out"
            or command.get("explain")
        ):
            return await original(self, context)
        if context.raw_body.get("autocommit") is False:
            raise failure(
                "Operation not permitted in transaction :: caused by :: $out",
                _OPERATION_NOT_SUPPORTED_IN_TRANSACTION,
                "OperationNotSupportedInTransaction",
            )
        db_name, name = _out_target(pipeline[-1]["$out"], context.db_name)
        source = self._client.get_database(context.db_name).get_collection(str(command["aggregate"]))
        options = {option: command[key] for key, option in _FORWARDED.items() if key in command}
        results = await source.aggregate(pipeline[:-1], session=context.session, **options).to_list()
        await _replace_collection(self._client, db_name, name, results, command.get("bypassDocumentValidation") is True)
        cursor = {"firstBatch": [], "id": Int64(0), "ns": f"{context.db_name}.{command['aggregate']}"}
        return {"cursor": cursor, "ok": 1.0}

    WireSpecialCommandHandlers.dispatch = dispatch



# (cw) A $push or $addToSet of a field a document lacks added null: {$group: {_id: "$k", v: {$push: "$note"}}}
# gave [null, "x"] for {k: 1} and {k: 1, note: "x"}, where mongod skips a missing value and gives ["x"]
# (a migration collecting an optional field, or checking which documents hold it, saw nulls that no
# document stores). accumulators._apply_accumulators evaluates each accumulator's expression with the
# evaluator that turns a missing value into null. A $push or $addToSet whose expression is a field
# path ("$a", "$a.b") now leaves out the documents where that path is missing, as mongod's
# accumulators do; a null stored in the document is still pushed. Other expressions are untouched.
def patch_accumulated_missing_values() -> None:
    from mongoeco.core.aggregation import accumulators, runtime

    from ._support import replace_everywhere

    original = accumulators._apply_accumulators
    coerce = accumulators._coerce_accumulator_specs
    resolve_path, missing = runtime._resolve_aggregation_field_path, runtime._MISSING
    collecting = ("$push", "$addToSet")

    def apply_accumulators(bucket: Any, accumulator_specs: Any, document: Any, *args: Any, **kwargs: Any) -> None:
        specs = coerce(accumulator_specs)
        absent = [
            field
            for field, operator, expression in specs
            if operator in collecting
            and isinstance(expression, str)
            and expression.startswith("$")
            and not expression.startswith("$$")
            and resolve_path(document, expression[1:]) is missing
        ]
        if absent:
            specs = tuple(spec for spec in specs if spec[0] not in absent)
        original(bucket, specs, document, *args, **kwargs)

    apply_accumulators.__wrapped__ = original  # type: ignore[attr-defined]
    replace_everywhere(accumulators, "_apply_accumulators", apply_accumulators)
