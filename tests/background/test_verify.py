"""``background verify``: old shapes written after a migration completed are found, reported or reopened.

One probe per completed forward migration; what it cannot or need not probe is skipped with a
stable reason. No document id ever reaches the output.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pymongo import AsyncMongoClient

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event

from ..conftest import TEST_CLIENT_OPTIONS
from .conftest import background_file, seed

NAME = "0001_names.py"


def completed(project: Any, count: int) -> None:
    """``project`` with :data:`NAME` registered and run to completion over ``count`` seeded people."""
    project.add(NAME, background_file())
    s = project.settings()

    async def complete() -> Any:
        client: AsyncMongoClient[Any] = AsyncMongoClient(project.uri, **TEST_CLIENT_OPTIONS)
        try:
            await seed(client[project.db].people, count)
        finally:
            await client.close()
        await command.up(s)
        return await bg.run(s, [NAME])

    (done,) = asyncio.run(complete())
    assert done.status == "completed"
#: An id no output may show.
SECRET_ID = "drift-id-7731"


def old_shape(**extra: Any) -> dict[str, Any]:
    return {"first": "old", "last": "app", "__v": 1, "__rev": 1, **extra}


def test_verify_reports_an_old_shape_written_after_completion_without_its_id(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    db = sync_client[fast_project.db]
    # One document fails and is tolerated: it stays in the old shape, but no pass would take it
    # again, so it is not drift (the probe uses the engine's own definition of the old shape).
    failing = background_file(extra="max_document_errors=1,").replace(
        "def migrate(doc, ctx):\n", "def migrate(doc, ctx):\n    if doc['n'] == 3:\n        raise ValueError('no')\n"
    )
    fast_project.add(NAME, failing)
    s = fast_project.settings()

    async def complete() -> Any:
        client: AsyncMongoClient[Any] = AsyncMongoClient(fast_project.uri, **TEST_CLIENT_OPTIONS)
        try:
            await seed(client[fast_project.db].people, 40)
        finally:
            await client.close()
        await command.up(s)
        return await bg.run(s, [NAME])

    (done,) = asyncio.run(complete())
    assert done.status == "completed" and done.failed_documents == 1

    code, out, _ = cli(fast_project, "background", "verify", "--json")
    assert code == 0
    assert json.loads(out)["verify"] == [
        {"migration": NAME, "collection": "people", "found": False, "action": "clean", "reason": None, "detail": None, "stranded": False}
    ]

    db.people.insert_one(old_shape(_id=SECRET_ID))  # an old application version
    code, out, err = cli(fast_project, "background", "verify", "--json")
    assert code == 31
    document = json.loads(out)
    assert document["drift"] == [NAME]
    assert document["verify"][0]["found"] is True and document["verify"][0]["action"] == "reported"
    assert SECRET_ID not in out + err
    code, out, err = cli(fast_project, "background", "verify", NAME.removesuffix(".py"), "--report")  # the table, piped
    assert code == 31 and "drift: reported" in out and SECRET_ID not in out + err
    assert db["_mongoshift_background"].find_one({"_id": NAME})["status"] == "completed"  # only reported


async def test_reopen_gives_one_more_pass_that_a_runner_does_with_the_counters_kept(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30)
    fast_project.add(NAME, background_file())
    s = fast_project.settings()
    await command.up(s)
    (before,) = await bg.run(s, [NAME])
    assert before.status == "completed" and before.totals["migrated"] == 30
    states = db["_mongoshift_background"]
    completed = await states.find_one({"_id": NAME})

    await db.people.insert_one(old_shape(_id=SECRET_ID))
    events: list[Event] = []
    (found,) = await bg.verify(s, [NAME], reopen=True, observers=[events.append])
    assert (found.found, found.action) == (True, "reopened")
    drift = [e for e in events if e.kind == "drift"]
    assert [(e.migration, e.data["collection"], e.data["found"], e.data["action"]) for e in drift] == [(NAME, "people", True, "reopened")]
    assert SECRET_ID not in repr(drift)
    reopened = await states.find_one({"_id": NAME})
    assert reopened["status"] == "pending" and reopened["history"][-1]["action"] == "reopen"
    assert reopened["registration"] == completed["registration"]

    (after,) = await bg.run(s, [NAME])
    assert after.status == "completed"
    assert (await db.people.find_one({"_id": SECRET_ID}))["__v"] == 2
    assert after.totals["migrated"] == 31  # the counters went on, not from zero
    state = await states.find_one({"_id": NAME})
    assert state["registration"] == completed["registration"]  # the same run, not a new registration
    assert state["pass"] == completed["pass"] + 1
    assert state["generation"] == completed["generation"] + 1  # every pass is one more plan
    (clean,) = await bg.verify(s, reopen=True)
    assert (clean.found, clean.action) == (False, "clean")


def _on(collection: str, source: str) -> str:
    return source.replace('collection="people"', f'collection="{collection}"')


STEP = """
from mongoshift import Background

async def step(ctx):
    return {"checkpoint": None, "done": True, "migrated": 0}

