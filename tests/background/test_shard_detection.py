"""Detection: what config.collections / config.chunks say, under the shard_aware setting.

The embedded server is no mongos; with ``shard_aware = "on"`` the engine reads ``config`` on any
server, so the recorded documents (tests/unit/fixtures/sharding) are written there and read back.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from bson import Int64
from bson.json_util import loads

from mongoshift.background.plan.shards import detect

from ..conftest import REAL_URI, fail_command

FIXTURES = Path(__file__).parents[1] / "unit" / "fixtures" / "sharding"

pytestmark = pytest.mark.skipif(bool(REAL_URI), reason="writes into the config database: only on the embedded server")


async def _record(client: Any, db: Any, name: str, *, by_namespace: bool = False) -> str:
    data = loads((FIXTURES / f"{name}.json").read_text())
    ns = f"{db.name}.{data['collection']['_id'].split('.', 1)[1]}"
    coll = {**data["collection"], "_id": ns}
    chunks = [{**c, "ns": ns} for c in data["chunks"]]
    if by_namespace:
        for c in chunks:
            c["uuid"] = None
    await client.config.collections.insert_one(coll)
    if chunks:
        await client.config.chunks.insert_many(chunks)
    return ns.split(".", 1)[1]


@pytest.fixture
async def config(client):  # type: ignore[no-untyped-def]
    yield client
    await client.config.collections.delete_many({})
    await client.config.chunks.delete_many({})


async def test_on_reads_the_layout_with_exact_bounds(config, db) -> None:  # type: ignore[no-untyped-def]
    name = await _record(config, db, "int64_bounds")
    found = await detect(db, name, mode="on", configured={}, warned=set())
    assert found.status == "sharded" and found.layout is not None
    assert [c.shard for c in found.layout.chunks] == ["shard0", "shard1", "shard0"]
    edge = found.layout.chunks[1].range.min[0]
    assert type(edge) is Int64 and int(edge) == 2**53 + 1


async def test_chunks_recorded_by_namespace_are_found_too(config, db) -> None:  # type: ignore[no-untyped-def]
    name = await _record(config, db, "ranged_single", by_namespace=True)
    found = await detect(db, name, mode="on", configured={}, warned=set())
    assert found.layout is not None and len(found.layout.chunks) == 4


async def test_auto_is_quietly_off_without_a_mongos_and_off_reads_nothing(config, db, caplog) -> None:  # type: ignore[no-untyped-def]
    name = await _record(config, db, "ranged_single")
    with caplog.at_level(logging.WARNING, logger="mongoshift.background"):
        assert (await detect(db, name, mode="auto", configured={}, warned=set())).status == "unsharded"
        assert (await detect(db, name, mode="off", configured={name: {"userId": 1}}, warned=set())).status == "off"
        unsplittable = await _record(config, db, "unsplittable")
        assert (await detect(db, unsplittable, mode="on", configured={}, warned=set())).layout is None
    assert not caplog.records
    found = await detect(db, "other", mode="auto", configured={"other": {"k": 1}}, warned=set())
    assert found.status == "configured" and found.layout is not None and found.layout.key.fields == ("k",)


async def test_no_privilege_on_config_is_unknown_with_one_warning(config, db, caplog) -> None:  # type: ignore[no-untyped-def]
    warned: set[str] = set()
    with caplog.at_level(logging.WARNING, logger="mongoshift.background"):
        async with fail_command(config, "alwaysOn", failCommands=["find"], errorCode=13):  # Unauthorized
            first = await detect(db, "people", mode="on", configured={}, warned=warned)
            again = await detect(db, "people", mode="on", configured={}, warned=warned)
            keyed = await detect(db, "people", mode="on", configured={"people": {"tenant": 1}}, warned=warned)
    assert (first.status, again.status, keyed.status) == ("unknown", "unknown", "configured")
    warnings = [r for r in caplog.records if "clusterMonitor" in r.getMessage()]
    assert len(warnings) == 1


RUN_FILE = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["seen"] = True
    return doc

background = Background(
    collection="users",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=9,
    pause_ms=0,
    max_parallel=3,
    partitions={"min_partition_docs": 10},
)
'''


async def test_a_detected_layout_plans_by_shard_and_a_reshard_re_splits(config, db, project) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.api import background as bg, migrations as command
    from mongoshift.background.lanes.engine import open_engine

    name = await _record(config, db, "ranged_single")
    assert name == "users"
    await db.users.insert_many([{"_id": i, "userId": i * 50, "__v": 1, "__rev": 1} for i in range(120)])
    await db.users.create_index([("__v", 1), ("userId", 1), ("_id", 1)])
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2, shard_aware="on")
    project.add("0001_users.py", RUN_FILE)
    settings = project.settings()
    await command.up(settings)
    async with open_engine(settings) as engine:
        spec = engine.spec("0001_users.py")
        assert (await engine.coordinator.step("0001_users.py", spec)).next == "process"
        before = await engine.store.state("0001_users.py")
        assert before is not None and before.plan is not None and before.plan["method"] == "shard-key"
        # Resharded: a new UUID and epoch (the chunks follow the new UUID).
        fresh = loads((FIXTURES / "reshard.json").read_text())["after"]["collection"]
        old_uuid = (await config.config.collections.find_one({"_id": f"{db.name}.users"}))["uuid"]
        await config.config.collections.update_one({"_id": f"{db.name}.users"}, {"$set": {"uuid": fresh["uuid"], "lastmodEpoch": fresh["lastmodEpoch"]}})
        await config.config.chunks.update_many({"uuid": old_uuid}, {"$set": {"uuid": fresh["uuid"]}})
        await engine.coordinator.step("0001_users.py", spec)
        after = await engine.store.state("0001_users.py")
        assert after is not None and after.plan is not None
        assert after.generation == before.generation + 1 and after.plan["layout"]["uuid"] == fresh["uuid"]
    (report,) = await bg.run(settings, ["0001_users.py"], concurrency=3)
    assert report.status == "completed" and report.totals["scanned"] == 120 and report.totals["migrated"] == 120
    rows = await bg.partitions(settings, "0001_users.py")
    assert {r.shard for r in rows} == {"shard0", "shard1"}
