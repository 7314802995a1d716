"""requires, inline mode, and background migrations that wait for each other."""

from __future__ import annotations

import json

import pytest

from mongoshift.api import background as bg, migrations as command
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
    with pytest.raises(RequirementsPendingError, match=r"0001_names\.py") as info:
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


INDEX = """
async def up(ctx):
    await ctx.db.people.create_index("last")
"""


def names_requiring(*required: str) -> str:
    """The usual 1 → 2 background rewrite of people, declaring ``requires``."""
    return f"requires = {list(required)!r}\n" + background_file(batch_size=50)


async def _run(s, names):  # type: ignore[no-untyped-def]
    """``background run`` with a bound: a requirement that is never met would wait forever."""
    import asyncio

    return await asyncio.wait_for(bg.run(s, names), 60)


async def test_a_background_migration_may_require_an_ordinary_migration_the_changelog_has_applied(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 40)
    fast_project.add("0001_index.py", INDEX)
    fast_project.add("0002_names.py", names_requiring("0001_index"))
    s = fast_project.settings()
    report = await command.up(s)  # one run: the index is applied first, so the rewrite registers runnable
    assert [r.status for r in report.results] == ["applied", "applied"]
    state = await db["_mongoshift_background"].find_one({"_id": "0002_names.py"})
    assert state["status"] == "pending" and state["waits_for"] == []
    assert state["requires"] == ["0001_index.py"]  # kept as declared
    (result,) = await _run(s, ["0002_names.py"])
    assert result.status == "completed" and await db.people.count_documents({"__v": 2}) == 40


async def test_a_background_migration_whose_ordinary_requirement_is_not_applied_is_refused_at_up(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 10)
    fast_project.add("0001_index.py", INDEX)
    fast_project.add("0002_names.py", names_requiring("0001_index"))
    s = fast_project.settings()
    with pytest.raises(RequirementsPendingError, match=r"0001_index\.py \(not applied yet\)") as info:
        await command.up(s, target="0002_names.py")  # one file: its requirement stays pending
    assert info.value.details["waits_for"] == ["0001_index.py"]
    assert await db["_mongoshift_background"].count_documents({}) == 0  # never registered blocked
    assert await db["_mongoshift_migrations"].count_documents({}) == 0  # no trace
    await command.up(s, target="0001_index.py")
    await command.up(s, target="0002_names.py")  # now met
    assert (await db["_mongoshift_background"].find_one({"_id": "0002_names.py"}))["status"] == "pending"


