"""The whole flow on a real sharded cluster: ``MONGOSHIFT_TEST_URI`` pointing at a mongos.

Marked ``real_mongodb`` (skipped on the embedded server), and skipped on a replica set: it
shards a collection, splits it (and moves a chunk when there are two shards), then runs a
background migration and checks that the plan followed the chunks, that every document was
rewritten once, and that a transform moving a document to another chunk is a document error.
"""

from __future__ import annotations

from typing import Any

import pytest

from mongoshift.api import background as bg, migrations as command

pytestmark = pytest.mark.real_mongodb

FILE = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["label"] = f"{{doc['tenant']}}:{{doc['n']}}"
    if doc["n"] == 7:
        doc["tenant"] = "elsewhere"
    return doc

background = Background(
    collection="{collection}",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=50,
    pause_ms=0,
    max_parallel=4,
    max_document_errors=1,
    max_replication_lag_ms=False,
)
'''


async def _sharded(client: Any, db: Any, collection: str, key: dict[str, Any], splits: list[dict[str, Any]]) -> list[str]:
    hello = await client.admin.command("hello")
    if hello.get("msg") != "isdbgrid":
        pytest.skip("MONGOSHIFT_TEST_URI is not a mongos: this test needs a sharded cluster")
    shards = [s["_id"] for s in (await client.admin.command("listShards"))["shards"]]
    await client.admin.command("enableSharding", db.name)
    await client.admin.command("shardCollection", f"{db.name}.{collection}", key=key)
    for at in splits:
        await client.admin.command("split", f"{db.name}.{collection}", middle=at)
    if len(shards) > 1 and splits:
        await client.admin.command("moveChunk", f"{db.name}.{collection}", find=splits[0], to=shards[1])
    return shards


async def test_a_ranged_key_is_planned_by_chunk_and_rewritten_once(project, client, db) -> None:  # type: ignore[no-untyped-def]
    await _sharded(client, db, "people", {"tenant": 1, "n": 1}, [{"tenant": "m", "n": 0}, {"tenant": "t", "n": 0}])
    await db.people.insert_many([{"_id": i, "tenant": "aemstx"[i % 6], "n": i, "__v": 1, "__rev": 1} for i in range(600)])
    await db.people.create_index([("__v", 1), ("tenant", 1), ("n", 1), ("_id", 1)])
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.2)
    project.add("0001_people.py", FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people.py"], concurrency=4)
    assert report.status == "completed"
    assert report.totals["scanned"] == 600 and report.totals["migrated"] == 599 and report.totals["failed"] == 1
    rows = await bg.partitions(settings, "0001_people.py")
    assert all(r.shard for r in rows)
    assert await db.people.count_documents({"__v": 2}) == 599
    assert (await db.people.find_one({"n": 7}))["tenant"] != "elsewhere"


async def test_a_hashed_key_without_its_version_index_reads_id_ranges_and_targets_the_writes(project, client, db) -> None:  # type: ignore[no-untyped-def]
    await _sharded(client, db, "people", {"tenant": "hashed"}, [])
    await db.people.insert_many([{"_id": i, "tenant": f"t{i % 9}", "n": i, "__v": 1, "__rev": 1} for i in range(300)])
    await db.people.create_index([("__v", 1), ("_id", 1)])
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.2)
    project.add("0001_people.py", FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people.py"], concurrency=2)
    assert report.status == "completed" and report.totals["migrated"] == 299 and report.totals["failed"] == 1


async def test_a_hashed_key_is_drained_by_hash_range_on_its_chunks(project, client, db) -> None:  # type: ignore[no-untyped-def]
    shards = await _sharded(client, db, "people", {"tenant": "hashed"}, [])
    await db.people.insert_many([{"_id": i, "tenant": f"t{i % 23}", "n": i, "__v": 1, "__rev": 1} for i in range(600)])
    await db.people.create_index([("__v", 1), ("tenant", "hashed"), ("_id", 1)])
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.2)
    project.add("0001_people.py", FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people.py"], concurrency=4)
    assert report.status == "completed"
    assert report.totals["scanned"] == 600 and report.totals["migrated"] == 599 and report.totals["failed"] == 1
    rows = await bg.partitions(settings, "0001_people.py")
    assert {r.shard for r in rows} == set(shards)  # a hashed collection starts with chunks on every shard
    stored = [p async for p in db["_mongoshift_background_partitions"].find({"background": "0001_people.py"})]
    assert all(p["scope"].get("ranges") and p["scope"]["key"] == [["tenant", "hashed"]] for p in stored)
    assert await db.people.count_documents({"__v": 2}) == 599


PIPELINE_FILE = '''
from mongoshift import Background

background = Background(
    collection="{collection}",
    from_version=1,
    to_version=2,
    pipeline=[{{"$set": {{
        "label": {{"$concat": ["$tenant", ":", {{"$toString": "$n"}}]}},
        "tenant": {{"$cond": [{{"$eq": ["$n", 7]}}, "elsewhere", "$tenant"]}},
    }}}}],
    batch_size=50,
    pause_ms=0,
    max_parallel=4,
    max_document_errors=1,
    max_replication_lag_ms=False,
)
'''


async def test_a_pipeline_that_moves_a_document_fails_it_alone(project, client, db) -> None:  # type: ignore[no-untyped-def]
    await _sharded(client, db, "people", {"tenant": 1, "n": 1}, [{"tenant": "m", "n": 0}, {"tenant": "t", "n": 0}])
    await db.people.insert_many([{"_id": i, "tenant": "aemstx"[i % 6], "n": i, "__v": 1, "__rev": 1} for i in range(600)])
    await db.people.create_index([("__v", 1), ("tenant", 1), ("n", 1), ("_id", 1)])
    project.write_config(background_lease_ttl_seconds=5, background_poll_seconds=0.2)
    project.add("0001_people.py", PIPELINE_FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people.py"], concurrency=4)
    assert report.status == "completed"
    assert report.totals["migrated"] == 599 and report.totals["failed"] == 1
    (status,) = await bg.status(settings, "0001_people.py")
    assert [e["reason"] for e in status.doc_error_counts] == ["shard-key-changed"]
    assert await db.people.count_documents({"__v": 2, "__mongoshift_shard_key": {"$exists": False}}) == 599
    assert (await db.people.find_one({"n": 7}))["tenant"] != "elsewhere"


async def test_a_pipeline_batch_filter_goes_to_the_one_shard_owning_its_keys(client, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.write.batch import batch_keys

    shards = await _sharded(client, db, "people", {"tenant": 1, "n": 1}, [{"tenant": "m", "n": 0}, {"tenant": "t", "n": 0}])
    if len(shards) < 2:
        pytest.skip("one shard: every write is targeted to it")
    await db.people.insert_many([{"_id": i, "tenant": "aemstx"[i % 6], "n": i, "__v": 1, "__rev": 1} for i in range(60)])
    # tenants m and s lie in the chunk [{m, 0}, {t, 0}), the one moved to the second shard.
    docs = await db.people.find({"tenant": {"$in": ["m", "s"]}}, {"_id": 1, "tenant": 1, "n": 1}).to_list(None)
    filter_ = {"$and": [{"__v": 1}, {"_id": {"$in": [d["_id"] for d in docs]}}, batch_keys(docs, ("tenant", "n"))]}
    update = {"q": filter_, "u": [{"$set": {"x": 1}}], "multi": True}
    explained = await db.command("explain", {"update": "people", "updates": [update]}, verbosity="queryPlanner")
    plan = explained["queryPlanner"]["winningPlan"]
    assert [s["shardName"] for s in plan.get("shards", [])] == [shards[1]], plan.get("stage")
