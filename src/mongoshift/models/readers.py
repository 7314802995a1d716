"""Finding the models of a package and reading each into what a declaration and a snapshot need.

Three kinds are read: Beanie ``Document`` classes (``Settings.name``, ``Settings.indexes``,
``Indexed(...)`` fields), MongoEngine documents (``meta["collection"]``, ``meta["indexes"]``,
``unique`` / ``sparse`` fields, through MongoEngine's own index specs) and plain Pydantic models
registered with :func:`mongoshift.models.collection`. Each ODM is imported only when installed
and only here, so a project with neither loads neither.
"""

from __future__ import annotations

import importlib
import math
import pkgutil
import sys
import sysconfig
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pymongo.operations import IndexModel

from ..errors import ModelsInvalidError, MongoshiftError
from ..project.redaction import describe_error
from ..schema.collections import CollectionDeclaration, IndexDeclaration
from ..schema.validation import describe_errors
from .jsonschema import Converter, bson_types, nullable
from .registry import registration_of

Odm = Literal["beanie", "mongoengine", "pydantic"]

#: What a generated declaration says about validation when nothing else does: old documents
#: that do not match are not blocked from other updates, and a violation is only logged.
DEFAULT_LEVEL = "moderate"
DEFAULT_ACTION = "warn"


@dataclass
class ModelShape:
    """One model read: its collection's generated declaration and its top-level fields for the snapshot."""

    collection: str
    model: str
    odm: Odm
    declaration: dict[str, Any]
    #: field name (as stored) → {"types", "nullable", "required", "default"?, "renamed_from"?}
    fields: dict[str, dict[str, Any]]
    unsupported: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- finding the models

def check_package_name(package: str) -> None:
    """Refuse a ``--models`` value that no ``import`` could name (exit 49), before anything quotes it back."""
    if not package or not all(part.isidentifier() for part in package.split(".")):
        raise ModelsInvalidError(f"--models {package!r} is not a module name (such as myapp.models)", models=package)


def import_models(package: str) -> list[ModuleType]:
    """The package and every module under it (but a ``__main__``: the package's program), imported as the
    application imports them.

    The current folder comes first on ``sys.path`` while importing, as for ``python -c 'import PKG'``
    run there. A module that fails to import is an error naming it and the line (exit 49)."""
    check_package_name(package)
    here = str(Path.cwd())
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        root = _import(package, package)
        modules = [root]
        if hasattr(root, "__path__"):
            for info in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
                # a package's __main__ is its program (`python -m PKG`), never imported as a module: importing it
                # would run the application (a server that never returns, a CLI that exits)
                if info.name.rpartition(".")[2] != "__main__":
                    modules.append(_import(info.name, package))
        return modules
    finally:
        if added:
            sys.path.remove(here)


