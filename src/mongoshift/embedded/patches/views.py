"""Views listed as mongod lists them: ``type: "view"`` and read-only (bi); read through their pipeline and
refused as the target of a write (cv)."""

from __future__ import annotations

import dataclasses
from typing import Any


# (bi) listCollections reported a view as {type: "collection", info: {readOnly: false}}:
# mongoeco's AsyncDatabaseAdminService._list_collection_snapshots builds every entry with
# the snapshot's defaults and only copies the options (where viewOn and pipeline are). A
# client that tells views from collections by ``type``, as drivers and mongoshift's own
# check of its record collections do, took a view for a collection. The fix marks each
# entry whose options name ``viewOn`` as mongod does: type "view", info.readOnly true.
def patch_view_listing() -> None:
    from mongoeco.api._async.database_admin import AsyncDatabaseAdminService

    original = AsyncDatabaseAdminService._list_collection_snapshots

    async def list_collection_snapshots(self: Any, *args: Any, **kwargs: Any) -> Any:
        snapshots = await original(self, *args, **kwargs)
        return [
            dataclasses.replace(snapshot, type="view", read_only=True) if "viewOn" in (snapshot.options or {}) else snapshot
            for snapshot in snapshots
        ]

    AsyncDatabaseAdminService._list_collection_snapshots = list_collection_snapshots


#: mongod's codes for a command a view cannot serve and for a chain of views too deep.
COMMAND_NOT_SUPPORTED_ON_VIEW = 166
VIEW_DEPTH_LIMIT_EXCEEDED = 165
#: mongod's limit on a chain of views (a view on a view on ...).
MAX_VIEW_DEPTH = 20
#: The write commands whose statements mongod refuses on a view, one write error each: the field holding them.
_STATEMENTS = {"insert": "documents", "update": "updates", "delete": "deletes"}
#: The commands mongod refuses whole on a view: they write to it or to its indexes, or list its indexes.
_REFUSED = frozenset({"findAndModify", "findandmodify", "createIndexes", "dropIndexes", "deleteIndexes", "listIndexes"})
#: The find fields that become stages of the view's aggregate; the rest (batchSize, singleBatch,
#: hint, collation, let, comment, maxTimeMS, readConcern, the session's...) are carried as they are.
_FIND_STAGES = ("filter", "sort", "skip", "limit", "projection")
_FIND_CURSOR = ("batchSize", "singleBatch")
#: The find options an aggregate has no place for: mongod refuses them on a view (168 InvalidPipelineOperator).
_FIND_ONLY = ("min", "max", "returnKey", "showRecordId", "tailable", "awaitData", "noCursorTimeout", "allowPartialResults", "oplogReplay")
INVALID_PIPELINE_OPERATOR = 168
#: The stages that read another collection, or hold pipelines that may.
_NESTING = frozenset({"$lookup", "$unionWith", "$facet"})


