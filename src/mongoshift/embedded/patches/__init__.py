"""Version-pinned fixes for the wire server of mongoeco 4.11.0.

mongoeco serves the MongoDB wire protocol from Python. Probed through the real
pymongo driver, version 4.11.0 has a handful of gaps that would break or mislead
mongoshift's tests (docs/embedded.md lists each one with its cause and its test).
Every fix below replaces or wraps one private function of mongoeco, so it is only
valid for the exact version it was written against: :func:`apply` refuses to run
on any other version instead of patching code it has never seen.

The fixes only make mongoeco answer the way a MongoDB replica set does; none
adds a feature mongod lacks (the added commands, collMod and $changeStream, are mongod's). They
are process-wide and idempotent; call :func:`apply` before building the server
(``mongoshift.embedded.server`` does).

One module per area; each fix keeps the letter of its row in docs/embedded.md:

- :mod:`.wire`: (a) bulk insert, (p) single-insert ``_id`` scan, (g) rename sent to admin,
  (h) unknown commands, (q) the change-stream shim's hook, (r) 64-bit cursor ids, (bo) cursor batches,
  (ci) a TLS handshake refused at once
- :mod:`.transactions`: (b, c, e) commit and abort, (j) a failed statement aborts,
  (o) per-document conflicts, (by) a write's namespace found once per collection
- :mod:`.replica_set`: (u) a replica set's hello and cluster time, (v) fail points
  (with (d), fail points on commit and abort), (w) retryable writes, (x) error labels,
  (y) getParameter, buildinfo, search-index commands, killSessions, transaction lifetimes
  and a standalone's refusals, (ad) snapshot reads
- :mod:`.indexes`: (s) compound hashed indexes, (t) a find's min/max bounds, (ax) unique index builds in one pass,
  (ay) compound unique indexes checked by lookup, (cr) listIndexes entries shaped as mongod's, (da) an existing index
  under another name refused
- :mod:`.coll_mod`: (l) collMod
- :mod:`.create`: (cq) a capped collection's size and count given as doubles
- :mod:`.queries`: (i) collStats sizes, (k, n) ``$in`` and ``$nin`` membership, (m) Decimal128 ``$set``, (cu) a double's,
  (z) English's regional collations, (ab) ``let`` variables evaluated,
  (az) a double beside a decimal and binaries compared as mongod's
- :mod:`.regexes`: (cx) a query's regular expression matches a stored one, ``$eq`` of one is an equality
- :mod:`.comparisons`: (aq) ``$gt``/``$gte``/``$lt``/``$lte`` compare only within a type bracket, as mongod's,
  (bx) ObjectIds by their bytes in one call, (ck) binaries in mongod's order (length, subtype, bytes)
- :mod:`.documents`: (aa) ``$``-prefixed ``_id`` fields, (bn) a ``$jsonSchema`` ``additionalProperties`` that is a schema
- :mod:`.aggregation`: (ac) ``$out`` and database-level ``aggregate``, (cw) a missing value left out of ``$push`` and ``$addToSet``
- :mod:`.type_names`: (cj) the BSON type names of ``$type``, in aggregation expressions and in queries
- :mod:`.scans`: (ae) the ``_id`` order, (af) ``_id`` range scans, (ag) ``_id`` ``$in`` by lookup
- :mod:`.counts`: (ap) ``count_documents``' aggregate counted inside the engine, without a ``$group`` stream,
  (cl) and a ``$group`` by the ``_id``'s ``$type``, (cp) documents whose top-level value rules out a ``$not: {$type}``
  or an ``$exists`` skipped before the matcher
- :mod:`.distinct`: (bw) ``distinct`` by lookups, not by a comparison with every value kept
- :mod:`.updates`: (ah) guarded updates by ``_id``, (ai) index keys of top-level fields (and (ay)'s of compound indexes),
  (cn) an ``$inc`` or ``$mul`` past the int64 range refused as that statement's BadValue
- :mod:`.pipeline_updates`: (an) pipeline updates of top-level fields, with (ah)'s write steps, (ct) a value's
  new BSON type written
- :mod:`.expressions`: (an)'s ``$set`` expressions compiled once per command (issue 27, item 2)
- :mod:`.arithmetic`: (co) aggregation arithmetic past the int64 range gives a double, as mongod's,
  (cz) an integer result with a 64-bit operand stays 64-bit
- :mod:`.conversions`: (cs) ``$convert`` to ``"decimal"`` and to a type given by its number
- :mod:`.find_and_modify`: (ao) ``findAndModify`` by ``_id`` with (ah)'s write steps
- :mod:`.values`: (aj) ObjectIds not deep-copied, plain wire values converted at once, (as) requests
  converted by pymongo's decoder, plain replies encoded as they are, (bv) a sequence document over 16 MiB refused,
  (cy) a date out of the server's range refused in words naming no value
- :mod:`.views`: (bi) a view listed as a view, (cv) reads through a view run its pipeline on its source,
  writes to it are refused
- :mod:`.loops`: (al) commands on the engine thread's loop, heartbeats on the network loop, (am) its shutdown

(ak), the server process's garbage-collector threshold, is set by ``server.run``: it is no patch.

The version pin and the order the fixes are applied in are here and nowhere else.
"""

from __future__ import annotations

import logging

