"""Cheap pipeline updates for the memory engine: fix (an).

A pipeline-form ``update_many`` (``update_many(filter, [{$set: ...}, {$unset: ...}])``: B0, and the
``pipeline=`` migrations' ranges, which run inside a transaction) goes through mongoeco 4.11's generic
per-document update: after reading the matched documents, each one is updated by its own call of the
engine's update path, which compiles the update again, takes the collection lock, deep-copies the
document three times, evaluates the pipeline with a deep copy of the document per stage and of each
value it sets, re-encodes the whole document, re-derives every index key twice, and opens a rollback
and publication scope. Profiled at 5,000 documents, pipeline evaluation was about 30 % of a
document's update, most of it those copies (docs/performance.md).

:func:`patch_pipeline_updates` answers the pipelines whose stages it evaluates exactly as mongoeco
does — ``$set``/``$addFields`` of top-level fields (any expression: each is evaluated by mongoeco's
own expression evaluator, on the stage's input document), ``$unset`` of top-level fields — stage by
stage on shallow copies, and writes the documents with the write steps of fix (ah) (:class:`.Batch`):
one lock, one TTL purge, one rollback and publication scope and one change dispatch for the command,
only the changed fields encoded, only the indexes over them updated. The matched documents are read
exactly as mongoeco reads them (its cursor over the filter: the ``_id`` range walk of (af)) and
matched again under the lock, as mongoeco's per-document update does. (bt) When the walk answers the
read, the update takes its (storage key, stored value) pairs alone: no matched document is copied to
its public form, or looked up again by its ``_id``. It works inside a transaction
(the writes go to the transaction's views, as mongoeco's do).

(bf) An operator update (``update_many(filter, {$set: ..., $unset: ..., $inc: ...})``, the statements
of fix (ah): :func:`.updates.operators_of`) takes the same read, decision and batch, each document's
new value computed by (ah)'s :func:`.updates.updated`.

It decides everything before writing anything: every matched document's new value and stored form
are computed first; an expression that fails, a value it cannot store as it is, a collection with
options (a validator...) or with a unique secondary index the update can change (:func:`written_fields`),
profiling, a collation, ``arrayFilters``, an upsert, a stage, an operator or a field name it does not
take: mongoeco's own ``update_many`` answers the whole statement from the start, so its errors, and
what it wrote before them, are mongoeco's. A failure in
the engine's write steps (a write conflict with another transaction) rolls the batch back whole and
hands the statement to mongoeco's path, which meets the same failure after the same writes.
"""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from .expressions import Compiler
from .scans import READ_ITEMS, ReadItems
from .updates import _MISSING, STATEMENT_CHECKS, Batch, _bind, _index_touched, _plain_name, _storable, _stored, _Undecided, operators_of, updated

#: The update pipeline stages this fast path evaluates (``$set`` is ``$addFields``'s alias).
_ADD_FIELDS = frozenset({"$set", "$addFields"})


def _field(name: object) -> bool:
    """A top-level field a stage may set or remove here (``_id``'s rules are mongoeco's)."""
    return _plain_name(name) and name != "_id"


def stages(pipeline: Any) -> list[tuple[str, Any]] | None:
    """The pipeline as (operator, top-level field names, or (name, expression, None) of a ``$set``:
    :func:`compiled` fills in the callable), or None when it is not one this fast path evaluates
    (another stage, a path, ``_id``, a malformed stage: mongoeco's path answers, with its errors)."""
    if not isinstance(pipeline, list) or not pipeline:  # mongoeco's prepared pipeline is a list (and its stages dicts)
        return None
    steps: list[tuple[str, Any]] = []
    for stage in pipeline:
        if not isinstance(stage, dict) or len(stage) != 1:
            return None
        ((operator, spec),) = stage.items()
        if operator in _ADD_FIELDS:
            if not isinstance(spec, dict) or not spec or not all(_field(name) for name in spec):
                return None
            steps.append(("$set", [(name, expression, None) for name, expression in spec.items()]))
        elif operator == "$unset":
            names = [spec] if type(spec) is str else spec
            if not isinstance(names, list) or not names or not all(_field(name) for name in names):
                return None
            steps.append(("$unset", tuple(names)))
        else:
            return None
    return steps


