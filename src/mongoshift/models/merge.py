"""Regenerating without losing hand edits: a three-way merge per part of a declaration.

The base is what the models gave last time (kept in the snapshot), ``new`` what they give
now, ``mine`` the file as it is. For each part (an index by name, a validator property, a
``required`` entry, ``validation_level``...): left as generated, the models decide; edited
by hand while the models did not change it, the edit stays; edited by hand *and* changed by
the models, the edit stays and a note says what the models now want. Parts the models never
gave (``prune``, ``versioning``, an index of your own) are never touched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..schema.index_specs import default_name

ABSENT: Any = object()


def canonical(item: Any) -> str:
    """A comparable text: table keys sorted, except an index's ``keys``, whose order is the index."""

    def walk(v: Any, parent: str | None) -> Any:
        if isinstance(v, Mapping):
            if parent == "keys":
                return [[k, walk(x, None)] for k, x in v.items()]
            return {str(k): walk(x, str(k)) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [walk(x, parent if parent == "keys" else None) for x in v]
        return v

    return json.dumps(walk(item, None), sort_keys=True, default=str)


def same(a: Any, b: Any) -> bool:
    if a is ABSENT or b is ABSENT:
        return a is b
    return canonical(a) == canonical(b)


def _short(item: Any) -> str:
    text = "(removed)" if item is ABSENT else canonical(item)
    return text if len(text) <= 120 else text[:117] + "..."


def merge_keyed(base: Mapping[str, Any], new: Mapping[str, Any], mine: Mapping[str, Any], where: str, notes: list[str]) -> dict[str, Any]:
    """Three-way by key, in the file's order with the models' new keys after."""
    out: dict[str, Any] = {}
    for k in [*mine, *(k for k in new if k not in mine)]:
        b, n, m = base.get(k, ABSENT), new.get(k, ABSENT), mine.get(k, ABSENT)
        if same(m, b):
            chosen = n
        elif same(n, b) or same(m, n):
            chosen = m
        else:
            chosen = m
            notes.append(f"{where}{k}: your edit is kept; the models now give {_short(n)}")
        if chosen is not ABSENT:
            out[k] = chosen
    return out


def index_name(index: Mapping[str, Any]) -> str:
    name = index.get("name")
    if isinstance(name, str):
        return name
    keys = index.get("keys")
    pairs = list(keys.items()) if isinstance(keys, Mapping) else [tuple(p) if isinstance(p, (list, tuple)) else (p, 1) for p in keys or []]
    return default_name(pairs)


def _by_name(indexes: Any) -> dict[str, Any]:
    return {index_name(i): i for i in indexes or [] if isinstance(i, Mapping)}


def merge_schema(base: Mapping[str, Any], new: Mapping[str, Any], mine: Mapping[str, Any], notes: list[str]) -> dict[str, Any]:
    """``$jsonSchema``: properties one by one, ``required`` entry by entry, other keys as values."""
    plain = {k: v for k, v in mine.items() if k not in ("properties", "required")}
    out = merge_keyed(
        {k: v for k, v in base.items() if k not in ("properties", "required")},
        {k: v for k, v in new.items() if k not in ("properties", "required")},
        plain, "validator.", notes,
    )
    properties = merge_keyed(base.get("properties") or {}, new.get("properties") or {}, mine.get("properties") or {},
                             "validator property ", notes)
    if properties or "properties" in mine or "properties" in new:
        out["properties"] = properties

    def flags(value: Any) -> dict[str, bool]:
        return {str(r): True for r in value or []}

    required = merge_keyed(flags(base.get("required")), flags(new.get("required")), flags(mine.get("required")), "required field ", notes)
    if required:
        out["required"] = list(required)
    return out


def merge_declaration(base: Mapping[str, Any], new: Mapping[str, Any], mine: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The declaration to write and the notes on edits kept against the models."""
    notes: list[str] = []
    merged = merge_keyed(
        {k: v for k, v in base.items() if k not in ("indexes", "validator")},
        {k: v for k, v in new.items() if k not in ("indexes", "validator")},
        {k: v for k, v in mine.items() if k not in ("indexes", "validator")},
        "", notes,
    )
    if "indexes" in mine or "indexes" in new:
        merged["indexes"] = list(merge_keyed(_by_name(base.get("indexes")), _by_name(new.get("indexes")),
                                             _by_name(mine.get("indexes")), "index ", notes).values())
    if "validator" in mine or "validator" in new:
        b, n, m = (dict(d.get("validator") or {}) for d in (base, new, mine))
        validator = merge_keyed({k: v for k, v in b.items() if k != "$jsonSchema"}, {k: v for k, v in n.items() if k != "$jsonSchema"},
                                {k: v for k, v in m.items() if k != "$jsonSchema"}, "validator ", notes)
        if "$jsonSchema" in m or "$jsonSchema" in n:
            if "$jsonSchema" in m or "$jsonSchema" not in b:
                schema = merge_schema(b.get("$jsonSchema") or {}, n.get("$jsonSchema") or {}, m.get("$jsonSchema") or {}, notes)
                validator["$jsonSchema"] = schema
            else:
                notes.append("validator.$jsonSchema: removed by hand; kept removed")
        merged["validator"] = validator if validator else False
    return _ordered(merged), notes


ORDER = ("name", "indexes", "validation_level", "validation_action", "prune", "versioning", "validator")


def _ordered(declaration: dict[str, Any]) -> dict[str, Any]:
    """Plain keys first, the validator's tables last: the order the file is written in."""
    known = {k: declaration[k] for k in ORDER if k in declaration}
    return {**{k: v for k, v in declaration.items() if k not in ORDER}, **known}
