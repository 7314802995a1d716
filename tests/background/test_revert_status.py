"""``status`` after ``down`` of a background migration: the revert is only registered until a runner does it."""

from __future__ import annotations

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.errors import OutOfOrderError

from .conftest import background_file, seed

NAME = "0001_names.py"
REVERT = "def revert(doc, ctx):\n    doc['first'], doc['last'] = doc.pop('full_name').split(' ')\n    return doc\n\nbackground = Background("


async def test_status_after_down_says_revert_pending_until_a_runner_reverted_the_documents(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30)
    fast_project.add(NAME, background_file(extra="revert=revert,").replace("background = Background(", REVERT))
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, [NAME])
    assert [r.shown_state for r in await command.status(s)] == ["applied (completed)"]

    assert (await command.down(s)).results[0].reason == "revert registered"
    (row,) = await command.status(s)
    assert await db.people.count_documents({"__v": 2}) == 30  # still the new shape: nothing reverted yet
    assert (row.state, row.background, row.shown_state) == ("reverted", "revert pending", "reverted (revert pending)")
    assert command.rows_to_json([row])[0]["background"] == "revert pending"

    (done,) = await bg.run(s, [NAME])
    assert done.status == "completed" and done.direction == "revert"
    (row,) = await command.status(s)
    assert await db.people.count_documents({"__v": 1}) == 30
    assert (row.state, row.background, row.shown_state) == ("reverted", None, "reverted")


async def test_a_withdrawn_one_way_migration_shows_plain_reverted(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 5)
    fast_project.add(NAME, background_file())
    s = fast_project.settings()
    await command.up(s)
    assert (await command.down(s)).results[0].reason == "withdrawn (nothing was rewritten)"
    assert [r.shown_state for r in await command.status(s)] == ["reverted"]


NEXT = """
from mongoshift import Background

def migrate(doc, ctx):
    doc["initials"] = doc["full_name"][:1]
    return doc

def revert(doc, ctx):
    doc.pop("initials", None)
    return doc

background = Background(collection="people", from_version=2, to_version=3, migrate=migrate, revert=revert, pause_ms=0)
"""


async def test_a_rollback_that_would_strand_a_later_migrations_documents_is_refused(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """0002 goes on from 0001's target: rolling back 0001 alone would send only the documents still at 2 back to 1
    and leave the rest at 3, two shapes no registered migration joins. Refused (23) before anything, dry run
    included; rolled back together, both go."""
    await seed(db.people, 30)
    fast_project.add(NAME, background_file(extra="revert=revert,").replace("background = Background(", REVERT))
    fast_project.add("0002_initials.py", NEXT)
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, [NAME, "0002_initials.py"])
    assert await db.people.count_documents({"__v": 3}) == 30
    for attempt in (command.down(s, target=NAME), command.dry_run(s, "down", target=NAME)):
        with pytest.raises(OutOfOrderError, match=r"0002_initials\.py carries .people. on from version 2") as refused:
            await attempt
        assert refused.value.exit_code == 23 and refused.value.details["blocked_by"] == ["0002_initials.py"]
        assert "('mongoshift down 0002_initials')" in refused.value.message  # a command that does it
    assert [r.state for r in await command.status(s)] == ["applied", "applied"]
    report = await command.down(s, to=None, steps=2)
    assert [r.reason for r in report.results] == ["revert registered", "revert registered"]


async def test_a_revert_waits_for_the_revert_of_the_later_migration_of_its_collection(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Both rolled back in one ``down``: 0001's revert, run first, found no document at 2 (they were all at 3),
    completed with nothing reverted, and 0002's revert then left all 30 at 2 for good. It now starts blocked on
    0002's revert and runs once that completed, taking every document back to 1."""
    await seed(db.people, 30)
    fast_project.add(NAME, background_file(extra="revert=revert,").replace("background = Background(", REVERT))
    fast_project.add("0002_initials.py", NEXT)
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, [NAME, "0002_initials.py"])
    await command.down(s, to=None, steps=2)
    (first,) = await bg.run(s, [NAME], once=True)
    assert (first.status, first.direction, first.totals["migrated"]) == ("blocked", "revert", 0)
    state = await db["_mongoshift_background"].find_one({"_id": NAME})
    assert state["waits_for"] == ["0002_initials.py"]
    assert await db.people.count_documents({"__v": 3}) == 30  # nothing moved yet
    reports = await bg.run(s, [NAME, "0002_initials.py"])
    assert [(r.status, r.direction) for r in reports] == [("completed", "revert")] * 2
    assert await db.people.count_documents({"__v": 1}) == 30
    assert {r.name: r.totals["migrated"] for r in reports} == {NAME: 30, "0002_initials.py": 30}