def compiled(steps: list[tuple[str, Any]], compiler: Compiler) -> list[tuple[str, Any]]:
    """``steps`` with each ``$set`` expression's compiled callable, or None where mongoeco's evaluator
    answers (an expression outside :mod:`.expressions`' subset)."""
    return [
        (operator, [(name, expression, compiler.top(expression)) for name, expression, _ in spec] if operator == "$set" else spec)
        for operator, spec in steps
    ]


def evaluate(document: dict[str, Any], steps: list[tuple[str, Any]], variables: Any, dialect: Any, evaluator: Any, missing: Any, remove: Any) -> dict[str, Any]:
    """The document after the pipeline, as mongoeco's stages give it, without their copies.

    mongoeco's ``$addFields`` deep-copies its input and each value it sets, evaluates every field's
    expression on the stage's input document, then sets them in order (``$$REMOVE`` removes the field,
    a missing value sets nothing); ``$unset`` deep-copies and removes. Here each stage makes a shallow
    copy: the stages only add, replace or remove top-level fields, so nested values are never
    changed in place; a new document or array a stage sets is still copied, since it may be a piece of
    the pipeline or of the input, which the stored document must not share. An expression compiled by
    :mod:`.expressions` is called on a plain dict; where it raises (an error, a branch it leaves to
    mongoeco), or where there is no callable, mongoeco's evaluator answers for the whole expression
    (expressions have no side effects: evaluating one again is safe)."""
    current = document
    for operator, spec in steps:
        result = dict(current)
        if operator == "$unset":
            for name in spec:
                result.pop(name, None)
        else:
            plain = type(current) is dict
            values = []
            for name, expression, function in spec:
                if plain and function is not None:
                    try:
                        value = function(current)
                    except Exception:
                        value = evaluator(current, expression, variables, dialect=dialect)
                else:
                    value = evaluator(current, expression, variables, dialect=dialect)
                values.append((name, value))
            for name, value in values:
                if value is remove:
                    result.pop(name, None)
                elif value is not missing:
                    kind = type(value)
                    result[name] = deepcopy(value) if kind is dict or kind is list or isinstance(value, (dict, list)) else value
        current = result
    return current


def modified(document: dict[str, Any], new_document: dict[str, Any], changed: set[str], values_equal: Any) -> bool:
    """``not values_equal(document, new_document)`` (mongoeco's test of a pipeline update), comparing
    only the ``changed`` fields' values: the others are the same objects in both.

    The names and their order first, whatever ``changed`` holds: a field removed by one stage and set
    again by a later one to the very object it held (a small int, an interned string) is in no
    ``changed`` set, yet it has moved to the end of the document."""
    if list(document) != list(new_document):
        return True  # values_equal compares two documents' fields in order, names first
    return not all(
        values_equal(document[name], new_document[name]) and bson_kinds(document[name]) == bson_kinds(new_document[name])
        for name in changed
    )


def bson_kinds(value: Any) -> Any:
    """(ct) What a value's BSON encoding tells that mongoeco's value equality does not: the numeric type of
    every number in it (int, long, double, decimal), a decimal's digits and exponent, a zero double's sign.

    mongod's no-op test of an update compares the stored bytes: a pipeline ``$set`` of ``{$toLong: "$n"}``
    over an int ``3`` stores ``NumberLong(3)`` (nModified 1), where mongoeco's test (``values_equal``: ``3 ==
    Int64(3)``) left the int in place and reported nothing modified."""
    import decimal
    import math

    from mongoeco.core.bson_scalars import bson_numeric_alias, unwrap_bson_numeric
    from mongoeco.core.codec import DocumentCodec

    def kinds(item: Any) -> Any:
        if isinstance(item, dict):
            return tuple((key, kinds(inner)) for key, inner in item.items())
        if isinstance(item, list):
            return tuple(kinds(inner) for inner in item)
        alias = bson_numeric_alias(item)
        number = unwrap_bson_numeric(item)
        if alias == "decimal":
            digits = getattr(number, "value", number)
            digits = digits.to_decimal() if hasattr(digits, "to_decimal") else digits
            return (alias, digits.as_tuple()) if isinstance(digits, decimal.Decimal) else (alias, str(number))
        if alias == "double" and isinstance(number, float):
            return (alias, math.copysign(1.0, number))
        return alias

    return kinds(DocumentCodec.to_internal(value))


