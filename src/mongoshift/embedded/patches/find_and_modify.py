"""Cheap ``findAndModify`` by ``_id`` for the memory engine: fix (ao).

mongoeco 4.11 runs every ``findAndModify`` through its whole generic update path (normalize and
compile the filter, the update and the projection, bind an operation context, take the lock,
deep-copy the document for the plan and for the before and after images, re-encode the whole
document, re-derive every index key twice, open a rollback and publication scope): about 40 ms each
in the demo under load, where the background engine's lease claims and checkpoints made 23 % of its
server's time (docs/performance.md).

:func:`patch_find_and_modify` answers the commands whose meaning it can prove — an ObjectId, string or
int32 ``_id``; equality guards on scalars (or ``$exists: false``) at top-level fields or at paths through
sub-documents (the engine's ``lease.token``); an operator update of ``$set``/``$unset``/``$inc``/
``$currentDate`` (a date: the statement's clock, as mongoeco's operator reads it) of such fields and
paths (:func:`command`, :func:`apply`: each operator in turn, its paths by name, new fields and
sub-documents appended where mongoeco's update plan appends them) — with (ah)'s write steps
(:class:`.Batch`, one statement), in or out of a transaction, ``new`` true or false, with mongoeco's own
projection of ``fields``. Anything else (an upsert, a sort, a collation, ``arrayFilters``, a hint,
``maxTimeMS``, a pipeline or a replacement, a remove, another operator, a numeric or positional path, a
timestamp ``$currentDate``, two paths one inside the other) goes to mongoeco's path before anything is
written, as does a statement the write steps cannot prove (an array, a scalar or a DBRef on a path, an
array under a guard, a value the operators refuse, a duplicate key...). A failure in the write steps
themselves (a write conflict with another transaction) rolls the one statement back and hands it to
mongoeco's path, which meets the same failure.

So the background engine's checkpoints and releases take it; its lease claims do not: they select the
partition with a filter and a ``sort`` (docs/performance.md, "Fix (ao) and the demo").
"""

from __future__ import annotations

import math
from typing import Any

from .updates import _M, _MISSING, Batch, _bind, _storable, _stored, _Undecided, guard_holds, guard_of, incremented, internal_value

#: findAndModify options the fast path takes only when unset (mongoeco's path answers any of them).
_UNSET_OPTIONS = ("sort", "collation", "array_filters", "hint", "max_time_ms")
#: The update operators the fast path applies, with paths through sub-documents.
_OPERATORS = frozenset({"$set", "$unset", "$inc", "$currentDate"})

_SEGMENTS: dict[str, tuple[str, ...] | None] = {}


def _path(name: object) -> tuple[str, ...] | None:
    """A field path as its segments, each a name without a meaning of its own (not empty, no
    operator, not numeric: an array index or a positional is mongoeco's business), or None; the
    answers for the names seen last are kept (the engine repeats its few names)."""
    if type(name) is not str:
        return None
    if name in _SEGMENTS:
        return _SEGMENTS[name]
    if len(_SEGMENTS) > 4096:
        _SEGMENTS.clear()
    segments = tuple(name.split("."))
    plain = all(s != "" and s[0] != "$" and not s.isdigit() for s in segments) and segments[0] != "_id"
    known = _SEGMENTS[name] = segments if plain else None
    return known


class Command:
    """One findAndModify the fast path takes: the ``_id``, the other guards (by path), and the
    operators in the update's order, each with its paths in mongoeco's order (sorted by name)."""

    __slots__ = ("document_id", "guards", "operators")

    def __init__(self, document_id: Any, guards: list[tuple[tuple[str, ...], Any]],
                 operators: list[tuple[str, list[tuple[tuple[str, ...], Any]]]]) -> None:
        self.document_id = document_id
        self.guards = guards
        self.operators = operators