# (cv) A view was an ordinary collection: mongoeco keeps a view's viewOn and pipeline as options
# and nothing else reads them, so find, aggregate, count and distinct on a view read the view's
# own (empty) documents, and insert, update, delete, findAndModify and createIndexes wrote to it.
# mongod resolves a view on every read: the view's pipeline (a view on a view: the innermost
# view's pipeline first) runs on the source collection, followed by the command's own work, and
# every write to a view is refused (166 CommandNotSupportedOnView: a write error for each statement
# of an insert, update or delete, the command's error for the others). A read through a view is now
# an aggregate on its source, as mongod rewrites it: a find's filter, sort, skip, limit and
# projection become $match, $sort, $skip, $limit and $project after the view's stages (a find option
# an aggregate has no place for, min, max, returnKey, tailable..., answers 168 as on mongod); an
# aggregate's pipeline follows them; a count is $match, $skip, $limit and $count; a distinct is
# $match, an $unwind of each prefix of its key's path, an $exists $match and an $addToSet. The aggregate is run as
# mongoeco runs any command (the request's session, transaction and read concern), and a
# cursor's namespace is the view's, so getMore and killCursors name the view as on mongod. The
# A view that a $lookup or a $unionWith reads (in any pipeline, a view's own and a $facet's included) is
# replaced by its source and its stages, as mongod resolves it (inner_views). The
# refusals are answered before anything is written; drop is untouched (it drops only the
# view). A chain deeper than 20 views (a cycle) answers 165 ViewDepthLimitExceeded.
def patch_view_reads_and_writes() -> None:
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.wire._executor_passthrough import _execute_database_command
    from mongoeco.wire.executor import WireCommandExecutor

    original = WireCommandExecutor.execute_prepared

    async def execute_prepared(self: Any, context: Any) -> dict[str, Any]:
        name = context.command_document.get(context.command_name)
        engine = self._client._engine
        if not isinstance(name, str) or type(engine) is not MemoryEngine:
            return await original(self, context)
        views: dict[str, Any] = engine._collection_options.get(context.db_name) or {}
        options = views.get(name)
        if not options or "viewOn" not in options:
            if context.command_name == "aggregate" and _nests_a_view(views, context.command_document.get("pipeline")):
                resolved = {**context.command_document, "pipeline": inner_views(views, context.command_document["pipeline"])}
                return await original(self, dataclasses.replace(context, command_document=resolved))
            return await original(self, context)
        if context.command_name in _STATEMENTS:
            return _refused_statements(context.command_document, _STATEMENTS[context.command_name], f"{context.db_name}.{name}")
        if context.command_name in _REFUSED:
            raise _refusal(context.db_name, name)
        if context.command_name not in ("find", "aggregate", "count", "distinct"):
            return await original(self, context)
        if context.command_name == "distinct" and not (isinstance(context.command_document.get("key"), str) and context.command_document["key"]):
            return await original(self, context)  # mongoeco's refusal of the command
        source, pipeline = resolve(views, name)
        body = context.command_document
        command = _aggregate(context.command_name, body, source, pipeline)
        if _nests_a_view(views, command["pipeline"]):
            command["pipeline"] = inner_views(views, command["pipeline"])
        database = self._client.get_database(context.db_name)
        # As mongoeco runs a find or an aggregate: the request's session, transaction and execution context.
        result = await _execute_database_command(database, _as_aggregate(context, command))  # type: ignore[no-untyped-call]
        batch = list(result["cursor"]["firstBatch"])
        if context.command_name == "count":
            return {"n": int(batch[0]["n"]) if batch else 0, "ok": 1.0}
        if context.command_name == "distinct":
            return {"values": list(batch[0]["values"]) if batch else [], "ok": 1.0}
        result["cursor"]["ns"] = f"{context.db_name}.{name}"
        # Cut into batches as any find or aggregate is ((bo)), with the command's own batchSize and singleBatch.
        materialized: dict[str, Any] = self._cursor_store.materialize_command_result(
            body, result, lsid=context.raw_body.get("lsid"), connection=context.connection
        )
        return materialized

    def _as_aggregate(context: Any, command: dict[str, Any]) -> Any:
        return dataclasses.replace(context, command_name="aggregate", command_document=command)

    execute_prepared.__wrapped__ = original  # type: ignore[attr-defined]
    WireCommandExecutor.execute_prepared = execute_prepared


def resolve(views: dict[str, Any], name: str) -> tuple[str, list[Any]]:
    """The collection a view reads at the end of its chain, and the stages run on it (innermost view's first)."""
    pipeline: list[Any] = []
    for _depth in range(MAX_VIEW_DEPTH + 1):
        options = views.get(name) or {}
        if "viewOn" not in options:
            return name, pipeline
        pipeline = list(options.get("pipeline") or []) + pipeline
        name = str(options["viewOn"])
    raise _too_deep()


def _too_deep() -> Exception:
    from ._support import failure

    return failure(
        f"View depth too deep or view cycle detected. Maximum depth is {MAX_VIEW_DEPTH}", VIEW_DEPTH_LIMIT_EXCEEDED, "ViewDepthLimitExceeded"
    )


def _is_view(views: dict[str, Any], name: object) -> bool:
    return isinstance(name, str) and "viewOn" in (views.get(name) or {})


def _nests_a_view(views: dict[str, Any], stages: object) -> bool:
    """Whether ``stages`` may read another collection ($lookup, $unionWith, $facet) in a database that has a view."""
    if not isinstance(stages, list) or not any(isinstance(o, dict) and "viewOn" in o for o in views.values()):
        return False
    return any(isinstance(stage, dict) and not _NESTING.isdisjoint(stage) for stage in stages)