def patch_pipeline_type_changes() -> None:
    """(ct) mongoeco's own pipeline update (the statements (an) leaves to it: a dotted path, ``$replaceWith``,
    an upsert...) tests ``document_id_bson_type_changed(original, replacement) or not values_equal(...)``
    (``CompiledUpdatePipelinePlan.apply``); the type test, which looks at ``_id`` only, now looks at every
    value (:func:`bson_kinds`), so a type change is written as on mongod."""
    from mongoeco.core import operators

    original = operators.document_id_bson_type_changed
    if hasattr(original, "__wrapped__"):
        return

    def bson_type_changed(before: dict[str, Any], after: dict[str, Any]) -> bool:
        return bool(original(before, after)) or bson_kinds(before) != bson_kinds(after)

    bson_type_changed.__wrapped__ = original  # type: ignore[attr-defined]
    operators.document_id_bson_type_changed = bson_type_changed  # type: ignore[assignment]  # the same signature, wrapped


def written_fields(steps: list[tuple[str, Any]] | None, operators: list[tuple[str, dict[str, Any]]] | None) -> set[str]:
    """The top-level fields an update may change: those its stages set or remove, or its operators name."""
    if operators is not None:
        return {name for _operator, fields in operators for name in fields}
    assert steps is not None
    return {name if operator == "$unset" else name[0] for operator, spec in steps for name in spec}


def _changed(document: dict[str, Any], new_document: dict[str, Any], written: tuple[str, ...]) -> set[str]:
    """The fields whose stored value may differ: every field a stage set (a new object, even when
    equal), or removed. Only the stages' ``written`` fields (:func:`written_fields`) are looked at: a
    field no stage names is the same object in both documents, or in neither."""
    return {name for name in written if new_document.get(name, _MISSING) is not document.get(name, _MISSING)}


def _viewed(collection: Any, session: Any) -> tuple[Any, Any] | None:
    """(ch) The collection object of the session's storage view and its map of values now, when it is one
    of mongoeco's (a persistent map: the same object while nothing is written), else None."""
    engine, m = collection._engine, _bind()
    try:
        with engine._meta_lock:
            stored = engine._storage_view(session).get(collection._db_name, {}).get(collection._collection_name)
    except Exception:  # the session's checks are the read's to raise
        return None
    return (stored, stored._values) if type(stored) is m["MemoryCollection"] else None