def command(query: Any, change: Any) -> Command | None:
    """The command as the fast path reads it, or None when it is not one it takes: an ObjectId,
    string or int32 ``_id``; equality guards on scalars (or ``$exists: false``) at paths through
    sub-documents; ``$set``/``$unset``/``$inc``/``$currentDate`` (a date) of such paths, none of
    them a prefix of another (mongoeco's conflict, code 40)."""
    m = _bind()
    if type(query) is not dict or type(change) is not dict or not change:
        return None
    document_id = query.get("_id", _MISSING)
    kind = type(document_id)
    if not (kind is str or kind is int or kind in m["object_ids"]):
        return None
    guards: list[tuple[tuple[str, ...], Any]] = []
    for name, value in query.items():
        if name == "_id":
            continue
        path = _path(name)
        if path is None:
            return None
        guard = guard_of(value, m)
        if guard is None:
            return None
        guards.append((path, guard))
    operators: list[tuple[str, list[tuple[tuple[str, ...], Any]]]] = []
    seen: list[str] = []
    for operator, fields in change.items():
        if operator not in _OPERATORS or type(fields) is not dict or not fields:
            return None
        items: list[tuple[tuple[str, ...], Any]] = []
        for name, value in sorted(fields.items(), key=lambda item: item[0]):  # mongoeco's order: by name (no numeric names here)
            path = _path(name)
            if path is None:
                return None
            for other in seen:  # the same path twice, or one inside another: mongoeco's error
                if name == other or name.startswith(other + ".") or other.startswith(name + "."):
                    return None
            seen.append(name)
            kind = type(value)
            if operator == "$inc":
                if not (kind is int or kind is m["BsonInt64"] or (kind is float and math.isfinite(value))):
                    return None
            elif operator == "$currentDate":
                if not (value is True or (kind is dict and len(value) == 1 and value.get("$type") == "date")):
                    return None  # a timestamp, or a value mongoeco refuses
            elif operator == "$set" and (kind is dict or kind is list or isinstance(value, (dict, list))) and not _storable(value):
                return None
            items.append((path, value))
        operators.append((operator, items))
    return Command(document_id, guards, operators)


