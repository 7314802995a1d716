"""Document validity fixes: an ``_id`` with ``$``-prefixed fields is refused (aa)."""

from __future__ import annotations

from typing import Any

from ._support import replace_everywhere

DOLLAR_PREFIXED_FIELD_NAME = 52


def _dollar_field(value: object) -> str | None:
    """The first ``$``-prefixed field of an ``_id`` document, None if none (a DBRef is allowed)."""
    if not isinstance(value, dict):
        return None
    keys = [key for key in value if isinstance(key, str)]
    if keys[:2] == ["$ref", "$id"]:
        return None
    return next((key for key in keys if key.startswith("$")), None)


# (aa) An _id with $-prefixed fields is stored: {_id: {$a: 1}} is accepted, where
# mongod refuses it ("_id fields may not contain '$'-prefixed fields", 52
# DollarPrefixedFieldName), also since 5.0 allows such fields elsewhere in a
# document. core/identity.assert_valid_root_document_id, which every insert,
# replacement and upsert runs on the stored _id (it refuses arrays and regexes,
# code 53), now refuses those too, as a write error of that statement.
def patch_dollar_prefixed_ids() -> None:
    from mongoeco.core import identity
    from mongoeco.errors import WriteError

    original = identity.assert_valid_root_document_id

    def assert_valid_root_document_id(value: Any) -> None:
        original(value)
        field = _dollar_field(value)
        if field is not None:
            raise WriteError(
                f"_id fields may not contain '$'-prefixed fields: {field} is not valid for storage.",
                code=DOLLAR_PREFIXED_FIELD_NAME,
            )

    replace_everywhere(identity, "assert_valid_root_document_id", assert_valid_root_document_id)


# (bn) A $jsonSchema whose additionalProperties is a schema (every field the properties do not name
# must match it: {bsonType: "object", additionalProperties: {bsonType: "int"}}, what a model's
# ``dict[str, int]`` field declares) is refused, "$jsonSchema additionalProperties must be a bool":
# mongod takes a boolean or a schema there. core/schema_validation.CompiledJsonSchema checks a
# schema-valued additionalProperties as the sub-schema it is, and validates each field the
# properties do not name against it (where mongoeco took True: every such field allowed).
def patch_schema_additional_properties() -> None:
    from mongoeco.core.schema_validation import CompiledJsonSchema

    define, check_object = CompiledJsonSchema._validate_schema_definition, CompiledJsonSchema._validate_object

    def _validate_schema_definition(self: Any, schema: Any) -> None:
        extra = schema.get("additionalProperties") if isinstance(schema, dict) else None
        if not isinstance(extra, dict):
            return define(self, schema)
        define(self, extra)
        return define(self, {**schema, "additionalProperties": True})

    def _validate_object(self: Any, schema: Any, value: Any, path: tuple[str, ...]) -> list[Any]:
        extra = schema.get("additionalProperties")
        if not isinstance(extra, dict):
            return check_object(self, schema, value, path)
        issues: list[Any] = check_object(self, {**schema, "additionalProperties": True}, value, path)
        named = schema.get("properties") or {}
        for field_name, field_value in value.items():
            if field_name not in named:
                issues.extend(self._validate_schema(extra, field_value, (*path, field_name)))
        return issues

    CompiledJsonSchema._validate_schema_definition = _validate_schema_definition
    CompiledJsonSchema._validate_object = _validate_object
