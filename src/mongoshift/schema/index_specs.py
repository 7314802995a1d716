"""The comparable form of an index and of a validator.

The server does not hand back exactly what it was sent: numbers come back as
another BSON type (1, 1.0, Int64(1)), false booleans are dropped (or, on some
servers, reported), a text index's key becomes ``{_fts: "text", _ftsx: 1}``
with its weights filled in, and a collation comes back with every default
filled. The declaration and what ``listIndexes`` / ``listCollections`` report
are both turned into this form, so that an index or validator that is in place
compares equal and a second converge plans nothing.

Only the options mongoshift knows are compared; an option only the server
reports (``v``, ``ns``, a future default) is ignored rather than turned into a
rebuild that would repeat on every run.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import json_util
from bson.regex import Regex

#: Index options compared between declaration and server, in the server's spelling.
COMPARED = (
    "unique",
    "sparse",
    "hidden",
    "expireAfterSeconds",
    "partialFilterExpression",
    "wildcardProjection",
    "weights",
    "default_language",
    "language_override",
    "textIndexVersion",
    "2dsphereIndexVersion",
    "bits",
    "min",
    "max",
)

#: A value equal to the server's default is the same as leaving the option out.
DEFAULTS: dict[str, Any] = {
    "unique": False,
    "sparse": False,
    "hidden": False,
    "default_language": "english",
    "language_override": "language",
    "bits": 26,
    "min": -180,
    "max": 180,
}

#: Options the server fills in by itself: compared only when the declaration sets them.
DECLARED_ONLY = frozenset({"textIndexVersion", "2dsphereIndexVersion"})

#: Changes ``collMod`` can make to an index in place (the rest needs a rebuild).
IN_PLACE = frozenset({"expireAfterSeconds", "hidden", "unique"})

KEY_TYPES = ("text", "2d", "2dsphere", "hashed")

Key = tuple[tuple[str, int | str], ...]


#: Every NaN in the comparable form (no other value canonicalizes to a tuple).
NAN = ("NaN",)


def canonical(value: Any) -> Any:
    """A value with BSON number types folded (1 == 1.0 == Int64(1)), dates as the server keeps them (UTC,
    milliseconds) and mappings as plain dicts.

    Dict equality ignores key order, which is what a filter or a ``$jsonSchema``
    means; list order is kept.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (Regex, re.Pattern)):
        # the driver sends Python's implicit re.UNICODE as "u", which a server may drop (it is redundant there)
        regex = value if isinstance(value, Regex) else Regex.from_native(value)
        return Regex(regex.pattern, int(regex.flags) & ~re.UNICODE)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            return NAN  # NaN equals nothing, not even itself: a filter holding one never compared equal
        return int(value) if value.is_integer() else value
    if isinstance(value, datetime.datetime):
        # BSON keeps a date as UTC milliseconds: the server hands back a naive UTC time without the
        # microseconds (a TOML 2024-01-01T00:00:00Z is aware; Python's datetime.now() has microseconds)
        if value.tzinfo is not None:
            value = value.astimezone(datetime.UTC).replace(tzinfo=None)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical(v) for v in value]
    return value


def direction(value: Any) -> int | str:
    """A key's direction as compared: the sign of a number, or the index type string."""
    if isinstance(value, str):
        return value
    return 1 if float(value) > 0 else -1


def normalize_key(pairs: Iterable[tuple[str, Any]]) -> Key:
    """The key in the server's stored form: text fields collapse into ``_fts``/``_ftsx``."""
    out: list[tuple[str, int | str]] = []
    text_done = False
    for name, value in pairs:
        if name == "_ftsx":
            continue
        value = direction(value)
        if value == "text":
            if not text_done:
                out += [("_fts", "text"), ("_ftsx", 1)]
                text_done = True
            continue
        out.append((name, value))
    return tuple(out)


def text_fields(pairs: Iterable[tuple[str, Any]]) -> list[str]:
    return [name for name, value in pairs if value == "text" and name != "_fts"]


