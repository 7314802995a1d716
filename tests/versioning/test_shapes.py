"""define_shapes: declaration checks, stamping, reading versions, upcasting, background reuse."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from bson import Int64, ObjectId
from hypothesis import given, strategies as st

from mongoshift.versioning import ShapeVersionError, define_shapes

from .conftest import PEOPLE


def test_upcast_lifts_v1_through_every_step_to_current_without_touching_the_input() -> None:
    stored = {"_id": 1, "__v": 1, "__rev": 4, "name": "Ada Lovelace", "tags": ["x"]}
    before = copy.deepcopy(stored)
    lifted = PEOPLE.upcast(stored)
    assert lifted == {"_id": 1, "__v": 3, "__rev": 4, "first": "Ada", "last": "Lovelace", "tags": ["x"], "status": "active"}
    assert stored == before
    lifted["tags"].append("y")
    assert stored["tags"] == ["x"]  # a deep copy: nested values are not shared


def test_upcast_of_a_current_document_is_an_equal_copy() -> None:
    doc = {"_id": 1, "__v": 3, "first": "A", "last": "B", "status": "gone"}
    lifted = PEOPLE.upcast(doc)
    assert lifted == doc and lifted is not doc


def test_upcast_keeps_bson_and_tz_aware_values() -> None:
    when = datetime.datetime(2026, 1, 2, tzinfo=datetime.UTC)
    oid = ObjectId()
    lifted = PEOPLE.upcast({"_id": oid, "__v": 2, "at": when, "n": Int64(7)})
    assert lifted["at"] == when and lifted["at"].tzinfo is not None
    assert lifted["_id"] == oid and type(lifted["n"]) is Int64


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ({"__v": 4}, "newer"),
        ({"__v": 0}, "below_minimum"),
        ({}, "below_minimum"),  # missing reads as 0
        ({"__v": None}, "below_minimum"),
        ({"__v": "2"}, "invalid"),
        ({"__v": 2.0}, "invalid"),
        ({"__v": True}, "invalid"),
        ({"__v": -1}, "invalid"),
    ],
)
def test_upcast_refuses_what_this_code_cannot_read(doc: dict[str, Any], reason: str) -> None:
    with pytest.raises(ShapeVersionError) as info:
        PEOPLE.upcast(doc)
    assert info.value.reason == reason
    assert isinstance(info.value, ValueError)


def test_missing_or_null_version_is_zero_and_lifts_when_there_is_a_step_from_zero() -> None:
    shapes = define_shapes(1, {0: lambda d: {**d, "kind": "legacy"}})
    assert shapes.minimum == 0
    assert shapes.version_of({}) == 0 and shapes.version_of({"__v": None}) == 0
    assert shapes.is_version({}, 0) and shapes.is_version({"__v": None}, 0)
    assert shapes.upcast({"_id": 1}) == {"_id": 1, "kind": "legacy", "__v": 1}
    assert shapes.match(0) == {"__v": {"$in": [None, 0]}} and shapes.match(1) == {"__v": 1}


def test_version_of_and_is_version() -> None:
    assert PEOPLE.version_of({"__v": Int64(2)}) == 2
    assert PEOPLE.is_version({"__v": 2}, 2) and not PEOPLE.is_version({"__v": 2}, 3)
    assert not PEOPLE.is_version({"__v": "2"}, 2)  # a predicate: corrupt is simply not that version
    assert PEOPLE.is_current({"__v": 3})
    with pytest.raises(ShapeVersionError, match="holds a value of type str, not"):
        PEOPLE.version_of({"__v": "2"})
    with pytest.raises(ShapeVersionError, match="holds a negative integer, not"):
        PEOPLE.version_of({"__v": -1})
    with pytest.raises(ValueError):
        PEOPLE.is_version({}, -1)


def test_stamp_returns_a_new_document_at_the_current_version_and_revision_1() -> None:
    template = {"first": "A", "last": "B", "status": "active"}
    stamped = PEOPLE.stamp(template)
    assert stamped == {**template, "__v": 3, "__rev": 1}
    assert "__v" not in template and stamped is not template


def test_field_names_are_configurable() -> None:
    shapes = define_shapes(2, {1: lambda d: d}, version_field="schema", revision_field="rev")
    assert shapes.stamp({}) == {"schema": 2, "rev": 1}
    assert shapes.upcast({"schema": 1, "__v": 9}) == {"schema": 2, "__v": 9}


async def _async_step(doc: dict[str, Any]) -> dict[str, Any]:
    return doc


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0,), {}, "at least 1"),
        ((True,), {}, "integer"),
        ((3, {1: lambda d: d}), {}, "no step from version 2: "),
        ((3, {1: lambda d: d, 2: lambda d: d}), {"minimum": 0}, "no step from version 0: "),
        ((3, {2: lambda d: d}), {"minimum": 0}, r"no step from versions 0, 1: "),
        ((2, {2: lambda d: d}), {}, "past current"),
        ((2, {1: "nope"}), {}, "not callable"),
        ((2, {1: _async_step}), {}, "step 1 is async"),
        ((2, {1: lambda d: d}), {"minimum": 3}, "above current"),
        ((1,), {"version_field": "a.b"}, "top-level"),
        ((1,), {"revision_field": "_id"}, "top-level"),
        ((1,), {"version_field": "x", "revision_field": "x"}, "must differ"),
    ],
)
def test_define_shapes_refuses_an_incoherent_declaration(args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        define_shapes(*args, **kwargs)


def test_steps_below_minimum_stay_usable_by_migration_files_after_the_contract() -> None:
    shapes = define_shapes(3, {1: lambda d: {**d, "a": 1}, 2: lambda d: {**d, "b": 1}}, minimum=2)
    with pytest.raises(ShapeVersionError) as info:
        shapes.upcast({"__v": 1})
    assert info.value.reason == "below_minimum"
    assert shapes.migrate_from(1)({"__v": 1}) == {"__v": 2, "a": 1}


def test_migrate_from_takes_a_version_stored_as_a_whole_double() -> None:
    """The engine's ``{__v: 1}`` selects a legacy ``1.0``; the step refused it as no version at all, so every such
    document failed the run's transform. A whole double at ``from_version`` is that version; any other is refused."""
    migrate = PEOPLE.migrate_from(1)
    assert migrate({"__v": 1.0, "name": "Ada Lovelace"})["__v"] == 2
    for stored in (1.5, 2.0, "1", float("nan")):
        with pytest.raises(ShapeVersionError):
            migrate({"__v": stored, "name": "Ada Lovelace"})


