"""Cheap ``findAndModify`` by ``_id`` for the memory engine: fix (ao).

mongoeco 4.11 runs every ``findAndModify`` through its whole generic update path (normalize and
compile the filter, the update and the projection, bind an operation context, take the lock,
deep-copy the document for the plan and for the before and after images, re-encode the whole
document, re-derive every index key twice, open a rollback and publication scope): about 40 ms each
in the demo under load, where the background engine's lease claims and checkpoints made 23 % of its
server's time (docs/performance.md).

:func:`patch_find_and_modify` answers the commands whose meaning fix (ah) already proves — a filter
:func:`.updates.statement` takes (``_id`` equality and scalar guards), an operator update of top-level
``$set``/``$unset``/``$inc`` — with (ah)'s write steps (:class:`.Batch`, one statement), in or out of
a transaction, ``new`` true or false, with mongoeco's own projection of ``fields``. Anything else (an
upsert, a sort, a collation, ``arrayFilters``, a hint, ``maxTimeMS``, a pipeline or a
replacement, a remove, a statement (ah) leaves to mongoeco) goes to mongoeco's path before anything
is written, as does a statement the write steps cannot prove (an array under a guard, a value the
operators refuse, a duplicate key...). A failure in the write steps themselves (a write conflict
with another transaction) rolls the one statement back and hands it to mongoeco's path, which meets
the same failure.

The background engine's own claims and checkpoints are not taken yet: they sort, guard a dotted
``lease.token`` and use ``$currentDate`` and dotted ``$inc`` (docs/performance.md, "Fix (ao) and the demo").
"""

from __future__ import annotations

from typing import Any

from .updates import _M, Batch, _bind, _stored, _Undecided, guard_holds, statement, updated

#: findAndModify options the fast path takes only when unset (mongoeco's path answers any of them).
_UNSET_OPTIONS = ("sort", "collation", "array_filters", "hint", "max_time_ms")


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


def _write(batch: Batch, plan: Any) -> tuple[Any, Any, Any]:
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
    if not guard_holds(document, plan.guards):
        return result(matched_count=0, modified_count=0), None, None
    new_document, changed = updated(document, plan.operators)
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
            plan = statement(dict(query) if isinstance(query, dict) else query, update_spec, False, False, {})
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
            result, before, new = _write(batch, plan)
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
