"""Transaction fixes: a failed commit leaves no zombie, conflicts carry code 112 and their label,
unknown numbers get 251 (b, c, e), a failed statement aborts its transaction (j), and conflicts
judged per document instead of globally (o). Fail points on commit and abort (d) are the
replica-set layer's (patches/replica_set.py), which every command passes through."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from typing import Any

from . import scans, updates
from ._support import NO_SUCH_TRANSACTION, TRANSIENT, WRITE_CONFLICT, as_int, failure

log = logging.getLogger(__name__)


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
    return failure(
        f"Transaction {number} has been aborted or does not exist",
        NO_SUCH_TRANSACTION,
        "NoSuchTransaction",
        (TRANSIENT,),
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
def patch_transactions() -> None:
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
            raise _no_such_transaction(as_int(body.get("txnNumber")))
        original_apply(session, body)
        if starts and session.transaction_active:
            _remember(session, number=as_int(body.get("txnNumber")), state="open")
            session._mongoshift_txn_started = time.monotonic()  # for the lifetime limit (replica_set.py)

    def commit_transaction(self: Any, body: dict[str, Any]) -> dict[str, Any]:
        number = as_int(body.get("txnNumber"))
        try:
            session = self._require_session(body)
        except OperationFailure:
            if number is None:
                raise
            raise _no_such_transaction(number) from None
        known: Any = getattr(session, "_mongoshift_txn", None)  # (number, outcome), set by this patch
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
            # mongoeco picks its error bases at import time (pymongo's when installed): mypy sees Exception's.
            if isinstance(error, OperationFailure) and error.code is None and "conflict" in str(error).lower():  # type: ignore[attr-defined]
                raise failure(
                    f"WriteConflict error: this operation conflicted with another operation ({error})",
                    WRITE_CONFLICT,
                    "WriteConflict",
                    (TRANSIENT,),
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
def patch_errors_abort_transaction() -> None:
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
# As in mongod, the first writer wins: the first write of a document (by its
# storage key) that another open transaction has written, or that was written
# since this transaction's snapshot, fails at once with 112 +
# TransientTransactionError (a failed statement then aborts the transaction, (j));
# the commit-time check stays for what the write-time one cannot see (a secondary
# unique key, _ids equal under another storage key such as 1 and 1.0).
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
    #: each live collection's roots and its index maps' when it began (see :func:`_installable`)
    roots: dict[tuple[str, str], Any] = dataclasses.field(default_factory=dict)
    #: (by) the namespace of each collection object in ``collections``, by its id (checked against it)
    namespaces: dict[int, tuple[str, str]] = dataclasses.field(default_factory=dict)


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


def _write_conflict_now() -> Exception:
    return failure(
        "Write conflict during plan execution and yielding is disabled. :: Please retry your operation or multi-document transaction.",
        WRITE_CONFLICT,
        "WriteConflict",
        (TRANSIENT,),
    )


def _roots(storage: Any, index_data: Any) -> dict[tuple[str, str], Any]:
    """Each collection's persistent roots and those of its index maps (None: not persistent ones)."""
    m = updates._bind()
    collection_class, map_class = m["MemoryCollection"], m["MemoryIndexMap"]
    roots: dict[tuple[str, str], Any] = {}
    for db, collections in storage.items():
        for name, collection in collections.items():
            maps = index_data.get(db, {}).get(name, {})
            if type(collection) is not collection_class or any(type(index_map) is not map_class for index_map in maps.values()):
                roots[(db, name)] = None
                continue
            roots[(db, name)] = (collection._snapshot_state(), {index: index_map._snapshot_state() for index, index_map in maps.items()})
    return roots


def _same(state: tuple[Any, ...], other: tuple[Any, ...]) -> bool:
    """Two persistent states are one: the same root objects, the same counters."""
    return all(a is b or (type(a) is int and a == b) for a, b in zip(state, other, strict=True))


