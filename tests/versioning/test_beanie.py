"""Beanie documents through mongoshift.versioning.beanie: stamped inserts, guarded and bumped
saves/updates, and a background migration beside Beanie writes that loses none of them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bson import ObjectId

pytest.importorskip("beanie", reason="Beanie is not installed (pip install 'mongoshift[beanie]')")

from beanie import init_beanie
from pydantic import ValidationError

from mongoshift.api import background as bg, migrations as command
from mongoshift.versioning import (
    RevisionConflictError,
    ShapeVersionError,
    UnguardedWriteError,
    define_shapes,
    retry_on_conflict,
)
from mongoshift.versioning.beanie import VersionedDocument

from .conftest import PEOPLE, split_name
from .test_background_reuse import MIGRATION


class Person(VersionedDocument):
    shapes = PEOPLE
    name: str | None = None
    first: str | None = None
    last: str | None = None
    n: int = 0

    class Settings:
        name = "people"
        keep_nulls = False  # a replacement writes only the fields the document has


@pytest.fixture
async def people(db: Any) -> Any:
    await init_beanie(database=db, document_models=[Person])
    return db.people


async def test_insert_stamps_the_current_version_and_revision_one(people: Any) -> None:
    one = await Person(first="Ada").insert()
    await Person.insert_many([Person(first="Bob"), Person(first="Cy")])
    assert one.shape_version == PEOPLE.current and one.revision == 1
    stored = await people.find({}, {"_id": 0}).sort("first", 1).to_list()
    assert [(d["__v"], d["__rev"]) for d in stored] == [(3, 1)] * 3
    old_shape = await Person(name="Old Shape", shape_version=1, revision=5).insert()  # an older shape written on purpose: kept
    assert await people.find_one({"_id": old_shape.id}, {"_id": 0, "__v": 1, "__rev": 1}) == {"__v": 1, "__rev": 1}


async def test_save_replace_and_update_bump_the_revision_and_keep_the_version(people: Any) -> None:
    await people.insert_one({"_id": ObjectId(b"1" * 12), "__v": 1, "name": "Ada Lovelace"})  # written before revisions: 0
    person = await Person.get(ObjectId(b"1" * 12))
    assert person is not None and person.revision is None
    person.n = 1
    await person.save()
    await person.replace()
    await person.set({Person.n: 5})
    await person.inc({Person.n: 1})
    stored = await people.find_one({}, {"_id": 0})
    assert stored == {"__v": 1, "__rev": 4, "name": "Ada Lovelace", "n": 6}
    assert (person.revision, person.n) == (4, 6)


async def test_a_stale_save_or_update_raises_a_conflict_and_writes_nothing(people: Any) -> None:
    fresh = await Person(first="Ada").insert()
    stale = await Person.get(fresh.id)
    assert stale is not None
    fresh.n = 1
    await fresh.save()
    stale.n = 2
    with pytest.raises(RevisionConflictError) as caught:
        await stale.save()
    assert (caught.value.reason, caught.value.expected_revision, caught.value.actual_revision) == ("conflict", 1, 2)
    with pytest.raises(RevisionConflictError):
        await stale.inc({Person.n: 10})
    stored = await people.find_one({"_id": fresh.id})
    assert (stored["n"], stored["__rev"]) == (1, 2)


async def test_a_save_with_a_new_id_inserts_but_a_deleted_document_is_not_recreated(people: Any) -> None:
    await Person(id=None, first="Ada").save()
    assert await people.count_documents({"__rev": 1, "__v": 3}) == 1
    gone = await Person(first="Bob").insert()
    await people.delete_one({"_id": gone.id})
    with pytest.raises(RevisionConflictError) as caught:
        await gone.save()
    assert caught.value.reason == "not_found"
    # a legacy document (written before revisions: none stored) read, then deleted: not re-created either
    legacy = (await people.insert_one({"__v": 1, "name": "Old Shape"})).inserted_id
    read = await Person.get(legacy)
    assert read is not None and read.revision is None
    await people.delete_one({"_id": legacy})
    read.name = "Back Again"
    with pytest.raises(RevisionConflictError) as caught:
        await read.save()
    assert caught.value.reason == "not_found" and await people.count_documents({"_id": legacy}) == 0


async def test_a_new_instance_that_replaces_a_legacy_document_is_stamped_with_the_current_version(people: Any) -> None:
    """``Person(id=pid, ...).save()`` over a document written before versioning (revision 0) replaced it with
    this code's fields but no ``__v``: version 0, so ``upcast`` and a rewrite from 0 ran the steps from shape 0
    on them (``split_name`` set ``first`` and ``last`` to "")."""
    await people.insert_one({"_id": ObjectId(b"4" * 12), "name": "Bob Legacy"})
    await Person(id=ObjectId(b"4" * 12), first="Bob", last="Builder").save()
    stored = await people.find_one({}, {"_id": 0})
    assert stored == {"__v": 3, "__rev": 1, "first": "Bob", "last": "Builder", "n": 0}
    assert (PEOPLE.upcast(stored)["first"], PEOPLE.upcast(stored)["last"]) == ("Bob", "Builder")
    read = await Person.get(ObjectId(b"4" * 12))  # read from the server: its version is kept as read
    assert read is not None
    await people.update_one({}, {"$unset": {"__v": ""}})
    read.shape_version = None
    await read.save()
    assert "__v" not in await people.find_one({})


class OlderPerson(VersionedDocument):
    """The previous release's model of ``people``: shapes up to 2 (no ``status``), still running during the expand phase."""

    shapes = define_shapes(2, {1: split_name})
    first: str | None = None
    last: str | None = None
    n: int = 0

    class Settings:
        name = "people"
        keep_nulls = False