def key_document(key: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    return {name: value for name, value in key}


def default_name(pairs: Iterable[tuple[str, Any]]) -> str:
    """The name the driver and the shell give an index: ``a_1_b_-1``, ``body_text``."""
    return "_".join(f"{name}_{value}" for name, value in pairs)


#: The binary comparison written out. On an index it differs from no collation only where the
#: collection has a default one: an index declared without a collation inherits that default.
SIMPLE: dict[str, Any] = {"locale": "simple"}


def normalize_collation(value: Any, *, keep_simple: bool = False) -> dict[str, Any] | None:
    """``None`` for no collation; ``{locale: "simple"}`` is the binary comparison, the same as none
    unless ``keep_simple`` (an index's own, see :data:`SIMPLE`)."""
    if not value:
        return None
    doc: dict[str, Any] = canonical(value)
    if doc.get("locale") == "simple":
        return dict(SIMPLE) if keep_simple else None
    doc.pop("version", None)
    return doc


#: Collation fields whose default is the same for every locale: a declaration that leaves one out means
#: that default (a bare ``{locale: "en"}`` is case-sensitive), whatever the server reports or leaves out.
COLLATION_DEFAULTS: dict[str, Any] = {"strength": 3, "caseLevel": False, "numericOrdering": False}


def collation_matches(declared: Mapping[str, Any] | None, server: Mapping[str, Any] | None, default: Mapping[str, Any] | None) -> bool:
    """The declared fields and :data:`COLLATION_DEFAULTS`; the rest depends on the locale
    (``caseFirst``, ``alternate``, ...) and is left to the server.

    An index declared without a collation inherits the collection's default, so
    a server index carrying exactly that default still matches.
    """
    binary = server is None or dict(server) == SIMPLE  # a server reports a simple index without a collation, or with this
    if declared is None:
        return binary or (default is not None and dict(server or {}) == dict(default))
    if dict(declared) == SIMPLE:
        return binary  # written out on purpose: the collection's default is not wanted
    if binary or server is None:
        return False
    wanted = {**COLLATION_DEFAULTS, **declared}
    return all(server.get(k, COLLATION_DEFAULTS.get(k)) == v for k, v in wanted.items())


def options_from(document: Mapping[str, Any], pairs: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """The compared options of an index document, defaults and false booleans removed."""
    pairs = list(pairs)
    options: dict[str, Any] = {}
    for name in COMPARED:
        value = document.get(name)
        if value is None:
            continue
        value = canonical(value)
        if name in DEFAULTS and value == DEFAULTS[name] and type(value) is type(DEFAULTS[name]):
            continue
        if name in ("unique", "sparse", "hidden"):
            if not value:
                continue
            value = True
        if name == "wildcardProjection" and isinstance(value, dict):
            if not value.get("_id", 0):
                value.pop("_id", None)
        options[name] = value
    fields = text_fields(pairs)
    if fields or any(name == "_fts" for name, _ in pairs):
        weights = {name: 1 for name in fields}
        weights.update(options.get("weights") or {})
        if weights:
            options["weights"] = weights
    return options


@dataclass(frozen=True)
class IndexSpec:
    """One index, declared or reported, in the comparable form; ``document`` is what to send / what was read."""

    name: str
    key: Key
    options: Mapping[str, Any]
    collation: Mapping[str, Any] | None
    document: Mapping[str, Any] = field(compare=False)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> IndexSpec:
        pairs = list(document["key"].items())
        return cls(
            name=str(document["name"]),
            key=normalize_key(pairs),
            options=options_from(document, pairs),
            collation=normalize_collation(document.get("collation"), keep_simple=True),
            document=dict(document),
        )

    @property
    def filter(self) -> Any:
        return self.options.get("partialFilterExpression")

    def same_identity(self, other: IndexSpec, default_collation: Mapping[str, Any] | None) -> bool:
        """Same key, filter and collation: the server treats two such indexes as one."""
        return (
            self.key == other.key
            and self.filter == other.filter
            and collation_matches(self.collation, other.collation, default_collation)
        )

    def differences(self, server: IndexSpec, default_collation: Mapping[str, Any] | None) -> tuple[str, ...]:
        """The options (server spelling) whose declared value the server index does not have."""
        changed = []
        for name in COMPARED:
            mine, theirs = self.options.get(name), server.options.get(name)
            if name in DECLARED_ONLY and mine is None:
                continue
            if mine != theirs:
                changed.append(name)
        if not collation_matches(self.collation, server.collation, default_collation):
            changed.append("collation")
        return tuple(changed)


@dataclass(frozen=True)
class ValidatorSpec:
    """A collection's validator with its level and action; ``{}`` means no validator."""

    validator: Mapping[str, Any]
    level: str = "strict"
    action: str = "error"

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> ValidatorSpec:
        return cls(
            validator=dict(options.get("validator") or {}),
            level=str(options.get("validationLevel") or "strict"),
            action=str(options.get("validationAction") or "error"),
        )

    @property
    def empty(self) -> bool:
        return not self.validator

    def same_as(self, other: ValidatorSpec) -> bool:
        if self.empty and other.empty:
            return True
        return (
            canonical(self.validator) == canonical(other.validator)
            and self.level == other.level
            and self.action == other.action
        )

    def document(self) -> dict[str, Any]:
        """The fields of ``create`` / ``collMod`` that set it."""
        if self.empty:
            return {"validator": {}}
        return {"validator": dict(self.validator), "validationLevel": self.level, "validationAction": self.action}


def versioning_minimum(validator: Mapping[str, Any], field_name: str) -> int:
    """The minimum a validator enforces on the version field; 0 when there is none (missing counts as 0)."""
    schema = validator.get("$jsonSchema") if isinstance(validator, Mapping) else None
    if not isinstance(schema, Mapping):
        return 0
    rule = (schema.get("properties") or {}).get(field_name)
    if not isinstance(rule, Mapping):
        return 0
    required = field_name in (schema.get("required") or [])
    minimum = rule.get("minimum")
    if not required or not isinstance(minimum, (int, float)) or isinstance(minimum, bool):
        return 0
    return int(minimum)


def as_json(value: Any) -> Any:
    """A BSON value as relaxed Extended JSON data (for ``--json`` and the converge log)."""
    if value is None:
        return None
    return json.loads(json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS))


def as_text(value: Any) -> str | None:
    """A document as one line of relaxed Extended JSON: stored this way, ``$`` keys never reach a field name."""
    if value is None:
        return None
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)