def _installable(engine: Any, entry: Any, namespace: tuple[str, str], written: dict[Any, Any], mine: Any, live: Any, maps: Any) -> bool:
    """Whether the transaction's copy of a collection (``mine``, with its index ``maps``) is exactly
    what applying its writes one by one to the live one would give: nobody wrote the live collection
    or its indexes since the transaction began (the same roots), and each written document has the
    place in the natural order that the merge would give it (an updated one its own, the new ones
    the next places in the order they were first written)."""
    m = updates._bind()
    started = entry.roots.get(namespace)
    live_maps = engine._index_data.get(namespace[0], {}).get(namespace[1], {})
    if started is None or type(mine) is not m["MemoryCollection"] or not _same(live._snapshot_state(), started[0]):
        return False
    if set(live_maps) != set(started[1]) or set(maps) != set(live_maps):
        return False
    for index, index_map in live_maps.items():
        if type(index_map) is not m["MemoryIndexMap"] or type(maps[index]) is not m["MemoryIndexMap"]:
            return False
        if not _same(index_map._snapshot_state(), started[1][index]):
            return False
    following = live._next_ordinal
    same_order = mine._ordinals is live._ordinals  # (cf) one map of places: every document has its own in both
    for key, before in written.items():
        if same_order and before is not _ABSENT:
            continue  # what the lookups below would answer for it
        if key not in mine:
            continue
        if before is _ABSENT:
            if mine._ordinals.get(key) != following:
                return False
            following += 1
        elif mine._ordinals.get(key) != live._ordinals.get(key):
            return False
    return bool(mine._next_ordinal == following)


def _install(engine: Any, namespace: tuple[str, str], mine: Any, live: Any, maps: Any) -> None:
    """The transaction's copy of a collection and of its index maps become the live ones (their
    roots: persistent maps, shared, never changed in place). The open rollback scope restores the
    collection's roots, and, journaled here, each index map's."""
    for index, index_map in engine._index_data.get(namespace[0], {}).get(namespace[1], {}).items():
        engine._record_index_state_undo_locked(namespace, str(index), index_map, index_data=engine._index_data, remove_on_rollback=False)
        index_map._restore_state(maps[index]._snapshot_state())
    live._restore_state(mine._snapshot_state())
    scans.carry_id_order(mine, live)


def _changed_fields(engine: Any, before: Any, after: Any) -> set[str] | None:
    """The top-level fields whose stored (encoded) value is not the same object in both stored forms
    of a document (None: not two of mongoeco's field-by-field encoded documents). (ah), (an) and (ao)
    take every unchanged field's encoded value over, and a whole re-encode makes every field a new
    object: more fields, never fewer, are then taken as changed."""
    m = updates._bind()
    stored = m["StoredDocument"]
    if engine._codec is not m["codec"] or type(before) is not stored or type(after) is not stored:
        return None
    old, new = before.payload, after.payload
    if type(old) is not dict or type(new) is not dict:
        return None
    changed = {field for field, value in new.items() if old.get(field, _ABSENT) is not value}
    changed.update(field for field in old if field not in new)
    return changed