def inner_views(views: dict[str, Any], stages: list[Any], depth: int = 0) -> list[Any]:
    """``stages`` with each view that a $lookup or $unionWith reads (in a $facet too, at any depth) replaced by
    its source and its pipeline, as mongod resolves it. A $lookup by localField/foreignField from a view whose
    stages are not all $match is left as it is: mongoeco matches the fields before a $lookup's pipeline, and
    only $match stages may run after that match and give mongod's answer."""
    if depth > MAX_VIEW_DEPTH:
        raise _too_deep()
    out: list[Any] = []
    for stage in stages:
        if not isinstance(stage, dict) or len(stage) != 1:
            out.append(stage)
            continue
        ((operator, spec),) = stage.items()
        if operator == "$lookup" and isinstance(spec, dict):
            spec = dict(spec)
            if isinstance(spec.get("pipeline"), list):
                spec["pipeline"] = inner_views(views, spec["pipeline"], depth + 1)
            if _is_view(views, spec.get("from")):
                source, viewed = resolve(views, spec["from"])
                viewed = inner_views(views, viewed, depth + 1)
                by_fields = "localField" in spec or "foreignField" in spec
                if not by_fields or all(isinstance(s, dict) and list(s) == ["$match"] for s in viewed):
                    spec["from"], spec["pipeline"] = source, viewed + list(spec.get("pipeline") or [])
            out.append({operator: spec})
        elif operator == "$unionWith" and isinstance(spec, (str, dict)):
            spec = {"coll": spec} if isinstance(spec, str) else dict(spec)
            if isinstance(spec.get("pipeline"), list):
                spec["pipeline"] = inner_views(views, spec["pipeline"], depth + 1)
            if _is_view(views, spec.get("coll")):
                source, viewed = resolve(views, spec["coll"])
                spec["coll"], spec["pipeline"] = source, inner_views(views, viewed, depth + 1) + list(spec.get("pipeline") or [])
            out.append({operator: spec})
        elif operator == "$facet" and isinstance(spec, dict):
            out.append({operator: {k: inner_views(views, v, depth + 1) if isinstance(v, list) else v for k, v in spec.items()}})
        else:
            out.append(stage)
    return out


def _refusal(db_name: str, name: str) -> Exception:
    from ._support import failure

    return failure(f"Namespace {db_name}.{name} is a view, not a collection", COMMAND_NOT_SUPPORTED_ON_VIEW, "CommandNotSupportedOnView")


def _refused_statements(body: dict[str, Any], field: str, namespace: str) -> dict[str, Any]:
    """mongod's reply to an insert, update or delete on a view: each statement it tried is a 166 write error
    (ordered: the first, which stops the rest; unordered: every one) and nothing is written."""
    statements = body.get(field)
    count = len(statements) if isinstance(statements, list) else 1
    tried = count if body.get("ordered") is False else min(count, 1)
    errors = [{"index": index, "code": COMMAND_NOT_SUPPORTED_ON_VIEW, "errmsg": f"Namespace {namespace} is a view, not a collection"} for index in range(tried)]
    reply: dict[str, Any] = {"n": 0}
    if field == "updates":
        reply["nModified"] = 0
    return {**reply, "writeErrors": errors, "ok": 1.0}


def _aggregate(command_name: str, body: dict[str, Any], source: str, pipeline: list[Any]) -> dict[str, Any]:
    """The aggregate on ``source`` that answers ``body`` (a find, aggregate, count or distinct on the view)."""
    stages = list(pipeline)
    carried: dict[str, Any] = {}
    if command_name == "aggregate":
        stages += list(body.get("pipeline") or [])
        carried = {k: v for k, v in body.items() if k not in ("aggregate", "pipeline", "cursor")}
    elif command_name == "find":
        for option in _FIND_ONLY:
            if body.get(option):
                from ._support import failure

                raise failure(f"Option {option} not supported in aggregation.", INVALID_PIPELINE_OPERATOR, "InvalidPipelineOperator")
        if body.get("filter"):
            stages.append({"$match": body["filter"]})
        if body.get("sort"):
            stages.append({"$sort": body["sort"]})
        if body.get("skip"):
            stages.append({"$skip": body["skip"]})
        if body.get("limit"):
            stages.append({"$limit": abs(body["limit"])})
        if body.get("projection"):
            stages.append({"$project": body["projection"]})
        carried = {k: v for k, v in body.items() if k != "find" and k not in _FIND_STAGES + _FIND_CURSOR + _FIND_ONLY}
    elif command_name == "count":
        if body.get("query"):
            stages.append({"$match": body["query"]})
        if body.get("skip"):
            stages.append({"$skip": body["skip"]})
        if body.get("limit"):
            stages.append({"$limit": abs(body["limit"])})
        stages.append({"$count": "n"})
        carried = {k: v for k, v in body.items() if k not in ("count", "query", "skip", "limit")}
    else:  # distinct
        key = str(body.get("key") or "")
        if body.get("query"):
            stages.append({"$match": body["query"]})
        parts = key.split(".")
        for end in range(1, len(parts) + 1):  # an array anywhere along the path gives its elements, as distinct does
            stages.append({"$unwind": {"path": "$" + ".".join(parts[:end]), "preserveNullAndEmptyArrays": True}})
        stages.append({"$match": {key: {"$exists": True}}})  # a missing value (an empty array unwound) is no value
        stages.append({"$group": {"_id": None, "values": {"$addToSet": "$" + key}}})
        carried = {k: v for k, v in body.items() if k not in ("distinct", "key", "query")}
    return {"aggregate": source, "pipeline": stages, "cursor": {}, **carried}
