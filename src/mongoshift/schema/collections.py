"""What a project declares about its collections: indexes, a validator, versioning.

A declaration is an end state, not a list of steps: ``converge`` compares it
with the server and makes the difference. A part left out is *unmanaged*
(converge neither adds nor removes anything there); ``validator = false`` in
TOML or ``None`` in Python means "this collection has no validator".

Declarations come from ``[[collections]]`` in the project file (validated with
the other settings, so a typo fails every command at once) and from one file
per collection in ``collections_dir`` (``users.toml`` or ``users.py`` with
``collection = {...}``), read by :mod:`mongoshift.project.declarations`.
This module holds only the declared values, with no I/O. Every key is checked:
an unknown key is an error naming it and where it was written, because a
misspelt ``uniqe`` that is silently ignored builds the wrong index.

Index options use the server's spelling (``expireAfterSeconds``,
``partialFilterExpression``), the one pymongo's ``IndexModel`` takes, since
they are sent to ``createIndexes`` as written; a pymongo ``IndexModel`` is
accepted as is in Python declarations.
"""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pymongo.operations import IndexModel

from .index_specs import KEY_TYPES, IndexSpec, ValidatorSpec, default_name
from .validation import control_characters, list_errors

FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
INLINE_SOURCE = "[[collections]] in the project config"


def bson_problem(value: Any, path: str = "") -> str | None:
    """Why ``value`` cannot be sent to the server as BSON (a function, a cycle, a non-text key), or None.

    A Python declaration can hold anything; without this check a function in a validator
    would only fail (with a traceback) when converge encodes it.
    """
    import bson
    from bson.errors import InvalidDocument

    ancestors: set[int] = set()

    def walk(item: Any, where: str) -> str | None:
        if isinstance(item, (Mapping, list, tuple)):
            if id(item) in ancestors:
                return f"{where or 'the value'} contains itself (a circular reference)"
            ancestors.add(id(item))
            try:
                pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
                for key, child in pairs:
                    if isinstance(item, Mapping) and not isinstance(key, str):
                        return f"{where or 'the value'} has the key {key!r}: keys must be text"
                    inner = f"{where}.{key}" if isinstance(item, Mapping) else f"{where}[{key}]"
                    if problem := walk(child, inner.lstrip(".")):
                        return problem
            finally:
                ancestors.discard(id(item))
            return None
        try:
            bson.encode({"v": item})
        except (InvalidDocument, TypeError, ValueError, OverflowError):
            if isinstance(item, int) and not isinstance(item, bool):  # an int: its type is BSON's, its size is not
                return f"{where or 'the value'} is an integer outside BSON's 64 bits"
            return f"{where or 'the value'} is of type {type(item).__name__}, which is not a BSON value"
        return None

    return walk(value, path)


def _bson_only(value: Any) -> Any:
    if value is not None and (problem := bson_problem(value)):
        raise ValueError(problem)
    return value


#: Keys of the search-index declarations other tools take (spelt without '_', lower case): not a misspelt 'indexes'.
_SEARCH_KEYS = frozenset({"searchindexes", "vectorsearchindexes", "searchindex"})


