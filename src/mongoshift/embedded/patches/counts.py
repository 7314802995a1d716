"""Counts without a ``$group`` stream: ``count_documents`` answered by counting matches (ap).

pymongo's ``count_documents(filter, skip=, limit=)`` is the aggregate ``[{$match: filter}, ({$skip}),
({$limit}), {$group: {_id: 1, n: {$sum: 1}}}]``. mongoeco 4.11 pushes the ``$match``, ``$skip`` and
``$limit`` down into a find (so the read reaches (af)'s ``_id`` walk), then streams every matched
document through that find's cursor into the ``$group`` accumulator: each one is ordered by its
insertion ordinal, finalized (projection), copied for the public API, paged and accumulated, only to
be counted. In the demo the engine's planning counts each partition and ``_id`` bracket this way: 24 %
of its server's time (docs/performance.md).

This fix answers exactly that shape by counting inside the engine: the documents the find would read
((af)'s ``_id`` range or type-bracket walk when the filter confines ``_id``; only the ``_id``s (ae)'s
order does not place when it asks for the ``undefined`` or ``dbPointer`` type, which no placed ``_id``
has; else the candidates mongoeco's own scan takes) go through mongoeco's matcher, and nothing else is
done with them. The
read keeps every step of the scan it replaces (the collection lock, the operation metadata, the TTL
purge, the hint check) and the views of the cursor's session: a transaction's, a snapshot read's
(ad), or the latest data; the command around it (read concern, cluster time, fail points, the cursor
reply) is untouched, since the hook sits inside mongoeco's aggregation cursor.

(cl) The background planner's ``$group`` of the documents by the ``$type`` of their ``_id`` (one
``{$sum: 1}``, nothing else) is counted the same way, per name: from the version index's keys bracket by
bracket of (ae)'s order where (ca) would count (only a number's name needs more than its bracket, and
only a long's or a decimal's ``_id`` is decoded for it), else over the documents the find would read,
each ``_id`` named by the aggregation's own ``$type``.

(cp) A count whose filter says, by conjuncts on a top-level field, that the field's value must not be of
some types (``$not: {$type: [...]}``) or must exist (``$exists``) rejects a stored document whose top-level
value alone says it cannot match (:func:`rejecting_test`) before mongoeco's matcher is asked; every other
document goes through the matcher as before. The background engine counts the versions that are not
numbers this way at the planning of every pass.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from .scans import (
    _BINARY,
    _BOOL,
    _DATE,
    _MAX_KEY,
    _MIN_KEY,
    _NULL,
    _OBJECT_ID,
    _STRING,
    _TIMESTAMP,
    _conjuncts,
    _inexact,
    _stored_id,
    begin_scan,
    covered_span,
    covering_test,
    has_id_order,
    id_bounds,
    id_order,
    id_type_bracket,
)

#: ``$type`` aliases of no bracket (ae)'s order places. mongoeco's matcher gives them to no value of a
#: bracket the order models exactly (numbers, strings, ObjectIds, dates, booleans, null, timestamps,
#: MinKey, MaxKey): an ``undefined`` value is mongoeco's ``UndefinedType`` (and one sent over the wire is
#: stored as null), ``dbPointer`` matches nothing (one sent over the wire is stored as a DBRef, an
#: object). The engine's planning counts both brackets: only ``_id``s of the unmodelled brackets can match.
_UNPLACED = frozenset({"undefined", "dbPointer"})


def count_field(plan: Any) -> tuple[Any, str] | None:
    """(the group ``_id``, the count's field) when an incremental-group plan is a plain count:
    nothing between the pushed-down find and a ``$group`` of a constant ``_id`` and one ``{$sum: 1}``,
    nothing after it; None otherwise."""
    shape = _counting_group(plan)
    if shape is None:
        return None
    group_id, name = shape
    if not (group_id is None or type(group_id) is int or (type(group_id) is str and not group_id.startswith("$"))):
        return None
    return group_id, name


def type_count_field(plan: Any) -> str | None:
    """(cl) The count's field when an incremental-group plan counts the documents of each ``_id`` type:
    as :func:`count_field`, with a group ``_id`` of exactly ``{$type: "$_id"}``; None otherwise."""
    shape = _counting_group(plan)
    if shape is None:
        return None
    group_id, name = shape
    if not isinstance(group_id, Mapping) or list(group_id.items()) != [("$type", "$_id")]:
        return None
    return name


def _counting_group(plan: Any) -> tuple[Any, str] | None:
    """(the group ``_id``, the field) of a plan whose only stage after the pushed-down find is a ``$group``
    of an ``_id`` and one ``{$sum: 1}``."""
    if plan.prefix or plan.prefix_skip or plan.prefix_limit is not None or plan.suffix:
        return None
    spec = plan.group_spec
    if not isinstance(spec, dict) or len(spec) != 2:
        return None
    first, name = list(spec)
    if first != "_id" or not isinstance(name, str) or not name or name.startswith("$") or "." in name:
        return None
    accumulator = spec[name]
    if not isinstance(accumulator, dict) or list(accumulator) != ["$sum"] or type(accumulator["$sum"]) is not int or accumulator["$sum"] != 1:
        return None
    return spec["_id"], name


def _confined(semantics: Any) -> tuple[Any, Any, int | None] | None:
    """(lower, upper, bracket) when the filter confines ``_id`` to a range or one ``$type`` bracket
    that (af)'s walk takes; None when it does not (the scan then reads mongoeco's candidates)."""
    bounds = id_bounds(semantics.query_plan)
    if bounds is None:
        return None
    bracket = id_type_bracket(semantics.query_plan)
    if bracket is None and bounds == (None, None):
        return None
    return bounds[0], bounds[1], bracket


def _unplaced_only(plan: Any) -> bool:
    """Whether an ``_id`` ``$type`` conjunct of ``plan`` names only types of :data:`_UNPLACED`."""
    from mongoeco.core.query_plan import AndCondition, TypeCondition

    return any(
        type(node) is TypeCondition and node.field == "_id" and node.aliases and node.aliases <= _UNPLACED
        for node in _conjuncts(plan, AndCondition)
    )


def _unmodelled(engine: Any, coll: Any) -> Iterator[Any]:
    """The stored documents whose ``_id`` (ae)'s order does not place exactly (none, most often)."""
    order = id_order(coll)
    if not order.inexact:
        return
    borrow = engine._borrow_storage_document
    for key, storage_key in zip(order.keys, order.storage_keys, strict=True):
        if _inexact(key):
            data = coll.get(storage_key)
            if data is not None:
                yield borrow(data)