async def test_an_ordinary_migration_may_require_an_ordinary_one(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    fast_project.add("0001_index.py", INDEX)
    fast_project.add("0002_contract.py", CONTRACT.replace("0001_names", "0001_index"))
    report = await command.up(fast_project.settings())
    assert [r.status for r in report.results] == ["applied", "applied"]
    assert await db.contract.count_documents({}) == 1


async def test_a_requirement_that_names_no_migration_is_refused_at_up(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import ExitCode, FileNotFoundMigrationError

    await seed(db.people, 10)
    fast_project.add("0001_index.py", INDEX)
    fast_project.add("0002_names.py", names_requiring("0001_idx"))  # a typo: nothing has this name
    s = fast_project.settings()
    with pytest.raises(FileNotFoundMigrationError, match=r"0002_names\.py requires 0001_idx\.py, but no migration") as info:
        await command.up(s)
    assert info.value.exit_code == ExitCode.FILE_NOT_FOUND and info.value.details["requires"] == "0001_idx.py"
    assert await db["_mongoshift_background"].count_documents({}) == 0
    with pytest.raises(FileNotFoundMigrationError):
        await command.dry_run(s, "up")  # the same refusal, read only
    done = cli(fast_project, "up", "--json")
    assert done.returncode == 8, done.stderr
    assert json.loads(done.stdout)["error"]["kind"] == "file_not_found"


async def test_dry_run_counts_an_ordinary_requirement_the_same_run_applies_as_met(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 10)
    fast_project.add("0001_index.py", INDEX)
    fast_project.add("0002_names.py", names_requiring("0001_index"))
    preview = await command.dry_run(fast_project.settings(), "up")
    assert [r.name for r in preview.rows] == ["0001_index.py", "0002_names.py"] and preview.waiting == []
    assert await db["_mongoshift_migrations"].count_documents({}) == 0


async def test_a_dependent_leaves_blocked_the_moment_its_requirements_complete(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Unblocking is part of completing the requirement: status is right at once, no runner of the dependent needed."""

    await seed(db.people, 30)
    await db.pets.insert_many([{"_id": i} for i in range(5)])
    fast_project.add("0001_names.py", background_file(batch_size=50))
    upper = background_file(batch_size=50).replace("from_version=1", "from_version=2").replace("to_version=2", "to_version=3")
    fast_project.add("0002_upper.py", 'requires = ["0001_names"]\n' + upper)
    pets = background_file().replace('collection="people"', 'collection="pets"').replace("from_version=1", "from_version=0")
    fast_project.add("0003_pets.py", 'requires = ["0001_names", "0002_upper"]\n' + pets.replace("to_version=2", "to_version=1"))
    s = fast_project.settings()
    await command.up(s)
    assert [r.status for r in await bg.status(s)] == ["pending", "blocked", "blocked"]

    await _run(s, ["0001_names.py"])  # only the requirement's runner
    upper_now, pets_now = (await bg.status(s, "0002_upper.py"))[0], (await bg.status(s, "0003_pets.py"))[0]
    assert upper_now.status == "pending" and upper_now.waits_for == []
    assert pets_now.status == "blocked" and pets_now.waits_for == ["0002_upper.py"]  # still waits, for less
    shown = {r["name"]: r for r in json.loads(cli(fast_project, "background", "status", "--json").stdout)["background"]}
    assert shown["0002_upper.py"]["status"] == "pending" and shown["0003_pets.py"]["waits_for"] == ["0002_upper.py"]
    detail = cli(fast_project, "background", "status", "0003_pets").stdout
    assert "waits for\t0002_upper.py" in detail and "status\tblocked" in detail
    history = (await db["_mongoshift_background"].find_one({"_id": "0002_upper.py"}))["history"]
    assert history[-1]["action"] == "unblock" and history[-1]["from"] == "blocked"

    await _run(s, ["0002_upper.py"])
    assert (await bg.status(s, "0003_pets.py"))[0].status == "pending"
    assert await db.pets.count_documents({"__v": {"$exists": True}}) == 0  # nothing ran it


@pytest.mark.parametrize("how", ["failed", "paused", "cancelled"])
def test_a_run_does_not_wait_for_a_requirement_only_a_person_moves_on(fast_project, sync_client, cli, how: str) -> None:  # type: ignore[no-untyped-def]
    """``background run A B`` (or ``--all``) where A failed, was paused or cancelled and B requires A waited for B
    forever (found in a user trial: a CI job that never ends, A's failure hidden until it is killed; the in-app runner
    stuck on B, the migrations after it never run). The run now reports B blocked and exits 24, naming what it waits for."""
    db = sync_client[fast_project.db]
    db.people.insert_many([{"_id": i, "first": "F", "last": "L", "__v": 1, "__rev": 1} for i in range(20)])
    first = background_file(batch_size=50)
    if how == "failed":
        first = first.replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise ValueError('no')")
    fast_project.add("0001_names.py", first)
    second = background_file(batch_size=50).replace("from_version=1", "from_version=2").replace("to_version=2", "to_version=3")
    fast_project.add("0002_upper.py", 'requires = ["0001_names.py"]\n' + second)
    assert cli(fast_project, "up").returncode == 0
    control = {"failed": ("run", "0001_names"), "paused": ("pause", "0001_names"), "cancelled": ("cancel", "0001_names", "--yes")}[how]
    assert cli(fast_project, "background", *control).returncode == (32 if how == "failed" else 0)
    named = cli(fast_project, "background", "run", "0002_upper", "--json")
    assert named.returncode == 24, (named.stdout, named.stderr[-2000:])
    error = json.loads(named.stdout)["error"]
    assert error["kind"] == "requirements_pending" and error["details"]["held"] == ["0002_upper.py"]
    assert error["details"]["waits_for"] == ["0001_names.py"] and "only a person moves on" in error["message"]
    every = cli(fast_project, "background", "run", "--all", "--json")  # leaves A out (it waits for a person), runs B
    assert every.returncode == 24, (every.stdout, every.stderr[-2000:])
    assert json.loads(every.stdout)["error"]["details"]["held"] == ["0002_upper.py"]
    assert db["_mongoshift_background"].find_one({"_id": "0002_upper.py"})["status"] == "blocked"


def test_a_run_does_not_wait_for_a_requirement_that_was_rolled_back(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """B requires A, and A was rolled back (``down``: its revert registered, then run): ``up 0002_upper`` registers B
    blocked, and ``background run 0002_upper`` waited for A for ever, though only a person (``up`` of A) meets it
    again. The run now reports B blocked on A and exits 24, as for a failed, paused or cancelled requirement."""
    db = sync_client[fast_project.db]
    db.people.insert_many([{"_id": i, "first": "F", "last": "L", "__v": 1, "__rev": 1} for i in range(20)])
    revert = "def revert(doc, ctx):\n    doc['first'], doc['last'] = doc.pop('full_name').split(' ')\n    return doc\n\nbackground = Background("
    fast_project.add("0001_names.py", background_file(batch_size=50, extra="revert=revert,").replace("background = Background(", revert))
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "run", "0001_names").returncode == 0
    assert cli(fast_project, "down").returncode == 0
    second = background_file(batch_size=50).replace("from_version=1", "from_version=2").replace("to_version=2", "to_version=3")
    fast_project.add("0002_upper.py", 'requires = ["0001_names.py"]\n' + second)
    for reverted in (False, True):
        if reverted:
            assert cli(fast_project, "background", "run", "0001_names").returncode == 0  # the revert ran: still not met
        assert cli(fast_project, "up", "0002_upper").returncode == 0
        named = cli(fast_project, "background", "run", "0002_upper", "--json")
        assert named.returncode == 24, (named.stdout, named.stderr[-2000:])
        error = json.loads(named.stdout)["error"]
        assert error["details"]["held"] == ["0002_upper.py"] and error["details"]["waits_for"] == ["0001_names.py"]
        assert "rolled back: 'mongoshift up' it again" in error["message"]
        assert db["_mongoshift_background"].find_one({"_id": "0002_upper.py"})["status"] == "blocked"
    assert db.people.count_documents({"__v": 1}) == 20  # the revert took every document back, nothing rewrote them since
