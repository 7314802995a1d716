"""Declarations: strict validation with messages that name the key and the file, and loading."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from pymongo import IndexModel

from mongoshift.errors import ConfigInvalidError, IOFailedError
from mongoshift.project.declarations import declarations_by_name, load_declarations
from mongoshift.project.settings import Settings, load_settings
from mongoshift.schema.collections import CollectionDeclaration


def declare(**values: Any) -> CollectionDeclaration:
    return CollectionDeclaration.model_validate({"name": "users", **values})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"indexes": [{"keys": {"a": 1}, "uniqe": True}]}, "unknown key 'uniqe' (did you mean 'unique'?)"),
        ({"indexes": [{"keys": {"a": 1}, "expire_after_seconds": 5}]}, "did you mean 'expireAfterSeconds'?"),
        ({"indexs": []}, "unknown key 'indexs' (did you mean 'indexes'?)"),
        ({"indexes": [{"keys": {"a": 2}}]}, "direction of 'a' must be 1, -1"),
        ({"indexes": [{"keys": {"a": True}}]}, "direction of 'a' must be 1, -1"),
        ({"indexes": [{"keys": {}}]}, "at least one field"),
        ({"indexes": [{"keys": {"a": 1, "b": 1}, "expireAfterSeconds": 5}]}, "single-field"),
        ({"indexes": [{"keys": {"a": 1}, "weights": {"a": 2}}]}, "need a 'text' key"),
        ({"indexes": [{"keys": {"a": 1}, "wildcardProjection": {"a": 1}}]}, "wildcardProjection needs"),
        ({"indexes": [{"keys": {"_id": 1}}]}, "the _id index belongs to the server"),
        ({"indexes": [{"keys": {"a": 1}}, {"keys": {"b": 1}, "name": "a_1"}]}, "index name 'a_1' is declared twice"),
        ({"indexes": [{"keys": {"a": 1}}, {"keys": {"a": 1.0}, "name": "again"}]}, "have the same keys, filter and collation"),
        ({"indexes": [{"keys": {"a": 1}, "collation": {"locale": "fr", "strenght": 2}}]}, "did you mean 'strength'?"),
        ({"validator": "yes"}, "validator must be a table"),
        ({"validation_level": "moderate"}, "need a validator"),
        ({"validation_action": "shout", "validator": {}}, "validation_action"),
        ({"versioning": {"min": 1}}, "versioning.current"),
        ({"versioning": {"current": 1, "min": 2}}, "min (2) cannot be above current (1)"),
        ({"versioning": {"current": 1, "field": "_id"}}, "field must be a top-level field name"),
        ({"versioning": {"current": 1, "field": "a.b"}}, "field must be a top-level field name"),
        ({"versioning": {"current": 1, "revision_field": "__v"}}, "must differ"),
        ({"versioning": {"current": 1, "revison_field": "r"}}, "did you mean 'revision_field'?"),
        (
            {"versioning": {"current": 1}, "validator": {"$jsonSchema": {"properties": {"__v": {"bsonType": "long"}}}}},
            "rules on '__v', which the versioning block owns",
        ),
        ({"versioning": {"current": 1}, "validator": {"__rev": {"$gte": 0}}}, "rules on '__rev'"),
        ({"versioning": {"current": 1}, "indexes": [{"keys": {"x": 1}, "name": "__v_1__id_1"}]}, "is the version index's"),
        ({"name": "system.users"}, "not a collection name"),
        # the plan showed them dropped ("ab" for the "a\u202eb" it creates)
        ({"name": "a\u202eb", "indexes": []}, "a collection name cannot hold control or bidirectional characters (found U+202E)"),
        ({"name": "a\nb", "indexes": []}, "(found U+000A)"),
        ({"indexes": [{"keys": {"a": 1}, "name": "by\x1b[31ma"}]}, "an index name cannot hold control or bidirectional characters (found U+001B)"),
        ({"indexes": [{"keys": {"g": "2d"}, "min": float("nan")}]}, "min"),
        ({"indexes": [{"keys": {"g": "2d"}, "max": float("inf")}]}, "max"),
        ({"indexes": [{"keys": {"g": "2d"}, "min": 10, "max": 10}]}, "min (10) must be below max (10)"),
        ({"indexes": [{"keys": {"body": "text"}, "default_language": ""}]}, "default_language"),
        ({"indexes": [{"keys": {"body": "text"}, "language_override": ""}]}, "language_override"),
        ({"indexes": [{"keys": {"body": "text"}, "weights": {"body": 0}}]}, "weights"),
        ({"indexes": [{"keys": {"body": "text"}, "weights": {"body": 100_000}}]}, "weights"),
        ({"validator": False, "validation_action": "warn"}, "need a validator"),
        ({"validator": {}, "validation_level": "moderate"}, "need a validator"),
        ({"indexes": [], "search_indexes": [{"definition": {}}]}, "Atlas Search and Vector Search indexes are not managed"),
        ({"indexes": [], "searchIndexes": []}, "'searchIndexes': Atlas Search"),
    ],
)
def test_invalid_declarations_name_the_problem(values: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        declare(**values)
    assert message in str(info.value)


def test_keys_forms_and_pymongo_index_models() -> None:
    d = declare(
        indexes=[
            {"keys": [["a", 1], ["b", -1.0]]},
            {"keys": "email", "unique": True},
            IndexModel([("body", "text")], name="search", weights={"body": 4}),
            {"keys": {"g": "2dsphere"}, "2dsphereIndexVersion": 3},
            IndexModel([("legacy", 1)], background=True),  # ignored by the server since 4.2: accepted, never sent
        ]
    )
    assert [(i.index_name, i.keys) for i in d.indexes or ()] == [
        ("a_1_b_-1", (("a", 1), ("b", -1))),
        ("email_1", (("email", 1),)),
        ("search", (("body", "text"),)),
        ("g_2dsphere", (("g", "2dsphere"),)),
        ("legacy_1", (("legacy", 1),)),
    ]
    assert d.indexes is not None and d.indexes[2].document() == {"key": {"body": "text"}, "name": "search", "weights": {"body": 4}}
    assert d.indexes[3].document()["2dsphereIndexVersion"] == 3
    assert d.indexes[4].document() == {"key": {"legacy": 1}, "name": "legacy_1"}


@pytest.mark.parametrize("values", [{}, {"prune": True}, {"prune": False}])
def test_a_declaration_that_manages_nothing_is_refused(values: dict[str, Any]) -> None:
    with pytest.raises(ValueError) as info:
        declare(**values)
    assert "manages nothing" in str(info.value) and "indexes, validator or versioning" in str(info.value)


def test_omitted_parts_are_unmanaged_and_false_means_no_validator() -> None:
    only_validator = declare(validator={"a": {"$exists": True}})
    assert not only_validator.manages_indexes and only_validator.validator_spec() is not None
    only_indexes = declare(indexes=[])
    assert only_indexes.manages_indexes and not only_indexes.manages_validator and only_indexes.validator_spec() is None
    for none in (False, None, {}):
        d = declare(validator=none)
        assert d.manages_validator
        spec = d.validator_spec()
        assert spec is not None and spec.empty


def test_inline_error_names_key_file_and_collection(tmp_path: Path) -> None:
    config = tmp_path / "mongoshift.toml"
    config.write_text(
        textwrap.dedent(
            """
            [mongoshift]
            [[mongoshift.collections]]
            name = "users"
            indexes = [{ keys = { email = 1 }, uniqe = true }]
            """
        )
    )
    with pytest.raises(ConfigInvalidError) as info:
        load_settings({}, environ={}, cwd=tmp_path)
    message = info.value.message
    assert "collections[0].indexes[0]" in message and "uniqe" in message and str(config) in message and "'users'" in message
    assert info.value.exit_code == 6


def test_collections_outside_the_mongoshift_table_are_refused(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ndb = "x"\n\n[[collections]]\nname = "users"\n')
    with pytest.raises(ConfigInvalidError, match=r"outside the \[mongoshift\] table.*mongoshift.collections"):
        load_settings({}, environ={}, cwd=tmp_path)


def test_pyproject_and_toml_tables(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.mongoshift]
            db = "app"

            [[tool.mongoshift.collections]]
            name = "users"
            validator = false

            [[tool.mongoshift.collections.indexes]]
            keys = { email = 1 }
            unique = true
            collation = { locale = "en", strength = 2 }
            """
        )
    )
    s = load_settings({}, environ={}, cwd=tmp_path)
    [users] = s.collections
    assert users.indexes is not None and users.indexes[0].unique and users.indexes[0].collation is not None
    assert users.manages_validator and users.validator is None