def _walked(engine: Any, coll: Any, confined: tuple[Any, Any, int | None]) -> Iterator[Any] | None:
    """The stored documents of (af)'s walk between the bounds and inside the bracket, in ``_id`` order
    (the order does not change a count)."""
    lower, upper, bracket = confined
    order = id_order(coll)
    start, end = order.span(lower, upper)
    if bracket is not None:
        start = max(start, bisect.bisect_left(order.keys, (bracket,), lo=start, hi=end))
        end = min(end, bisect.bisect_left(order.keys, (bracket + 1,), lo=start, hi=end))
    storage_keys = order.storage_keys
    borrow = engine._borrow_storage_document
    return (borrow(data) for data in map(coll.get, storage_keys[start:end]) if data is not None)


def _covered_count(engine: Any, context: Any, db_name: str, coll_name: str, coll: Any, semantics: Any, indexes: Any) -> int | None:
    """(ca) How many documents match, counted from the version index's keys over (ae)'s order
    (:func:`.scans.covering_test`): the filter's ``_id`` span (the whole order when it has none), each
    storage key tested by its index entry, no document decoded or matched; None when the filter, the
    index or an ``_id`` of the span the order does not place exactly does not allow it."""
    from mongoeco.core.operation_limits import enforce_deadline

    covered = covering_test(engine, context, db_name, coll_name, semantics, indexes)
    bounds = None if covered is None else id_bounds(semantics.query_plan)
    if covered is None or bounds is None:
        return None
    test, bracket = covered
    if bounds == (None, None) and bracket is None and not has_id_order(coll):
        return None  # nothing confines _id: a collection no read walks in _id order is not given an order to keep
    order = id_order(coll)
    span = covered_span(order, bounds[0], bounds[1], bracket)
    if span is None:
        return None
    start, end = span
    deadline = semantics.deadline
    if deadline is None:
        return sum(1 for storage_key in order.storage_keys[start:end] if test(coll, storage_key))
    counted = 0
    for storage_key in order.storage_keys[start:end]:
        enforce_deadline(deadline)
        counted += test(coll, storage_key)
    return counted


