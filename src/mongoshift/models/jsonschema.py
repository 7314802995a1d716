"""A model's JSON schema turned into MongoDB's ``$jsonSchema`` (draft 4, ``bsonType`` instead of ``type``).

Pydantic describes what JSON would look like; the server stores BSON. So ``integer`` becomes
``int`` or ``long``, a ``date-time`` string a BSON ``date``, Beanie's ``PydanticObjectId`` an
``objectId``, ``Optional[X]`` X or ``null``. What has no faithful BSON counterpart is named in
``unsupported`` (``model.field: why``) and left without a rule there: the validator is then
looser than the model, never stricter, and the user sees where.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: JSON schema type → BSON types.
TYPES: dict[str, str | list[str]] = {
    "string": "string",
    "integer": ["int", "long"],
    "number": "number",
    "boolean": "bool",
    "null": "null",
    "array": "array",
    "object": "object",
}
#: String formats that are stored as another BSON type (pydantic writes them as strings in JSON;
#: the drivers and Beanie's encoder store a datetime, a date and bytes natively, a UUID as binary,
#: a timedelta as its seconds).
FORMATS: dict[str, str] = {"date-time": "date", "date": "date", "binary": "binData", "uuid": "binData", "duration": "number"}
#: Formats that stay strings in BSON: a pattern of their own is not added.
STRING_FORMATS = frozenset({"email", "uri", "hostname", "ipv4", "ipv6", "time"})
#: Keys that describe rather than constrain, or that mongoshift reads itself (``renamed_from``).
IGNORED = frozenset({"title", "description", "default", "examples", "example", "renamed_from", "deprecated", "readOnly", "writeOnly"})
#: Constraints copied as they are (the same meaning in draft 4).
COPIED = frozenset({"minLength", "maxLength", "pattern", "minimum", "maximum", "minItems", "maxItems", "uniqueItems", "multipleOf",
                    "minProperties", "maxProperties"})
OBJECT_ID_DEFS = frozenset({"PydanticObjectId", "ObjectId"})


class Converter:
    """One model's conversion; ``unsupported`` collects every construct it could not express."""

    def __init__(self, model: str, defs: Mapping[str, Any]) -> None:
        self.model = model
        self.defs = defs
        self.unsupported: list[str] = []
        self._stack: list[str] = []

    def note(self, where: str, why: str) -> None:
        self.unsupported.append(f"{self.model}.{where}: {why}" if where else f"{self.model}: {why}")

    def top(self, schema: Mapping[str, Any], skip: frozenset[str] = frozenset({"_id"})) -> dict[str, Any]:
        """The document's rules: ``bsonType: object``, each property, ``required``. ``_id`` belongs to the server."""
        out = self.node(schema, "")
        for name in skip:
            out.get("properties", {}).pop(name, None)
            if name in out.get("required", []):
                out["required"] = [r for r in out["required"] if r != name]
        if not out.get("required"):
            out.pop("required", None)
        return out

    def node(self, schema: Mapping[str, Any], where: str) -> dict[str, Any]:
        if "$ref" in schema:
            return self._ref(schema, where)
        for combiner in ("anyOf", "oneOf"):
            if combiner in schema:
                return self._union(list(schema[combiner]), where, {k: v for k, v in schema.items() if k != combiner})
        if "allOf" in schema:
            parts = list(schema["allOf"])
            if len(parts) == 1:
                return self._with_constraints(self.node(parts[0], where), schema, where, skip={"allOf"})
            self.note(where, "allOf with several schemas is not translated")
            return {}
        out: dict[str, Any] = {}
        kind = schema.get("type")
        if isinstance(kind, list):
            return self._union([{**schema, "type": k} for k in kind], where, {})
        if "const" in schema:
            out["enum"] = [schema["const"]]
        if "enum" in schema:
            out["enum"] = list(schema["enum"])
        if kind is not None:
            if kind not in TYPES:
                self.note(where, f"type {kind!r} has no BSON counterpart")
                return out
            fmt = schema.get("format")
            if kind == "string" and fmt in FORMATS:
                out["bsonType"] = FORMATS[fmt]
                return out
            out["bsonType"] = TYPES[kind]
            if kind == "array":
                self._array(schema, where, out)
            elif kind == "object":
                self._object(schema, where, out)
        return self._with_constraints(out, schema, where, skip={"type", "const", "enum", "format", "items", "prefixItems", "properties",
                                                                "required", "additionalProperties"})

    def _with_constraints(self, out: dict[str, Any], schema: Mapping[str, Any], where: str, skip: set[str]) -> dict[str, Any]:
        for key, value in schema.items():
            if key in skip or key in IGNORED or key.startswith("$"):
                continue
            if key in COPIED:
                if key == "pattern" and out.get("bsonType") not in (None, "string"):
                    continue
                out[key] = value
            elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, (int, float)):
                bound = "minimum" if key == "exclusiveMinimum" else "maximum"
                out[bound] = value
                out[key] = True  # draft 4: a flag on minimum / maximum
            elif key == "format" and value in STRING_FORMATS:
                continue
            else:
                self.note(where, f"{key!r} is not translated")
        return out

    def _ref(self, schema: Mapping[str, Any], where: str) -> dict[str, Any]:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        if name in OBJECT_ID_DEFS:
            return {"bsonType": "objectId"}
        target = self.defs.get(name)
        if target is None:
            self.note(where, f"reference {name!r} not found")
            return {}
        if name in self._stack:
            self.note(where, f"{name} contains itself: the nested levels are not checked")
            return {"bsonType": "object"}
        self._stack.append(name)
        try:
            return self._with_constraints(self.node(target, where), schema, where, skip={"$ref"})
        finally:
            self._stack.pop()

    def _union(self, parts: list[Any], where: str, rest: Mapping[str, Any]) -> dict[str, Any]:
        nullable = any(p == {"type": "null"} for p in parts)
        others = [p for p in parts if p != {"type": "null"}]
        if any(_is_link(p) for p in others):
            self.note(where, "a Beanie Link is stored as a DBRef: only that it is an embedded document is checked")
            return {"bsonType": ["object", "null"] if nullable else "object"}
        converted = [self.node(p, where) for p in others]
        if len(converted) == 1:
            out = dict(converted[0])
        elif converted and all(set(c) == {"bsonType"} for c in converted):
            types: list[str] = []
            for c in converted:
                for t in _as_list(c["bsonType"]):
                    if t not in types:
                        types.append(t)
            out = {"bsonType": types}
        elif any(not c for c in converted):
            out = {}  # one branch accepts anything: so does the union
        else:
            out = {"anyOf": converted}
        if nullable and "enum" in out:
            # a null must pass both the type and the list of values: kept apart, it needs neither
            out = {"anyOf": [out, {"bsonType": "null"}]}
        elif nullable:
            if "bsonType" in out:
                out["bsonType"] = [*_as_list(out["bsonType"]), "null"] if "null" not in _as_list(out["bsonType"]) else out["bsonType"]
            elif "anyOf" in out:
                out["anyOf"] = [*out["anyOf"], {"bsonType": "null"}]
        return self._with_constraints(out, rest, where, skip=set())

    def _array(self, schema: Mapping[str, Any], where: str, out: dict[str, Any]) -> None:
        if "prefixItems" in schema:
            self.note(where, "a tuple's positions are not checked (only that it is an array)")
        elif isinstance(schema.get("items"), Mapping):
            items = self.node(schema["items"], f"{where}[]")
            if items:
                out["items"] = items

    def _object(self, schema: Mapping[str, Any], where: str, out: dict[str, Any]) -> None:
        properties = schema.get("properties") or {}
        if properties:
            out["properties"] = {
                name: self.node(value, f"{where}.{name}" if where else name) for name, value in properties.items()
            }
        required = list(schema.get("required") or [])
        if required:
            out["required"] = required
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            converted = self.node(extra, f"{where}.*" if where else "*")
            if converted:
                out["additionalProperties"] = converted
        elif extra is False:
            out["additionalProperties"] = False


def _is_link(schema: Any) -> bool:
    """Beanie's ``Link[...]`` describes itself as ``{id, collection}``, which is not how it is stored (a DBRef)."""
    return (
        isinstance(schema, Mapping)
        and schema.get("type") == "object"
        and set(schema.get("properties") or {}) == {"id", "collection"}
        and sorted(schema.get("required") or []) == ["collection", "id"]
    )


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def bson_types(rule: Mapping[str, Any]) -> list[str]:
    """The BSON types a property's rule allows, without ``null`` ("int" for int/long, "double" for number)."""
    if "bsonType" in rule:
        types = _as_list(rule["bsonType"])
    elif "anyOf" in rule:
        types = [t for part in rule["anyOf"] for t in bson_types(part)]
    else:
        return []
    out: list[str] = []
    for t in types:
        t = {"long": "int", "number": "double", "decimal": "double"}.get(t, t)
        if t != "null" and t not in out:
            out.append(t)
    return out


def nullable(rule: Mapping[str, Any]) -> bool:
    if "bsonType" in rule:
        return "null" in _as_list(rule["bsonType"])
    return any(nullable(part) for part in rule.get("anyOf", []))