async def test_older_code_does_not_replace_a_document_newer_code_wrote(db: Any) -> None:
    """Old code still running during an expand phase ("that is fine", docs/versioning.md) read a document the new
    release wrote at version 3 and saved it: the replacement held only the old model's fields, so ``status`` was
    dropped without a word, and the document still said version 3. The helpers' ``upcast`` refuses such a document
    ("newer"); the Beanie class now refuses to replace it, before anything is sent."""
    await init_beanie(database=db, document_models=[OlderPerson])
    await db.people.insert_one(PEOPLE.stamp({"_id": ObjectId(b"3" * 12), "first": "Ada", "last": "Lovelace", "status": "s3cret"}))
    old = await OlderPerson.get(ObjectId(b"3" * 12))
    assert old is not None and old.shape_version == 3
    old.n = 1
    for write in (old.save, old.replace):
        with pytest.raises(ShapeVersionError) as caught:
            await write()
        assert caught.value.reason == "newer" and caught.value.version == 3 and "s3cret" not in str(caught.value)
    assert await db.people.find_one({}, {"_id": 0}) == {"__v": 3, "__rev": 1, "first": "Ada", "last": "Lovelace", "status": "s3cret"}
    await old.set({OlderPerson.n: 2})  # a partial update keeps the fields it does not name: still allowed
    assert await db.people.find_one({}, {"_id": 0}) == {"__v": 3, "__rev": 2, "first": "Ada", "last": "Lovelace", "status": "s3cret", "n": 2}


@pytest.mark.parametrize("stored", [{"__v": "s3cret-v"}, {"__v": 1, "__rev": "s3cret-rev"}, {"__v": ["s3cret-v"]}, {"__v": -7}])
async def test_a_corrupt_stored_version_or_revision_fails_the_read_without_quoting_it(people: Any, stored: dict[str, Any]) -> None:
    """pydantic's error read "input_value='s3cret-v'": the stored value in an error an application logs."""
    await people.insert_one({"_id": ObjectId(b"c" * 12), "first": "Ada", **stored})
    with pytest.raises(ValidationError) as caught:
        await Person.get(ObjectId(b"c" * 12))
    assert "s3cret" not in str(caught.value) and "-7" not in str(caught.value) and "input_value" not in str(caught.value)


async def test_unguardable_writes_are_refused(people: Any) -> None:
    person = await Person(first="Ada").insert()
    with pytest.raises(UnguardedWriteError):
        await person.update({"$set": {"n": 1}}, upsert=True)
    with pytest.raises(UnguardedWriteError):
        await person.replace(bulk_writer=object())
    with pytest.raises(UnguardedWriteError):
        await person.set({"__rev": 9})


async def test_a_background_migration_beside_beanie_writes_loses_none(people: Any, project: Any) -> None:
    ids = [ObjectId(f"{i:024x}") for i in range(60)]
    await people.insert_many([{"_id": id_, "__v": 1, "__rev": 1, "name": f"F{i} L{i}", "n": 0} for i, id_ in enumerate(ids)])
    await people.create_index([("__v", 1), ("_id", 1)])
    stale = await Person.get(ids[0])  # read before the rewrite, saved after it
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.1)
    project.add("0001_people_v2.py", MIGRATION)
    settings = project.settings()
    await command.up(settings)

    async def bump(id_: ObjectId) -> None:
        async def attempt() -> None:
            person = await Person.get(id_)
            assert person is not None
            person.n += 1
            await person.save()

        await retry_on_conflict(attempt, attempts=20)

    async def application() -> None:
        for id_ in ids:
            await bump(id_)

    (report,), _ = await asyncio.gather(bg.run(settings, ["0001_people_v2.py"]), application())
    assert stale is not None
    stale.n = 99
    with pytest.raises(RevisionConflictError):  # the engine rewrote it since the read
        await stale.save()
    await bump(ids[0])

    assert report.status == "completed"
    stored = await people.find({}).sort("_id", 1).to_list()
    assert [d["n"] for d in stored] == [2] + [1] * 59  # every application write is there
    assert all(d["__v"] == 2 and "name" not in d for d in stored)
    assert (stored[7]["first"], stored[7]["last"]) == ("F7", "L7")


async def test_a_model_defined_after_init_beanie_inserts_with_its_own_id(people: Any, db: Any) -> None:
    """``init_beanie`` initialised ``VersionedDocument`` as Person's parent, leaving query expressions on it; a model
    defined after that (imported later, or in another test) took them for its defaults and inserted ``_id: "_id"``."""

    class Late(VersionedDocument):
        shapes = PEOPLE
        first: str | None = None

        class Settings:
            name = "late"
            keep_nulls = False

    await init_beanie(database=db, document_models=[Late])
    late = await Late(first="Ada").insert()
    stored = await db.late.find_one({})
    assert isinstance(stored["_id"], ObjectId) and stored["_id"] == late.id
    assert (stored["__v"], stored["__rev"]) == (PEOPLE.current, 1)