# (cp) The background engine counts, at the planning of every pass, the documents whose version is not a
# number: {__v: {$exists: true, $not: {$type: ["number", "null"]}}}, $and-ed with the migration's filter.
# Neither (ca)'s covered count nor (af)'s walk applies, so count_matches asked mongoeco's compiled matcher
# about every candidate, whose $exists resolves the field as a path (extract_values): about 2.1 µs a
# document, 43 ms of the server's CPU at 20,000. A document whose top-level value of such a field decides
# that it cannot match (a number, null, a missing or a present field, as the conjuncts say) is now skipped
# before the matcher; any other one (an array, a document, a string...) is matched as before.
#: (cp) The ``$type`` aliases of a number: a ``$type`` set holding all four matches every number.
_NUMBER_ALIASES = frozenset({"int", "long", "double", "decimal"})
_INT64 = 2**63


def _number_classes() -> frozenset[type]:
    """The exact classes of a number in a stored document besides ``int`` (checked for its range): a double,
    mongoeco's wrappers (an Int64 is stored as its ``BsonInt64``), the two Decimal128 classes, bson's Int64."""
    from bson import Decimal128 as BsonDecimal, Int64
    from mongoeco.core.bson_scalars import BsonDecimal128, BsonDouble, BsonInt32, BsonInt64
    from mongoeco.types import Decimal128

    return frozenset({float, BsonInt32, BsonInt64, BsonDouble, BsonDecimal128, Decimal128, BsonDecimal, Int64})


def rejecting_test(plan: Any) -> Callable[[Any], bool] | None:
    """(cp) A test that is true of a stored document that cannot match ``plan`` (and false of one that may),
    from the top-level values of the fields of ``plan``'s conjuncts (its ``$and``s flattened): a value whose
    class alone decides ``{field: {$not: {$type: [...]}}}`` (a number, int or not, when the set holds the four
    number types, null when it holds ``null``; a bool is no number, an array or a document is left to the
    matcher) and the presence ``{field: {$exists: ...}}`` asks for. None when no conjunct allows it.

    The answers are mongoeco's matcher's: a top-level value is the only one its path yields for a field
    without a dot (an array adds its elements, which is why it is left alone), a number's class is one of
    the type set's aliases whichever (an int by its range, an Int64 as ``long`` or ``int``), and ``$exists``
    is whether the path yields anything, i.e. whether the field is there. A document that is not a plain
    dict is left to the matcher."""
    from mongoeco.core.query_plan import AndCondition, ExistsCondition, NotCondition, TypeCondition

    numbers: set[str] = set()
    nulls: set[str] = set()
    present: set[str] = set()
    absent: set[str] = set()
    for node in _conjuncts(plan, AndCondition):
        if type(node) is NotCondition and type(node.clause) is TypeCondition:
            field, aliases = node.clause.field, node.clause.aliases
            if not aliases or not isinstance(field, str) or not field or "." in field:
                continue
            if _NUMBER_ALIASES <= aliases:
                numbers.add(field)
            if "null" in aliases:
                nulls.add(field)
        elif type(node) is ExistsCondition and isinstance(node.field, str) and node.field and "." not in node.field:
            (present if node.value else absent).add(node.field)
    rules = [
        (field, field in present, field in absent, field in numbers, field in nulls)
        for field in sorted(numbers | nulls | present | absent)
    ]
    if not rules:
        return None
    classes = _number_classes()
    missing = object()

    def rule(field: str, needs: bool, refuses: bool, number: bool, null: bool) -> Callable[[Any], bool]:
        def rejects(document: Any) -> bool:
            if type(document) is not dict:
                return False
            value = document.get(field, missing)
            if value is missing:
                return needs
            if refuses:
                return True
            kind = type(value)
            if number and (kind in classes or (kind is int and -_INT64 <= value < _INT64)):
                return True
            return null and value is None

        return rejects

    tests = [rule(*each) for each in rules]
    if len(tests) == 1:  # the background engine's count: one field, one call a document
        return tests[0]
    return lambda document: any(test(document) for test in tests)


