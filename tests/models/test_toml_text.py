"""Editing a declaration file in place (``models.toml_text``): any change of any declaration, in a file full of comments."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from mongoshift.errors import ModelsInvalidError
from mongoshift.models.merge import canonical
from mongoshift.models.toml_text import document, edit

from ..conftest import examples

FIELDS = ["a", "b", "c", "d", "e e"]

scalars = st.one_of(st.booleans(), st.integers(-3, 3), st.sampled_from(["x", "y z", "é"]))
rules: st.SearchStrategy[dict[str, Any]] = st.recursive(
    st.fixed_dictionaries({}, optional={"bsonType": st.sampled_from(["string", "date", ["int", "long"], ["object", "null"]]),
                                        "maxLength": st.integers(0, 9), "enum": st.lists(scalars, max_size=2)}),
    lambda inner: st.fixed_dictionaries({}, optional={
        "bsonType": st.sampled_from(["object", ["object", "null"]]),
        "properties": st.dictionaries(st.sampled_from(FIELDS), inner, max_size=3),
        "required": st.lists(st.sampled_from(FIELDS), unique=True, max_size=3),
        "items": inner,
    }),
    max_leaves=4,
)
indexes = st.lists(
    st.builds(
        lambda name, keys, options: {"keys": keys, "name": name, **options},
        st.sampled_from(["i1", "i2", "i3", "i4"]),
        st.dictionaries(st.sampled_from(FIELDS), st.sampled_from([1, -1]), min_size=1, max_size=2),
        st.fixed_dictionaries({}, optional={"unique": st.just(True), "expireAfterSeconds": st.integers(1, 9),
                                            "partialFilterExpression": st.just({"a": {"$gt": 1}})}),
    ),
    unique_by=lambda index: index["name"], max_size=4,
)
declarations = st.fixed_dictionaries(
    {"indexes": indexes, "validation_level": st.sampled_from(["moderate", "strict"])},
    optional={
        "validation_action": st.sampled_from(["warn", "error"]),
        "prune": st.booleans(),
        "validator": st.one_of(st.just(False), st.fixed_dictionaries({"$jsonSchema": rules})),
    },
)


def commented(text: str) -> str:
    """A comment after every line that holds something, and a comment line above every table."""
    lines = []
    for number, line in enumerate(text.splitlines()):
        if line.startswith("["):
            lines.append(f"# above {number}")
        lines.append(f"{line}  # after {number}" if line and not line.startswith("#") else line)
    return "\n".join(lines) + "\n"


@examples(thorough=400, quick=80)
def test_any_change_in_a_commented_file_declares_exactly_the_new_declaration(max_examples: int) -> None:
    @settings(max_examples=max_examples)
    @given(before=declarations, after=declarations, same=st.booleans())
    def check(before: dict[str, Any], after: dict[str, Any], same: bool) -> None:
        text = commented(document(before, "header line\n\nsecond"))
        assert edit(text, before, before) == text  # nothing changed: the very same text
        if same:
            after = before
        out = edit(text, before, after)
        assert canonical(tomllib.loads(out)) == canonical(after)
        assert out.startswith("# header line\n#\n# second\n\n")
        lines = out.splitlines()
        for number, line in enumerate(text.splitlines()):  # a header that stays keeps the comment above it
            if line.startswith("[") and line in lines:
                assert lines[lines.index(line) - 1] == text.splitlines()[number - 1]
        for name in ("validation_level", "validation_action", "prune"):  # a key the models left alone keeps its line and comment
            if name in before and name in after and before[name] == after[name]:
                (line,) = [line for line in text.splitlines() if line.startswith(f"{name} = ")]
                assert line in out.splitlines()

    check()


def test_a_new_file_has_the_generated_layout() -> None:
    text = document({
        "indexes": [{"keys": {"email": 1}, "name": "email_1", "unique": True}],
        "validation_level": "moderate",
        "validator": {"$jsonSchema": {"bsonType": "object", "required": ["email"], "properties": {
            "email": {"bsonType": "string"},
            "address": {"bsonType": ["object", "null"], "properties": {"city": {"bsonType": "string"}}},
            "any": {},
        }}},
    }, "Collection customers\n\nEdit freely.")
    assert text == '''\
# Collection customers
#
# Edit freely.

indexes = [
  { keys = { email = 1 }, name = "email_1", unique = true },
]
validation_level = "moderate"

[validator."$jsonSchema"]
bsonType = "object"
required = ["email"]

[validator."$jsonSchema".properties]
any = {}

[validator."$jsonSchema".properties.email]
bsonType = "string"

[validator."$jsonSchema".properties.address]
bsonType = ["object", "null"]

[validator."$jsonSchema".properties.address.properties.city]
bsonType = "string"
'''


def test_a_part_added_to_a_file_looks_as_in_a_new_file_and_removing_the_last_table_leaves_no_blank_line() -> None:
    before = {"indexes": [], "validator": {"$jsonSchema": {"properties": {"a": {"bsonType": "string"}}}}}
    after = {"indexes": [{"keys": {"b": 1}, "name": "b_1"}], "validator": {"$jsonSchema": {"properties": {"b": {"bsonType": "date"}}}}}
    text = "indexes = []  # none yet\n\n[validator.\"$jsonSchema\".properties.a]\nbsonType = \"string\"\n"
    assert edit(text, before, after) == '''\
indexes = [
  { keys = { b = 1 }, name = "b_1" },
]  # none yet

[validator."$jsonSchema".properties.b]
bsonType = "date"
'''


def test_a_removed_table_takes_its_comments_and_leaves_the_next_ones() -> None:
    text = """\
