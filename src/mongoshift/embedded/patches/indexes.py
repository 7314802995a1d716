"""Index fixes: compound hashed indexes are created (s) and a find's min/max bounds are
honoured (t), so the background engine's hash-range reads work as on mongod; a unique index is
built over existing documents in one pass (ax)."""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from ._support import BAD_VALUE, CANNOT_CREATE_INDEX, failure, id_key


# (s) A compound index with a hashed field is refused ("special index types currently
# require a single-field key pattern"); mongod (4.4+) creates {a: 1, b: "hashed", c: 1}, with
# at most one hashed field and never unique, and a sharded collection's version index is one
# when its shard key is hashed. MemoryEngine.create_index asks special_index_directions (its
# module's name, used nowhere else) whether the key is special: for such a key the answer is
# now "not special", so the index is recorded like any index whose key is not plain 1/-1:
# listed, hintable by fix (t), never used by the planner (no index data is built for it).
# Two hashed fields, or unique, keep mongod's refusals.
def patch_compound_hashed_indexes() -> None:
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
            raise failure("A maximum of one index field is allowed to be hashed", CANNOT_CREATE_INDEX, "CannotCreateIndex")
        if compound_hashed(normalized) and options.get("unique"):
            raise failure("Currently hashed indexes cannot guarantee uniqueness. Use a regular index.", CANNOT_CREATE_INDEX, "CannotCreateIndex")
        return str(await create(self, db_name, coll_name, keys, **options))

    memory.special_index_directions = special_index_directions
    memory.MemoryEngine.create_index = create_index


# (t) A find's min/max are ignored: every matching document comes back, so a read bounded
# to one range of an index (the background engine's hash-range partitions) would silently
# read them all. A find with min or max is now answered here, as mongod answers it: the
# hint is required (51173) and must name an existing index (2), the bounds must have the
# index's fields in order (2); the documents matching the filter whose index key
# (index_bounds.index_key: hashed fields hashed as mongod hashes them) is >= min and < max
# come back in index order, then skip and limit, then the projection. One batch, cursor
# id 0; with a sort, the documents inside the bounds are sorted (then skipped, limited and
# projected) by mongoeco's own find. Not handled (an error, never a silently different
# answer): an array on an indexed path.
def patch_find_min_max() -> None:
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
                reply = await _bounded_find(self._client, context, index_bounds)
            except index_bounds.UnsupportedKey as error:
                raise failure(str(error), BAD_VALUE, "BadValue") from error
        # Its batches are cut as any find's ((bo)): 101 documents first, then by getMore, at most 16 MiB each.
        materialized: dict[str, Any] = self._cursor_store.materialize_command_result(
            body, reply, lsid=context.raw_body.get("lsid"), connection=context.connection
        )
        return materialized

    WireCommandExecutor._build_request_context = build_request_context
    WireCommandExecutor.execute_prepared = execute_prepared


async def _bounded_find(client: Any, context: Any, index_bounds: Any) -> dict[str, Any]:
    body = context.command_document
    name = str(body["find"])
    collection = client[context.db_name][name]
    hint = body.get("hint")
    if hint is None:
        raise failure("When using min()/max() a hint of which index to use must be provided", 51173, "Location51173")
    wanted = index_bounds.pairs(hint) if not isinstance(hint, str) else None
    pattern = None
    async for index in await collection.list_indexes():
        key = index_bounds.pairs(index["key"])
        if (wanted is None and index.get("name") == hint) or key == wanted:
            pattern = key
    if pattern is None:
        raise failure("hint provided does not correspond to an existing index", BAD_VALUE, "BadValue")
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
    skip = int(index_bounds.plain(body.get("skip") or 0))
    limit = abs(int(index_bounds.plain(body.get("limit") or 0)))
    if body.get("sort"):
        # mongod sorts what the bounds kept: mongoeco's own find sorts, skips, limits and projects
        # those documents (found again by _id), so its sort order is the one every other find has.
        inside = {"_id": {"$in": [doc["_id"] for _key, doc in keyed]}}
        window = {"skip": skip, **({"limit": limit} if limit else {})}  # mongoeco's limit 0 returns nothing
        found = collection.find(inside, body.get("projection"), sort=list(body["sort"].items()), session=context.session, **window)
        return {"cursor": {"firstBatch": [d async for d in found], "id": 0, "ns": f"{context.db_name}.{name}"}, "ok": 1.0}
    docs = [doc for _key, doc in keyed][skip:]
    if limit:
        docs = docs[:limit]
    projection = body.get("projection")
    if projection and docs:
        ids = [doc["_id"] for doc in docs]
        projected = [d async for d in collection.find({"_id": {"$in": ids}}, projection, session=context.session)]
        at = {id_key(d["_id"]): d for d in projected}
        docs = [at[id_key(i)] for i in ids if id_key(i) in at]
    return {"cursor": {"firstBatch": docs, "id": 0, "ns": f"{context.db_name}.{name}"}, "ok": 1.0}