def _not_rejected(documents: Iterator[Any], rejects: Callable[[Any], bool], deadline: float | None) -> Iterator[Any]:
    """(cp) The documents ``rejects`` does not reject; each rejected one still checks the deadline, as the
    matcher's loop checks it for every document."""
    from mongoeco.core.operation_limits import enforce_deadline

    if deadline is None:
        for document in documents:
            if not rejects(document):
                yield document
        return
    for document in documents:
        if rejects(document):
            enforce_deadline(deadline)
        else:
            yield document


def _memory_collection(engine: Any, context: Any, db_name: str, coll_name: str) -> Any:
    """The collection in ``context``'s views (read under its lock) when it is a memory collection without a
    collation, the only kind these counts answer for; None otherwise."""
    from mongoeco.engines._memory_collection import MemoryCollection

    coll = engine._storage_view(context).get(db_name, {}).get(coll_name, {})
    options = engine._collection_options_view(context).get(db_name, {}).get(coll_name) or {}
    return coll if isinstance(coll, MemoryCollection) and options.get("collation") is None else None


async def count_matches(engine: Any, db_name: str, coll_name: str, semantics: Any, context: Any) -> int | None:
    """How many documents ``semantics`` (no sort, a limit that is None or positive) reads after its
    skip and limit, in ``context``'s views; None when mongoeco's path must answer (a text query, a
    collation, the profile collection, a collection that does not exist or is not a memory one)."""
    from mongoeco.core.operation_limits import enforce_deadline
    from mongoeco.core.query_plan import EqualsCondition
    from mongoeco.engines.semantic_core import iter_filtered_documents

    if semantics.text_query is not None or semantics.collation is not None or semantics.sort or engine._is_profile_namespace(coll_name):
        return None
    enforce_deadline(semantics.deadline)
    async with engine._get_lock(db_name, coll_name):
        if (coll := _memory_collection(engine, context, db_name, coll_name)) is None:
            return None
        indexes = begin_scan(engine, context, db_name, coll_name, semantics)  # the steps of the scan this count replaces
        covered = _covered_count(engine, context, db_name, coll_name, coll, semantics, indexes)
        if covered is not None:
            del coll
            found = max(0, covered - int(semantics.skip))
            return found if semantics.limit is None else min(found, int(semantics.limit))
        confined = _confined(semantics)
        walked = None if confined is None else _walked(engine, coll, confined)
        if walked is not None:
            documents: Iterator[Any] = walked
        elif _unplaced_only(semantics.query_plan):
            documents = _unmodelled(engine, coll)
        else:
            limit = semantics.limit
            candidates = engine._candidate_items_for_plan_locked(
                coll, semantics.query_plan, dialect=semantics.dialect, indexes=indexes,
                index_data=engine._index_data_view(context).get(db_name, {}).get(coll_name, {}),
                collation=semantics.collation,
                natural_order_limit=semantics.skip + limit if limit is not None and isinstance(semantics.query_plan, EqualsCondition) else None,
            )
            documents = (engine._borrow_storage_document(data) for _storage_key, data in candidates)
        rejects = rejecting_test(semantics.query_plan)
        if rejects is not None:
            documents = _not_rejected(documents, rejects, semantics.deadline)
        matched = 0
        for _document in iter_filtered_documents(documents, semantics):
            matched += 1
        del coll
    found = max(0, matched - int(semantics.skip))
    return found if semantics.limit is None else min(found, int(semantics.limit))


