"""``create --from-models``: a model's data-shape change since the snapshot, as a background migration.

Four changes are written as code: a field added with a constant default (set where missing),
a field removed (unset), a field renamed with ``json_schema_extra={"renamed_from": "old"}``,
and a type change for which a converter is known (``str`` → ``int`` ...). The file bumps the
collection's shape version with ``define_shapes`` and reverts where every change has a way
back. What cannot be written faithfully (a required field without a default, a field added with
a default that is not a constant, a type change without a converter) is refused with the field
named: a guess in a migration is worse than none. Changes that need no rewrite (a field made
optional, a new optional field) are noted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import ModelsInvalidError
from .readers import ModelShape
from .snapshot import Shape

#: (old type, new type) → (the conversion of ``value``, and a condition on ``value`` and its ``converted``
#: form that must hold, or None). A conversion never changes what a value means: one that would (``2.7``
#: to the int ``2``, the word ``'active'`` to ``False``, ``5`` to ``True``, ``' 12'`` or ``'1_000'`` read as
#: a number) fails that document instead. A change is reversible when the opposite pair is here too, with
#: its own condition; the only losses on the way back are in the form of a text (``'10'`` read as a double
#: comes back as ``'10.0'``, an ObjectId's hex in lower case). Words become booleans one way only: the
#: word a document held is not kept.
CONVERTERS: dict[tuple[str, str], tuple[str, str | None]] = {
    ("string", "int"): ("int(value)", "str(converted) == value"),
    ("int", "string"): ("str(value)", None),
    ("int", "double"): ("float(value)", "converted == value"),
    ("double", "int"): ("int(value)", "converted == value"),
    # '1e400' is not infinity, 'nan' no number; ' 12 ', '1_000' and other digits than ASCII's are refused as for an int
    ("string", "double"): ("float(value)", "value.isascii() and value.strip() == value and '_' not in value and math.isfinite(converted)"),
    ("double", "string"): ("str(value)", None),
    ("string", "objectId"): ("ObjectId(value)", None),
    ("objectId", "string"): ("str(value)", None),
    ("string", "bool"): ("_YES_NO[value.strip().lower()]", None),
    ("int", "bool"): ("bool(value)", "value in (0, 1)"),
    ("bool", "int"): ("int(value)", None),
}
#: The words a text field may hold for a boolean (any other fails the document).
YES_NO = "{'1': True, 'true': True, 'yes': True, 'on': True, '0': False, 'false': False, 'no': False, 'off': False}"
#: How a stored value of a shape's type is recognised in Python, as the driver decodes it. Every value
#: the old model's type admits must match, or the document is stamped with that value unconverted:
#: ``int`` is an int32 (``int``) or an int64 (``bson.Int64``, an ``int`` subclass), never a ``bool``
#: (an ``int`` in Python); ``double`` is any BSON number, as the validator's ``number`` admits
#: (``int``, ``Int64``, ``float``, ``Decimal128``). A conversion that fails on a value (``int()`` of a
#: ``Decimal128``, of ``'gold'``) fails that document, with an error that never shows the value.
CHECKS: dict[str, str] = {
    "string": "isinstance(value, str)",
    "int": "isinstance(value, int) and not isinstance(value, bool)",
    "double": "isinstance(value, (int, float, Decimal128)) and not isinstance(value, bool)",
    "bool": "isinstance(value, bool)",
    "objectId": "isinstance(value, ObjectId)",
}
#: Names the generated code takes from ``bson`` when it uses them.
BSON_NAMES = ("Decimal128", "ObjectId")


@dataclass
class Change:
    kind: str  # added | removed | renamed | retyped
    field: str
    text: str
    forward: list[str]
    reverse: list[str] | None  # None: no way back
    why_one_way: str = ""


@dataclass
class CollectionChange:
    collection: str
    model: str
    from_version: int
    changes: list[Change]
    #: changes that need no rewrite (the validator covers them)
    notes: list[str] = field(default_factory=list)

    @property
    def to_version(self) -> int:
        """The shape version the snapshot records: one higher when a migration is written, else unchanged (notes only)."""
        return self.from_version + 1 if self.changes else self.from_version

    @property
    def reversible(self) -> bool:
        return all(c.reverse is not None for c in self.changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "collection": self.collection, "model": self.model, "from_version": self.from_version, "to_version": self.to_version,
            "changes": [c.text for c in self.changes], "reversible": self.reversible, "notes": self.notes,
        }


def _convert(name: str, old: str, new: str, model: str) -> tuple[list[str], list[str] | None]:
    pair = CONVERTERS.get((old, new))
    if pair is None or old not in CHECKS:
        raise ModelsInvalidError(
            f"{model}: field {name!r} changed from {old} to {new}, and no converter is known for that: "
            "write this migration by hand (mongoshift create --background NAME)",
            field=name,
        )
    lines = _conversion(name, old, new, *pair)
    back = CONVERTERS.get((new, old))
    reverse = _conversion(name, new, old, *back) if back is not None and new in CHECKS else None
    return lines, reverse


def _conversion(name: str, old: str, new: str, expression: str, keeps: str | None) -> list[str]:
    """Convert the field's value of type ``old`` with ``expression``. The error of a failed conversion
    would show the value (``invalid literal for int() with base 10: 'gold'``), so it is replaced by one
    that names the field and the types only, raised outside the handler: not even chained to it."""
    key = repr(name)
    # The field's name unquoted: a transform's message has its quoted literals masked, as values (docs/background.md).
    message = repr(f"field {name}: {old} to {new} conversion failed (the value is not shown)")
    return [
        f"value = doc.get({key})",
        f"if {CHECKS[old]}:",
        "    failed = False",
        "    try:",
        *(
            [f"        converted = {expression}", f"        if not ({keeps}):  # it would change what the value means", "            raise ValueError",
             f"        doc[{key}] = converted"]
            if keeps else [f"        doc[{key}] = {expression}"]
        ),
        "    except Exception:  # its message could show the value: the error is raised below without it",
        "        failed = True",
        "    if failed:",
        f"        raise ValueError({message})",
    ]


def _retyped(name: str, before: dict[str, Any], after: dict[str, Any], model: str) -> tuple[str, str] | None:
    """(old, new) when the stored type must change; None when the new types still take the old values."""
    old, new = before.get("types") or [], after.get("types") or []
    if not old or not new or set(old) <= set(new):
        return None
    if len(old) != 1:
        raise ModelsInvalidError(f"{model}: field {name!r} changed from {' or '.join(old)} to {' or '.join(new)}: write this migration by hand",
                                 field=name)
    return old[0], new[0]


def _move(source: str, target: str) -> list[str]:
    """The lines that move field ``source`` to ``target``: a document that holds both with different values fails
    (one of them would be lost without a word), its message naming the fields, never the values."""
    s, t = repr(source), repr(target)
    said = f"field {source}: renamed to {target}, which the document already holds with another value (the values are not shown)"
    return [
        f"if {s} in doc:",
        f"    if {t} in doc and doc[{t}] != doc[{s}]:",
        f"        raise ValueError({said!r})",
        f"    doc[{t}] = doc.pop({s})",
    ]


def compare(previous: Shape, shape: ModelShape) -> CollectionChange:
    """The changes from the snapshot's shape to the model's, in the order the migration makes them."""
    model = shape.model
    before, after = previous.fields, shape.fields
    renames = {
        f: spec["renamed_from"]
        for f, spec in after.items()
        if spec.get("renamed_from") and f not in before and spec["renamed_from"] in before and spec["renamed_from"] not in after
    }
    changes: list[Change] = []
    notes: list[str] = []
    for new_name, old_name in renames.items():
        forward = _move(old_name, new_name)
        reverse: list[str] | None = _move(new_name, old_name)
        text = f"renamed {old_name!r} to {new_name!r}"
        if (pair := _retyped(new_name, before[old_name], after[new_name], model)) is not None:
            lines, back = _convert(new_name, *pair, model)
            forward += lines
            reverse = None if back is None or reverse is None else back + reverse
            text += f" (and from {pair[0]} to {pair[1]})"
        changes.append(Change("renamed", new_name, text, forward, reverse))
    for name, spec in after.items():
        if name in before or name in renames:
            continue
        if spec.get("renamed_from"):  # a hint that matched nothing (a typo, say): the old field would be removed
            notes.append(
                f"{name!r}: renamed_from {spec['renamed_from']!r} names no field the snapshot has and the model dropped, "
                f"so {name!r} is taken as a new field"
            )
        default = spec.get("default")
        if default is not None and not default.get("constant"):
            raise ModelsInvalidError(
                f"{model}: field {name!r} is added with a default that is not a constant (a default_factory, or a value "
                "a migration file cannot write as a literal): the migration cannot fill it; give it a constant default "
                "(or make it optional without one), or write this migration by hand",
                field=name,
            )
        if default is not None and default.get("value") is not None:
            value = default["value"]
            changes.append(Change("added", name, f"added {name!r} with default {value!r}", [f"doc.setdefault({name!r}, {value!r})"],
                                  [f"doc.pop({name!r}, None)"]))
        elif spec.get("required") and not spec.get("nullable"):
            raise ModelsInvalidError(
                f"{model}: field {name!r} is added as required with no default: the migration cannot fill it; "
                "give it a constant default (or make it optional), or write this migration by hand",
                field=name,
            )
        else:
            notes.append(f"added {name!r} (optional, no value to set)")
    for name in before:
        if name in after or name in renames.values():
            continue
        changes.append(Change("removed", name, f"removed {name!r}", [f"doc.pop({name!r}, None)"], None,
                              why_one_way=f"{name!r} was removed: its values are gone"))
    for name, spec in after.items():
        if name not in before:
            continue
        if (pair := _retyped(name, before[name], spec, model)) is not None:
            lines, back = _convert(name, *pair, model)
            changes.append(Change("retyped", name, f"{name!r} from {pair[0]} to {pair[1]}", lines, back,
                                  why_one_way="" if back else f"{name!r}: no converter back from {pair[1]} to {pair[0]}"))
        elif set(before[name].get("types") or []) != set(spec.get("types") or []):
            notes.append(f"{name!r}: now also takes {' or '.join(spec.get('types') or [])} (the stored values still fit; no rewrite)")
        elif before[name].get("required") != spec.get("required") or before[name].get("nullable") != spec.get("nullable"):
            notes.append(f"{name!r}: required or optional changed (the validator says it; no rewrite)")
    return CollectionChange(shape.collection, model, previous.version, changes, notes)


def _constant(collection: str) -> str:
    name = re.sub(r"\W+", "_", collection).strip("_").upper() or "SHAPES"
    return name if name[0].isalpha() else f"C_{name}"


def _body(lines: list[str]) -> list[str]:
    return [f"    {line}" for line in lines]


def render(change: CollectionChange, package: str) -> str:
    """The migration file: the step in ``define_shapes``, its reverse, and the ``Background`` spec."""
    shapes = _constant(change.collection)
    old, new = change.from_version, change.to_version
    lines = [
        f'"""{change.collection}: shape {old} to {new}, from the models ({change.model}).',
        "",
        "Written by 'mongoshift create --from-models' from the models snapshot; review it before",
        "running it (the application's own define_shapes should take the same step).",
        "",
        *[f"- {c.text}" for c in change.changes],
        '"""',
        "",
    ]
    # The code the file holds: a one-way migration writes no revert, so its reverse lines import nothing.
    code = [line for c in change.changes for line in [*c.forward, *((c.reverse or []) if change.reversible else [])]]
    used = [n for n in BSON_NAMES if any(re.search(rf"\b{n}\b", line) for line in code)]
    if any(re.search(r"\bmath\.", line) for line in code):
        lines += ["import math", ""]
    if used:
        lines += [f"from bson import {', '.join(used)}", ""]
    lines += [
        "from mongoshift import Background",
        "from mongoshift.versioning import define_shapes",
        "",
    ]
    if any("_YES_NO" in line for line in code):
        lines += ["#: The words a text field may hold for a boolean; any other fails its document.", f"_YES_NO = {YES_NO}", ""]
    lines += [
        "",
        "def upgrade(doc):",
        f'    """Shape {old} to {new}: gets a private copy of the document, returns the new one."""',
    ]
    for c in change.changes:
        lines += [f"    # {c.text}", *_body(c.forward)]
    lines += ["    return doc", "", ""]
    if change.reversible:
        lines += ["def revert(doc, ctx):", f'    """Shape {new} back to {old} (mongoshift down)."""']
        for c in reversed(change.changes):
            assert c.reverse is not None
            lines += [f"    # undo: {c.text}", *_body(c.reverse)]
        lines += ["    return doc", "", ""]
    lines += [
        f"{shapes} = define_shapes({new}, {{{old}: upgrade}})",
        "",
        "background = Background(",
        f"    collection={change.collection!r},",
        f"    from_version={old},",
        f"    to_version={new},",
        f"    migrate={shapes}.migrate_from({old}),",
    ]
    if change.reversible:
        lines.append("    revert=revert,")
    else:
        reasons = "; ".join(c.why_one_way for c in change.changes if c.reverse is None)
        lines.append(f"    # one-way: {reasons}")
    lines += [f"    description={f'{change.collection}: shape {old} to {new} from {package}'!r},", ")", ""]
    return "\n".join(lines)


@dataclass
class FromModelsPlan:
    """What ``create --from-models`` writes: one migration per changed collection, then the snapshot's new shapes."""

    models: str
    changes: list[CollectionChange]
    #: collection → the shape to record once the migrations are written
    shapes: dict[str, Shape]
    #: collections the snapshot has no shape for yet (recorded now; nothing to migrate)
    new_collections: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"models": self.models, "collections": [c.to_json() for c in self.changes], "new_collections": self.new_collections}


def plan(package: str, previous: dict[str, Shape], shapes: list[ModelShape]) -> FromModelsPlan:
    """Compare every model with its snapshot shape; the refusals come before anything is written."""
    changes: list[CollectionChange] = []
    recorded: dict[str, Shape] = {}
    new: list[str] = []
    for shape in shapes:
        before = previous.get(shape.collection)
        if before is None:
            new.append(shape.collection)
            recorded[shape.collection] = Shape(0, shape.model, shape.fields)
            continue
        change = compare(before, shape)
        recorded[shape.collection] = Shape(change.to_version, shape.model, shape.fields)
        if change.changes or change.notes:
            changes.append(change)
    return FromModelsPlan(package, changes, recorded, new)