def _parent(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The sub-document holding ``path``'s last field (None: a field on the way is missing);
    :class:`_Undecided` for anything but a document on the way (an array: element matching, paths
    through array elements; a scalar or a DBRef: mongoeco's rules)."""
    node = document
    for name in path[:-1]:
        child = node.get(name, _MISSING)
        if type(child) is dict:
            node = child
        elif child is _MISSING:
            return None
        else:
            raise _Undecided
    return node


def holds(document: dict[str, Any], guards: list[tuple[tuple[str, ...], Any]]) -> bool:
    """Whether ``document`` equals every guard, as :func:`.updates.guard_holds` compares them, at
    paths through sub-documents."""
    for path, wanted in guards:
        parent = _parent(document, path) if len(path) > 1 else document
        if not guard_holds({} if parent is None else parent, [(path[-1], wanted)]):
            return False
    return True


def apply(document: dict[str, Any], plan: Command, now: Any) -> tuple[dict[str, Any], set[str]]:
    """The document after the operators, and the top-level fields that changed (empty: a no-op).

    As mongoeco's update plan: each operator in turn, its paths by name; a field changes when its
    new value is not the same BSON value (``paths._same_value_for_update``); a new field, and a
    missing sub-document on its path, is appended where it is created; ``$inc`` adds with
    mongoeco's ``bson_add``; ``$currentDate`` sets the statement's clock (``now``). ``document`` and
    its sub-documents are never changed: the ones on a changed path are copied. A non-numeric
    ``$inc`` target, an overflow, a scalar or an array on a path: :class:`_Undecided`."""
    m = _M
    same, codec = m["paths"]._same_value_for_update, m["codec"]
    result = dict(document)
    private: set[int] = set()  # the sub-documents already copied into result
    changed: set[str] = set()
    for operator, items in plan.operators:
        for path, raw in items:
            parent = _parent(result, path) if len(path) > 1 else result
            leaf = path[-1]
            current = _MISSING if parent is None else parent.get(leaf, _MISSING)
            if operator == "$unset":
                if current is _MISSING:
                    continue
                value = _MISSING
            elif operator == "$currentDate":
                value = now
            else:  # the BSON boundary the update document crosses on mongoeco's path
                value = internal_value(raw, codec)
                if operator == "$inc" and current is not _MISSING:
                    value = incremented(current, value, m)
            if current is not _MISSING and value is not _MISSING and same(current, value):
                continue
            node = result
            for name in path[:-1]:  # copy (or create) the sub-documents on the path
                child = node.get(name, _MISSING)
                if child is _MISSING:
                    child = node[name] = {}
                    private.add(id(child))
                elif id(child) not in private:
                    child = node[name] = dict(child)
                    private.add(id(child))
                node = child
            if value is _MISSING:
                del node[leaf]
            else:
                node[leaf] = value
            changed.add(path[0])
    return result, changed


def _taken(update_spec: Any, options: dict[str, Any]) -> bool:
    """Whether the command's options leave only what the fast path does (a plain operator update;
    ``let`` the command's evaluated variables, which fix (ab) passes: a filter the fast path takes
    reads none of them, and their clock is the statement's)."""
    if options.get("upsert") or type(update_spec) is not dict:
        return False
    let = options.get("let")
    if let is not None and getattr(let, "now", None) is None:
        return False
    return all(options.get(name) is None for name in _UNSET_OPTIONS)


def _write(batch: Batch, plan: Command, now: Any) -> tuple[Any, Any, Any]:
    """The statement's UpdateResult and its before and after documents (None: no match), as
    :meth:`.Batch.apply` writes it; :class:`_Undecided` before anything is written when mongoeco's
    path must answer."""
    m = _M
    result = m["UpdateResult"]
    engine, db_name, coll_name = batch.engine, batch.db_name, batch.coll_name
    coll = batch.storage.get(db_name, {}).get(coll_name)
    storage_key = engine._storage_key(plan.document_id)
    data = None if coll is None else coll.get(storage_key)
    if data is None or coll is None:
        if coll and type(plan.document_id) is int:
            raise _Undecided  # 1.0 or Int64(1) may be stored under another key: mongoeco's path looks
        return result(matched_count=0, modified_count=0), None, None
    document = engine._borrow_storage_document(data)
    if not holds(document, plan.guards):
        return result(matched_count=0, modified_count=0), None, None
    new_document, changed = apply(document, plan, now)
    if not changed:
        return result(matched_count=1, modified_count=0), document, document
    try:
        encoded = _stored(engine, data, new_document, changed)
        if batch.unique:
            engine._ensure_unique_indexes(
                db_name, coll_name, new_document, exclude_storage_key=storage_key, indexes_view=batch.indexes_view,
                storage_view=batch.storage, index_data_view=batch.index_data, check_id_storage=True, scan_payload_id=False,
            )
    except Exception as error:  # an unencodable value, a duplicate key: mongoeco's path reports it
        raise _Undecided from error
    batch._write(coll, storage_key, document, new_document, encoded, changed)
    return result(matched_count=1, modified_count=1), document, new_document


# (ao) _collection_modify.find_one_and_update_outcome: what DatabaseAdminWriteCommandService's
# findAndModify with an operator update calls (by its module name) for the statement's outcome; the
# command around it (parsing, the reply's lastErrorObject, the codec options) is mongoeco's. A
# public-API call (not server_command) keeps the original.
def patch_find_and_modify() -> None:
    from mongoeco.api._async import _collection_modify
    from mongoeco.core.expression_context import ensure_expression_context
    from mongoeco.engines.results import FindAndModifyOutcome, MutationOutcome
    from mongoeco.types import ReturnDocument

    m = _bind()
    original: Any = _collection_modify.find_one_and_update_outcome  # untyped in mongoeco
    projection_executor: Any = _collection_modify._ProjectionExecutor  # likewise

    async def fast(collection: Any, filter_spec: Any, update_spec: Any, options: dict[str, Any]) -> Any:
        """The command's FindAndModifyOutcome; :class:`_Undecided` with nothing written when
        mongoeco's path must answer it."""
        session = options.get("session")
        try:  # the original's own steps before its write: their errors are the original's to raise
            query = collection._normalize_filter(filter_spec)
            # the command's query arrives as mongoeco's internal-document dict subclass: the same fields
            plan = command(dict(query) if isinstance(query, dict) else query, update_spec)
            if plan is None:
                raise _Undecided
            project = projection_executor(
                collection._normalize_projection(options.get("projection")), selector_filter=query, dialect=collection._mongodb_dialect,
            )
            after = collection._normalize_return_document(options.get("return_document")) is ReturnDocument.AFTER
            collection._ensure_session_active(session)
        except Exception as error:
            raise _Undecided from error
        batch = Batch()
        variables = options.get("let") or collection._new_execution_context()
        await batch.open(collection, session, variables, options.get("comment"), transactions=True)
        try:
            result, before, new = _write(batch, plan, ensure_expression_context(variables).now)  # $currentDate's clock, as mongoeco's operator reads it
        except _Undecided:
            batch.close()
            raise
        except Exception as error:
            batch.close(error)  # rolled back: mongoeco's path meets the same failure
            raise _Undecided from error
        batch.close()
        selected = new if after else before
        value = None if selected is None else project(selected)
        return FindAndModifyOutcome(captured=MutationOutcome(result=result, before_document=before, after_document=new), value=value)

    async def find_one_and_update_outcome(collection: Any, filter_spec: Any, update_spec: Any, **options: Any) -> Any:
        if options.get("server_command") and type(collection._engine) is m["MemoryEngine"] and _taken(update_spec, options):
            try:
                return await fast(collection, filter_spec, update_spec, options)
            except _Undecided:
                pass
        return await original(collection, filter_spec, update_spec, **options)

    find_one_and_update_outcome.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    _collection_modify.find_one_and_update_outcome = find_one_and_update_outcome