def folder_settings(tmp_path: Path, *inline: dict[str, Any]) -> Settings:
    folder = tmp_path / "collections"
    folder.mkdir(exist_ok=True)
    return Settings(collections_dir=folder, collections=list(inline))


def test_folder_declarations_toml_and_python(tmp_path: Path) -> None:
    s = folder_settings(tmp_path, {"name": "inline", "validator": False})
    (s.collections_dir / "users.toml").write_text('indexes = [{ keys = { email = 1 }, unique = true }]\nvalidator = false\n')
    (s.collections_dir / "orders.py").write_text(
        textwrap.dedent(
            """
            from pymongo import IndexModel

            TTL = 3600

            collection = {
                "indexes": [IndexModel([("created", 1)], expireAfterSeconds=TTL), {"keys": {"customer": 1, "at": -1}}],
                "versioning": {"current": 2, "min": 1},
            }
            """
        )
    )
    (s.collections_dir / "_shared.py").write_text("raise RuntimeError('a helper is never loaded as a declaration')\n")
    (s.collections_dir / "README.md").write_text("notes\n")
    declarations = load_declarations(s)
    assert [d.name for d in declarations] == ["inline", "orders", "users"]
    orders = declarations[1]
    assert orders.source.endswith("orders.py")
    assert [i.name for i in orders.index_specs()] == ["created_1", "customer_1_at_-1", "__v_1__id_1"]
    assert orders.index_specs()[0].options == {"expireAfterSeconds": 3600}
    assert "users" in declarations_by_name(s) and "nobody" not in declarations_by_name(s)