# (ax) A unique index built over existing documents costs O(n²): MemoryEngine.create_index checks
# each stored document against every one before it (_unique_index_conflict, pairwise), so 30,000
# documents took over 11 minutes of server CPU (a migration or `converge` adding a unique index to
# a populated collection). For a unique index of plain 1/-1 keys without a collation, not yet in the
# collection, the index is now built by mongoeco's own code as a non-unique one, and, in the same
# critical section (under the collection's lock, inside its rollback scope, after the record is
# added and before the TTL purge that ends the build), the documents the index covers are checked in
# one pass over a set of their keys (the keys mongoeco's check compares): the first document whose
# key an earlier one has fails the build with mongoeco's own error (11000, "Index build failed"),
# which rolls the build back as before; otherwise the record is replaced by the same record marked
# unique. Any other index (a collation, special keys, one that exists already) takes mongoeco's path.
# The build is marked for the hook through a context variable, so it is seen only by the task that
# runs it.
_UNIQUE_BUILD: contextvars.ContextVar[_UniqueBuild | None] = contextvars.ContextVar("unique_build", default=None)


@dataclasses.dataclass
class _UniqueBuild:
    db_name: str
    coll_name: str
    name: str
    done: bool = False


def patch_unique_index_builds() -> None:
    from mongoeco.engines import memory

    create = memory.MemoryEngine.create_index
    purge = memory.MemoryEngine._purge_expired_documents_locked

    def one_pass(engine: Any, db_name: str, coll_name: str, indexes: Any, storage: Any, name: str) -> None:
        records = indexes.get(db_name, {}).get(coll_name, [])
        position = next((i for i, record in enumerate(records) if record.name == name and not record.unique), None)
        if position is None:
            return
        record = dataclasses.replace(records[position], unique=True)
        seen: set[Any] = set()
        for data in storage.get(db_name, {}).get(coll_name, {}).values():
            document = engine._borrow_storage_document(data)
            if not memory.document_in_virtual_index(document, record):
                continue
            keys = engine._unique_index_keys(document, record.fields)
            repeated = keys & seen
            if repeated:
                raise memory.index_build_duplicate_error(  # type: ignore[no-untyped-call]
                    namespace=f"{db_name}.{coll_name}", index=record, document=document, conflict=next(iter(repeated))
                )
            seen |= keys
        records[position] = record

    def purge_expired_documents(self: Any, db_name: str, coll_name: str, **kwargs: Any) -> Any:
        build = _UNIQUE_BUILD.get()
        if build is not None and not build.done and (build.db_name, build.coll_name) == (db_name, coll_name):
            build.done = True
            one_pass(self, db_name, coll_name, kwargs["indexes_view"], kwargs["storage_view"], build.name)
        return purge(self, db_name, coll_name, **kwargs)

    def built_in_one_pass(engine: Any, db_name: str, coll_name: str, keys: Any, options: dict[str, Any]) -> str | None:
        """The index's name when it takes the one-pass build, else None."""
        if not options.get("unique") or options.get("collation") is not None:
            return None
        try:
            normalized = memory.normalize_index_keys(keys)
        except Exception:
            return None  # mongoeco's error
        if engine._is_builtin_id_index(normalized):
            return None
        if any(direction not in (1, -1) or isinstance(direction, bool) for _field, direction in normalized):
            return None  # text, 2d, hashed...: their own checks and refusals
        name = options.get("name") or memory.default_index_name(normalized)
        records = engine._indexes_view(options.get("context")).get(db_name, {}).get(coll_name, [])
        if any(record.name == name or record.key == normalized for record in records):
            return None  # no build: mongoeco answers (the same index, or a conflict)
        return str(name)

    async def create_index(self: Any, db_name: str, coll_name: str, keys: Any, **options: Any) -> str:
        name = built_in_one_pass(self, db_name, coll_name, keys, options)
        if name is None:
            return str(await create(self, db_name, coll_name, keys, **options))
        build = _UniqueBuild(db_name, coll_name, name)
        token = _UNIQUE_BUILD.set(build)
        try:
            created = str(await create(self, db_name, coll_name, keys, **{**options, "unique": False}))
        finally:
            _UNIQUE_BUILD.reset(token)
        if not build.done:
            # Another request created an index of that name meanwhile: mongoeco's own answer to this one.
            return str(await create(self, db_name, coll_name, keys, **options))
        return created

    create_index.__wrapped__ = create  # type: ignore[attr-defined]
    memory.MemoryEngine._purge_expired_documents_locked = purge_expired_documents
    memory.MemoryEngine.create_index = create_index