#: (cl) The ``$type`` name of an ``_id`` of each bracket (ae)'s order places exactly, but numbers (four names).
_PLACED_NAMES = {
    _MIN_KEY: "minKey", _NULL: "null", _STRING: "string", _BINARY: "binData", _OBJECT_ID: "objectId", _BOOL: "bool",
    _DATE: "date", _TIMESTAMP: "timestamp", _MAX_KEY: "maxKey",
}


async def count_id_types(engine: Any, db_name: str, coll_name: str, semantics: Any, context: Any) -> list[tuple[str, int]] | None:
    """(cl) The documents ``semantics`` reads per ``$type`` name of their ``_id``, each name with its count,
    in the order the names are first met: the ``_id`` order where it is walked, the candidates' order
    otherwise. MongoDB leaves the order of a ``$group``'s output unspecified; mongoeco's follows the natural
    order, which tracking here cost more than the counting (1.2 µs a document). None where mongoeco's path
    must answer (as :func:`count_matches`, and a skip, a limit, a filter of undefined or dbPointer ``_id``s)."""
    from mongoeco.core.aggregation import scalar_expressions
    from mongoeco.core.operation_limits import enforce_deadline
    from mongoeco.engines.semantic_core import iter_filtered_documents

    if semantics.text_query is not None or semantics.collation is not None or semantics.sort or engine._is_profile_namespace(coll_name):
        return None
    if semantics.skip or semantics.limit is not None or _unplaced_only(semantics.query_plan):
        return None
    missing = object()

    def name_of(value: Any) -> str:
        return str(scalar_expressions._aggregation_type_name(value, missing_sentinel=missing))

    enforce_deadline(semantics.deadline)
    async with engine._get_lock(db_name, coll_name):
        if (coll := _memory_collection(engine, context, db_name, coll_name)) is None:
            return None
        indexes = begin_scan(engine, context, db_name, coll_name, semantics)
        found: dict[str, int] = {}  # in the order the names are met

        def add(name: str, count: int) -> None:
            if count:
                found[name] = found.get(name, 0) + count

        covered = covering_test(engine, context, db_name, coll_name, semantics, indexes)
        bounds = None if covered is None else id_bounds(semantics.query_plan)
        span = None
        if covered is not None and bounds is not None:
            order = id_order(coll)  # built if need be: the planner's count is followed by the lanes' walks of it
            span = covered_span(order, bounds[0], bounds[1], covered[1])
        if covered is not None and span is not None:
            # (ca)'s count, bracket by bracket of the span: one name for each bracket, but numbers
            test, deadline = covered[0], semantics.deadline
            if deadline is not None:
                untimed = test

                def test(coll: Any, storage_key: Any) -> bool:
                    enforce_deadline(deadline)
                    return bool(untimed(coll, storage_key))

            keys, storage_keys = order.keys, order.storage_keys
            at, end = span
            while at < end:
                bracket = keys[at][0]
                stop = bisect.bisect_left(keys, (bracket + 1,), lo=at, hi=end)
                matched = [storage_key for storage_key in storage_keys[at:stop] if test(coll, storage_key)]
                name = _PLACED_NAMES.get(bracket)
                if name is not None:
                    add(name, len(matched))
                else:  # numbers: an int32's or a double's storage key says so, the others' _ids are decoded
                    for storage_key in matched:
                        kind = storage_key[0] if type(storage_key) is tuple else None
                        add("int" if kind == "int" else "double" if kind == "float" else name_of(_stored_id(coll.get(storage_key))), 1)
                at = stop
        else:
            confined = _confined(semantics)
            if confined is not None:
                order = id_order(coll)
                start, end = order.span(confined[0], confined[1])
                bracket = confined[2]
                if bracket is not None:
                    start = max(start, bisect.bisect_left(order.keys, (bracket,), lo=start, hi=end))
                    end = min(end, bisect.bisect_left(order.keys, (bracket + 1,), lo=start, hi=end))
                pairs: Iterator[tuple[Any, Any]] = ((key, coll.get(key)) for key in order.storage_keys[start:end])
            else:
                pairs = iter(engine._candidate_items_for_plan_locked(
                    coll, semantics.query_plan, dialect=semantics.dialect, indexes=indexes,
                    index_data=engine._index_data_view(context).get(db_name, {}).get(coll_name, {}),
                    collation=semantics.collation,
                    natural_order_limit=None,
                ))
            documents = (engine._borrow_storage_document(data) for _storage_key, data in pairs if data is not None)
            for document in iter_filtered_documents(documents, semantics):
                add(name_of(document.get("_id", missing)), 1)
        del coll
    return list(found.items())