# (an) update_many's per-document loop, for the pipelines stages() takes. The function replaced is
# _collection_modify.update_many, which execute_server_update (the `update` command's statements,
# after (ah)) calls by its module name; a public-API call (not server_command) keeps the original.
def patch_pipeline_updates() -> None:
    from mongoeco.api._async import _collection_modify
    from mongoeco.api._async._collection_modify import _bind_execution_context
    from mongoeco.api.operations import compile_find_selection_from_update_operation, compile_update_operation
    from mongoeco.api.public_api import COLLECTION_UPDATE_MANY_SPEC, normalize_public_operation_arguments
    from mongoeco.core.aggregation import runtime, transform_stages
    from mongoeco.core.aggregation.evaluation_environment import aggregation_environment
    from mongoeco.core.expression_context import ensure_expression_context
    from mongoeco.core.filtering import QueryEngine
    from mongoeco.core.operators import CompiledUpdatePipelinePlan
    from mongoeco.engines.semantic_core import compile_update_semantics

    m = _bind()
    original: Any = _collection_modify.update_many  # untyped in mongoeco
    missing, remove = runtime._MISSING, runtime._REMOVE

    async def fast(collection: Any, filter_spec: Any, update_spec: Any, options: dict[str, Any]) -> Any:
        """The statement's UpdateResult; :class:`_Undecided` with nothing written when mongoeco's
        update_many must answer it."""
        steps = stages(update_spec) if type(update_spec) is list else None
        operators = operators_of(update_spec) if type(update_spec) is dict else None  # (bf) an operator update
        if (steps is None and operators is None) or options.get("collation") is not None or options.get("array_filters") is not None:
            raise _Undecided
        session = options.get("session")
        try:  # update_many's own steps up to its per-document loop: their errors are the original's to raise
            normalized = normalize_public_operation_arguments(
                COLLECTION_UPDATE_MANY_SPEC,
                explicit={
                    "filter_spec": filter_spec, "update_spec": update_spec, "upsert": False, "collation": None,
                    "array_filters": None, "hint": options.get("hint"), "comment": options.get("comment"),
                    "let": options.get("let"), "bypass_document_validation": bool(options.get("bypass_document_validation")),
                    "session": session,
                },
                extra_kwargs={"filter": options.get("filter"), "update": options.get("update"), **options.get("extra_kwargs", {})},
                profile=None,
            )
            query = collection._normalize_filter(normalized["filter_spec"])
            pipeline = m["codec"].to_internal(normalized["update_spec"])
            collection._ensure_session_active(session)
            operation = compile_update_operation(
                query, collation=None, array_filters=None, hint=normalized.get("hint"), comment=normalized.get("comment"),
                let=collection._normalize_let(normalized.get("let")), dialect=collection._mongodb_dialect,
                update_spec=pipeline, planning_mode=collection._planning_mode,
            )
            operation = _bind_execution_context(operation, collection, session=session, change_operation_type="update")
            semantics = compile_update_semantics(operation)
        except Exception as error:
            raise _Undecided from error
        plan = semantics.compiled_update_plan
        prepared = None
        if operators is None:
            if not isinstance(plan, CompiledUpdatePipelinePlan) or plan.compiled_pipeline is None:
                raise _Undecided  # a collation's pipeline: mongoeco's uncompiled stages
            prepared = stages(plan.update_spec)
            if prepared is None:
                raise _Undecided
        elif isinstance(plan, CompiledUpdatePipelinePlan):
            raise _Undecided
        if semantics.collation is not None or semantics.sort:
            raise _Undecided
        expressions = operation.context.expressions if operation.context is not None else None
        if getattr(expressions, "now", None) is None:
            raise _Undecided
        viewed = _viewed(collection, session)  # (ch) the collection the read reads, and its values, before it
        sink = ReadItems(bare=True)  # (storage key, stored value) of each match; no public copies when the walk answers
        token = READ_ITEMS.set(sink)
        try:
            matched_documents = await collection._build_cursor(
                compile_find_selection_from_update_operation(operation), session=session, apply_codec_options=False,
            ).to_list()
        except Exception as error:
            raise _Undecided from error
        finally:
            READ_ITEMS.reset(token)
        read: list[tuple[Any, Any]] = sink
        if not sink.walked:  # mongoeco's read answered: each document is found again by its _id's storage key
            storage_key = collection._engine._storage_key
            read = [(storage_key(selected.get("_id", _MISSING)), _MISSING) for selected in matched_documents]
        if not read:
            return m["UpdateResult"](matched_count=0, modified_count=0)  # as update_many answers, recording nothing
        batch = Batch()
        # (bs) a collection whose only options are its validator's is taken, each document judged
        batch.validating, batch.bypass = True, bool(normalized.get("bypass_document_validation"))
        await batch.open(collection, session, expressions, operation.comment, transactions=True)
        try:
            matched, writes = decide(batch, read, prepared, operators, semantics, batch.validator, viewed)
        except BaseException:
            batch.close()
            raise
        try:
            coll = batch.storage[batch.db_name][batch.coll_name]
            noted = batch.in_transaction and bool(STATEMENT_CHECKS)
            if noted:  # (cc) the transaction's note of every write, before the first (nothing written in between)
                for check in STATEMENT_CHECKS:
                    check(batch.engine, coll, [(write[0], write[5]) for write in writes])
            batch.defer(coll)  # (cg) each written document is a different one the collection holds
            for storage_key, document, new_document, encoded, changed, data in writes:
                batch._write(coll, storage_key, document, new_document, encoded, changed, data=data, noted=noted)
            batch.store(coll)
        except Exception as error:
            batch.close(error)  # rolled back whole: mongoeco's path meets the same failure after the same writes
            raise _Undecided from error
        batch.close()  # its count of (ah) statements is 0: update_many records its metadata once, here
        collection._record_operation_metadata(operation="update_many", comment=operation.comment, hint=operation.hint, session=session)
        return m["UpdateResult"](matched_count=matched, modified_count=len(writes))

    def decide(
        batch: Batch,
        read: list[tuple[Any, Any]],
        steps: list[tuple[str, Any]] | None,
        operators: list[tuple[str, dict[str, Any]]] | None,
        semantics: Any,
        validator: Any = None,
        viewed: tuple[Any, Any] | None = None,
    ) -> tuple[int, list[Any]]:
        """How many documents still match, and the writes of those the pipeline (or the operators)
        change, each (storage key, document, new document, its stored form, the changed fields, the
        stored value it replaces).

        ``read``: each matched document's storage key, in the read's order, with the stored value it
        had when the read matched it when the read was (af)'s walk (``_MISSING`` otherwise). (bd) A
        document still stored as that very value matched the filter then and is the same document
        now: it is not matched again (mongoeco's interpreted matcher, about a third of the update's
        time); any other is. ``validator``: the collection's, compiled (None: none, or bypassed); a
        document it refuses sends the statement to mongoeco's path, which writes the documents before it
        and refuses it there (a no-op's too, as that path validates every document it matched).
        ``viewed``: (ch) the collection object of the statement's storage view and its map of values,
        taken just before the read (None: not known). When the batch writes that same object and its
        values are still that map, nothing was written since: each document the read walked is stored as
        the value it read, which the batch takes without looking it up again."""
        fields = written_fields(steps, operators)
        written = tuple(fields)
        if any(index.unique and index.name != "_id_" and _index_touched(index, fields) for index in batch.indexes):
            raise _Undecided  # a duplicate key is reported by the original path, after the writes before it
        engine = batch.engine
        coll = batch.storage.get(batch.db_name, {}).get(batch.coll_name)
        dialect, query_plan, query_variables = semantics.dialect, semantics.query_plan, semantics.variables
        evaluator = transform_stages._evaluate_expression_with_missing  # looked up now: a later fix may wrap it
        environment = aggregation_environment(ensure_expression_context(semantics.variables))
        environment.preserve_numeric_conversion_types = True  # as CompiledUpdatePipelinePlan.apply
        environment = aggregation_environment(environment)  # as CompiledPipelinePlan.execute
        values_equal = dialect.values_equal
        if steps is not None:
            steps = compiled(steps, Compiler(dialect, environment))
        matched = 0
        writes: list[Any] = []
        unwritten = viewed is not None and coll is viewed[0] and coll._values is viewed[1]
        for storage_key, read_data in read:
            if unwritten and read_data is not _MISSING:
                data = read_data  # (ch) what the lookup below gives
            else:
                data = None if coll is None else coll.get(storage_key)
            if data is None:
                raise _Undecided  # gone since it was read: the original's lookup by BSON equality decides
            document = engine._borrow_storage_document(data)
            if data is not read_data and not QueryEngine.match_plan(
                document, query_plan, dialect=dialect, collation=None, variables=query_variables
            ):
                continue
            matched += 1
            if operators is not None:
                new_document, changed = updated(document, operators)  # _Undecided: the original's operator rules
                changes = bool(changed)
            else:
                assert steps is not None
                try:
                    new_document = evaluate(document, steps, environment, dialect, evaluator, missing, remove)
                except Exception as error:  # an expression's error: the original raises it after the writes before it
                    raise _Undecided from error
                changed = _changed(document, new_document, written)
                changes = modified(document, new_document, changed, values_equal)
            if validator is not None and validator.validation_action != "warn" and not validator.validate_document(
                new_document, original_document=document, dialect=dialect
            ).valid:
                raise _Undecided  # (bs) the rule refuses it: mongoeco's update_many answers the statement whole
            if changes:
                if not all(_storable(new_document[name]) for name in changed if name in new_document):
                    raise _Undecided
                try:
                    encoded = _stored(engine, data, new_document, changed)
                except Exception as error:
                    raise _Undecided from error
                writes.append((storage_key, document, new_document, encoded, changed, data))
        return matched, writes

    async def update_many(collection: Any, filter_spec: Any, update_spec: Any, upsert: bool, **options: Any) -> Any:
        kind = type(update_spec)
        if options.get("server_command") and not upsert and (kind is list or kind is dict) and type(collection._engine) is m["MemoryEngine"]:
            try:
                return await fast(collection, filter_spec, update_spec, options)
            except _Undecided:
                pass
        return await original(collection, filter_spec, update_spec, upsert, **options)

    update_many.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    _collection_modify.update_many = update_many