# (ay) A write to a collection with a compound unique index costs O(n): MemoryEngine.
# _ensure_unique_indexes looks a single-field unique index's keys up in its index data, but compares
# the document with every stored one for a compound index (_unique_index_conflict, pairwise), so
# inserting 4,000 documents under a unique {a: 1, b: 1} took 348 s (0.95 s under a unique {a: 1});
# mongoshift's own run log has one ({run_id: 1, seq: 1}). The index data of a compound index now holds
# every key a document has in a unique index on those fields (patches/updates.py, (ay)), so a compound
# unique index without a collation is checked the way a single-field one is: each of the document's
# keys is looked up, and a stored document under one (other than the document being replaced) is a
# duplicate, with mongoeco's error. The indexes are checked in their order, each by its own rule (the
# others, and the `_id` checks before them, by mongoeco's code), so the first index a write violates
# is still the one reported.
def patch_compound_unique_checks() -> None:
    from mongoeco.engines import memory

    original = memory.MemoryEngine._ensure_unique_indexes

    def ensure_unique_indexes(
        self: Any, db_name: str, coll_name: str, candidate: Any, *, exclude_storage_key: Any = None,
        indexes_view: Any = None, storage_view: Any = None, index_data_view: Any = None, **options: Any,
    ) -> None:
        views = {"exclude_storage_key": exclude_storage_key, "storage_view": storage_view, "index_data_view": index_data_view}
        indexes = (self._indexes if indexes_view is None else indexes_view).get(db_name, {}).get(coll_name, [])
        maps = (self._index_data if index_data_view is None else index_data_view).get(db_name, {}).get(coll_name, {})
        looked_up = {
            id(index) for index in indexes
            if index.unique and len(index.fields) > 1 and index.collation is None and maps.get(index.name) is not None
        }
        if not looked_up:
            original(self, db_name, coll_name, candidate, indexes_view=indexes_view, **views, **options)
            return
        original(self, db_name, coll_name, candidate, indexes_view={}, **views, **options)  # the _id checks
        exclude = exclude_storage_key
        stored = (self._storage if storage_view is None else storage_view).get(db_name, {}).get(coll_name, {})
        if exclude is not None and exclude not in stored:
            exclude = self._storage_key(exclude)
        for index in indexes:
            if id(index) not in looked_up:
                original(self, db_name, coll_name, candidate, indexes_view={db_name: {coll_name: [index]}}, **views)
                continue
            if not memory.document_in_virtual_index(candidate, index):
                continue
            self._validate_compound_multikey_shape(candidate, index)
            index_map = maps[index.name]
            for key in self._unique_index_keys(candidate, index.fields):
                matches = index_map.get(key)
                if matches and (exclude is None or any(match != exclude for match in matches)):
                    raise self._unique_key_error(
                        f"Duplicate key for unique index '{index.name}': {index.fields}={key!r}",
                        f"{db_name}.{coll_name}", candidate, index=index, conflict=key,
                    )

    ensure_unique_indexes.__wrapped__ = original  # type: ignore[attr-defined]
    memory.MemoryEngine._ensure_unique_indexes = ensure_unique_indexes