from . import (
    aggregation,
    arithmetic,
    coll_mod,
    comparisons,
    conversions,
    counts,
    create,
    distinct,
    documents,
    find_and_modify,
    indexes,
    loops,
    pipeline_updates,
    queries,
    regexes,
    replica_set,
    scans,
    transactions,
    type_names,
    updates,
    values,
    views,
    wire,
)

PINNED_VERSION = "4.11.0"

log = logging.getLogger(__name__)

_applied = False


class UnsupportedMongoecoVersion(RuntimeError):
    """The installed mongoeco is not the version these patches were written for."""


def check_version(version: str | None = None) -> None:
    """Raise unless ``version`` (default: the installed mongoeco's) is the pinned one."""
    if version is None:
        import mongoeco

        version = str(getattr(mongoeco, "__version__", "unknown"))
    if version != PINNED_VERSION:
        raise UnsupportedMongoecoVersion(
            f"mongoshift's embedded server needs mongoeco=={PINNED_VERSION}, found {version}: "
            f"its fixes patch private mongoeco code and are only valid for that version "
            f'(pip install "mongoeco=={PINNED_VERSION}", or "mongoshift[embedded]")'
        )


def apply() -> None:
    """Check the mongoeco version, then install every fix once per process, in this order."""
    global _applied
    check_version()
    if _applied:
        return
    wire.patch_insert()  # (a)
    wire.patch_single_insert_id_scan()  # (p)
    transactions.patch_transactions()  # (b, c, e)
    transactions.patch_errors_abort_transaction()  # (j)
    wire.patch_rename_from_admin()  # (g)
    wire.patch_unknown_command()  # (h)
    queries.patch_bson_size()  # (i)
    queries.patch_in_lookup()  # (k)
    queries.patch_kept_answers()  # (ar), outside (k): a value (ar) does not keep takes (k)'s code
    coll_mod.patch_coll_mod()  # (l)
    create.patch_capped_numbers()  # (cq)
    queries.patch_decimal_set()  # (m), (cu)
    queries.patch_in_membership_once()  # (n)
    queries.patch_exact_equality()  # (az)
    regexes.patch_regex_matches()  # (cx)
    type_names.patch_type_names()  # (cj)
    comparisons.patch_type_brackets()  # (aq), before (af): its walks end where a bound's bracket ends
    comparisons.patch_binary_order()  # (ck)
    transactions.patch_transaction_conflicts()  # (o)
    scans.patch_id_order()  # (ae), after (o): it wraps the re-key hook (o) installs
    scans.patch_id_range_scans()  # (af)
    scans.patch_id_in_lookup()  # (ag)
    counts.patch_count_aggregates()  # (ap), over (af)'s order and (ag)'s candidates
    distinct.patch_distinct()  # (bw)
    updates.patch_guarded_updates()  # (ah)
    updates.patch_index_keys()  # (ai)
    updates.patch_arithmetic_overflow()  # (cn)
    arithmetic.patch_expression_overflow()  # (co), before (an) compiles its $add with the module's bson_add
    arithmetic.patch_long_results()  # (cz)
    conversions.patch_convert_targets()  # (cs)
    pipeline_updates.patch_pipeline_updates()  # (an), under (ah)'s execute_server_update: it replaces the update_many that one calls
    pipeline_updates.patch_pipeline_type_changes()  # (ct)
    find_and_modify.patch_find_and_modify()  # (ao)
    values.patch_object_id_copies()  # (aj)
    values.patch_plain_wire_values()  # (aj)
    values.patch_wire_decoding()  # (as) and (bv), after (aj): its conversion is mongoeco's own, kept by (aj)
    values.patch_plain_materialization()  # (as)
    wire.patch_change_streams()  # (q)
    indexes.patch_compound_hashed_indexes()  # (s)
    indexes.patch_equivalent_index_names()  # (da), outside (s)
    indexes.patch_find_min_max()  # (t), before (r): its replies' cursor ids are widened there too
    indexes.patch_unique_index_builds()  # (ax), outside (s): it takes only plain 1/-1 keys, which (s) passes through
    indexes.patch_compound_unique_checks()  # (ay), over (ai)'s compound index keys
    indexes.patch_single_field_unique_nulls()  # (bj)
    views.patch_view_reads_and_writes()  # (cv), before (r): its cursors' ids are widened there too
    wire.patch_int64_cursor_ids()  # (r)
    wire.patch_cursor_batches()  # (bo)
    wire.patch_tls_refused()  # (ci)
    queries.patch_english_locales()  # (z)
    documents.patch_dollar_prefixed_ids()  # (aa)
    documents.patch_schema_additional_properties()  # (bn)
    queries.patch_let_evaluated()  # (ab)
    aggregation.patch_database_aggregate()  # (ac)
    aggregation.patch_out_stage()  # (ac), outside (q): the change-stream shim never sees $out
    aggregation.patch_accumulated_missing_values()  # (cw)
    views.patch_view_listing()  # (bi)
    indexes.patch_index_listing()  # (cr)
    replica_set.patch_replica_set()  # (u)-(y), (ad): outside every other fix of execute_prepared, it sees each command whole
    replica_set.patch_close_connection()  # (v)
    # Last: the outermost wrapper of a request's dispatch, so that everything inside it runs on the engine's loop.
    loops.patch_engine_thread_dispatch()  # (al)
    loops.patch_engine_thread_close()  # (am)
    _applied = True
    log.debug("mongoeco %s patched", PINNED_VERSION)
