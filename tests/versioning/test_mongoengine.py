"""MongoEngine documents through mongoshift.versioning.mongoengine: a signal stamps inserts,
saves and updates are guarded and bumped, and a background migration beside MongoEngine
writes (in a worker thread: MongoEngine is blocking) loses none of them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

mongoengine = pytest.importorskip("mongoengine", reason="MongoEngine is not installed (pip install 'mongoshift[mongoengine]')")

from bson import ObjectId  # noqa: E402

from mongoshift.api import (  # noqa: E402
    background as bg,
    migrations as command,
)
from mongoshift.versioning import (  # noqa: E402
    RevisionConflictError,
    UnguardedWriteError,
    retry_on_conflict_sync,
)
from mongoshift.versioning.mongoengine import VersionedDocument  # noqa: E402

from .conftest import PEOPLE  # noqa: E402
from .test_background_reuse import MIGRATION  # noqa: E402


class Person(VersionedDocument):
    shapes = PEOPLE
    name = mongoengine.StringField()
    first = mongoengine.StringField()
    last = mongoengine.StringField()
    n = mongoengine.IntField(default=0)
    meta = {"collection": "people"}  # noqa: RUF012 - mongoengine reads this class attribute


@pytest.fixture
def people(mongo_uri: str, db_name: str, sync_db: Any) -> Iterator[Any]:
    mongoengine.connect(alias="default", host=mongo_uri, db=db_name, uuidRepresentation="standard", connectTimeoutMS=120_000, socketTimeoutMS=300_000)
    Person._collection = None  # MongoEngine caches the collection per class: this test has its own database
    try:
        yield sync_db.people
    finally:
        mongoengine.disconnect(alias="default")
        Person._collection = None


def test_a_first_save_stamps_the_current_version_and_revision_one(people: Any) -> None:
    person = Person(first="Ada").save()
    assert (person.shape_version, person.revision) == (PEOPLE.current, 1)
    assert people.find_one({}, {"_id": 0}) == {"__v": 3, "__rev": 1, "first": "Ada", "n": 0}
    old_shape = Person(name="Old Shape", shape_version=1, revision=5).save()  # an older shape written on purpose: kept
    assert people.find_one({"_id": old_shape.pk}, {"_id": 0, "__v": 1, "__rev": 1}) == {"__v": 1, "__rev": 1}


def test_saves_and_updates_bump_the_revision_and_keep_the_version(people: Any) -> None:
    people.insert_one({"_id": ObjectId(b"1" * 12), "__v": 1, "name": "Ada Lovelace"})  # written before revisions: 0
    person = Person.objects.get(pk=ObjectId(b"1" * 12))
    person.n = 1
    person.save()
    person.save()  # nothing changed: nothing written
    person.update(inc__n=5)
    person.reload()
    person.first = "Ada"
    person.save()
    assert people.find_one({}, {"_id": 0}) == {"__v": 1, "__rev": 3, "name": "Ada Lovelace", "n": 6, "first": "Ada"}
    assert person.revision == 3


def test_a_stale_save_or_update_raises_a_conflict_and_writes_nothing(people: Any) -> None:
    fresh = Person(first="Ada").save()
    stale = Person.objects.get(pk=fresh.pk)
    fresh.n = 1
    fresh.save()
    stale.n = 2
    with pytest.raises(RevisionConflictError) as caught:
        stale.save()
    assert (caught.value.reason, caught.value.expected_revision, caught.value.actual_revision) == ("conflict", 1, 2)
    with pytest.raises(RevisionConflictError):
        stale.update(inc__n=10)
    assert people.find_one({"_id": fresh.pk}, {"_id": 0, "n": 1, "__rev": 1}) == {"n": 1, "__rev": 2}
    people.delete_one({"_id": fresh.pk})
    fresh.n = 3
    with pytest.raises(RevisionConflictError) as gone:  # never re-created by an upsert
        fresh.save()
    assert gone.value.reason == "not_found" and people.count_documents({}) == 0


def test_a_partial_load_still_carries_the_revision_and_saves_guarded(people: Any) -> None:
    person = Person(first="Ada", last="Lovelace").save()
    person.first = "Augusta"
    person.save()  # revision 2
    for query in (Person.objects.only("first"), Person.objects.exclude("revision")):
        partial = query.get(pk=person.pk)
        assert partial.revision == people.find_one({"_id": person.pk})["__rev"]  # not None, read as 0: a conflict with itself
        partial.first = f"{partial.first}!"
        partial.save()
    assert people.find_one({"_id": person.pk}, {"_id": 0}) == {"__v": 3, "__rev": 4, "first": "Augusta!!", "last": "Lovelace", "n": 0}


def test_unguardable_writes_are_refused(people: Any) -> None:
    person = Person(first="Ada").save()
    with pytest.raises(UnguardedWriteError):
        person.update(set__n=1, upsert=True)
    person.revision = 7
    with pytest.raises(UnguardedWriteError):
        person.save()
    assert people.find_one({}, {"_id": 0, "__rev": 1}) == {"__rev": 1}


def test_a_new_instance_with_the_id_of_a_stored_document_does_not_overwrite_it_unguarded(people: Any) -> None:
    """MongoEngine saves a new instance that has an ``_id`` with ``find_one_and_replace``: a document stored at
    revision 4 (written by the engine or another writer) was replaced whole, unguarded, its revision set back
    to 1, so a writer still holding revision 1 would have matched again."""
    ADA, BOB, CY = ObjectId(b"a" * 12), ObjectId(b"b" * 12), ObjectId(b"y" * 12)
    people.insert_one({"_id": ADA, "__v": 3, "__rev": 4, "first": "Ada", "last": "Lovelace", "n": 7})
    with pytest.raises(RevisionConflictError) as caught:
        Person(id=ADA, first="Augusta").save()
    assert (caught.value.reason, caught.value.expected_revision, caught.value.actual_revision) == ("conflict", 0, 4)
    assert people.find_one({"_id": ADA}, {"_id": 0}) == {"__v": 3, "__rev": 4, "first": "Ada", "last": "Lovelace", "n": 7}
    # at revision 0 (written before versioning), the new instance replaces it, as MongoEngine does, with revision 1
    people.insert_one({"_id": BOB, "name": "Bob Legacy"})
    Person(id=BOB, first="Bob").save()
    assert people.find_one({"_id": BOB}, {"_id": 0}) == {"__v": 3, "__rev": 1, "first": "Bob", "n": 0}
    Person(id=CY, first="Cy").save()  # not stored: inserted
    assert people.find_one({"_id": CY}, {"_id": 0}) == {"__v": 3, "__rev": 1, "first": "Cy", "n": 0}


@pytest.mark.parametrize("stored", [{"__v": "s3cret-v"}, {"__v": 1, "__rev": "s3cret-rev"}, {"__v": ["s3cret-v"]}])
def test_a_corrupt_stored_version_or_revision_is_refused_without_quoting_it(people: Any, stored: dict[str, Any]) -> None:
    """MongoEngine's IntField said "s3cret-v could not be converted to int": the stored value in the error."""
    people.insert_one({"_id": ObjectId(b"c" * 12), "first": "Ada", "n": 0, **stored})
    person = Person.objects.get(pk=ObjectId(b"c" * 12))
    person.n = 1
    with pytest.raises(mongoengine.ValidationError) as caught:
        person.save()
    assert "s3cret" not in str(caught.value) and "holds a value of type" in str(caught.value)
    assert people.find_one({}, {"_id": 0, "n": 1}) == {"n": 0}