def test_migrate_from_is_a_background_migrate_function_with_a_fixed_target() -> None:
    migrate = PEOPLE.migrate_from(1)
    assert (migrate.from_version, migrate.to_version) == (1, 2)
    doc = {"_id": 1, "__v": 1, "__rev": 2, "name": "Ada Lovelace"}
    assert migrate(doc, object()) == {"_id": 1, "__v": 2, "__rev": 2, "first": "Ada", "last": "Lovelace"}
    assert doc["name"] == "Ada Lovelace"
    assert PEOPLE.migrate_from(1, 3)(doc)["status"] == "active"
    with pytest.raises(ShapeVersionError) as info:  # the engine turns this into a document error
        migrate({"__v": 2})
    assert info.value.reason == "newer"
    for bad in ((3,), (2, 2), (1, 4), (0,)):
        with pytest.raises(ValueError):
            PEOPLE.migrate_from(*bad)


def test_a_step_that_returns_no_document_is_reported() -> None:
    shapes = define_shapes(2, {1: lambda d: None})  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="step 1"):
        shapes.upcast({"__v": 1})


# -- properties ------------------------------------------------------------

values = st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none(), st.lists(st.integers(), max_size=3))
bodies = st.dictionaries(st.text(alphabet="abcxyz", min_size=1, max_size=3), values, max_size=5)


def _appender(v: int):  # type: ignore[no-untyped-def]
    def step(doc: dict[str, Any]) -> dict[str, Any]:
        doc.setdefault("trail", []).append(v)
        return doc

    return step


CHAIN = define_shapes(6, {v: _appender(v) for v in range(1, 6)})


@given(body=bodies, start=st.integers(1, 6))
def test_upcast_applies_exactly_the_missing_steps_in_order_and_never_mutates(body: dict[str, Any], start: int) -> None:
    doc = {**body, "__v": start}
    doc.pop("trail", None)
    before = copy.deepcopy(doc)
    lifted = CHAIN.upcast(doc)
    assert doc == before
    assert lifted.get("trail", []) == list(range(start, 6))
    assert lifted["__v"] == 6
    assert CHAIN.upcast(lifted) == lifted  # idempotent at current


@given(body=bodies, start=st.integers(1, 5), data=st.data())
def test_background_steps_compose_to_the_in_memory_upcast(body: dict[str, Any], start: int, data: st.DataObject) -> None:
    """Rewriting in stored hops (any split) gives what one in-memory upcast gives."""
    doc = {**body, "__v": start}
    middle = data.draw(st.integers(start + 1, 6))
    hops = CHAIN.migrate_from(start, middle)(doc)
    if middle < 6:
        hops = CHAIN.migrate_from(middle, 6)(hops)
    assert hops == CHAIN.upcast(doc)


@pytest.mark.parametrize(
    ("call", "said"),
    [
        (lambda: define_shapes(-1, {}), "current must be an integer >= 0, got a negative integer"),
        (lambda: define_shapes(2, {1: lambda d: d}).match(-3), "version must be an integer >= 0, got a negative integer"),
        (lambda: define_shapes("2", {}), "current must be an integer >= 0, got str"),
    ],
)
def test_a_negative_number_is_said_to_be_one(call, said: str) -> None:  # type: ignore[no-untyped-def]
    """``define_shapes(-1, ...)`` said "must be an integer >= 0, got int": it is an int; what is wrong is its sign."""
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == said


def test_a_document_that_was_not_found_is_said_to_be_none() -> None:
    """``PEOPLE.upcast(await coll.find_one(...))`` for a vanished document raised "'NoneType' object has no
    attribute 'get'" from inside mongoshift.versioning; ``revision_of`` too."""
    from mongoshift.versioning import revision_of

    for call in (lambda: PEOPLE.upcast(None), lambda: PEOPLE.version_of(None), lambda: revision_of(None)):  # type: ignore[arg-type]
        with pytest.raises(TypeError) as caught:
            call()
        assert str(caught.value) == "a document is a mapping, not NoneType (a find that matches nothing returns None)"