def test_the_api_hands_out_one_declaration_without_connecting(tmp_path: Path) -> None:
    """docs/converge.md: application code reads a declared collection's versioning field from the project."""
    from mongoshift import api

    s = folder_settings(tmp_path, {"name": "users", "versioning": {"current": 2, "field": "schema_v"}})
    s = s.model_copy(update={"uri": "mongodb://127.0.0.1:1/?connectTimeoutMS=100", "db": "app"})  # never reached
    users = api.declaration_for(s, "users")
    assert users is not None and users.versioning is not None and users.versioning.field == "schema_v"
    assert api.declaration_for(s, "nobody") is None


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"users.toml": "indexes = [{ keys = { a = 1 }, sparce = true }]\n"}, "users.toml: indexes[0]: unknown key 'sparce' (did you mean 'sparse'?)"),
        ({"users.toml": "indexes = [\n"}, "users.toml is not valid TOML"),
        ({"users.py": "x = 1\n"}, "users.py: must define collection = {...}"),
        ({"users.py": "def collection():\n    return {}\n"}, "collection must be a dict, not a function"),
        ({"users.py": "collection = {'indexes': []}\nraise RuntimeError('boom')\n"}, "users.py: failed to import (line 2): RuntimeError: boom"),
        ({"users.json": "{}"}, "declarations are .toml or .py files"),
        ({"users.toml": "indexes = []\n", "users.py": "collection = {'indexes': []}\n"}, "1 collection is declared more than once"),
        ({"inline.toml": "indexes = []\n"}, "'inline' in [[collections]] entry 1 in the project config and in "),
    ],
)
def test_folder_errors_name_the_file(tmp_path: Path, files: dict[str, str], message: str) -> None:
    s = folder_settings(tmp_path, {"name": "inline", "validator": False})
    for name, text in files.items():
        (s.collections_dir / name).write_text(text)
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(s)
    assert message in info.value.message


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda folder: (folder / "users.toml").symlink_to(folder / "gone.toml"), "users.toml is a symbolic link to a file that does not exist"),
        (lambda folder: (folder / "users.toml").mkdir(), "users.toml is a folder: a declaration is one .toml or .py file"),
        (lambda folder: (folder / "users.TOML").write_text("indexes = []\n"), "users.TOML ends in '.TOML', not '.toml': it would never be read"),
        (lambda folder: (folder / "users.Py").write_text("collection = {'indexes': []}\n"), "users.Py ends in '.Py', not '.py'"),
        (lambda folder: (folder / "users.JSON").write_text("{}"), "users.JSON: collection declarations are .toml or .py files"),
    ],
)
def test_an_entry_named_like_a_declaration_that_cannot_be_read_is_refused(tmp_path: Path, make: Any, message: str) -> None:
    """Skipped, it left its collection undeclared while converge (and --check) reported the rest in sync."""
    s = folder_settings(tmp_path)
    (s.collections_dir / "orders.toml").write_text("indexes = []\n")
    (s.collections_dir / "notes").mkdir()  # any other folder or file is not a declaration: still ignored
    make(s.collections_dir)
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(s)
    assert message in info.value.message