def _merge_update(engine: Any, db: str, name: str, live: Any, key: Any, before: Any, after: Any, indexes: list[Any], index_maps: Any) -> bool:
    """One document a transaction updated, applied to the live collection ``live`` with (ah)'s write
    steps; False (nothing done) when they do not apply (another codec or kind of stored value).

    The fields that changed are :func:`_changed_fields`. Only the indexes over them lose the old
    document's entries and get the new one's; the new document is decoded only for those indexes'
    fields (the others are the old document's, decoded already), each field as a whole-document
    decode gives it. mongoeco's whole steps took every index out and in and decoded the whole new
    document."""
    m = updates._bind()
    changed = _changed_fields(engine, before, after)
    if changed is None:
        return False
    new = after.payload
    touched = [index for index in indexes if updates._index_touched(index, changed)]
    if not touched:
        engine._set_storage_document_locked(live, key, after)
        return True
    lean = [index for index in touched if updates._lean(index) and type(index_maps.get(index.name)) is m["MemoryIndexMap"]]
    others = [index for index in touched if index not in lean]
    document = engine._borrow_storage_document(before)
    if others:
        new_document = engine._borrow_storage_document(after)
    else:
        new_document = {}
        for field in {field.split(".", 1)[0] for index in lean for field in index.fields}:
            value = new.get(field, _ABSENT)
            if value is _ABSENT:
                continue
            if field not in changed:
                new_document[field] = document[field]
            elif isinstance(value, dict):
                new_document[field] = m["codec"].decode(value, preserve_bson_wrappers=True)
            elif isinstance(value, list):
                new_document[field] = m["codec"]._decode_list_fast(value, preserve_bson_wrappers=True)
            else:
                new_document[field] = value
    view = {db: {name: others}}
    undo, keys = engine._record_index_membership_undo_locked, engine._index_keys
    data = engine._index_data
    for index in lean:  # _update_indexes_locked(action="delete") for an index with no TTL and no membership rule
        index_map, index_name = index_maps[index.name], str(index.name)
        for entry in keys(document, index.fields):
            undo(db, name, index_name, entry, key, index_data=data)
            if entry in index_map:
                index_map.discard(entry, key)
    if others:
        engine._update_indexes_locked(db, name, key, document, action="delete", indexes_view=view)
    engine._set_storage_document_locked(live, key, after)
    ordinal = live.ordinal_for(key) if type(live) is m["MemoryCollection"] and key in live else None
    for index in lean:  # _update_indexes_locked(action="insert"), likewise
        index_map, index_name = index_maps[index.name], str(index.name)
        for entry in keys(new_document, index.fields):
            undo(db, name, index_name, entry, key, index_data=data)
            index_map.add(entry, key, ordinal=ordinal)
    if others:
        engine._update_indexes_locked(db, name, key, new_document, action="insert", indexes_view=view)
    return True


