"""``ensure_indexes`` covers every index of mongoshift's own collections: the changelog, the lock,
the background states and partitions, the converge journal, the run log. The one exception is the
partitions' ``lease_slot``, which caps the lanes across processes (docs, "Settings")."""

from __future__ import annotations

from ..conftest import fail_command
from .conftest import background_file, seed

OWN = ("_mongoshift_migrations", "_mongoshift_locks", "_mongoshift_background", "_mongoshift_background_partitions", "_mongoshift_converge",
       "_mongoshift_run_log")


async def _indexes(db) -> dict[str, set[str]]:  # type: ignore[no-untyped-def]
    return {name: {index["name"] async for index in await db[name].list_indexes()} for name in OWN}


async def _every_feature(cli, project, db, *, ensure_indexes: bool) -> None:  # type: ignore[no-untyped-def]
    """up (a plain migration and a background one), background run, converge."""
    project.write_config(ensure_indexes=ensure_indexes, background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    await seed(db.people, 50)
    project.add("0001_mark.py", "def up(ctx):\n    ctx.db.marks.insert_one({'at': 'up'})\n    ctx.log.info('marked')\n")
    project.add("0002_names.py", background_file(batch_size=20))
    (project.root / "collections").mkdir()
    (project.root / "collections" / "people.toml").write_text("indexes = [{ keys = { email = 1 } }]\n")
    for command in (["up"], ["background", "run", "--all"], ["converge", "--yes"]):
        result = cli(project, *command)
        assert result.returncode == 0, (command, result.stderr[-2000:])
    assert await db.people.count_documents({"__v": 2}) == 50
    assert await db["_mongoshift_converge"].count_documents({}) == 1  # converge wrote its journal
    assert await db["_mongoshift_run_log"].count_documents({}) == 1  # up stored its log line


async def test_with_ensure_indexes_false_no_own_collection_gets_an_index_but_the_lane_cap(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await _every_feature(cli, project, db, ensure_indexes=False)
    indexes = await _indexes(db)
    assert indexes == {**{name: {"_id_"} for name in OWN}, "_mongoshift_background_partitions": {"_id_", "lease_slot"}}


async def test_with_ensure_indexes_true_every_own_index_is_there(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await _every_feature(cli, project, db, ensure_indexes=True)
    indexes = await _indexes(db)
    assert indexes["_mongoshift_migrations"] > {"_id_", "name_unique", "status_batch", "batch"}
    assert indexes["_mongoshift_background"] == {"_id_", "status_registered_at"}
    assert indexes["_mongoshift_background_partitions"] == {"_id_", "claim", "lease_slot"}
    assert indexes["_mongoshift_converge"] == {"_id_", "started_at"}
    assert indexes["_mongoshift_locks"] == {"_id_"}  # looked up by _id only
    assert indexes["_mongoshift_run_log"] == {"_id_", "run_id_seq", "at_ttl"}


async def test_without_ensure_indexes_a_lane_cap_made_beforehand_needs_no_create_index(project, db, client, cli) -> None:  # type: ignore[no-untyped-def]
    """A user without the privilege to create indexes runs once the lane cap's index exists."""
    project.write_config(ensure_indexes=False, background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    await seed(db.people, 30)
    project.add("0001_names.py", background_file(batch_size=10))
    await db["_mongoshift_background_partitions"].create_index(
        [("background", 1), ("lease.slot", 1)], name="lease_slot", unique=True, partialFilterExpression={"lease.slot": {"$exists": True}}
    )
    async with fail_command(client, "alwaysOn", failCommands=["createIndexes"], errorCode=13):  # Unauthorized
        for command in (["up"], ["background", "run", "--all"]):
            result = cli(project, *command)
            assert result.returncode == 0, (command, result.stderr[-2000:])
    assert await db.people.count_documents({"__v": 2}) == 30