async def test_a_background_migration_beside_mongoengine_writes_loses_none(people: Any, project: Any) -> None:
    ids = [ObjectId(f"{i:024x}") for i in range(60)]
    people.insert_many([{"_id": id_, "__v": 1, "__rev": 1, "name": f"F{i} L{i}", "n": 0} for i, id_ in enumerate(ids)])
    people.create_index([("__v", 1), ("_id", 1)])
    stale = Person.objects.get(pk=ids[0])  # read before the rewrite, saved after it
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.1)
    project.add("0001_people_v2.py", MIGRATION)
    settings = project.settings()
    await command.up(settings)

    def bump(id_: ObjectId) -> None:
        def attempt() -> None:
            person = Person.objects.get(pk=id_)
            person.n += 1
            person.save()

        retry_on_conflict_sync(attempt, attempts=20)

    def application() -> None:
        for id_ in ids:
            bump(id_)

    (report,), _ = await asyncio.gather(bg.run(settings, ["0001_people_v2.py"]), asyncio.to_thread(application))
    stale.n = 99
    with pytest.raises(RevisionConflictError):  # the engine rewrote it since the read
        stale.save()
    bump(ids[0])

    assert report.status == "completed"
    stored = list(people.find({}).sort("_id", 1))
    assert [d["n"] for d in stored] == [2] + [1] * 59  # every application write is there
    assert all(d["__v"] == 2 and "name" not in d for d in stored)
    assert (stored[7]["first"], stored[7]["last"]) == ("F7", "L7")