def patch_transaction_conflicts() -> None:
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
                    roots=_roots(self._storage, self._index_data),
                )

    def noting(self: Any, collection: Any) -> tuple[_TransactionWrites, tuple[str, str]] | None:
        """The open transaction whose write to ``collection`` is noted, and the collection's namespace
        (None: no transaction's, or one not tracked: its commit keeps the global rule)."""
        stack = self._publication_stack
        state = stack[-1].state if stack else None
        if state is None:
            return None
        entry = _transaction_table(self).get(id(state))
        if entry is None or entry.state is not state:
            return None  # not tracked: its commit keeps the global rule
        # (by) A transaction's writes go to one or a few collection objects: each one's namespace is
        # found once, then by its id (the object itself checked, as an id outlives a freed object).
        namespace = entry.namespaces.get(id(collection))
        if namespace is None or entry.collections.get(namespace) is not collection:
            namespace = next((ns for ns, coll in entry.collections.items() if coll is collection), None)
            if namespace is None:
                namespace = next(
                    ((db, name) for db, colls in state.storage.items() for name, coll in colls.items() if coll is collection),
                    None,
                )
                if namespace is None or namespace in entry.collections:
                    entry.untracked = True
                    return None
                entry.collections[namespace] = collection
                entry.sizes[namespace] = len(collection)
            entry.namespaces[id(collection)] = namespace
        return entry, namespace

    def note(self: Any, collection: Any, key: Any) -> None:
        noted = noting(self, collection)
        if noted is None:
            return
        entry, namespace = noted
        written = entry.base.get(namespace)
        if written is not None and key in written:
            return  # noted already: its base is the value it had when first written
        conflict_at_write(self, entry, namespace, collection, key)
        if written is None:
            written = entry.base[namespace] = {}
        written[key] = collection.get(key, _ABSENT)

    def note_all(self: Any, collection: Any, stored: list[tuple[Any, Any]]) -> None:
        """(cc) :func:`note` of each (storage key, its stored value in ``collection`` now) in turn, for a
        statement that writes them all: the transaction, the namespace and the other open transactions'
        documents are found once, not once a document, and each value is the one its caller holds."""
        noted = noting(self, collection)
        if noted is None:
            return
        entry, namespace = noted
        written = entry.base.get(namespace)
        others = [base for other in _transaction_table(self).values() if other is not entry and (base := other.base.get(namespace))]
        collections: Any = self._storage.get(namespace[0]) or {}
        live: Any = collections.get(namespace[1])
        if live is not None and id(entry.started.get(namespace)) != id(live):
            live = None  # created, or replaced, since it began: the commit-time rule judges it
        for key, value in stored:
            if written is not None and key in written:
                continue  # noted already: its base is the value it had when first written
            if (others and any(key in base for base in others)) or (live is not None and live.get(key, _ABSENT) is not value):
                raise _write_conflict_now()  # conflict_at_write's answer
            if written is None:
                written = entry.base[namespace] = {}
            written[key] = value

    def conflict_at_write(self: Any, entry: _TransactionWrites, namespace: tuple[str, str], collection: Any, key: Any) -> None:
        """mongod's first-writer-wins: the first write of a document another open transaction
        wrote, or one written since this transaction's snapshot, fails at once."""
        for other in _transaction_table(self).values():
            if other is not entry and key in other.base.get(namespace, {}):
                raise _write_conflict_now()
        collections: Any = self._storage.get(namespace[0]) or {}
        live: Any = collections.get(namespace[1])
        if live is None or id(entry.started.get(namespace)) != id(live):
            return  # created, or replaced, since it began: the commit-time rule judges it
        if live.get(key, _ABSENT) is not collection.get(key, _ABSENT):
            raise _write_conflict_now()

    def set_document(self: Any, collection: Any, storage_key: Any, document: Any) -> None:
        note(self, collection, storage_key)
        original_set(self, collection, storage_key, document)

    set_document.__wrapped__ = original_set  # type: ignore[attr-defined]
    set_document.mongoshift_layer = updates.NOTE_LAYER  # type: ignore[attr-defined]  # a batch notes its writes first (updates.py)
    updates.WRITE_CHECKS[:] = [note]  # (be) a guarded batch's check before a statement's writes
    updates.STATEMENT_CHECKS[:] = [note_all]  # (cc) a pipeline batch's, before its statement's writes

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
            inserted = deleted = 0
            for k, b in written.items():  # one pass, no generators (cf)
                if b is _ABSENT:
                    inserted += k in mine
                elif k not in mine:
                    deleted += 1
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

    def merge_whole(self: Any, merged: list[Any], concurrent: bool, entry: _TransactionWrites) -> None:
        """(o) as first written: each written document out of every index of the live collection
        and in again, with mongoeco's whole write steps (kept for the tests that compare both)."""
        with _rollback_scopes(self, merged):
            for (db, name), written, mine, live in merged:
                self._invalidate_search_runtime_cache(db, name)
                for key, before in written.items():
                    after = mine.get(key, _ABSENT)
                    if after is not before:
                        _write_whole(self, db, name, live, key, before, after)
            unique_checks(self, merged, concurrent, lean=False)

    def merge(self: Any, merged: list[Any], concurrent: bool, entry: _TransactionWrites) -> None:
        """The transaction's documents applied to the live collections: an insert or a delete with
        mongoeco's whole write steps, an update with (ah)'s (:func:`_merge_update`: only the indexes
        over the fields that changed, the new document decoded only for their keys)."""
        with _rollback_scopes(self, merged):
            for (db, name), written, mine, live in merged:
                self._invalidate_search_runtime_cache(db, name)
                maps = entry.state.index_data.get(db, {}).get(name, {})
                if _installable(self, entry, (db, name), written, mine, live, maps):
                    _install(self, (db, name), mine, live, maps)
                    continue
                indexes = self._indexes.get(db, {}).get(name, [])
                index_maps = self._index_data.get(db, {}).get(name, {})
                for key, before in written.items():
                    after = mine.get(key, _ABSENT)
                    if after is before:
                        continue
                    if before is not _ABSENT and after is not _ABSENT and _merge_update(self, db, name, live, key, before, after, indexes, index_maps):
                        continue
                    _write_whole(self, db, name, live, key, before, after)
            unique_checks(self, merged, concurrent, lean=True)

    def unique_checks(self: Any, merged: list[Any], concurrent: bool, *, lean: bool) -> None:
        """Each written document against the live unique indexes, when something was written since the
        transaction began. ``lean``: not an updated document whose changed fields no unique index
        reads (its keys there are those it held in the live collection, where nobody could take them;
        the transaction's own write checked it against the same index definitions)."""
        if not concurrent:
            return  # the live collections were the snapshot: the transaction's own checks hold
        for (db, name), written, mine, _ in merged:
            unique = [index for index in self._indexes.get(db, {}).get(name, []) if index.unique]
            for key, before in written.items():
                after = mine.get(key, _ABSENT)
                if after is _ABSENT or after is before:
                    continue
                if lean and before is not _ABSENT:
                    changed = _changed_fields(self, before, after)
                    if changed is not None and not any(updates._index_touched(index, changed) for index in unique):
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

    merge.__wrapped__ = merge_whole  # type: ignore[attr-defined]
    engine_class._mongoshift_merge = merge  # type: ignore[attr-defined]  # the merge step commit calls (the tests swap in merge_whole)

    def unwritten_since_start(entry: _TransactionWrites, namespace: tuple[str, str], live: Any) -> bool:
        """(cf) Whether the live collection (the one the transaction began with) has the very roots it had
        then: no write reached it since (a write that failed was rolled back whole, within its own
        steps). The note of each document the transaction wrote found its value in the live collection
        (the first-writer-wins check), and recorded that same value as its base: the live value is
        still that base, which is what the commit's check of each document tests."""
        started = entry.roots.get(namespace)
        return started is not None and type(live) is MemoryCollection and _same(live._snapshot_state(), started[0])

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
                if unwritten_since_start(entry, (db, name), live):
                    continue  # (cf) each document is as this transaction's note found it: the check below holds
                for key, before in written.items():
                    if live.get(key, _ABSENT) is not before:
                        raise _write_conflict(f"a document of {db}.{name} that it wrote was written meanwhile")
            sequence, changes, pruned_through = self._prepare_committed_changes_locked(state.pending_changes)
            self._mongoshift_merge(merged, concurrent, entry)
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

@contextlib.contextmanager
def _rollback_scopes(engine: Any, merged: list[Any]) -> Iterator[None]:
    """mongoeco's rollback scope of every collection a commit merges into, open for the merge."""
    views = {
        "storage": engine._storage,
        "indexes": engine._indexes,
        "index_data": engine._index_data,
        "search_indexes": engine._search_indexes,
        "collections": engine._collections,
        "options": engine._collection_options,
    }
    with contextlib.ExitStack() as scopes:
        for (db, name), _, _, _ in merged:
            scopes.enter_context(engine._document_state_rollback_locked(db, name, **views))
        yield

def _write_whole(engine: Any, db: str, name: str, live: Any, key: Any, before: Any, after: Any) -> None:
    """One written document merged with mongoeco's whole write steps: out of every index (and out of
    the collection when the transaction deleted it), then in again (when it is still there)."""
    if before is not _ABSENT:
        engine._update_indexes_locked(db, name, key, engine._borrow_storage_document(before), action="delete")
        if after is _ABSENT:
            engine._delete_storage_document_locked(live, key)
    if after is not _ABSENT:
        engine._set_storage_document_locked(live, key, after)
        engine._update_indexes_locked(db, name, key, engine._borrow_storage_document(after), action="insert")
