"""requires, inline mode, and background migrations that wait for each other."""

from __future__ import annotations

import pytest

from mongoshift.api import background as bg
from mongoshift.api import migrations as command
from mongoshift.errors import RequirementsPendingError

from .conftest import background_file, seed

CONTRACT = """
requires = ["0001_names"]

async def up(ctx):
    await ctx.db.people.update_many({}, {"$unset": {"legacy": ""}})
    await ctx.db.contract.insert_one({"ran": True})
"""

HOOKS = "def before_each(name, ctx, info):\n    ctx.db.hooklog.insert_one({'name': name})\n"


async def test_up_stops_before_a_migration_whose_background_requirement_is_not_done(fast_project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    hooks = tmp_path / "hooks_file.py"
    hooks.write_text(HOOKS)
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2, hooks=str(hooks))
    fast_project.add("0001_names.py", background_file(batch_size=50))
    fast_project.add("0002_contract.py", CONTRACT)
    s = fast_project.settings()
    with pytest.raises(RequirementsPendingError, match="0001_names.py") as info:
        await command.up(s)
    assert info.value.details["waits_for"] == ["0001_names.py"]
    assert await db["_mongoshift_migrations"].find_one({"name": "0002_contract.py"}) is None  # no trace
    assert [d["name"] async for d in db.hooklog.find()] == ["0001_names.py"]  # no hook for the blocked one
    await bg.run(s, ["0001_names.py"])
    report = await command.up(s)
    assert [r.name for r in report.results] == ["0002_contract.py"]
    assert await db.contract.count_documents({}) == 1


async def test_stop_policy_ends_the_run_cleanly_and_reports_what_it_waits_for(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 30)
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2, on_requires_pending="stop")
    fast_project.add("0001_names.py", background_file())
    fast_project.add("0002_contract.py", CONTRACT)
    report = await command.up(fast_project.settings())
    assert [r.name for r in report.results] == ["0001_names.py"]
    assert report.waiting == [{"migration": "0002_contract.py", "waits_for": ["0001_names.py"]}]


async def test_old_shapes_written_after_completion_reopen_the_requirement(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 40)
    fast_project.add("0001_names.py", background_file())
    fast_project.add("0002_contract.py", CONTRACT)
    s = fast_project.settings()
    await command.up(s, target="0001_names.py")
    await bg.run(s, ["0001_names.py"])
    await db.people.insert_one({"_id": 999, "first": "old", "last": "app", "__v": 1, "__rev": 1})  # an old app version
    with pytest.raises(RequirementsPendingError, match="reopened"):
        await command.up(s)
    state = await db["_mongoshift_background"].find_one({"_id": "0001_names.py"})
    assert state["status"] == "pending" and state["history"][-1]["action"] == "reopen"
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and (await db.people.find_one({"_id": 999}))["__v"] == 2
    await command.up(s)
    assert await db.contract.count_documents({}) == 1


async def test_inline_mode_runs_background_migrations_during_up(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120)
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2, background_inline=True)
    fast_project.add("0001_names.py", background_file(batch_size=50))
    fast_project.add("0002_contract.py", CONTRACT)
    report = await command.up(fast_project.settings())
    assert [r.status for r in report.results] == ["applied", "applied"]
    assert "inline: completed" in (report.results[0].reason or "")
    assert await db.people.count_documents({"__v": 2}) == 120


async def test_a_background_migration_that_requires_another_is_blocked_until_it_completes(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 60)
    fast_project.add("0001_names.py", background_file(batch_size=50))
    second = background_file(batch_size=50).replace("from_version=1", "from_version=2").replace("to_version=2", "to_version=3")
    second = second.replace('doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")', 'doc["upper"] = doc["full_name"].upper()')
    fast_project.add("0002_upper.py", 'requires = ["0001_names.py"]\n' + second)
    s = fast_project.settings()
    await command.up(s)
    state = await db["_mongoshift_background"].find_one({"_id": "0002_upper.py"})
    assert state["status"] == "blocked" and state["waits_for"] == ["0001_names.py"]
    results = await bg.run(s)  # --all, in name order: the first completes, the second unblocks
    assert [r.status for r in results] == ["completed", "completed"]
    assert await db.people.count_documents({"__v": 3, "upper": {"$exists": True}}) == 60
    history = (await db["_mongoshift_background"].find_one({"_id": "0002_upper.py"}))["history"]
    assert "unblock" in [h["action"] for h in history]


def test_requires_must_name_an_earlier_file(fast_project) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from mongoshift.errors import InvalidExportError

    fast_project.add("0001_contract.py", 'requires = ["0002_later"]\nasync def up(ctx):\n    pass\n')
    fast_project.add("0002_later.py", background_file())
    with pytest.raises(InvalidExportError, match="earlier migration"):
        asyncio.run(command.up(fast_project.settings()))
