"""The planner, table-driven: declaration + server state → actions (no server involved)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from bson import Int64, Regex

from mongoshift.converge.inspection import CollectionState, MinProbe
from mongoshift.converge.planner import DROPS_OWN_RULES, plan, plan_collection
from mongoshift.schema.collections import CollectionDeclaration
from mongoshift.schema.index_specs import IndexSpec, ValidatorSpec

FR_FILLED = {
    "locale": "fr",
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 2,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}


def declared(**values: Any) -> CollectionDeclaration:
    return CollectionDeclaration.model_validate({"name": "users", **values})


def ix(key: dict[str, Any], name: str | None = None, **options: Any) -> IndexSpec:
    """A server index as listIndexes reports it."""
    return IndexSpec.from_document({"v": 2, "key": key, "name": name or "_".join(f"{k}_{v}" for k, v in key.items()), **options})


def state(*indexes: IndexSpec, validator: dict[str, Any] | None = None, kind: str = "collection", **extra: Any) -> CollectionState:
    spec = ValidatorSpec.from_options(validator or {})
    return CollectionState("users", kind, spec, indexes=indexes, **extra)  # type: ignore[arg-type]


MISSING = CollectionState("users", "missing")

TEXT_SERVER = ix(
    {"_fts": "text", "_ftsx": 1},
    "bio_text_title_text",
    weights={"bio": 1, "title": Int64(5)},
    default_language="english",
    language_override="language",
    textIndexVersion=3,
)

CASES: list[tuple[str, dict[str, Any], CollectionState, bool, list[tuple[str, str | None, str]]]] = [
    (
        "missing collection: create it, then every index",
        {"indexes": [{"keys": {"email": 1}, "unique": True}], "validator": {"a": {"$exists": True}}},
        MISSING,
        False,
        [("collection", None, "create"), ("index", "email_1", "create")],
    ),
    (
        "directions 1, 1.0 and Int64(1) are the same",
        {"indexes": [{"keys": {"a": 1, "b": -1}}]},
        state(ix({"a": 1.0, "b": Int64(-1)}, "a_1_b_-1")),
        False,
        [("index", "a_1_b_-1", "unchanged")],
    ),
    (
        "false booleans reported by the server are not a difference",
        {"indexes": [{"keys": {"a": 1}}]},
        state(ix({"a": 1}, unique=False, sparse=False, hidden=False)),
        False,
        [("index", "a_1", "unchanged")],
    ),
    (
        "text index in the stored _fts form with its defaults",
        {"indexes": [{"keys": {"bio": "text", "title": "text"}, "weights": {"title": 5}}]},
        state(TEXT_SERVER),
        False,
        [("index", "bio_text_title_text", "unchanged")],
    ),
    (
        "text weights changed: rebuild",
        {"indexes": [{"keys": {"bio": "text", "title": "text"}, "weights": {"title": 9}}]},
        state(TEXT_SERVER),
        False,
        [("index", "bio_text_title_text", "rebuild")],
    ),
    (
        "collation compared on declared fields only",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "fr", "strength": 2}}]},
        state(ix({"c": 1}, collation=FR_FILLED)),
        False,
        [("index", "c_1", "unchanged")],
    ),
    (
        "collation strength changed: rebuild",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "fr", "strength": 3}}]},
        state(ix({"c": 1}, collation=FR_FILLED)),
        False,
        [("index", "c_1", "rebuild")],
    ),
    (
        "a bare locale means strength 3: a server index at strength 2 is rebuilt",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "fr"}}]},
        state(ix({"c": 1}, collation=FR_FILLED)),
        False,
        [("index", "c_1", "rebuild")],
    ),
    (
        "a bare locale matches a server that fills the locale's own defaults in, or none",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "fr"}}, {"keys": {"d": 1}, "collation": {"locale": "da"}}]},
        state(ix({"c": 1}, collation={**FR_FILLED, "strength": 3}), ix({"d": 1}, collation={"locale": "da", "caseFirst": "upper"})),
        False,
        [("index", "c_1", "unchanged"), ("index", "d_1", "unchanged")],
    ),
    (
        "simple written out on a collection with a default collation: an index carrying the default is rebuilt",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "simple"}}]},
        state(ix({"c": 1}, collation=FR_FILLED), default_collation={k: v for k, v in FR_FILLED.items() if k != "version"}),
        False,
        [("index", "c_1", "rebuild")],
    ),
    (
        "simple written out matches an index without a collation, or one reported as simple",
        {"indexes": [{"keys": {"c": 1}, "collation": {"locale": "simple"}}, {"keys": {"d": 1}, "collation": {"locale": "simple"}}]},
        state(ix({"c": 1}), ix({"d": 1}, collation={"locale": "simple"}), default_collation={"locale": "fr"}),
        False,
        [("index", "c_1", "unchanged"), ("index", "d_1", "unchanged")],
    ),
    (
        "no declared collation matches the collection's default one",
        {"indexes": [{"keys": {"c": 1}}]},
        state(ix({"c": 1}, collation=FR_FILLED), default_collation={k: v for k, v in FR_FILLED.items() if k != "version"}),
        False,
        [("index", "c_1", "unchanged")],
    ),
    (
        "TTL changed: modify in place",
        {"indexes": [{"keys": {"seen": 1}, "expireAfterSeconds": 60}]},
        state(ix({"seen": 1}, expireAfterSeconds=Int64(3600))),
        False,
        [("index", "seen_1", "modify")],
    ),
    (
        "TTL added to an existing index: modify in place",
        {"indexes": [{"keys": {"seen": 1}, "expireAfterSeconds": 60}]},
        state(ix({"seen": 1})),
        False,
        [("index", "seen_1", "modify")],
    ),
    (
        "TTL removed: rebuild",
        {"indexes": [{"keys": {"seen": 1}}]},
        state(ix({"seen": 1}, expireAfterSeconds=60)),
        False,
        [("index", "seen_1", "rebuild")],
    ),
    (
        "hidden toggled: modify in place",
        {"indexes": [{"keys": {"h": 1}, "hidden": True}]},
        state(ix({"h": 1})),
        False,
        [("index", "h_1", "modify")],
    ),
    (
        "made unique: modify in place (prepareUnique, then unique)",
        {"indexes": [{"keys": {"u": 1}, "unique": True}]},
        state(ix({"u": 1})),
        False,
        [("index", "u_1", "modify")],
    ),
    (
        "unique removed: rebuild",
        {"indexes": [{"keys": {"u": 1}}]},
        state(ix({"u": 1}, unique=True)),
        False,
        [("index", "u_1", "rebuild")],
    ),
    (
        "hidden and partial filter changed together: rebuild",
        {"indexes": [{"keys": {"p": 1}, "hidden": True, "partialFilterExpression": {"p": {"$gt": 5}}}]},
        state(ix({"p": 1}, partialFilterExpression={"p": {"$gt": 1}})),
        False,
        [("index", "p_1", "rebuild")],
    ),
    (
        "partial filter compared by value, not key order or number type",
        {"indexes": [{"keys": {"p": 1}, "partialFilterExpression": {"p": {"$gt": 5}, "q": True}}]},
        state(ix({"p": 1}, partialFilterExpression={"q": True, "p": {"$gt": 5.0}})),
        False,
        [("index", "p_1", "unchanged")],
    ),
    (
        "an undeclared index is kept without prune",
        {"indexes": []},
        state(ix({"x": 1})),
        False,
        [("index", "x_1", "keep")],
    ),
    (
        "an undeclared index is dropped with prune",
        {"indexes": []},
        state(ix({"x": 1})),
        True,
        [("index", "x_1", "drop")],
    ),
    (
        "prune = true in the declaration drops without the flag",
        {"indexes": [], "prune": True},
        state(ix({"x": 1})),
        False,
        [("index", "x_1", "drop")],
    ),
    (
        "a shard-key index is never pruned",
        {"indexes": []},
        state(ix({"tenant": 1, "at": 1}), shard_key=("tenant",)),
        True,
        [("index", "tenant_1_at_1", "keep")],
    ),
    (
        "indexes not declared at all are not listed, and never pruned",
        {"validator": {"a": {"$exists": True}}},
        state(ix({"x": 1}), validator={"validator": {"a": {"$exists": True}}}),
        True,
        [("validator", None, "unchanged")],
    ),
    (
        "an index name used by other keys is a conflict",
        {"indexes": [{"keys": {"email": 1, "tenant": 1}, "name": "by_email"}]},
        state(ix({"email": 1}, "by_email")),
        True,
        [("index", "by_email", "conflict")],
    ),
    (
        "an undeclared index with the same keys and options satisfies the declaration",
        {"indexes": [{"keys": {"email": 1}, "name": "by_email"}]},
        state(ix({"email": 1}, "email_1")),
        True,
        [("index", "by_email", "unchanged")],
    ),
    (
        "an undeclared index with the same keys and other options is a conflict",
        {"indexes": [{"keys": {"email": 1}, "name": "by_email", "unique": True}]},
        state(ix({"email": 1}, "email_1")),
        False,
        [("index", "by_email", "conflict")],
    ),
    (
        "... which prune replaces",
        {"indexes": [{"keys": {"email": 1}, "name": "by_email", "unique": True}]},
        state(ix({"email": 1}, "email_1")),
        True,
        [("index", "by_email", "rebuild")],
    ),
    (
        "a view is a conflict",
        {"indexes": []},
        state(kind="view"),
        False,
        [("collection", None, "conflict")],
    ),
    (
        "a time-series collection is a conflict",
        {"indexes": []},
        state(kind="timeseries"),
        False,
        [("collection", None, "conflict")],
    ),
    (
        "validators compared canonically (key order, 1 vs 1.0)",
        {"validator": {"$jsonSchema": {"properties": {"n": {"minimum": 1}}, "bsonType": "object"}}},
        state(validator={"validator": {"$jsonSchema": {"bsonType": "object", "properties": {"n": {"minimum": 1.0}}}}, "validationLevel": "strict"}),
        False,
        [("validator", None, "unchanged")],
    ),
    (
        "a regular expression compiled in Python matches the server's, which may drop the implicit unicode flag",
        {"validator": {"a": re.compile("@x\\.com$", re.I), "b": Regex("y", "m"), "c": re.compile("z")}},
        state(validator={"validator": {"a": Regex("@x\\.com$", "i"), "b": Regex("y", "mu"), "c": Regex("z", "u")}}),
        False,
        [("validator", None, "unchanged")],
    ),
    (
        "a regular expression with other flags: modify",
        {"validator": {"a": re.compile("x", re.I)}},
        state(validator={"validator": {"a": Regex("x", "m")}}),
        False,
        [("validator", None, "modify")],
    ),
    (
        "validator level changed: modify",
        {"validator": {"a": {"$exists": True}}, "validation_level": "moderate"},
        state(validator={"validator": {"a": {"$exists": True}}}),
        False,
        [("validator", None, "modify")],
    ),
    (
        "validator = false removes the server's validator",
        {"validator": False},
        state(validator={"validator": {"a": {"$exists": True}}}),
        False,
        [("validator", None, "modify")],
    ),
    (
        "no validator on either side (an empty one reported)",
        {"validator": None},
        state(validator={"validator": {}, "validationLevel": "strict", "validationAction": "error"}),
        False,
        [("validator", None, "unchanged")],
    ),
    (
        "versioning on an existing collection: validator and version index",
        {"versioning": {"current": 1, "min": 0}},
        state(),
        False,
        [("validator", None, "modify"), ("index", "__v_1__id_1", "create")],
    ),
    (
        "raising min while a document is below it: conflict",
        {"versioning": {"current": 3, "min": 2}},
        state(ix({"__v": 1, "_id": 1}), probe=MinProbe(2, True)),
        False,
        [("validator", None, "conflict"), ("index", "__v_1__id_1", "unchanged")],
    ),
    (
        "raising min when the probe cannot answer: conflict (fail closed)",
        {"versioning": {"current": 3, "min": 2}},
        state(ix({"__v": 1, "_id": 1}), probe=MinProbe(2, None, "the check did not finish within 60s")),
        False,
        [("validator", None, "conflict"), ("index", "__v_1__id_1", "unchanged")],
    ),
    (
        "raising min when no document is below it: modify",
        {"versioning": {"current": 3, "min": 2}},
        state(ix({"__v": 1, "_id": 1}), probe=MinProbe(2, False)),
        False,
        [("validator", None, "modify"), ("index", "__v_1__id_1", "unchanged")],
    ),
    (
        "actions come in application order",
        {"indexes": [{"keys": {"a": 1}}, {"keys": {"b": 1}, "sparse": True}, {"keys": {"c": 1}, "hidden": True}], "validator": {"x": 1}},
        state(ix({"z": 1}), ix({"c": 1}), ix({"b": 1})),
        True,
        [("validator", None, "modify"), ("index", "a_1", "create"), ("index", "c_1", "modify"), ("index", "b_1", "rebuild"), ("index", "z_1", "drop")],
    ),
]


@pytest.mark.parametrize(("label", "declaration", "server", "prune", "expected"), CASES, ids=[c[0] for c in CASES])
def test_plan(label: str, declaration: dict[str, Any], server: CollectionState, prune: bool, expected: list[tuple[str, str | None, str]]) -> None:
    actions = plan_collection(declared(**declaration), server, prune=prune)
    got = [(a.target, a.name, a.action) for a in actions]
    if label != "actions come in application order":
        got, expected = sorted(got, key=str), sorted(expected, key=str)
    assert got == expected


def test_modify_lists_the_changed_options_and_rebuild_says_why() -> None:
    [modify] = plan_collection(declared(indexes=[{"keys": {"s": 1}, "expireAfterSeconds": 60, "hidden": True}]), state(ix({"s": 1}, expireAfterSeconds=5)))
    assert modify.action == "modify" and modify.changes == ("hidden", "expireAfterSeconds")
    assert modify.before is not None and modify.after is not None and modify.after["expireAfterSeconds"] == 60
    [rebuild] = plan_collection(declared(indexes=[{"keys": {"s": 1}, "sparse": True}]), state(ix({"s": 1})))
    assert rebuild.destructive and "sparse" in (rebuild.reason or "")
    [replace] = plan_collection(declared(indexes=[{"keys": {"s": 1}, "sparse": True, "name": "by_s"}]), state(ix({"s": 1}, name="old_s")), prune=True)
    assert replace.action == "rebuild" and replace.reason == "replaces the undeclared 'old_s' (sparse differs)"


def test_prune_replacing_an_undeclared_twin_names_it() -> None:
    [rebuild] = plan_collection(declared(indexes=[{"keys": {"e": 1}, "name": "by_e", "unique": True}]), state(ix({"e": 1}, "legacy")), prune=True)
    assert (rebuild.action, rebuild.name, rebuild.replaces) == ("rebuild", "by_e", "legacy")


def test_versioning_merges_into_the_users_schema() -> None:
    d = declared(
        validator={"$jsonSchema": {"bsonType": "object", "required": ["email"], "properties": {"email": {"bsonType": "string"}}}},
        versioning={"current": 2, "min": 1},
    )
    [create, index] = plan_collection(d, MISSING)
    assert create.after == {
        "validator": {
            "$jsonSchema": {
                "bsonType": "object",
                "required": ["email", "__v", "__rev"],
                "properties": {
                    "email": {"bsonType": "string"},
                    "__v": {"bsonType": "int", "minimum": 1},
                    "__rev": {"bsonType": ["int", "long"], "minimum": 0},
                },
            }
        },
        "validationLevel": "strict",
        "validationAction": "error",
    }
    assert index.after == {"key": {"__v": 1, "_id": 1}, "name": "__v_1__id_1"}


def test_versioning_alone_is_moderate_and_min_zero_requires_nothing() -> None:
    [create, _] = plan_collection(declared(versioning={"current": 1, "min": 0, "field": "sv", "revision_field": "rv"}), MISSING)
    assert create.after is not None and create.after["validationLevel"] == "moderate"
    schema = create.after["validator"]["$jsonSchema"]
    assert "required" not in schema and schema["properties"]["sv"] == {"bsonType": ["int", "long", "double", "decimal", "null"], "minimum": 0}
    assert schema["properties"]["rv"] == {"bsonType": ["int", "long", "null"], "minimum": 0}  # null counts as 0


def test_versioning_without_a_validator_says_it_removes_the_servers_own_rules() -> None:
    """A legacy validator is replaced by the versioning rules alone when no validator is declared: the plan says so."""
    legacy = {"validator": {"email": {"$type": "string"}}, "validationAction": "warn"}
    [change, _] = plan_collection(declared(versioning={"current": 1, "min": 0}), state(validator=legacy))
    assert change.action == "modify" and change.reason == DROPS_OWN_RULES
    mixed = {"validator": {"$jsonSchema": {"properties": {"__v": {"bsonType": "int"}}, "required": ["email"]}}}
    assert plan_collection(declared(versioning={"current": 1}), state(validator=mixed))[0].reason == DROPS_OWN_RULES
    # the server's validator is only the versioning rules (an earlier converge's), or "no validator" is declared: no warning
    [earlier] = plan_collection(declared(versioning={"current": 1, "min": 0}, indexes=[]), MISSING)[:1]
    ours = {"validator": earlier.after["validator"], "validationLevel": "moderate"} if earlier.after else {}
    raised = plan_collection(declared(versioning={"current": 2, "min": 0}, indexes=[]), state(validator=ours))
    assert [a.reason for a in raised if a.target == "validator"] in ([None], ["change the validator"])
    explicit = plan_collection(declared(versioning={"current": 1, "min": 0}, validator=False), state(validator=legacy))
    assert explicit[0].reason == "change the validator"


def test_versioning_index_false_and_a_declared_index_on_the_same_keys() -> None:
    assert [a.name for a in plan_collection(declared(versioning={"current": 1, "index": False}), MISSING)] == [None]
    mine = declared(indexes=[{"keys": [["__v", 1], ["_id", 1]], "name": "mine"}], versioning={"current": 1})
    assert [a.name for a in plan_collection(mine, MISSING)] == [None, "mine"]


def test_whole_plan_flags() -> None:
    other = CollectionDeclaration.model_validate({"name": "orders", "indexes": [{"keys": {"a": 1}}]})
    p = plan([declared(indexes=[]), other], {"users": state(ix({"x": 1})), "orders": CollectionState("orders", "view")}, prune=True)
    assert [a.action for a in p.destructive] == ["drop"]
    assert [a.collection for a in p.conflicts] == ["orders"]
    assert not p.in_sync
    assert plan([declared(indexes=[{"keys": {"x": 1}}])], {"users": state(ix({"x": 1}))}).in_sync


def test_a_sharded_collections_version_index_carries_the_shard_key_and_the_key_index_is_kept() -> None:
    server = state(
        ix({"tenant": 1, "at": 1}),
        ix({"__v": 1, "_id": 1}),
        shard_key=("tenant", "at"),
        shard_key_spec=(("tenant", 1), ("at", 1)),
    )
    actions = plan_collection(declared(indexes=[], versioning={"current": 2}), server, prune=True)
    got = {(a.name, a.action) for a in actions if a.target == "index"}
    assert got == {("__v_1_tenant_1_at_1__id_1", "create"), ("tenant_1_at_1", "keep"), ("__v_1__id_1", "drop")}
    create = next(a for a in actions if a.action == "create")
    assert create.after is not None and list(create.after["key"]) == ["__v", "tenant", "at", "_id"]


def test_a_hashed_shard_key_goes_into_the_version_index_as_hashed() -> None:
    server = state(ix({"email": "hashed"}), shard_key=("email",), shard_key_spec=(("email", "hashed"),))
    actions = plan_collection(declared(versioning={"current": 1}), server)
    create = next(a for a in actions if a.action == "create")
    assert create.after is not None and create.after["key"] == {"__v": 1, "email": "hashed", "_id": 1}
