"""``collections generate``: declarations from Beanie, MongoEngine and registered Pydantic models (issue 30, items 1 and 2)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from mongoshift.errors import ExitCode

from ..conftest import Project
from .conftest import PACKAGE, declared, write_models

BEANIE = '''
import datetime
import enum
from typing import Annotated, Optional

from beanie import Document, Indexed
from pydantic import BaseModel
from pymongo import IndexModel


class Tier(str, enum.Enum):
    free = "free"
    paid = "paid"


class Address(BaseModel):
    city: str
    zip: Optional[str] = None


class Customer(Document):
    email: Indexed(str, unique=True)
    name: Annotated[str, Indexed()]
    tier: Tier = Tier.free
    tags: list[str] = []
    address: Optional[Address] = None
    seen: datetime.datetime
    pair: Optional[tuple[int, str]] = None

    class Settings:
        name = "customers"
        indexes = [
            [("seen", -1), ("name", 1)],
            IndexModel([("seen", 1)], name="seen_ttl", expireAfterSeconds=3600),
            IndexModel([("tier", 1)], name="paid_only", partialFilterExpression={"tier": "paid"}),
        ]
'''


def test_a_beanie_document_gives_its_indexes_and_a_lenient_validator(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, BEANIE)
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 0, result.stderr
    declaration = declared(project, "customers")
    assert declaration["indexes"] == [
        {"keys": {"email": 1}, "name": "email_1", "unique": True},
        {"keys": {"name": 1}, "name": "name_1"},
        {"keys": {"seen": -1, "name": 1}, "name": "seen_-1_name_1"},
        {"keys": {"seen": 1}, "name": "seen_ttl", "expireAfterSeconds": 3600},
        {"keys": {"tier": 1}, "name": "paid_only", "partialFilterExpression": {"tier": "paid"}},
    ]
    assert (declaration["validation_level"], declaration["validation_action"]) == ("moderate", "warn")
    schema = declaration["validator"]["$jsonSchema"]
    assert schema["required"] == ["email", "name", "seen"]
    assert schema["properties"]["tier"] == {"enum": ["free", "paid"], "bsonType": "string"}
    assert schema["properties"]["tags"] == {"bsonType": "array", "items": {"bsonType": "string"}}
    assert schema["properties"]["seen"] == {"bsonType": "date"}
    assert schema["properties"]["address"] == {
        "bsonType": ["object", "null"], "required": ["city"],
        "properties": {"city": {"bsonType": "string"}, "zip": {"bsonType": ["string", "null"]}},
    }
    assert "_id" not in schema["properties"] and "revision_id" not in schema["properties"]
    # the tuple's positions have no $jsonSchema rule here: listed, and the field keeps what can be said
    assert schema["properties"]["pair"]["bsonType"] == ["array", "null"]
    assert "Customer.pair: a tuple's positions are not checked" in result.stderr
    assert "+[validator.\"$jsonSchema\".properties.email]" in result.stdout  # the diff of the new file


MONGOENGINE = '''
import mongoengine as me


class Address(me.EmbeddedDocument):
    city = me.StringField(required=True)


class Person(me.Document):
    email = me.StringField(required=True, unique=True)
    nick = me.StringField(unique=True, sparse=True)
    kind = me.StringField(choices=["staff", "guest"], default="guest")
    age = me.IntField(min_value=0)
    address = me.EmbeddedDocumentField(Address)
    seen = me.DateTimeField(db_field="s")
    shape = me.GenericReferenceField()
    meta = {
        "collection": "people",
        "indexes": [
            {"fields": ["kind", "-age"], "name": "kind_age", "partialFilterExpression": {"age": {"$gt": 17}}},
            {"fields": ["seen"], "expireAfterSeconds": 60},
        ],
    }


class Base(me.Document):
    meta = {"abstract": True}
'''


def test_mongoengine_meta_indexes_unique_and_sparse_fields(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, MONGOENGINE)
    result = cli(project, "--json", "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    (row,) = body["collections"]
    assert (row["collection"], row["model"], row["action"]) == ("people", f"{PACKAGE}.models.Person", "created")
    assert row["unsupported"] == ["Person.shape: GenericReferenceField is not translated"]
    declaration = declared(project, "people")
    assert declaration["indexes"] == [
        {"keys": {"kind": 1, "age": -1}, "name": "kind_age", "partialFilterExpression": {"age": {"$gt": 17}}},
        {"keys": {"s": 1}, "name": "s_1", "expireAfterSeconds": 60},
        {"keys": {"email": 1}, "name": "email_1", "unique": True},
        {"keys": {"nick": 1}, "name": "nick_1", "unique": True, "sparse": True},
    ]
    properties = declaration["validator"]["$jsonSchema"]["properties"]
    assert properties["kind"] == {"bsonType": "string", "enum": ["staff", "guest"]}
    assert properties["age"] == {"bsonType": ["int", "long"], "minimum": 0}
    assert properties["s"] == {"bsonType": "date"}
    assert properties["shape"] == {}  # listed above, never a rule it does not mean
    assert properties["address"] == {"bsonType": "object", "properties": {"city": {"bsonType": "string"}}, "required": ["city"]}


PYDANTIC = '''
import datetime

from pydantic import BaseModel
from pymongo import IndexModel

from mongoshift.models import collection


@collection("events", indexes=[IndexModel([("at", -1)], name="recent"), {"keys": {"kind": 1, "at": -1}}])
class Event(BaseModel):
    at: datetime.datetime
    kind: str
    payload: dict[str, int] = {}


class NotStored(BaseModel):
    x: int
'''


def test_a_registered_pydantic_model_and_an_unregistered_one(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    assert sorted(p.name for p in (project.root / "collections").iterdir()) == ["_models.json", "events.toml"]
    declaration = declared(project, "events")
    assert [i["name"] for i in declaration["indexes"]] == ["recent", "kind_1_at_-1"]
    assert declaration["validator"]["$jsonSchema"]["properties"]["payload"] == {
        "bsonType": "object", "additionalProperties": {"bsonType": ["int", "long"]},
    }


def test_hand_edits_are_kept_and_check_fails_until_the_models_change_is_generated(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, BEANIE)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    path = project.root / "collections" / "customers.toml"
    text = path.read_text(encoding="utf-8")
    edited = text.replace('validation_action = "warn"', 'validation_action = "error"').replace(
        '[validator."$jsonSchema".properties.name]\nbsonType = "string"', '[validator."$jsonSchema".properties.name]\nbsonType = "string"\nmaxLength = 80'
    )
    path.write_text(edited.replace("indexes = [", "prune = true\nindexes = [", 1), encoding="utf-8")
    # the models did not change: the hand edits are not a difference (the snapshot is read as the base)
    check = cli(project, "collections", "generate", "--check")
    assert check.returncode == 0, check.stdout + check.stderr

    write_models(project, BEANIE.replace("    seen: datetime.datetime\n", "    seen: datetime.datetime\n    plan: str = 'basic'\n")
                 .replace('IndexModel([("tier", 1)]', 'IndexModel([("plan", 1)], name="by_plan"),\n            IndexModel([("tier", 1)]'))
    check = cli(project, "collections", "generate", "--check")
    assert check.returncode == ExitCode.MODELS_DRIFT == 48
    assert '+  { keys = { plan = 1 }, name = "by_plan" },' in check.stdout
    assert "+[validator.\"$jsonSchema\".properties.plan]" in check.stdout
    assert path.read_text(encoding="utf-8").count("by_plan") == 0  # --check wrote nothing

    assert cli(project, "collections", "generate").returncode == 0  # the package comes from the snapshot
    after = declared(project, "customers")
    assert after["validation_action"] == "error" and after["prune"] is True
    assert after["validator"]["$jsonSchema"]["properties"]["name"] == {"bsonType": "string", "maxLength": 80}
    assert after["validator"]["$jsonSchema"]["properties"]["plan"] == {"bsonType": "string"}
    assert [i["name"] for i in after["indexes"]][-2:] == ["paid_only", "by_plan"]  # the file's order, the models' new ones after
    assert cli(project, "collections", "generate", "--check").returncode == 0


def test_an_edit_the_models_also_changed_is_kept_and_named(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    path = project.root / "collections" / "events.toml"
    path.write_text(path.read_text(encoding="utf-8").replace('name = "recent" }', 'name = "recent", hidden = true }'), encoding="utf-8")
    write_models(project, PYDANTIC.replace('name="recent")', 'name="recent", expireAfterSeconds=60)'))
    result = cli(project, "collections", "generate")
    assert result.returncode == 0
    assert "events: index recent: your edit is kept; the models now give" in result.stderr
    (recent,) = [i for i in declared(project, "events")["indexes"] if i["name"] == "recent"]
    assert recent == {"keys": {"at": -1}, "name": "recent", "hidden": True}


def test_a_model_whose_collection_is_declared_in_the_project_file_is_refused(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, PYDANTIC)
    project.config.write_text(project.config.read_text() + '\n[[mongoshift.collections]]\nname = "events"\nindexes = []\n')
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == ExitCode.MODELS_INVALID == 49
    assert "declared in the project file, where generate does not write: events" in result.stderr
    assert not (project.root / "collections").exists()


def test_refusals_name_what_is_wrong(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    result = cli(project, "collections", "generate")
    assert result.returncode == 49 and "--models PKG" in result.stderr
    result = cli(project, "collections", "generate", "--models", "nowhere.models")
    assert result.returncode == 49 and "'nowhere.models' not found" in result.stderr
    write_models(project, "raise RuntimeError('secret value')\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49 and "failed to import (shopapp/models.py, line 1): RuntimeError" in result.stderr
    assert "secret value" not in result.stderr
    # raised inside Python's own library: the line of the user's code that called it, not "(decoder.py, line 360)"
    write_models(project, "import json\n\nSETTINGS = json.loads('{secret value')\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49 and "failed to import (shopapp/models.py, line 3): JSONDecodeError" in result.stderr
    assert "secret value" not in result.stderr
    # @collection without its call: the line of the user's code and what to write, not "(registry.py, line 34): ValueError"
    head = "from pydantic import BaseModel\nfrom mongoshift.models import collection\n\n\n"
    write_models(project, head + "@collection\nclass Event(BaseModel):\n    y: int\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49, result.stderr
    assert ("failed to import (shopapp/models.py, line 5): @collection on Event needs the collection's name: "
            '@collection("events"), not @collection') in result.stderr
    write_models(project, head + "@collection('events', indexes='email')\nclass Event(BaseModel):\n    y: int\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49 and "(shopapp/models.py, line 5): collection('events'): indexes must be a list of indexes, not str" in result.stderr
    write_models(project, PYDANTIC + '\n\n@collection("events")\nclass Other(BaseModel):\n    y: int\n')
    result = cli(project, "--json", "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "models_invalid" and "collection 'events' has two models" in error["message"]
    write_models(project, "x = 1\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49 and "no models in 'shopapp.models'" in result.stderr


def test_an_empty_models_flag_is_refused_not_taken_as_left_out(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """``--models ""`` (an unset variable in a script) read the snapshot's package, as if it was not given."""
    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    for command in (("collections", "generate", "--check"), ("create", "next", "--from-models")):
        result = cli(project, *command, "--models", "")
        assert result.returncode == 49, (command, result.stderr)
        assert "--models '' is not a module name" in result.stderr
    assert cli(project, "collections", "generate", "--check").returncode == 0  # left out: the snapshot's package