def test_a_file_where_the_collections_folder_should_be_is_an_io_failure(tmp_path: Path) -> None:
    """It was 'collections folder not found' (exit 6) when named, and silently no declaration at all by default."""
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\n[[mongoshift.collections]]\nname = "a"\nindexes = []\n')
    (tmp_path / "collections").write_text("")
    default = load_settings({}, environ={}, cwd=Path("/"), config_path=tmp_path / "mongoshift.toml")
    named = default.model_copy(update={"collections_dir": tmp_path / "collections"})
    named.__pydantic_fields_set__.add("collections_dir")
    for s in (default, named):
        with pytest.raises(IOFailedError, match=r"cannot read the collections folder .*: it is a file, not a folder"):
            load_declarations(s)


def test_every_collection_declared_more_than_once_is_named_with_each_place(tmp_path: Path) -> None:
    s = folder_settings(tmp_path, {"name": "users", "validator": False}, {"name": "orders", "indexes": []}, {"name": "users", "validator": False})
    (s.collections_dir / "orders.toml").write_text("indexes = []\n")
    with pytest.raises(ConfigInvalidError) as info:
        load_declarations(s)
    assert info.value.message.startswith("2 collections are declared more than once (one declaration each): ")
    assert "'users' in [[collections]] entry 1 in the project config and in [[collections]] entry 3 in the project config" in info.value.message
    assert "'orders' in [[collections]] entry 2 in the project config and in " in info.value.message and "orders.toml" in info.value.message


def test_folder_is_optional_unless_named(tmp_path: Path) -> None:
    assert load_declarations(Settings(collections=[{"name": "a", "indexes": []}])) != []  # default folder absent: fine
    with pytest.raises(ConfigInvalidError, match="collections folder not found"):
        load_declarations(Settings(collections_dir=tmp_path / "nope"))


def test_collections_dir_in_a_file_is_relative_to_the_file(tmp_path: Path) -> None:
    (tmp_path / "mongoshift.toml").write_text('[mongoshift]\ncollections_dir = "db/collections"\n')
    s = load_settings({}, environ={}, cwd=Path("/"), config_path=tmp_path / "mongoshift.toml")
    assert s.collections_dir == tmp_path / "db" / "collections"