# (ap) A count aggregate (pymongo's count_documents) streams every matched document through mongoeco's
# aggregation cursor to count it: AsyncAggregationCursor._open_incremental_group_stream builds the
# pushed-down find's cursor and feeds its pages to the $group accumulator. When the plan is a plain
# count (nothing but the pushed-down $match/$skip/$limit before a $group of a constant _id and one
# {$sum: 1}, nothing after; no sort or projection pushed down; a limit that is None or positive; no
# aggregation cost policy), the count is made by count_matches in the cursor's session views, and the
# group's one document (none for no match) is streamed as mongoeco streams a group's output. The
# find's checks (planning issues) and its opcounter run as the cursor would run them; anything else,
# and whatever count_matches declines, takes the original.
def patch_count_aggregates() -> None:
    from mongoeco.api._async.aggregation_cursor import AsyncAggregationCursor
    from mongoeco.api._async.cursor import _ensure_operation_executable
    from mongoeco.engines.memory import MemoryEngine
    from mongoeco.engines.semantic_core import compile_find_semantics_from_operation

    original = AsyncAggregationCursor._open_incremental_group_stream

    async def open_incremental_group_stream(self: Any, plan: Any, *, dialect: Any, deadline: float | None) -> Any:
        shape = count_field(plan)
        by_type = type_count_field(plan) if shape is None else None
        collection = self._collection
        engine = collection._engine
        if (shape is None and by_type is None) or not isinstance(engine, MemoryEngine) or self._cost_policy() is not None:
            return await original(self, plan, dialect=dialect, deadline=deadline)
        operation = self._pushdown_find_operation()
        if operation.sort or operation.projection is not None or operation.limit == 0 or operation.context is None:
            return await original(self, plan, dialect=dialect, deadline=deadline)
        _ensure_operation_executable(collection, operation)  # the pushed-down find's planning issues, as its cursor checks them
        semantics = compile_find_semantics_from_operation(operation, dialect=collection._mongodb_dialect)
        if by_type is not None:
            named = await count_id_types(engine, collection._db_name, collection._collection_name, semantics, operation.context.session)
            if named is None:
                return await original(self, plan, dialect=dialect, deadline=deadline)
            engine._record_runtime_opcounter("query")
            return self._stream_group_documents([{"_id": name, by_type: count} for name, count in named])
        assert shape is not None
        count = await count_matches(engine, collection._db_name, collection._collection_name, semantics, operation.context.session)
        if count is None:
            return await original(self, plan, dialect=dialect, deadline=deadline)
        engine._record_runtime_opcounter("query")  # the find's first page; its getMore pages are not counted
        group_id, name = shape
        return self._stream_group_documents([{"_id": group_id, name: count}] if count else [])

    open_incremental_group_stream.__wrapped__ = original  # type: ignore[attr-defined]  # the original, for the tests that compare both
    AsyncAggregationCursor._open_incremental_group_stream = open_incremental_group_stream
