"""The pure parts: the JSON schema translation and the three-way merge, case by case."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from mongoshift.models.changes import compare, render
from mongoshift.models.jsonschema import Converter
from mongoshift.models.merge import merge_declaration
from mongoshift.models.readers import ModelShape
from mongoshift.models.snapshot import Shape


def convert(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[str]]:
    converter = Converter("M", defs or {})
    return converter.node(schema, "f"), converter.unsupported


def test_types_constraints_and_draft_4_bounds() -> None:
    assert convert({"type": "integer", "exclusiveMinimum": 0, "maximum": 9}) == (
        {"bsonType": ["int", "long"], "minimum": 0, "exclusiveMinimum": True, "maximum": 9}, []
    )
    assert convert({"type": "string", "format": "email", "maxLength": 5}) == ({"bsonType": "string", "maxLength": 5}, [])
    assert convert({"const": "x"}) == ({"enum": ["x"]}, [])
    assert convert({"type": ["string", "null"]}) == ({"bsonType": ["string", "null"]}, [])
    assert convert({"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}]}) == ({"bsonType": ["int", "long", "string", "null"]}, [])
    assert convert({"anyOf": [{"type": "string"}, {}]}) == ({}, [])  # Any in a union: anything goes


def test_what_has_no_rule_is_named_and_left_open() -> None:
    rule, unsupported = convert({"allOf": [{"type": "string"}, {"minLength": 2}]})
    assert rule == {} and unsupported == ["M.f: allOf with several schemas is not translated"]
    rule, unsupported = convert({"type": "string", "contentEncoding": "base64"})
    assert rule == {"bsonType": "string"} and unsupported == ["M.f: 'contentEncoding' is not translated"]
    rule, unsupported = convert({"$ref": "#/$defs/Node"}, {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}})
    assert rule == {"bsonType": "object", "properties": {"next": {"bsonType": "object"}}}
    assert unsupported == ["M.f.next: Node contains itself: the nested levels are not checked"]
    assert convert({"$ref": "#/$defs/Gone"}) == ({}, ["M.f: reference 'Gone' not found"])


def declaration(**parts: Any) -> dict[str, Any]:
    return {"indexes": [], "validation_level": "moderate", "validation_action": "warn", **parts}


def schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"$jsonSchema": {"bsonType": "object", "properties": properties, "required": required}}


def test_the_merge_follows_the_models_where_untouched_and_keeps_edits_and_removals() -> None:
    base = declaration(indexes=[{"keys": {"a": 1}, "name": "a_1"}, {"keys": {"b": 1}, "name": "b_1"}],
                       validator=schema({"a": {"bsonType": "string"}, "b": {"bsonType": "int"}}, ["a", "b"]))
    mine = declaration(indexes=[{"keys": {"a": 1}, "name": "a_1", "hidden": True}],  # b_1 removed, a_1 edited
                       validator=schema({"a": {"bsonType": "string"}, "b": {"bsonType": "int"}, "own": {"bsonType": "bool"}}, ["a"]),
                       validation_action="error", prune=True)
    new = declaration(indexes=[{"keys": {"a": 1}, "name": "a_1"}, {"keys": {"b": 1}, "name": "b_1"}, {"keys": {"c": 1}, "name": "c_1"}],
                      validator=schema({"a": {"bsonType": "string"}, "b": {"bsonType": "long"}, "c": {"bsonType": "date"}}, ["a", "b", "c"]))
    merged, notes = merge_declaration(base, new, mine)
    assert merged["indexes"] == [{"keys": {"a": 1}, "name": "a_1", "hidden": True}, {"keys": {"c": 1}, "name": "c_1"}]
    assert merged["validation_action"] == "error" and merged["prune"] is True
    properties = merged["validator"]["$jsonSchema"]["properties"]
    assert properties == {"a": {"bsonType": "string"}, "b": {"bsonType": "long"}, "own": {"bsonType": "bool"}, "c": {"bsonType": "date"}}
    assert merged["validator"]["$jsonSchema"]["required"] == ["a", "c"]  # b's requirement stays removed by hand
    assert notes == []


def test_an_edit_the_models_also_changed_is_kept_with_a_note() -> None:
    base = declaration(validation_level="moderate")
    mine = declaration(validation_level="strict")
    new = declaration(validation_level="off")
    merged, notes = merge_declaration(base, new, mine)
    assert merged["validation_level"] == "strict"
    assert notes == ['validation_level: your edit is kept; the models now give "off"']


def generated(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The migration file for one field's type change, run as a module: its ``upgrade`` and ``revert``."""
    change = compare(Shape(0, "app.M", {"f": before}), ModelShape("c", "app.M", "pydantic", {}, {"f": after}))
    namespace: dict[str, Any] = {}
    exec(compile(render(change, "app"), "generated.py", "exec"), namespace)  # the file the command would write
    return namespace