def _import(name: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except BaseException as exc:  # user code may raise anything while importing, even SystemExit
        # A real Ctrl-C arrives as KeyboardInterrupt only in the main thread (the commands import the models in a
        # worker thread, where Ctrl-C sets their cancel instead): elsewhere it is the package's own.
        if isinstance(exc, KeyboardInterrupt) and threading.current_thread() is threading.main_thread():
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise ModelsInvalidError(f"models package {name!r} not found (run from the folder it imports from)", models=package) from None
        if isinstance(exc, MongoshiftError):  # mongoshift's own refusal (a misused @collection): its words are ours
            raise ModelsInvalidError(f"models module {name!r} failed to import{_where(exc)}: {exc.message}", models=package) from None
        raise ModelsInvalidError(f"models module {name!r} failed to import{_where(exc)}: {type(exc).__name__}{_missing(exc)}", models=package) from None


#: mongoshift's own package: its frames are not "your code" in an import error.
_OWN = Path(__file__).resolve().parent.parent


def _own(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_OWN)


def _missing(exc: BaseException) -> str:
    """What an import could not find, said after the error's type: a module's or a name's, which are code, never data
    (the exception's own text is not shown). Without it, a module missing deep in a library the models import (an
    extra not installed) was only ``ModuleNotFoundError`` at a line of that library."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return f": no module named {exc.name!r}"
    name_from = getattr(exc, "name_from", None)
    if isinstance(exc, ImportError) and exc.name and isinstance(name_from, str):
        return f": cannot import {name_from!r} from {exc.name!r}"
    return ""


def _where(exc: BaseException) -> str:
    """`` (file, line N)`` in the user's code where an import failed, the file relative to the folder the
    models are imported from. A SyntaxError is raised by the import machinery: its own ``filename`` and
    ``lineno`` say where the code is, not its traceback (whose frames are ``<frozen importlib._bootstrap>``)."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f" ({_shown(exc.filename)}, line {exc.lineno})"
    # not a frame of mongoshift itself (the @collection that refused): the line of the user's code that called it
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<") and not _own(f.filename)]
    # and the deepest line of the project's own code rather than one of Python's or an installed library's
    # (json.loads of a bad text was "(decoder.py, line 360): JSONDecodeError", a file the user never wrote)
    theirs = [f for f in frames if _in_project(f.filename)] or frames
    return f" ({_shown(theirs[-1].filename)}, line {theirs[-1].lineno})" if theirs else ""


def _in_project(filename: str) -> bool:
    """A file under the folder the models are imported from, not in the interpreter's library or site-packages."""
    path = Path(filename).resolve()
    installed = {sysconfig.get_path(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return path.is_relative_to(Path.cwd().resolve()) and not any(path.is_relative_to(Path(p).resolve()) for p in installed if p)


def _shown(filename: str) -> str:
    """A file under the folder the models are imported from as a path relative to it (as the project's
    other messages show files), any other by its name only."""
    path, here = Path(filename), Path.cwd()
    for candidate in (path, path.resolve()) if path.is_absolute() else ():
        if candidate.is_relative_to(here):
            return candidate.relative_to(here).as_posix()
    return path.name


def _classes(modules: list[ModuleType]) -> Iterator[type]:
    seen: set[int] = set()
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__ and id(value) not in seen:
                seen.add(id(value))
                yield value


def find_models(package: str) -> list[ModelShape]:
    """Every model of ``package``, read; two models of one collection are refused (exit 49)."""
    classes = list(_classes(import_models(package)))
    shapes: list[ModelShape] = []
    beanie, mongoengine = _odm("beanie"), _odm("mongoengine")
    for cls in classes:
        if beanie is not None and issubclass(cls, beanie.Document):
            if _beanie_base(cls, classes) or _inherits_collection(cls, beanie.Document, _beanie_root):
                continue
            shapes.append(read_beanie(cls, _stored_with(cls, classes) if _beanie_root(cls) else []))
        elif mongoengine is not None and issubclass(cls, mongoengine.Document):
            if cls._meta.get("abstract") or _inherits_collection(cls, mongoengine.Document, _mongoengine_root):  # type: ignore[attr-defined]
                continue
            shapes.append(read_mongoengine(cls, _stored_with(cls, classes) if _mongoengine_root(cls) else []))
        elif issubclass(cls, BaseModel) and registration_of(cls) is not None:
            shapes.append(read_pydantic(cls))
    if not shapes:
        raise ModelsInvalidError(
            f"no models in {package!r}: no Beanie or MongoEngine document, no Pydantic model registered with mongoshift.models.collection",
            models=package,
        )
    owners: dict[str, str] = {}
    for shape in shapes:
        if shape.collection in owners:
            raise ModelsInvalidError(
                f"collection {shape.collection!r} has two models: {owners[shape.collection]} and {shape.model} (keep one, or register one elsewhere)",
                models=package, collection=shape.collection,
            )
        owners[shape.collection] = shape.model
    return sorted(shapes, key=lambda s: s.collection)


def _odm(name: str) -> Any:
    """The ODM's module when the application uses it (already imported by the models), else None."""
    if name not in sys.modules:
        return None
    return importlib.import_module(name)


def _beanie_base(cls: type, classes: list[type]) -> bool:
    """A Beanie class others of the package extend, without a ``Settings.name`` of its own, is a base, not a collection."""
    own = cls.__dict__.get("Settings")
    return getattr(own, "name", None) is None and any(other is not cls and issubclass(other, cls) for other in classes)


def _beanie_root(cls: type) -> bool:
    return bool(getattr(cls.__dict__.get("Settings"), "is_root", False))


def _mongoengine_root(cls: type) -> bool:
    meta = getattr(cls, "_meta", {})
    return bool(meta.get("allow_inheritance")) and not meta.get("abstract")


def _inherits_collection(cls: type, document: type, is_root: Any) -> bool:
    """A subclass stored in its root's collection (Beanie ``is_root``, MongoEngine ``allow_inheritance``) is the root's model."""
    return any(base is not document and issubclass(base, document) and is_root(base) for base in cls.__mro__[1:])


def _stored_with(root: type, classes: list[type]) -> list[type]:
    """The package's subclasses stored in ``root``'s collection: the ODM creates their indexes there too."""
    return [other for other in classes if other is not root and issubclass(other, root)]


def _add_indexes(indexes: list[dict[str, Any]], more: list[dict[str, Any]]) -> None:
    """``more`` after ``indexes``, each name once (a subclass repeats the indexes it inherits)."""
    names = {index["name"] for index in indexes}
    for index in more:
        if index["name"] not in names:
            names.add(index["name"])
            indexes.append(index)


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


# ---------------------------------------------------------------- indexes

def _index(model: str, value: Any) -> dict[str, Any]:
    """An index in the declaration's form, checked now: a bad option fails here, naming the model."""
    if isinstance(value, IndexModel):
        document = dict(value.document)
        data: dict[str, Any] = {"keys": dict(document.pop("key")), **document}
    elif isinstance(value, Mapping):
        data = dict(value)
    else:
        raise ModelsInvalidError(f"{model}: an index must be an IndexModel or a dict, not {type(value).__name__}")
    try:
        return index_form(data)
    except ValidationError as exc:
        raise ModelsInvalidError(f"{model}: index {data.get('name') or data.get('keys')}: {describe_errors(exc)}") from None


def index_form(data: Any) -> dict[str, Any]:
    """An index as a generated file writes it: keys as a table, always named, false flags left out."""
    declared = IndexDeclaration.model_validate(data)
    out = {"keys": dict(declared.keys), "name": declared.index_name}
    out.update({k: v for k, v in declared.document().items() if k not in ("key", "name")})
    return out


def _beanie_index(model: str, entry: Any, unsupported: list[str]) -> dict[str, Any] | None:
    if isinstance(entry, str):
        return _index(model, IndexModel([(entry, 1)]))
    if isinstance(entry, (list, tuple)) and entry and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in entry):
        return _index(model, IndexModel([tuple(p) for p in entry]))
    if isinstance(entry, IndexModel):
        return _index(model, entry)
    unsupported.append(f"{model}: Settings.indexes entry of type {type(entry).__name__} is not read")
    return None


# ---------------------------------------------------------------- the three kinds

def _beanie_indexes(cls: Any, settings: Any, unsupported: list[str]) -> list[dict[str, Any]]:
    """What Beanie's ``init_indexes`` creates for ``cls``: its ``Indexed`` fields, then ``settings.indexes``."""
    from beanie.odm.utils.typing import get_index_attributes

    model = _path(cls)
    indexes: list[dict[str, Any]] = []
    for field_name, info in cls.model_fields.items():
        attributes = get_index_attributes(info)
        if attributes is not None:
            indexes.append(_index(model, IndexModel([(info.alias or field_name, attributes[0])], **attributes[1])))
    for entry in getattr(settings, "indexes", None) or []:
        if (index := _beanie_index(model, entry, unsupported)) is not None:
            indexes.append(index)
    return indexes


def read_beanie(cls: Any, stored_with: Sequence[type] = ()) -> ModelShape:
    """``stored_with``: the subclasses of an ``is_root`` class, whose indexes Beanie creates in its collection."""
    model = _path(cls)
    settings = getattr(cls, "Settings", None)
    name = getattr(settings, "name", None) or cls.__name__
    unsupported: list[str] = []
    indexes = _beanie_indexes(cls, settings, unsupported)
    for child in stored_with:  # its own Settings only: what it inherits is the root's, read above
        _add_indexes(indexes, _beanie_indexes(child, child.__dict__.get("Settings"), unsupported))
    if getattr(settings, "is_root", False):
        unsupported.append(f"{model}: is_root (inheritance): the subclasses' fields and _class_id are not in the validator (their indexes are declared)")
    if getattr(settings, "timeseries", None) is not None:
        unsupported.append(f"{model}: timeseries: converge does not manage time-series collections")
    return _from_pydantic(cls, name, model, "beanie", indexes, unsupported, skip=frozenset({"_id", "revision_id"}))


def read_pydantic(cls: type[BaseModel]) -> ModelShape:
    registration = registration_of(cls)
    assert registration is not None  # find_models checked it
    model = _path(cls)
    indexes = [_index(model, entry) for entry in registration.indexes]
    return _from_pydantic(cls, registration.name, model, "pydantic", indexes, [], skip=frozenset({"_id"}))


def _from_pydantic(
    cls: type[BaseModel], name: str, model: str, odm: Odm, indexes: list[dict[str, Any]], unsupported: list[str], *, skip: frozenset[str]
) -> ModelShape:
    try:
        schema = cls.model_json_schema(by_alias=True)
    except Exception as exc:  # pydantic raises its own errors for types it cannot describe
        raise ModelsInvalidError(f"{model}: its JSON schema cannot be built: {describe_error(exc)}") from None
    converter = Converter(cls.__name__, schema.get("$defs") or {})
    rules = converter.top(schema, skip=skip)
    fields: dict[str, dict[str, Any]] = {}
    required = set(rules.get("required", []))
    extras = {info.alias or key: info for key, info in cls.model_fields.items()}
    for prop, rule in (rules.get("properties") or {}).items():
        info = extras.get(prop)
        default = _MISSING
        renamed = None
        if info is not None:
            if info.default_factory is not None:
                default = _literal_factory(info.default_factory)
            elif not info.is_required():
                default = _literal(info.default)
            extra = info.json_schema_extra
            if isinstance(extra, Mapping) and isinstance(hint := extra.get("renamed_from"), str):
                renamed = hint
        fields[prop] = _field(rule, prop in required, default, renamed)
    return ModelShape(name, model, odm, _declaration(name, indexes, rules, model), fields, unsupported + converter.unsupported)


# ---------------------------------------------------------------- MongoEngine

#: MongoEngine field class → its BSON rule (subclasses such as EmailField match their base).
MONGOENGINE_TYPES: list[tuple[str, dict[str, Any]]] = [
    ("ObjectIdField", {"bsonType": "objectId"}),
    ("IntField", {"bsonType": ["int", "long"]}),
    ("LongField", {"bsonType": ["int", "long"]}),
    ("FloatField", {"bsonType": "number"}),
    ("Decimal128Field", {"bsonType": "decimal"}),
    ("BooleanField", {"bsonType": "bool"}),
    ("DateTimeField", {"bsonType": "date"}),
    ("ComplexDateTimeField", {"bsonType": "string"}),
    ("StringField", {"bsonType": "string"}),
    ("BinaryField", {"bsonType": "binData"}),
    ("UUIDField", {"bsonType": ["binData", "string"]}),
    ("ReferenceField", {"bsonType": ["objectId", "object"]}),
    ("LazyReferenceField", {"bsonType": ["objectId", "object"]}),
    ("MapField", {"bsonType": "object"}),
    ("DictField", {"bsonType": "object"}),
    ("PointField", {"bsonType": "object"}),
]


def _mongoengine_rule(field_obj: Any, where: str, model: str, unsupported: list[str]) -> dict[str, Any]:
    import mongoengine

    if isinstance(field_obj, mongoengine.ListField):
        out: dict[str, Any] = {"bsonType": "array"}
        inner = getattr(field_obj, "field", None)
        if inner is not None:
            items = _mongoengine_rule(inner, f"{where}[]", model, unsupported)
            if items:
                out["items"] = items
        return out
    if isinstance(field_obj, mongoengine.EmbeddedDocumentField):
        return _mongoengine_object(field_obj.document_type, where, model, unsupported)
    names = [k.__name__ for k in type(field_obj).__mro__]
    for kind, rule in MONGOENGINE_TYPES:
        if kind in names:
            out = dict(rule)
            choices = getattr(field_obj, "choices", None)
            if choices:
                out["enum"] = [c[0] if isinstance(c, (list, tuple)) else c for c in choices]
            for attr, key in (("max_length", "maxLength"), ("min_length", "minLength"), ("min_value", "minimum"), ("max_value", "maximum")):
                value = getattr(field_obj, attr, None)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    out[key] = value
            regex = getattr(field_obj, "regex", None)
            if regex is not None:
                out["pattern"] = getattr(regex, "pattern", str(regex))
            return out
    unsupported.append(f"{model}.{where}: {type(field_obj).__name__} is not translated")
    return {}


def _mongoengine_object(document: Any, where: str, model: str, unsupported: list[str]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for key, field_obj in document._fields.items():
        stored = field_obj.db_field or key
        if stored in ("_id", "_cls"):
            continue
        properties[stored] = _mongoengine_rule(field_obj, f"{where}.{stored}" if where else stored, model, unsupported)
        if field_obj.required:
            required.append(stored)
    out: dict[str, Any] = {"bsonType": "object", "properties": properties}
    if required:
        out["required"] = required
    return out


def _mongoengine_indexes(cls: Any) -> list[dict[str, Any]]:
    """What MongoEngine's ``ensure_indexes`` creates for ``cls``: its ``index_specs``, and with ``allow_inheritance``
    (and ``index_cls``, true by default) an index on ``_cls`` when none of them begins with it."""
    indexes = []
    for spec in cls._meta.get("index_specs") or []:
        data = {k: v for k, v in spec.items() if k not in ("fields", "cls", "background", "args")}
        data["keys"] = [list(pair) for pair in spec["fields"]]
        if data.get("sparse") is False:
            data.pop("sparse")
        try:
            indexes.append(_index(_path(cls), data))
        except ModelsInvalidError as exc:
            if not (cls._meta.get("allow_inheritance") and data["keys"] and data["keys"][0][0] == "_cls"):
                raise
            keys = ", ".join(f"{name}: {direction}" for name, direction in data["keys"])
            raise ModelsInvalidError(
                f"{exc.message} (its keys are {{{keys}}}: MongoEngine puts _cls first in an index of a class that allows "
                'inheritance; "cls": False in the index\'s meta entry leaves it out)'
            ) from None
    if cls._meta.get("allow_inheritance") and cls._meta.get("index_cls", True) and not any(next(iter(i["keys"])) == "_cls" for i in indexes):
        indexes.append(_index(_path(cls), {"keys": {"_cls": 1}}))
    return indexes


def read_mongoengine(cls: Any, stored_with: Sequence[type] = ()) -> ModelShape:
    """``stored_with``: the subclasses of an ``allow_inheritance`` class, whose indexes MongoEngine creates in its collection."""
    model = _path(cls)
    unsupported: list[str] = []
    indexes = _mongoengine_indexes(cls)
    for child in stored_with:
        _add_indexes(indexes, _mongoengine_indexes(child))
    if cls._meta.get("allow_inheritance"):
        unsupported.append(f"{model}: allow_inheritance: the subclasses' fields are not in the validator (their indexes are declared)")
    rules = _mongoengine_object(cls, "", cls.__name__, unsupported)
    fields: dict[str, dict[str, Any]] = {}
    for key, field_obj in cls._fields.items():
        stored = field_obj.db_field or key
        if stored not in rules["properties"]:
            continue
        default = field_obj.default
        value = _literal_factory(default) if callable(default) else (_MISSING if default is None else _literal(default))
        fields[stored] = _field(rules["properties"][stored], bool(field_obj.required), value, None)
    return ModelShape(cls._get_collection_name(), model, "mongoengine", _declaration(cls._get_collection_name(), indexes, rules, model),
                      fields, unsupported)


# ---------------------------------------------------------------- shared

class _Missing:
    def __repr__(self) -> str:
        return "<no default>"


_MISSING: Any = _Missing()
#: Factories whose result is a constant a migration file can write as a literal.
_LITERAL_FACTORIES: tuple[Any, ...] = (list, dict, str, int, float, bool)


def _literal(value: Any) -> Any:
    """A default as plain data (an enum by its value), or a marker that it has none a file can spell."""
    import enum

    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, float) and not math.isfinite(value):
        return _NOT_LITERAL  # its repr (inf, nan) is no Python literal: the file would raise NameError on every document
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    # a container's items as plain data too (nested lists and dicts, enum members): each must be one
    if isinstance(value, (list, tuple)):
        items = [_literal(v) for v in value]
        return _NOT_LITERAL if any(i is _NOT_LITERAL for i in items) else items
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        entries = {k: _literal(v) for k, v in value.items()}
        return _NOT_LITERAL if any(v is _NOT_LITERAL for v in entries.values()) else entries
    return _NOT_LITERAL


class _NotLiteral:
    def __repr__(self) -> str:
        return "<not a constant>"


_NOT_LITERAL: Any = _NotLiteral()


def _literal_factory(factory: Any) -> Any:
    return _literal(factory()) if factory in _LITERAL_FACTORIES else _NOT_LITERAL


def _field(rule: Mapping[str, Any], required: bool, default: Any, renamed_from: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"types": bson_types(rule), "nullable": nullable(rule), "required": required}
    if default is _NOT_LITERAL:
        out["default"] = {"constant": False}
    elif default is not _MISSING:
        out["default"] = {"constant": True, "value": default}
    if renamed_from:
        out["renamed_from"] = renamed_from
    return out


def _declaration(name: str, indexes: list[dict[str, Any]], rules: dict[str, Any], model: str) -> dict[str, Any]:
    """The generated declaration, checked as converge will check it (a model that yields a bad one fails here)."""
    declaration = {
        "indexes": indexes,
        "validator": {"$jsonSchema": rules},
        "validation_level": DEFAULT_LEVEL,
        "validation_action": DEFAULT_ACTION,
    }
    try:
        CollectionDeclaration.model_validate({"name": name, **declaration})
    except ValidationError as exc:
        raise ModelsInvalidError(f"{model}: the declaration derived from it is invalid: {describe_errors(exc)}") from None
    return declaration