background = Background(collection="steps", from_version=0, to_version=1, step=step, pause_ms=0)
"""


async def test_what_is_not_probed_is_skipped_with_its_reason(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    folder = fast_project.root / "collections"
    folder.mkdir()
    (folder / "guarded.toml").write_text("versioning = { current = 2, min = 2 }\n", encoding="utf-8")
    await seed(db.people, 10)
    await seed(db.guarded, 10)
    await db.bare.insert_many([old_shape(_id=i) for i in range(10)])  # no version index
    fast_project.add(NAME, background_file())
    fast_project.add("0002_steps.py", STEP)
    fast_project.add("0003_guarded.py", _on("guarded", background_file()))
    fast_project.add("0004_bare.py", _on("bare", background_file()))
    s = fast_project.settings()
    await command.up(s)
    assert [r.status for r in await bg.run(s)] == ["completed"] * 4
    for collection in (db.people, db.guarded, db.bare):
        await collection.insert_one(old_shape(_id="late"))
    # A later step of people, registered but not run: people is busy.
    later = background_file().replace("from_version=1", "from_version=2").replace("to_version=2", "to_version=3")
    fast_project.add("0005_later.py", later)
    await command.up(s)

    found = {r.migration: (r.found, r.action, r.reason) for r in await bg.verify(s, reopen=True)}
    assert found == {
        NAME: (False, "skipped", "busy"),
        "0002_steps.py": (False, "skipped", "step"),
        "0003_guarded.py": (False, "skipped", "min_guard"),
        "0004_bare.py": (False, "skipped", "no_index"),
        "0005_later.py": (False, "skipped", "not_completed"),
    }
    statuses = {d["_id"]: d["status"] async for d in db["_mongoshift_background"].find()}
    assert statuses == {
        NAME: "completed",
        "0002_steps.py": "completed",
        "0003_guarded.py": "completed",
        "0004_bare.py": "completed",
        "0005_later.py": "pending",
    }

    await bg.apply_control(s, "0005_later.py", "cancel")  # people is no longer busy: the probe runs
    (first,) = await bg.verify(s, [NAME])
    assert (first.found, first.action) == (True, "reported")


async def test_a_revert_is_not_probed(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 5)
    source = background_file(extra="revert=revert,").replace(
        "background = Background(",
        "def revert(doc, ctx):\n    doc['first'], doc['last'] = doc.pop('full_name').split(' ')\n    return doc\n\nbackground = Background(",
    )
    fast_project.add(NAME, source)
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, [NAME])
    await command.down(s)  # registers the revert
    (result,) = await bg.verify(s)
    assert (result.found, result.action, result.reason) == (False, "skipped", "revert")


def test_an_unknown_name_and_both_modes_at_once_are_refused(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = cli(fast_project, "background", "verify", "0009_nothing", "--json")
    assert code == 9 and json.loads(out)["error"]["kind"] == "not_applied"
    code, _, err = cli(fast_project, "background", "verify", "--reopen", "--report")
    assert code == 6 and "exclude each other" in err
    code, out, _ = cli(fast_project, "background", "verify", "--json")
    assert code == 0 and json.loads(out) == {"verify": [], "drift": [], "stranded": []}


def test_a_document_at_a_version_no_migration_upgrades_is_reported_as_stranded(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    db = sync_client[fast_project.db]
    completed(fast_project, 10)
    for stranded in ({"_id": SECRET_ID, "first": "old", "__v": 0}, {"_id": SECRET_ID, "first": "never versioned"}):
        db.people.insert_one(stranded)  # below 1 -> 2, and no migration starts from 0: no pass can take it
        code, out, err = cli(fast_project, "background", "verify", "--json")
        assert code == 31, err
        document = json.loads(out)
        assert document["stranded"] == [NAME] and document["drift"] == []
        (row,) = document["verify"]
        assert (row["found"], row["stranded"], row["action"]) == (False, True, "reported")
        assert SECRET_ID not in out + err
        code, out, err = cli(fast_project, "background", "verify", "--reopen")
        assert code == 31 and "documents at a version no migration upgrades" in out and SECRET_ID not in out + err
        assert db["_mongoshift_background"].find_one({"_id": NAME})["status"] == "completed"  # a pass would not help: not reopened
        db.people.delete_one({"_id": SECRET_ID})
    assert cli(fast_project, "background", "verify")[0] == 0


def test_a_version_stored_as_text_is_stranded_and_the_warning_names_the_cure(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """Legacy data with ``__v: "1"`` is stranded too; the warning must not send its reader to "a migration from
    their version" alone, which no text version can have: it says to store the version as a number."""
    db = sync_client[fast_project.db]
    completed(fast_project, 10)
    db.people.insert_one({"_id": SECRET_ID, "first": "Secret Value", "__v": "1"})
    code, out, err = cli(fast_project, "background", "verify")
    assert code == 31, err
    assert "store it as a number" in err and "not a number" in err, err
    assert SECRET_ID not in out + err and "Secret Value" not in out + err