def test_a_number_the_converter_cannot_take_fails_the_document_without_its_value() -> None:
    """A ``float`` field holds any BSON number: a Decimal128 is not left behind unconverted, it fails the document."""
    upgrade = generated({"types": ["double"], "required": True}, {"types": ["int"], "required": True})["upgrade"]
    assert [upgrade({"f": v})["f"] for v in (2.0, 3, Int64(4))] == [2, 3, 4]
    with pytest.raises(ValueError) as failed:
        upgrade({"f": Decimal128("12345.5")})
    assert str(failed.value) == "field f: double to int conversion failed (the value is not shown)"
    assert failed.value.__context__ is None and failed.value.__cause__ is None  # not even chained to the error that shows it
    assert upgrade({"f": True}) == {"f": True} and upgrade({}) == {}  # not a number of the old shape: left as it is


def test_a_one_way_migration_imports_only_what_its_upgrade_uses() -> None:
    """int to double with a field removed is one-way: no revert is written, so the reverse's Decimal128 check is not in
    the file and ``from bson import Decimal128`` was an unused import a linter (ruff F401) flags in the user's project."""
    change = compare(
        Shape(0, "app.M", {"f": {"types": ["int"], "required": True}, "gone": {"types": ["string"], "required": False}}),
        ModelShape("c", "app.M", "pydantic", {}, {"f": {"types": ["double"], "required": True}}),
    )
    text = render(change, "app")
    assert not change.reversible and "def revert" not in text
    assert "import" not in text.replace("from mongoshift import Background", "").replace("from mongoshift.versioning import define_shapes", "")
    both_ways = render(compare(Shape(0, "app.M", {"f": {"types": ["int"], "required": True}}),
                               ModelShape("c", "app.M", "pydantic", {}, {"f": {"types": ["double"], "required": True}})), "app")
    assert "def revert" in both_ways and "from bson import Decimal128" in both_ways  # the way back checks a Decimal128


@pytest.mark.parametrize(
    ("old", "new", "kept", "refused"),
    [
        ("double", "int", [(2.0, 2), (3, 3)], [2.7, float("inf"), float("nan")]),
        ("string", "int", [("12", 12), ("-3", -3)], [" 12", "1_000", "+3", "007", "gold"]),
        ("string", "bool", [("yes", True), (" TRUE ", True), ("0", False), ("off", False)], ["active", "", "maybe"]),
        ("int", "bool", [(0, False), (1, True)], [5, -1]),
        ("int", "double", [(2, 2.0), (2**52, float(2**52))], [2**60 + 1]),
        # a text past a double's range became infinity, and 'nan' / 'inf' a value that is no number
        ("string", "double", [("2.5", 2.5), ("-3", -3.0), ("1e3", 1000.0), (".5", 0.5)],
         ["1e400", "-1e400", "inf", "-Infinity", "nan", "gold", " 12 ", "1_000", "\u0661\u0662"]),
    ],
)
def test_a_conversion_never_changes_what_a_value_means(old: str, new: str, kept: list[tuple[Any, Any]], refused: list[Any]) -> None:
    """A value the new type cannot hold as it is fails its document, never rewritten as something
    else (2.7 became 2, 'active' became False, 5 became True)."""
    upgrade = generated({"types": [old], "required": True}, {"types": [new], "required": True})["upgrade"]
    for value, converted in kept:
        result = upgrade({"f": value})["f"]
        assert (type(result), result) == (type(converted), converted)
    for value in refused:
        with pytest.raises(ValueError, match="conversion failed"):
            upgrade({"f": value})


def test_a_conversion_is_reversible_only_when_the_way_back_gives_the_value_back() -> None:
    to_bool = generated({"types": ["string"], "required": True}, {"types": ["bool"], "required": True})
    assert "revert" not in to_bool  # the word a document held is not kept: one-way
    bits = generated({"types": ["int"], "required": True}, {"types": ["bool"], "required": True})
    assert bits["revert"]({"f": True}, None) == {"f": 1} and bits["revert"]({"f": False}, None) == {"f": 0}
    ints = generated({"types": ["string"], "required": True}, {"types": ["int"], "required": True})
    assert ints["revert"]({"f": 12}, None) == {"f": "12"}
    back = generated({"types": ["int"], "required": True}, {"types": ["double"], "required": True})["revert"]
    assert back({"f": 2.0}, None) == {"f": 2}
    with pytest.raises(ValueError, match="conversion failed"):
        back({"f": 2.5}, None)  # a double the field took since: not truncated on the way back either


def test_a_rename_hint_that_matches_nothing_is_noted() -> None:
    """``renamed_from`` misspelt: the field was taken as new and the old one removed (its values gone) without a word."""
    change = compare(
        Shape(0, "app.M", {"fullname": {"types": ["string"], "required": True}}),
        ModelShape("c", "app.M", "pydantic", {}, {"full_name": {"types": ["string"], "required": False, "renamed_from": "fulname"}}),
    )
    assert [c.text for c in change.changes] == ["removed 'fullname'"]
    assert change.notes == [
        "'full_name': renamed_from 'fulname' names no field the snapshot has and the model dropped, so 'full_name' is taken as a new field",
        "added 'full_name' (optional, no value to set)",
    ]
    matched = compare(
        Shape(0, "app.M", {"fullname": {"types": ["string"], "required": True}}),
        ModelShape("c", "app.M", "pydantic", {}, {"full_name": {"types": ["string"], "required": True, "renamed_from": "fullname"}}),
    )
    assert [c.text for c in matched.changes] == ["renamed 'fullname' to 'full_name'"] and matched.notes == []
