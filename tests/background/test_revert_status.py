"""``status`` after ``down`` of a background migration: the revert is only registered until a runner does it."""

from __future__ import annotations

from mongoshift.api import background as bg, migrations as command

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
