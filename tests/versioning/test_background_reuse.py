"""A background migration whose ``migrate`` is a shape step: the stored rewrite and the
in-memory upcast agree, and application writes through the helpers are never lost."""

from __future__ import annotations

from typing import Any

from mongoshift.api import background as bg, migrations as command
from mongoshift.versioning import update_with_revision

from .conftest import PEOPLE

MIGRATION = '''
from mongoshift import Background
from tests.versioning.conftest import PEOPLE  # the application's own shapes

background = Background(collection="people", from_version=1, to_version=2, migrate=PEOPLE.migrate_from(1), pause_ms=0, batch_size=20)
'''


async def test_a_background_migration_reuses_the_step_and_matches_the_upcast(project: Any, db: Any) -> None:
    originals = [{"_id": i, "__v": 1, "__rev": 1, "name": f"First{i} Last{i}", "n": i} for i in range(50)]
    await db.people.insert_many(originals)
    await db.people.create_index([("__v", 1), ("_id", 1)])
    await update_with_revision(db.people, {"_id": 7}, {"$set": {"n": 700}}, expected_revision=1, expected_version=1)
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    project.add("0001_people_v2.py", MIGRATION)
    settings = project.settings()

    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people_v2.py"])

    assert report.status == "completed" and report.totals["migrated"] == 50
    stored = {d["_id"]: d for d in await db.people.find({}).to_list()}
    assert all(d["__v"] == 2 for d in stored.values())
    assert stored[7]["__rev"] == 3 and stored[7]["n"] == 700  # the application's write survived
    assert stored[3] == {"_id": 3, "__v": 2, "__rev": 2, "n": 3, "first": "First3", "last": "Last3"}
    for doc in originals:
        expected = PEOPLE.upcast({**doc, "n": 700} if doc["_id"] == 7 else doc)
        lifted = PEOPLE.upcast(stored[doc["_id"]])
        assert {k: v for k, v in lifted.items() if k != "__rev"} == {k: v for k, v in expected.items() if k != "__rev"}