indexes = []

[validator."$jsonSchema".properties.a]
bsonType = "string"
# about a's type

# about b
[validator."$jsonSchema".properties.b]
bsonType = "date"

# about c
[validator."$jsonSchema".properties.c]
bsonType = "date"
# about c's type

# the end of the file
"""

    def declaring(*names: str) -> dict[str, Any]:
        return {"indexes": [], "validator": {"$jsonSchema": {"properties": {n: {"bsonType": "string" if n == "a" else "date"} for n in names}}}}

    everything = declaring("a", "b", "c")
    assert edit(text, everything, declaring("b", "c")) == text.replace(
        '[validator."$jsonSchema".properties.a]\nbsonType = "string"\n# about a\'s type\n\n', "")
    assert edit(text, everything, declaring("a", "c")) == text.replace('# about b\n[validator."$jsonSchema".properties.b]\nbsonType = "date"\n\n', "")
    assert edit(text, everything, declaring("a", "b")) == text.replace(
        '# about c\n[validator."$jsonSchema".properties.c]\nbsonType = "date"\n# about c\'s type\n\n', "")
    # a new property goes after the last one, not between a header and the comment above it
    added = {"indexes": [], "validator": {"$jsonSchema": {"properties": {"a": {"bsonType": "string", "properties": {"x": {"bsonType": "int"}}},
                                                                           "b": {"bsonType": "date"}, "c": {"bsonType": "date"}}}}}
    assert edit(text, everything, added) == text.replace(
        "# about a's type\n\n", "# about a's type\n\n[validator.\"$jsonSchema\".properties.a.properties.x]\nbsonType = \"int\"\n\n")


def test_a_file_with_windows_line_ends_keeps_them() -> None:
    before = {"indexes": [{"keys": {"a": 1}, "name": "a_1"}], "validation_level": "moderate"}
    after = {**before, "validation_level": "strict", "validator": {"$jsonSchema": {"bsonType": "object"}}}
    text = 'indexes = [\r\n  { keys = { a = 1 }, name = "a_1" },\r\n]\r\nvalidation_level = "moderate"\r\n'
    assert edit(text, before, after) == (
        'indexes = [\r\n  { keys = { a = 1 }, name = "a_1" },\r\n]\r\nvalidation_level = "strict"\r\n\r\n[validator."$jsonSchema"]\r\nbsonType = "object"\r\n'
    )


def test_an_edit_the_text_does_not_allow_is_refused_not_guessed() -> None:
    with pytest.raises(ModelsInvalidError, match=r"cannot be updated in place \(NonExistentKey\); nothing was written"):
        edit("validation_level = 'strict'\n", {"prune": True}, {})