class _Strict(BaseModel):
    """Unknown keys are refused with a suggestion (``uniqe`` → did you mean ``unique``?).

    Types are strict: declarations come from files (TOML has real booleans and numbers)
    and Python, so ``unique = "yes"`` or ``expireAfterSeconds = "60"`` is a mistake to
    report, not a string to coerce.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    @model_validator(mode="before")
    @classmethod
    def _only_known_keys(cls, data: Any) -> Any:
        """Unknown keys are reported together with what is wrong in the known ones, so that one
        look at the error shows every mistake of the table (not one per try)."""
        if isinstance(data, Mapping):
            known = [f.alias or name for name, f in cls.model_fields.items()]
            problems = []
            for key in data:
                if key in known:
                    continue
                close = difflib.get_close_matches(str(key), known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(known)})"
                if str(key).replace("_", "").lower() in _SEARCH_KEYS:
                    hint = ": Atlas Search and Vector Search indexes are not managed by converge (create them with the Atlas tools)"
                problems.append(f"unknown key {str(key)!r}{hint}")
            if problems:
                try:
                    cls.model_validate({key: value for key, value in data.items() if key in known})
                except ValidationError as exc:
                    problems += list_errors(exc)
                raise ValueError("; ".join(problems))
        return data


class Collation(_Strict):
    """An index collation; only the fields written are compared (the server fills the rest)."""

    locale: str = Field(min_length=1)
    caseLevel: bool | None = None
    caseFirst: Literal["upper", "lower", "off"] | None = None
    strength: int | None = Field(default=None, ge=1, le=5)
    numericOrdering: bool | None = None
    alternate: Literal["non-ignorable", "shifted"] | None = None
    maxVariable: Literal["punct", "space"] | None = None
    normalization: bool | None = None
    backwards: bool | None = None


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    if isinstance(value, str):
        return [(value, 1)]
    if isinstance(value, Mapping):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        pairs: list[tuple[Any, Any]] = []
        for item in value:
            if isinstance(item, str):
                pairs.append((item, 1))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                pairs.append((item[0], item[1]))
            else:
                raise ValueError("each key must be a [field, direction] pair")
        return pairs
    raise ValueError("keys must be a table {field = direction} or a list of [field, direction] pairs")


class IndexDeclaration(_Strict):
    """One index: pymongo's ``IndexModel`` options, in the server's spelling."""

    keys: tuple[tuple[str, int | str], ...] = Field(strict=False)
    name: str | None = Field(default=None, min_length=1, max_length=127)
    unique: bool = False
    sparse: bool = False
    hidden: bool = False
    expireAfterSeconds: int | None = Field(default=None, ge=0, le=2_147_483_647)
    partialFilterExpression: dict[str, Any] | None = None
    collation: Collation | None = None
    wildcardProjection: dict[str, Any] | None = None
    #: The server takes a weight from 1 to 99999.
    weights: dict[str, Annotated[int, Field(ge=1, le=99_999)]] | None = None
    default_language: str | None = Field(default=None, min_length=1)
    language_override: str | None = Field(default=None, min_length=1)
    textIndexVersion: int | None = Field(default=None, ge=1, le=3)
    sphereIndexVersion: int | None = Field(default=None, alias="2dsphereIndexVersion", ge=1, le=3)
    bits: int | None = Field(default=None, ge=1, le=32)
    #: A 2d index's bounds: finite (the server refuses NaN and infinities), ``min`` below ``max``.
    min: float | None = Field(default=None, allow_inf_nan=False)
    max: float | None = Field(default=None, allow_inf_nan=False)
    #: Ignored by the server since 4.2 (every build is online) and never sent: accepted so that the
    #: ``IndexModel(..., background=True)`` of existing application code loads as written.
    background: bool = False

    @field_validator("name")
    @classmethod
    def _index_name(cls, value: str | None) -> str | None:
        if value is not None and (controls := control_characters(value)) is not None:
            raise ValueError(f"an index name cannot hold control or bidirectional characters (found {controls})")
        return value

    @field_validator("keys", mode="before")
    @classmethod
    def _keys(cls, value: Any) -> tuple[tuple[str, int | str], ...]:
        pairs = _pairs(value)
        if not pairs:
            raise ValueError("keys must name at least one field")
        out: list[tuple[str, int | str]] = []
        seen: set[str] = set()
        for name, direction in pairs:
            if not isinstance(name, str) or not name or "\0" in name:
                raise ValueError(f"invalid key field {name!r}")
            if name.startswith("$") and name != "$**":
                raise ValueError(f"invalid key field {name!r}: only the wildcard '$**' may start with '$'")
            if name in seen:
                raise ValueError(f"key field {name!r} appears twice")
            seen.add(name)
            if isinstance(direction, str) and direction in KEY_TYPES:
                out.append((name, direction))
            elif not isinstance(direction, bool) and isinstance(direction, (int, float)) and direction in (1, -1):
                out.append((name, int(direction)))
            else:
                raise ValueError(f"direction of {name!r} must be 1, -1, 'text', '2d', '2dsphere' or 'hashed', not {direction!r}")
        return tuple(out)

    @field_validator("partialFilterExpression", "wildcardProjection")
    @classmethod
    def _bson(cls, value: Any) -> Any:
        return _bson_only(value)

    @model_validator(mode="after")
    def _coherent(self) -> IndexDeclaration:
        types = {d for _, d in self.keys if isinstance(d, str)}
        if self.index_name == "_id_" or self.keys == (("_id", 1),):
            raise ValueError("the _id index belongs to the server: do not declare it")
        if self.wildcardProjection is not None and self.keys != (("$**", 1),):
            raise ValueError("wildcardProjection needs keys = {\"$**\" = 1}")
        text_options = (self.weights, self.default_language, self.language_override, self.textIndexVersion)
        if "text" not in types and any(v is not None for v in text_options):
            raise ValueError("weights, default_language, language_override and textIndexVersion need a 'text' key")
        if "2d" not in types and any(v is not None for v in (self.bits, self.min, self.max)):
            raise ValueError("bits, min and max need a '2d' key")
        low = -180 if self.min is None else self.min
        high = 180 if self.max is None else self.max
        if low >= high:
            raise ValueError(f"min ({low:g}) must be below max ({high:g})")
        if "2dsphere" not in types and self.sphereIndexVersion is not None:
            raise ValueError("2dsphereIndexVersion needs a '2dsphere' key")
        if self.expireAfterSeconds is not None and (len(self.keys) != 1 or types):
            raise ValueError("expireAfterSeconds (TTL) needs a single-field ascending or descending index")
        return self

    @property
    def index_name(self) -> str:
        return self.name or default_name(self.keys)

    def document(self) -> dict[str, Any]:
        """The ``createIndexes`` entry: false booleans are not sent (the server does not store them)."""
        doc: dict[str, Any] = {"key": dict(self.keys), "name": self.index_name}
        for flag in ("unique", "sparse", "hidden"):
            if getattr(self, flag):
                doc[flag] = True
        for option, value in self.model_dump(by_alias=True, exclude_none=True).items():
            if option in ("keys", "name", "unique", "sparse", "hidden", "background"):
                continue
            doc[option] = value
        return doc

    def spec(self) -> IndexSpec:
        return IndexSpec.from_document(self.document())


class Versioning(_Strict):
    """Document versioning: converge turns it into validator rules and the version index."""

    current: int = Field(ge=1)
    min: int = Field(default=1, ge=0)
    field: str = "__v"
    revision_field: str = "__rev"
    index: bool = True

    @model_validator(mode="after")
    def _coherent(self) -> Versioning:
        for key in ("field", "revision_field"):
            value = getattr(self, key)
            if not FIELD_NAME.match(value) or value == "_id":
                raise ValueError(f"{key} must be a top-level field name (letters, digits, '_', at most 64), not {value!r}")
        if self.field == self.revision_field:
            raise ValueError("field and revision_field must differ")
        if self.min > self.current:
            raise ValueError(f"min ({self.min}) cannot be above current ({self.current})")
        return self

    def rules(self) -> tuple[dict[str, Any], list[str]]:
        """The ``$jsonSchema`` properties and required fields: no maximum, so newer writers are never refused.

        With ``min`` 0 the rule only keeps what no reader takes for a version out (a text, a boolean, a document):
        a null version or revision counts as 0 (docs/versioning.md), as a missing one does, and a version stored as
        a long, a double or a decimal (``1.0``, a legacy writer's) is the number the engine selects it as; so no
        legacy document is refused its next write under a strict validator. Raising ``min`` requires an int."""
        if self.min > 0:
            properties = {
                self.field: {"bsonType": "int", "minimum": self.min},
                self.revision_field: {"bsonType": ["int", "long"], "minimum": 0},
            }
            return properties, [self.field, self.revision_field]
        properties = {
            self.field: {"bsonType": ["int", "long", "double", "decimal", "null"], "minimum": 0},
            self.revision_field: {"bsonType": ["int", "long", "null"], "minimum": 0},
        }
        return properties, []

    def index_declaration(self, shard_key: Sequence[tuple[str, int | str]] = ()) -> IndexDeclaration:
        """``{version: 1, _id: 1}``; on a sharded collection ``{version, ...shard key, _id}``, so that
        batches read one shard's key ranges through it."""
        middle = [[f, d] for f, d in shard_key if f != "_id"]
        return IndexDeclaration.model_validate({"keys": [[self.field, 1], *middle, ["_id", 1]]})


def _touches(validator: Mapping[str, Any], field_name: str) -> bool:
    for key in validator:
        if key == field_name or str(key).startswith(field_name + "."):
            return True
    schema = validator.get("$jsonSchema")
    if isinstance(schema, Mapping):
        if field_name in (schema.get("properties") or {}) or field_name in (schema.get("required") or []):
            return True
    return False


def merge_versioning(validator: Mapping[str, Any], versioning: Versioning) -> dict[str, Any]:
    """The user's validator with the versioning rules added to its ``$jsonSchema`` (or a new one)."""
    properties, required = versioning.rules()
    merged = copy.deepcopy(dict(validator))
    schema = dict(merged.get("$jsonSchema") or {})
    schema["properties"] = {**(schema.get("properties") or {}), **properties}
    if required:
        schema["required"] = [*(schema.get("required") or []), *required]
    merged["$jsonSchema"] = schema
    return merged


class CollectionDeclaration(_Strict):
    """One declared collection. ``None`` parts are unmanaged, except ``validator`` when written."""

    name: str = Field(min_length=1, max_length=255)
    indexes: tuple[IndexDeclaration, ...] | None = Field(default=None, strict=False)
    validator: dict[str, Any] | None = None
    validation_level: Literal["off", "strict", "moderate"] | None = None
    validation_action: Literal["error", "warn", "errorAndLog"] | None = None
    #: True / False: this collection's own choice, whatever the call's ``--prune``; None: the call decides.
    prune: bool | None = None
    versioning: Versioning | None = None

    _source: str = PrivateAttr(default=INLINE_SOURCE)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if value.startswith("system.") or "$" in value or "\0" in value or value.startswith(".") or value.endswith("."):
            raise ValueError(f"{value!r} is not a collection name mongoshift may manage")
        if (controls := control_characters(value)) is not None:  # the plan would show another name than the one it creates
            raise ValueError(f"a collection name cannot hold control or bidirectional characters (found {controls})")
        return value

    @field_validator("indexes", mode="before")
    @classmethod
    def _index_models(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            out = []
            for item in value:
                if isinstance(item, IndexModel):
                    document = dict(item.document)
                    document["keys"] = list(document.pop("key").items())
                    item = document
                out.append(item)
            return out
        return value

    @field_validator("validator", mode="before")
    @classmethod
    def _validator(cls, value: Any) -> Any:
        if value is False:
            return None
        if value is not None and not isinstance(value, Mapping):
            raise ValueError("validator must be a table (a query filter such as {\"$jsonSchema\": {...}}), or false for none")
        return _bson_only(dict(value) if isinstance(value, Mapping) else value)

    @model_validator(mode="after")
    def _coherent(self) -> CollectionDeclaration:
        if (self.validation_level or self.validation_action) and not (self.validator or self.versioning):
            raise ValueError("validation_level and validation_action need a validator (or a versioning block)")
        if not (self.manages_indexes or self.manages_validator):
            raise ValueError(
                "the declaration manages nothing: declare indexes, validator or versioning "
                "(indexes = [] for exactly none, validator = false for no validator)"
            )
        if self.versioning is not None and self.validator:
            for field_name in (self.versioning.field, self.versioning.revision_field):
                if _touches(self.validator, field_name):
                    raise ValueError(
                        f"the validator has rules on {field_name!r}, which the versioning block owns: remove them"
                    )
        names: dict[str, IndexSpec] = {}
        for declared in self.indexes or ():
            spec = declared.spec()
            if spec.name in names:
                raise ValueError(f"index name {spec.name!r} is declared twice")
            for other in names.values():
                if spec.same_identity(other, None):
                    raise ValueError(f"indexes {other.name!r} and {spec.name!r} have the same keys, filter and collation")
            names[spec.name] = spec
        version = self.version_index()
        if version is not None and version.index_name in names and names[version.index_name].key != version.spec().key:
            raise ValueError(f"index name {version.index_name!r} is the version index's: use another name")
        return self

    @property
    def source(self) -> str:
        return self._source

    @property
    def manages_validator(self) -> bool:
        return "validator" in self.model_fields_set or self.versioning is not None

    @property
    def manages_indexes(self) -> bool:
        """Whether the index list is declared at all: only then can undeclared indexes be pruned."""
        return self.indexes is not None

    def prunes(self, requested: bool) -> bool:
        """Whether undeclared indexes are dropped here: the declaration's own ``prune`` wins over the call's."""
        return requested if self.prune is None else self.prune

    def version_index(self, shard_key: Sequence[tuple[str, int | str]] = ()) -> IndexDeclaration | None:
        if self.versioning is None or not self.versioning.index:
            return None
        return self.versioning.index_declaration(shard_key)

    def index_specs(self, shard_key: Sequence[tuple[str, int | str]] = ()) -> list[IndexSpec]:
        """Every index converge manages here: the declared ones, then the version index unless one covers it.

        ``shard_key``: the collection's, when sharded (the version index then carries it)."""
        specs = [declared.spec() for declared in self.indexes or ()]
        version = self.version_index(shard_key)
        if version is not None:
            wanted = version.spec()
            if not any(s.same_identity(wanted, None) for s in specs):
                specs.append(wanted)
        return specs

    def validator_spec(self) -> ValidatorSpec | None:
        """The validator converge sets (versioning rules merged in), or None when unmanaged."""
        if not self.manages_validator:
            return None
        user = dict(self.validator or {})
        action = self.validation_action or "error"
        if self.versioning is None:
            return ValidatorSpec(user, self.validation_level or "strict", action)
        level = self.validation_level or ("strict" if user else "moderate")
        return ValidatorSpec(merge_versioning(user, self.versioning), level, action)