def test_a_package_name_no_import_could_take_is_refused_before_any_hint_quotes_it(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """With no snapshot yet, ``create --from-models --models 'a b'`` answered with a hint to run
    ``collections generate --models a b``: a command that cannot work, unquoted."""
    for command in (("create", "next", "--from-models"), ("collections", "generate", "--check")):
        result = cli(project, *command, "--models", "shop app")
        assert result.returncode == 49, (command, result.stderr)
        assert "--models 'shop app' is not a module name" in result.stderr and "generate --models shop app" not in result.stderr


def test_a_syntax_error_names_the_users_file_and_line(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """The import machinery raises a SyntaxError from its own frames: the file and line are the error's, not the traceback's."""
    write_models(project, "import datetime\n\n\nclass Broken(:\n    secret = 'value'\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49
    assert "models module 'shopapp.models' failed to import (shopapp/models.py, line 4): SyntaxError" in result.stderr
    assert "frozen" not in result.stderr and "secret" not in result.stderr
    write_models(project, "def helper(:\n", module="parts")
    write_models(project, "from .parts import helper\n")  # the broken module is another one than the one imported
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49
    assert "models module 'shopapp.models' failed to import (shopapp/parts.py, line 1): SyntaxError" in result.stderr
    write_models(project, "import datetime\nimport shopapp_helpers_nowhere\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49
    assert "models module 'shopapp.models' failed to import (shopapp/models.py, line 2): ModuleNotFoundError" in result.stderr


def test_a_missing_import_names_the_module_that_is_missing(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """A module missing deep in a library the models import (a driver extra not installed) was reported as
    ``(__init__.py, line 1): ModuleNotFoundError``: the library's file, and nothing saying what to install. A module's
    name is code, never data: it is named, as is the name an ``ImportError`` could not import."""
    library = project.root / "paymentlib"
    library.mkdir()
    (library / "__init__.py").write_text("import paymentlib_driver_nowhere\n", encoding="utf-8")
    write_models(project, "import datetime\nimport paymentlib\n")
    result = cli(project, "--json", "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49, result.stderr
    message = json.loads(result.stdout)["error"]["message"]
    assert message == (
        "models module 'shopapp.models' failed to import (paymentlib/__init__.py, line 1): "
        "ModuleNotFoundError: no module named 'paymentlib_driver_nowhere'"
    ), message
    write_models(project, "from datetime import nowhere_helper\n")
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49
    assert "(shopapp/models.py, line 1): ImportError: cannot import 'nowhere_helper' from 'datetime'" in result.stderr, result.stderr


def test_a_packages_main_module_is_not_run(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """``--models PKG`` imported ``PKG/__main__.py`` with the rest: the application's program ran (a server started
    there never returned; one that exits failed the run with exit 49). It is the package's program, not a module."""
    write_models(project, BEANIE)
    (project.root / PACKAGE / "__main__.py").write_text("raise SystemExit('the application started')\n", encoding="utf-8")
    result = cli(project, "--json", "collections", "generate", "--models", PACKAGE)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [c["collection"] for c in json.loads(result.stdout)["collections"]] == ["customers"]


def _broken_declaration(snapshot: dict) -> None:  # type: ignore[type-arg]
    snapshot["declarations"]["events"] = 5  # a hand edit, a merge conflict resolved badly


def _missing_model(snapshot: dict) -> None:  # type: ignore[type-arg]
    del snapshot["shapes"]["events"]["model"]


def _field_not_an_object(snapshot: dict) -> None:  # type: ignore[type-arg]
    snapshot["shapes"]["events"]["fields"]["kind"] = "string"


def _types_not_a_list(snapshot: dict) -> None:  # type: ignore[type-arg]
    snapshot["shapes"]["events"]["fields"]["kind"]["types"] = "string"


def _version(value: object):  # type: ignore[no-untyped-def]
    def breaking(snapshot: dict) -> None:  # type: ignore[type-arg]
        snapshot["shapes"]["events"]["version"] = value  # set by hand, as the docs say, for documents with a version
    return breaking


def _models_not_text(snapshot: dict) -> None:  # type: ignore[type-arg]
    snapshot["models"] = 5


@pytest.mark.parametrize(
    ("breaking", "said"),
    [
        (None, "not UTF-8 text"),
        (_version(2.7), "shapes.events.version must be a whole number from 0"),  # was read as 2
        (_version("3"), "shapes.events.version must be a whole number from 0"),
        (_version(True), "shapes.events.version must be a whole number from 0"),
        (_version("three"), "shapes.events.version must be a whole number from 0"),  # Python's message quoted the text
        (_version(-1), "shapes.events.version must be a whole number from 0"),
        (_models_not_text, "models must be the models package's name"),  # was "name the models package: --models PKG"
        (_broken_declaration, "declarations.events must be an object"),
        (_missing_model, "shapes.events: 'model' is missing"),
        (_field_not_an_object, "shapes.events.fields.kind must be an object"),
        (_types_not_a_list, "shapes.events.fields.kind.types must be a list of BSON type names"),
    ],
)
def test_a_snapshot_broken_by_hand_is_refused_naming_what_is_wrong(project: Project, cli, breaking, said: str) -> None:  # type: ignore[no-untyped-def]
    """docs/models.md: a snapshot that cannot be read is exit 49. A declaration or a field's shape that was not an
    object, or bytes that are not UTF-8, failed as exit 1 ("unexpected AttributeError ... please report it"); a
    field's ``types`` given as text was read as its letters; a missing key was said as ``('model')``."""
    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    path = project.root / "collections" / "_models.json"
    if breaking is None:
        path.write_bytes(b"\xff\xfe{}")
    else:
        snapshot = json.loads(path.read_text(encoding="utf-8"))
        breaking(snapshot)
        path.write_text(json.dumps(snapshot), encoding="utf-8")
    before = path.read_bytes()
    write_models(project, PYDANTIC.replace("    kind: str\n", "    kind: int\n"))
    for command in (("collections", "generate", "--check"), ("collections", "generate"), ("create", "next", "--from-models")):
        result = cli(project, "--json", *command)
        assert result.returncode == 49, (command, result.stdout, result.stderr)
        message = json.loads(result.stdout)["error"]["message"]
        assert f"_models.json: not a models snapshot mongoshift can read ({said}); restore it from version control" in message, message
    assert path.read_bytes() == before
    assert not any(p.suffix == ".py" for p in (project.root / "migrations").iterdir())


async def test_the_python_api_session_and_flat_function(project: Project, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import mongoshift
    from mongoshift import api

    monkeypatch.chdir(project.root)  # the package is imported from the current folder
    write_models(project, PYDANTIC)
    s = project.settings()
    report = await api.generate_collections(s, f"{PACKAGE}.models", check=True)
    assert not report.in_sync and [c.action for c in report.collections] == ["created"]
    assert not (project.root / "collections").exists()
    async with mongoshift.api.connect(s) as ms:
        report = await ms.collections.generate(f"{PACKAGE}.models")
        assert [c.action for c in report.collections] == ["created"]
        assert (await ms.collections.generate(check=True)).in_sync


def test_a_hand_written_declaration_is_completed_not_rewritten(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """No snapshot yet: the file's own parts stay, the models' missing ones are added, one spelled differently is the same index."""
    folder = project.root / "collections"
    folder.mkdir()
    (folder / "events.toml").write_text(
        'indexes = [{ keys = [["at", -1]], name = "recent" }, { keys = { owner = 1 } }]\nprune = true\n', encoding="utf-8"
    )
    write_models(project, PYDANTIC)
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 0
    assert "your edit is kept" not in result.stderr  # the same index, written another way, is no edit
    # the two indexes stay as written (no name added to the second); the models' index joins the list
    assert (folder / "events.toml").read_text(encoding="utf-8").startswith(
        'indexes = [{ keys = [["at", -1]], name = "recent" }, { keys = { owner = 1 } }, { keys = { kind = 1, at = -1 }, name = "kind_1_at_-1" }]\n'
        "prune = true\n"
    )
    after = declared(project, "events")
    assert after["prune"] is True and after["validator"]["$jsonSchema"]["required"] == ["at", "kind"]


def test_inherited_documents_are_their_roots_collection(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, '''
import mongoengine as me
from beanie import Document, Indexed


class Animal(me.Document):
    name = me.StringField(required=True)
    meta = {"collection": "animals", "allow_inheritance": True, "indexes": ["name"]}


class Dog(Animal):
    barks = me.BooleanField()
    meta = {"indexes": ["barks"]}


class Vehicle(Document):
    wheels: Indexed(int)

    class Settings:
        name = "vehicles"
        is_root = True


class Car(Vehicle):
    doors: int = 4


class Bike(Vehicle):
    gears: Indexed(int, unique=True)


class Plant(me.Document):
    meta = {"collection": "plants", "allow_inheritance": True}


class Tree(Plant):
    height = me.IntField()
''')
    result = cli(project, "--json", "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 0, result.stderr
    rows = {row["collection"]: row for row in json.loads(result.stdout)["collections"]}
    assert sorted(rows) == ["animals", "plants", "vehicles"]
    assert rows["animals"]["model"] == f"{PACKAGE}.models.Animal"
    assert rows["animals"]["unsupported"] == [
        "shopapp.models.Animal: allow_inheritance: the subclasses' fields are not in the validator (their indexes are declared)"
    ]
    assert rows["vehicles"]["unsupported"] == [
        "shopapp.models.Vehicle: is_root (inheritance): the subclasses' fields and _class_id are not in the validator (their indexes are declared)"
    ]
    # The ODMs create a subclass's indexes in its root's collection (Beanie's init_indexes, MongoEngine's ensure_indexes):
    # left out, they were dropped in silence, and a declaration with prune = true would have converge drop them.
    assert [i["keys"] for i in declared(project, "animals")["indexes"]] == [{"_cls": 1, "name": 1}, {"_cls": 1, "barks": 1}]
    # With allow_inheritance and no index that begins with _cls, MongoEngine's ensure_indexes creates one on _cls.
    assert declared(project, "plants")["indexes"] == [{"keys": {"_cls": 1}, "name": "_cls_1"}]
    vehicles = declared(project, "vehicles")["indexes"]
    assert [(i["keys"], i.get("unique", False)) for i in vehicles] == [({"wheels": 1}, False), ({"gears": 1}, True)]  # wheels once


def test_a_ttl_index_mongoengine_puts_cls_in_front_of_says_how_to_leave_it_out(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """A one-field TTL index in a class that allows inheritance was refused as "expireAfterSeconds (TTL) needs a
    single-field ... index", naming no keys: MongoEngine had put _cls first, which the user never wrote. The error
    now shows the keys and the way out ("cls": False in the index's meta entry), and that entry generates."""
    source = '''
import mongoengine as me


class Event(me.Document):
    at = me.DateTimeField()
    meta = {"collection": "events", "allow_inheritance": True, "indexes": [{"fields": ["at"], "expireAfterSeconds": 60, "name": "ttl"}]}
'''
    write_models(project, source)
    result = cli(project, "collections", "generate", "--models", f"{PACKAGE}.models")
    assert result.returncode == 49, result.stderr
    assert "index ttl" in result.stderr and "_cls" in result.stderr and '"cls": False' in result.stderr, result.stderr
    write_models(project, source.replace('"name": "ttl"}', '"name": "ttl", "cls": False}'))
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    assert {"keys": {"at": 1}, "name": "ttl", "expireAfterSeconds": 60} in declared(project, "events")["indexes"]


COMMENTED = '''
import datetime
from typing import Optional

from pydantic import BaseModel
from pymongo import IndexModel

from mongoshift.models import collection


class Address(BaseModel):
    city: str


@collection("customers", indexes=[IndexModel([("email", 1)], name="email_1", unique=True), IndexModel([("seen", -1)], name="recent")])
class Customer(BaseModel):
    email: str
    tier: str = "free"
    seen: datetime.datetime
    address: Optional[Address] = None


@collection("events", indexes=[IndexModel([("at", -1)], name="recent")])
class Event(BaseModel):
    at: datetime.datetime
'''


#: customers.toml as generated from COMMENTED, then commented by hand
HAND_COMMENTED = """\
# Customers: reviewed by the data team.
# Ask before loosening the validator.

indexes = [
  { keys = { email = 1 }, name = "email_1", unique = true },
  # the dashboard sorts by the last visit
  { keys = { seen = -1 }, name = "recent" },
]
validation_level = "moderate"
validation_action = "warn"  # "error" once the old documents are cleaned

[validator."$jsonSchema"]
bsonType = "object"
required = ["email", "seen"]

[validator."$jsonSchema".properties.email]
bsonType = "string"
# the format is checked by the application, not here

[validator."$jsonSchema".properties.tier]
bsonType = "string"

[validator."$jsonSchema".properties.seen]
bsonType = "date"

[validator."$jsonSchema".properties.address]
bsonType = ["object", "null"]  # null for guests
required = ["city"]

[validator."$jsonSchema".properties.address.properties.city]
bsonType = "string"
"""


def test_regenerating_changes_only_the_lines_the_models_changed_and_keeps_every_comment(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    write_models(project, COMMENTED)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    folder = project.root / "collections"
    customers, events = folder / "customers.toml", folder / "events.toml"
    assert tomllib.loads(HAND_COMMENTED) == declared(project, "customers")  # the same declaration, commented
    customers.write_text(HAND_COMMENTED, encoding="utf-8")
    check = cli(project, "collections", "generate", "--check")
    assert check.returncode == 0, check.stdout + check.stderr  # comments are no difference

    # an index added, a field's type changed (tier), a field removed (seen)
    write_models(project, COMMENTED.replace("    seen: datetime.datetime\n", "").replace('tier: str = "free"', "tier: int = 0")
                 .replace('name="recent")])\nclass Customer', 'name="recent"), IndexModel([("tier", 1)], name="by_tier")])\nclass Customer'))
    check = cli(project, "--json", "collections", "generate", "--check")
    assert check.returncode == ExitCode.MODELS_DRIFT == 48
    rows = {row["collection"]: row for row in json.loads(check.stdout)["collections"]}
    assert rows["events"]["action"] == "unchanged"
    changed = [line for line in rows["customers"]["diff"].splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert sorted(changed) == sorted([
        '+  { keys = { tier = 1 }, name = "by_tier" },',
        '-required = ["email", "seen"]', '+required = ["email"]',
        '-bsonType = "string"', '+bsonType = ["int", "long"]',  # tier
        '-[validator."$jsonSchema".properties.seen]', '-bsonType = "date"', "-",
    ])
    assert customers.read_text(encoding="utf-8") == HAND_COMMENTED  # --check wrote nothing

    os.utime(events, ns=(10**18, 10**18))
    events_before = events.read_bytes()
    result = cli(project, "collections", "generate")
    assert result.returncode == 0, result.stderr
    assert customers.read_text(encoding="utf-8") == HAND_COMMENTED.replace(
        '  { keys = { seen = -1 }, name = "recent" },\n', '  { keys = { seen = -1 }, name = "recent" },\n  { keys = { tier = 1 }, name = "by_tier" },\n'
    ).replace('required = ["email", "seen"]', 'required = ["email"]').replace(
        '[validator."$jsonSchema".properties.tier]\nbsonType = "string"\n', '[validator."$jsonSchema".properties.tier]\nbsonType = ["int", "long"]\n'
    ).replace('[validator."$jsonSchema".properties.seen]\nbsonType = "date"\n\n', "")
    assert events.read_bytes() == events_before and events.stat().st_mtime_ns == 10**18  # not rewritten at all
    assert cli(project, "collections", "generate", "--check").returncode == 0


def test_an_edit_that_would_not_read_back_as_the_merged_declaration_writes_nothing(project: Project, cli, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The read-back guard: whatever the in-place edit gives is checked before any file is written."""
    from mongoshift.models import generate

    write_models(project, COMMENTED)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    folder = project.root / "collections"
    customers = folder / "customers.toml"
    customers.write_text(HAND_COMMENTED, encoding="utf-8")
    snapshot = (folder / "_models.json").read_text(encoding="utf-8")
    write_models(project, COMMENTED.replace('tier: str = "free"', "tier: int = 0"))
    monkeypatch.setattr(generate, "edit", lambda text, before, after: text.replace('"recent"', '"recent_"'))
    result = cli(project, "collections", "generate")
    assert result.returncode == ExitCode.MODELS_INVALID == 49
    assert "customers.toml: the file could not be updated in place faithfully; nothing was written" in result.stderr
    assert customers.read_text(encoding="utf-8") == HAND_COMMENTED
    assert (folder / "_models.json").read_text(encoding="utf-8") == snapshot


ORPHAN_A = """
from beanie import Document


class A(Document):
    x: int

    class Settings:
        name = "a_coll"
"""

ORPHAN_B = """
from beanie import Document
from pymongo import IndexModel


class B(Document):
    y: int

    class Settings:
        name = "b_coll"
        indexes = [IndexModel([("y", 1)], name="by_y")]
"""


def test_a_collection_whose_model_is_gone_is_named_at_every_run_and_follows_its_model_when_it_comes_back(project: Project, cli) -> None:  # type: ignore[no-untyped-def]
    """The orphan was reported once (the snapshot forgot it), and a model that came back found no base
    to merge with: every part it generated read as a hand edit, kept as it was."""
    from .conftest import forget

    write_models(project, ORPHAN_A, "a")
    write_models(project, ORPHAN_B, "b")
    assert cli(project, "collections", "generate", "--models", PACKAGE).returncode == 0
    (project.root / PACKAGE / "b.py").unlink()
    forget()
    for _ in range(2):
        run = cli(project, "collections", "generate", "--json")
        assert run.returncode == 0 and json.loads(run.stdout)["orphaned"] == ["b_coll"], run.stdout
        assert "b_coll: no model gives this collection any more" in run.stderr
    assert cli(project, "collections", "generate", "--check").returncode == 0  # an orphan is warned about, not drift
    write_models(project, ORPHAN_B.replace("y: int", "y: str").replace('("y", 1)', '("y", -1)'), "b")
    back = cli(project, "collections", "generate")
    assert back.returncode == 0 and "your edit is kept" not in back.stderr, back.stderr
    declaration = declared(project, "b_coll")
    assert declaration["indexes"] == [{"keys": {"y": -1}, "name": "by_y"}]
    assert declaration["validator"]["$jsonSchema"]["properties"]["y"]["bsonType"] == "string"


BLOCKING = '''
import pathlib
import time

_here = pathlib.Path(__file__).parent
(_here / "importing").write_text("")
for _ in range(2400):  # until the test has sent its signal (at most two minutes)
    if (_here / "go").exists():
        break
    time.sleep(0.05)
'''


STOPPING_LINE = "mongoshift: stopping: nothing is written once the models are imported (press Ctrl-C again to stop now)\n"


def _interrupt_while_importing(process: subprocess.Popen[str], package: Path, *, go: bool = True) -> str:
    """SIGINT once ``process`` imports the models (BLOCKING's marker), then, once it said it took the signal, let the
    import end (``go``). Waits on the marker and on that line, never on time: writing ``go`` right after the signal let
    a loaded machine end the import before the signal was taken (the run then wrote, and exited 0). Returns that line."""
    import signal
    import time

    for _ in range(2400):  # a hang guard (two minutes), not a timing: the module writes the marker as it imports
        if (package / "importing").exists() or process.poll() is not None:
            break
        time.sleep(0.05)
    assert (package / "importing").exists(), process.communicate()
    assert process.stderr is not None
    process.send_signal(signal.SIGINT)
    while not (line := process.stderr.readline()).startswith("mongoshift: stopping"):  # the signal was taken: the stop is set
        assert line, process.communicate()
    if go:
        (package / "go").write_text("")
    return line


@pytest.mark.parametrize("command", [("collections", "generate"), ("create", "next", "--from-models")])
def test_ctrl_c_while_the_models_import_writes_nothing_and_exits_11(project: Project, cli, command: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """The stop was announced ("stopping: nothing new starts"), then the files were written and the command exited 0."""
    from ..conftest import reaped, start_cli

    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    before = {p.name: p.read_bytes() for p in (project.root / "collections").iterdir()}
    changed = PYDANTIC.replace("    kind: str\n", "    kind: str\n    level: int = 0\n")
    assert changed != PYDANTIC  # the models change: a run that did not stop would write
    write_models(project, changed + BLOCKING)
    process = start_cli(project, *command)
    with reaped(process):
        notice = _interrupt_while_importing(process, project.root / PACKAGE)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 11, stderr
    assert "before writing: nothing was written" in stderr
    assert notice == STOPPING_LINE  # this command's: no "ctx.cancelled" (a migration's), nothing new that "starts"
    assert {p.name: p.read_bytes() for p in (project.root / "collections").iterdir()} == before
    assert not any(p.suffix == ".py" for p in (project.root / "migrations").iterdir())


@pytest.mark.parametrize(
    ("command", "next_run"),
    [(("collections", "generate"), "collections generate"), (("create", "next", "--from-models"), "create --from-models")],
)
def test_a_second_ctrl_c_says_what_a_models_command_leaves(project: Project, cli, command: tuple[str, ...], next_run: str) -> None:  # type: ignore[no-untyped-def]
    """The second signal said "a lock this run held stays held ... a migration that was running is not recorded":
    a models command holds no lock and runs no migration; what it can leave is files written before the snapshot."""
    import signal

    from ..conftest import reaped, start_cli

    write_models(project, PYDANTIC)
    assert cli(project, "collections", "generate", "--models", f"{PACKAGE}.models").returncode == 0
    write_models(project, PYDANTIC.replace("    kind: str\n", "    kind: str\n    level: int = 0\n") + BLOCKING)
    process = start_cli(project, *command)
    with reaped(process):
        assert _interrupt_while_importing(process, project.root / PACKAGE, go=False) == STOPPING_LINE
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "lock" not in stderr and "a migration that was running" not in stderr, stderr
    said = f"no file is left half-written; those already written stay, and the next '{next_run}' completes the models snapshot from them"
    assert f"second signal, stopping now: {said}" in stderr, stderr