# (bj) A single-field unique index took a missing field and a null one for two keys: two documents,
# {a: null} and {}, were both accepted (on insert, and when the index was built over them), where
# mongod indexes both as null and refuses the second (E11000). MemoryEngine._index_keys gives a
# missing field the key (None,) and a null value null's equality key, and the unique checks compare
# those keys. A single field's unique keys now hold both whenever either is there, so the checks
# that look keys up in the index's data (which keeps the two apart) or compare two documents' keys
# see the clash; the index's data and its lookups are unchanged. Compound keys already used null's key
# for a missing field (ay).
def patch_single_field_unique_nulls() -> None:
    from mongoeco.engines import memory

    original = memory.MemoryEngine._unique_index_keys
    null = (memory.MemoryEngine._index_equality_key(None),)
    both = {_MISSING_KEY, null}

    def unique_index_keys(self: Any, document: Any, fields: list[str]) -> set[tuple[Any, ...]]:
        keys: set[tuple[Any, ...]] = original(self, document, fields)
        if len(fields) == 1 and (_MISSING_KEY in keys or null in keys):
            return keys | both
        return keys

    unique_index_keys.__wrapped__ = original  # type: ignore[attr-defined]
    memory.MemoryEngine._unique_index_keys = unique_index_keys


#: MemoryEngine._index_keys' key of a document that does not have the field.
_MISSING_KEY: tuple[Any, ...] = (None,)


# (cr) listIndexes answered each index as {name, key, unique, ns}: ``unique: false`` on every
# non-unique index and ``unique: true`` on ``_id_``, the namespace ``ns`` (mongod dropped it in 4.4)
# and no index version ``v``. mongod 7.0 lists {v: 2, key, name} and then only the options the index
# was given, so a client that compares ``index_information()`` with what it declared (or with a
# real server's) saw options nobody set. mongoeco's
# AsyncDatabaseAdminService._normalize_list_indexes_document_for_collection shapes each entry of
# the wire command only (the snapshot and the API read the engine's own list, unchanged); the fix
# reshapes that entry as mongod's.
def patch_index_listing() -> None:
    from mongoeco.api._async.database_admin import AsyncDatabaseAdminService

    original = AsyncDatabaseAdminService._normalize_list_indexes_document_for_collection

    def normalize(self: Any, collection_name: str, document: dict[str, object]) -> dict[str, object]:
        entry = original(self, collection_name, document)
        if not isinstance(entry, dict) or "key" not in entry or "name" not in entry:
            return entry
        rest = {name: value for name, value in entry.items() if name not in ("v", "key", "name", "ns")}
        if rest.get("unique") is False or entry["name"] == "_id_":
            rest.pop("unique", None)
        return {"v": entry.get("v", 2), "key": entry["key"], "name": entry["name"], **rest}

    AsyncDatabaseAdminService._normalize_list_indexes_document_for_collection = normalize


#: mongod's code for an index that exists under another name (createIndexes).
INDEX_OPTIONS_CONFLICT = 85


# (da) An index on the very keys and options of an existing one, under another name, was created beside it: two
# indexes on one key pattern, both maintained on every write, listed twice, and dropping one by name left the other.
# mongod refuses it with 85 IndexOptionsConflict ("Index already exists with a different name: <name>"). In
# MemoryEngine.create_index, an index of the same keys and another name whose options are the same is skipped over
# (`continue`) and the new one recorded; whether the options are the same is asked of mongoeco itself: the request
# is tried under the existing index's name, which mongoeco answers with that name (the same index: nothing is
# written) or with 86 (other options). Only then, in the first case, is the request refused with 85; in the second,
# mongoeco's own answer to the request stands ("One index per key pattern" in docs/embedded.md).
def patch_equivalent_index_names() -> None:
    from mongoeco.engines import memory
    from mongoeco.errors import OperationFailure

    create = memory.MemoryEngine.create_index

    async def create_index(self: Any, db_name: str, coll_name: str, keys: Any, **options: Any) -> str:
        normalized = memory.normalize_index_keys(keys)
        name = options.get("name") or memory.default_index_name(normalized)
        listed = self._indexes_view(options.get("context")).get(db_name, {}).get(coll_name, [])
        names = {index["name"] for index in listed}
        same_keys = [index["name"] for index in listed if index["key"] == normalized and index["name"] != name]
        if same_keys and name not in names and not self._is_builtin_id_index(normalized):
            try:
                await create(self, db_name, coll_name, keys, **{**options, "name": same_keys[0]})
            except OperationFailure:
                pass  # other options: mongoeco's answer below
            else:
                raise failure(f"Index already exists with a different name: {same_keys[0]}", INDEX_OPTIONS_CONFLICT, "IndexOptionsConflict")
        return str(await create(self, db_name, coll_name, keys, **options))

    memory.MemoryEngine.create_index = create_index
