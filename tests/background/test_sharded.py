"""Background migrations with a shard key: the targeted read and write paths on the embedded server.

The embedded server is not sharded, so the key comes from the ``shard_keys`` setting (a real
mongos is read from ``config``; see test_sharded_cluster.py). The filters, the hint, the keyset
cursor, the key in every guarded write and the ``shard-key-changed`` guard (in Python for
``migrate``, on the server for ``pipeline``) all run for real, and so do a hashed key's
hash-range reads (the embedded server's fixes (s) and (t)): the result must be the same
documents the untargeted path writes.
"""

from __future__ import annotations

from typing import Any

import pytest
from bson import Int64
from pymongo import AsyncMongoClient, monitoring

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.write.batch import apply_batch
from mongoshift.background.write.job import Job
from mongoshift.project.run import CancelSignal
from mongoshift.schema.background import Background

from ..conftest import TEST_CLIENT_OPTIONS

FILE = '''
from mongoshift import Background

def migrate(doc, ctx):
    doc["label"] = f"{{doc['n']}}-{{type(doc.get('tenant')).__name__}}"
    doc["n"] = float(doc["n"]) if doc["n"] % 5 == 0 else doc["n"]  # same value, other type: not a key change
    if doc["n"] == 13:
        doc["tenant"] = "moved"
    return doc

background = Background(
    collection="{collection}",
    from_version=1,
    to_version=2,
    migrate=migrate,
    batch_size=7,
    pause_ms=0,
    max_parallel=2,
    max_document_errors=1,
    partitions={{"min_partition_docs": 10}},
)
'''

TENANTS: list[Any] = ["acme", "globex", 3, 7.5, None, "<missing>", Int64(2**53 + 1), "acme"]


async def _seed(collection: Any, n: int, key: list[tuple[str, Any]] | None) -> None:
    docs = []
    for i in range(n):
        doc: dict[str, Any] = {"_id": i, "n": i, "__v": 1, "__rev": 1}
        tenant = TENANTS[i % len(TENANTS)]
        if tenant != "<missing>":
            doc["tenant"] = tenant
        docs.append(doc)
    await collection.insert_many(docs)
    await collection.create_index(key or [("__v", 1), ("_id", 1)])


def _configure(project: Any) -> None:
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    with project.config.open("a", encoding="utf-8") as out:
        out.write("[mongoshift.shard_keys]\npeople = { tenant = 1, n = 1 }\n")


async def test_targeted_paths_write_what_the_untargeted_path_writes(project, db) -> None:  # type: ignore[no-untyped-def]
    _configure(project)
    await _seed(db.people, 120, [("__v", 1), ("tenant", 1), ("n", 1), ("_id", 1)])
    await _seed(db.plain, 120, None)
    project.add("0001_people.py", FILE.format(collection="people"))
    project.add("0002_plain.py", FILE.format(collection="plain"))
    settings = project.settings()
    await command.up(settings)
    reports = {r.name: r for r in await bg.run(settings, ["0001_people.py", "0002_plain.py"], concurrency=2)}
    assert {name: r.status for name, r in reports.items()} == {"0001_people.py": "completed", "0002_plain.py": "completed"}

    # Each document read once: the key ranges tile the key space across types (null, missing, numbers, strings).
    assert reports["0001_people.py"].totals["scanned"] == 120
    rows = await bg.partitions(settings, "0001_people.py")
    assert len(rows) > 1
    stored = [p async for p in db["_mongoshift_background_partitions"].find({"background": "0001_people.py"})]
    assert all(p["scope"].get("ranges") and p["scope"]["key"] == [["tenant", 1], ["n", 1]] for p in stored)

    people = await db.people.find({}, sort=[("_id", 1)]).to_list(None)
    plain = await db.plain.find({}, sort=[("_id", 1)]).to_list(None)
    # The same documents, value for value, but the one whose key the transform changed: only a
    # collection with a shard key refuses that (the plain one has none to guard).
    assert [d for d in people if d["_id"] != 13] == [d for d in plain if d["_id"] != 13]
    assert all(type(a["n"]) is type(b["n"]) for a, b in zip(people, plain, strict=False))
    moved = next(d for d in people if d["_id"] == 13)
    assert moved["__v"] == 1 and moved.get("tenant") != "moved"  # refused, left as it was
    assert sum(1 for d in people if d["__v"] == 2) == 119
    (status,) = await bg.status(settings, "0001_people.py")
    assert status.totals["failed"] == 1


async def test_every_guarded_write_carries_the_shard_key(mongo_uri, db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people, 12, None)
    seen: list[dict[str, Any]] = []

    class Updates(monitoring.CommandListener):
        def started(self, event: monitoring.CommandStartedEvent) -> None:
            if event.command_name == "update":
                seen.extend(u["q"] for u in event.command["updates"])

        def succeeded(self, event: Any) -> None: ...

        def failed(self, event: Any) -> None: ...

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_uri, event_listeners=[Updates()], **TEST_CLIENT_OPTIONS)
    try:
        coll = client[db.name].people
        spec = Background(collection="people", from_version=1, to_version=2, migrate=lambda d, c: {**d, "x": 1})
        job = Job("0001_x.py", spec, "forward", 1, 1, 2, spec.migrate, None, None, [], shard_key=("tenant", "n"))
        docs = await coll.find({}, sort=[("_id", 1)]).to_list(None)
        result = await apply_batch(job, docs, coll, job.context("0", CancelSignal()))
    finally:
        await client.close()
    assert result.migrated == 12
    assert len(seen) == 12 and all("tenant" in q and "n" in q for q in seen)
    missing = next(q for q in seen if q["_id"] == 5)
    assert missing["tenant"] is None  # a missing key field is null to the shard key


async def test_a_changed_shard_key_is_a_document_error_numbers_compared_by_value(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people, 4, None)

    def migrate(doc: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if doc["_id"] == 0:
            doc["tenant"] = "other"
        elif doc["_id"] == 2:
            doc["tenant"] = Int64(3)  # was int 3: the same key
        elif doc["_id"] == 3:
            doc["tenant"] = 7.5  # was 7.5: unchanged
        return doc

    spec = Background(collection="people", from_version=1, to_version=2, migrate=migrate, max_document_errors=5)
    job = Job("0001_x.py", spec, "forward", 1, 1, 2, migrate, None, None, [], shard_key=("tenant",))
    docs = await db.people.find({}, sort=[("_id", 1)]).to_list(None)
    result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    assert [(e.id, e.reason) for e in result.errors] == [(0, "shard-key-changed")]
    assert "tenant" in result.errors[0].error and "other" not in result.errors[0].error  # names the field, never the value
    assert result.migrated == 3
    assert (await db.people.find_one({"_id": 0}))["tenant"] == "acme"


async def test_shard_concurrency_caps_the_lanes_on_one_shard(db) -> None:  # type: ignore[no-untyped-def]
    from bson import MaxKey, MinKey

    from mongoshift.background.state.model import Scope
    from mongoshift.background.state.store import BackgroundStore

    store = BackgroundStore(db, "_bg")
    await store.ensure_shard_slots()  # what the coordinator does when it plans by shard
    assert "lease_shard_slot" in [i["name"] async for i in await store.partitions.list_indexes()]
    state = await store.register("m", collection="people", spec={}, checksum="x", direction="forward", by="t")
    key = (("n", 1),)

    def scope(shard: str, low: Any, high: Any) -> dict[str, Any]:
        return {"scope": Scope(None, shard=shard, key=key, ranges=(((low,), (high,)),)).to_document(), "estimate": 1}

    plan = [scope("s0", MinKey(), 10), scope("s0", 10, 20), scope("s0", 20, 30), scope("s1", 30, MaxKey())]
    assert await store.adopt_plan(state, plan, estimate=4, method="shard-key", new_pass=True, layout={"uuid": None, "epoch": None})
    state = await store.state("m")
    assert state is not None

    async def claim(owner: str, cap: int) -> Any:
        return await store.claim(state, slots=list(range(4)), owner=owner, ttl_ms=60_000, shard_concurrency=cap)

    first, second = await claim("a", 1), await claim("b", 1)
    assert first and second and {first[1].scope.shard, second[1].scope.shard} == {"s0", "s1"}
    assert await claim("c", 1) is False  # s0 still has open partitions, but its one lane is taken
    third = await claim("c", 2)
    assert third and third[1].scope.shard == "s0"  # a cap of two lets a second lane on s0


# -- pipeline migrations: the server-side shard-key guard -------------------------------------

#: A pipeline that keeps every key but _id 9's (which it moves), re-typing numbers: the same key by value.
KEY_PIPELINE: list[dict[str, Any]] = [
    {
        "$set": {
            "label": {"$concat": [{"$toString": "$n"}, "-", {"$type": "$tenant"}]},
            "tenant": {
                "$switch": {
                    "branches": [
                        {"case": {"$eq": ["$_id", 9]}, "then": "moved"},
                        {"case": {"$eq": [{"$type": "$tenant"}, "int"]}, "then": {"$toLong": "$tenant"}},
                        {"case": {"$eq": [{"$type": "$tenant"}, "double"]}, "then": {"$toDecimal": "$tenant"}},
                    ],
                    "default": "$tenant",
                }
            },
        }
    },
]


def _pipeline_job(pipeline: list[dict[str, Any]], shard_key: tuple[str, ...], **settings: Any) -> Job:
    spec = Background(collection="people", from_version=1, to_version=2, pipeline=pipeline, max_document_errors=5, **settings)
    return Job("0001_x.py", spec, "forward", 1, 1, 2, None, None, None, [], pipeline=spec.pipeline, shard_key=shard_key)


async def test_a_pipeline_that_changes_the_shard_key_fails_that_document_alone(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people, 20, None)
    before = await db.people.find_one({"_id": 9})
    job = _pipeline_job(KEY_PIPELINE, ("tenant", "n"))
    docs = await db.people.find({}, job.projection, sort=[("_id", 1)]).to_list(None)
    result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    # _id 9 is in the middle of the batch: the multi-update fails there, the rest is counted exactly.
    assert (result.migrated, result.skipped, result.conflicts) == (19, 0, 0)
    assert [(e.id, e.reason) for e in result.errors] == [(9, "shard-key-changed")]
    assert "tenant" in result.errors[0].error and "moved" not in result.errors[0].error
    assert await db.people.find_one({"_id": 9}) == before  # left exactly as it was
    stored = {d["_id"]: d async for d in db.people.find({"__v": 2})}
    assert sorted(stored) == [i for i in range(20) if i != 9]
    assert all("__mongoshift_shard_key" not in d and d["__rev"] == 2 for d in stored.values())
    assert type(stored[2]["tenant"]) is Int64 and stored[2]["tenant"] == 3  # int -> long: the same key
    assert stored[5].get("tenant") is None  # missing before, missing (mongod) or null after: the same key


async def test_a_pipeline_document_already_holding_the_reserved_field_fails_instead_of_losing_it(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people, 6, None)
    await db.people.update_one({"_id": 2}, {"$set": {"__mongoshift_shard_key": "mine"}})
    job = _pipeline_job([{"$set": {"x": 1}}], ("tenant",))
    docs = await db.people.find({}, job.projection, sort=[("_id", 1)]).to_list(None)
    result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    assert result.migrated == 5 and [(e.id, e.reason) for e in result.errors] == [(2, "shard-key-changed")]
    assert (await db.people.find_one({"_id": 2}))["__mongoshift_shard_key"] == "mine"


async def test_without_a_shard_key_the_pipeline_is_not_guarded(db) -> None:  # type: ignore[no-untyped-def]
    await _seed(db.people, 12, None)
    job = _pipeline_job(KEY_PIPELINE, ())
    docs = await db.people.find({}, job.projection, sort=[("_id", 1)]).to_list(None)
    result = await apply_batch(job, docs, db.people, job.context("0", CancelSignal()))
    assert (result.migrated, result.errors) == (12, [])
    assert (await db.people.find_one({"_id": 9}))["tenant"] == "moved"


async def test_a_transactional_pipeline_batch_leaves_the_moved_document_out(db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.write.batch import DocumentFailed

    await _seed(db.people, 12, None)
    job = _pipeline_job(KEY_PIPELINE, ("tenant", "n"))
    docs = await db.people.find({}, job.projection, sort=[("_id", 1)]).to_list(None)
    with pytest.raises(DocumentFailed) as failed:
        await apply_batch(job, docs, db.people, job.context("0", CancelSignal()), strict=True)
    assert (failed.value.document.id, failed.value.document.reason) == (9, "shard-key-changed")


PIPELINE_FILE = '''
from mongoshift import Background

background = Background(
    collection="{collection}",
    from_version=1,
    to_version=2,
    pipeline={pipeline!r},
    batch_size=7,
    pause_ms=0,
    max_parallel=2,
    max_document_errors=1,
    partitions={{"min_partition_docs": 10}},
)
'''


async def test_a_pipeline_run_with_the_shard_key_setting_writes_what_the_untargeted_run_writes(project, db) -> None:  # type: ignore[no-untyped-def]
    _configure(project)
    await _seed(db.people, 120, [("__v", 1), ("tenant", 1), ("n", 1), ("_id", 1)])
    await _seed(db.plain, 120, None)
    project.add("0001_people.py", PIPELINE_FILE.format(collection="people", pipeline=KEY_PIPELINE))
    project.add("0002_plain.py", PIPELINE_FILE.format(collection="plain", pipeline=KEY_PIPELINE))
    settings = project.settings()
    await command.up(settings)
    reports = {r.name: r for r in await bg.run(settings, ["0001_people.py", "0002_plain.py"], concurrency=2)}
    assert {name: r.status for name, r in reports.items()} == {"0001_people.py": "completed", "0002_plain.py": "completed"}
    assert reports["0001_people.py"].totals["migrated"] == 119 and reports["0002_plain.py"].totals["migrated"] == 120
    people = await db.people.find({}, sort=[("_id", 1)]).to_list(None)
    plain = await db.plain.find({}, sort=[("_id", 1)]).to_list(None)
    assert [d for d in people if d["_id"] != 9] == [d for d in plain if d["_id"] != 9]
    assert all(type(a.get("tenant")) is type(b.get("tenant")) for a, b in zip(people, plain, strict=False) if a["_id"] != 9)
    moved = next(d for d in people if d["_id"] == 9)
    assert moved["__v"] == 1 and moved["tenant"] != "moved"
    (status,) = await bg.status(settings, "0001_people.py")
    assert status.totals["failed"] == 1 and [e["reason"] for e in status.doc_error_counts] == ["shard-key-changed"]


# -- pipeline migrations: targeted writes -------------------------------------------------------

#: A pipeline the server cannot evaluate on a document whose ``tag`` is a number ($concat of a number).
TAG_PIPELINE: list[dict[str, Any]] = [{"$set": {"label": {"$concat": [{"$ifNull": ["$tag", "t"]}, "-", {"$toString": "$n"}]}}}]


class PipelineWrites(monitoring.CommandListener):
    """The ``update`` statements a run sends to one collection (their filter and whether they are multi)."""

    def __init__(self, collection: str) -> None:
        self.collection = collection
        self.statements: list[dict[str, Any]] = []

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "update" and event.command.get("update") == self.collection:
            self.statements += [u for u in event.command["updates"] if isinstance(u["u"], list)]

    def succeeded(self, event: Any) -> None: ...

    def failed(self, event: Any) -> None: ...


def _key(doc: dict[str, Any]) -> tuple[Any, Any]:
    return (doc.get("tenant"), doc.get("n"))


def _keys_of(predicate: dict[str, Any]) -> list[tuple[Any, Any]]:
    """The (tenant, n) pairs of a batch's targeting predicate: one equality or an ``$or`` of them."""
    branches = predicate["$or"] if set(predicate) == {"$or"} else [predicate]
    assert all(set(b) == {"tenant", "n"} for b in branches), predicate
    return [(b["tenant"], b["n"]) for b in branches]


@pytest.mark.parametrize("index", ["keyed", "none"], ids=["key-ranges", "id-ranges"])
async def test_every_pipeline_write_filter_carries_the_shard_key(project, db, monkeypatch, index: str) -> None:  # type: ignore[no-untyped-def]
    # key-ranges: partitions read shard-key ranges through {__v, tenant, n, _id}; id-ranges: without
    # that index they read _id ranges, and the lanes still read the key to target the writes.
    from mongoshift.project import connection

    writes = PipelineWrites("people")
    options = connection.client_options
    monkeypatch.setattr(connection, "client_options", lambda settings: {**options(settings), "event_listeners": [writes]})
    _configure(project)
    await _seed(db.people, 120, [("__v", 1), ("tenant", 1), ("n", 1), ("_id", 1)] if index == "keyed" else None)
    await _seed(db.plain, 120, None)
    for collection in (db.people, db.plain):
        await collection.update_one({"_id": 45}, {"$set": {"tag": 12}})  # mid-batch, whatever the order
    seeded = {d["_id"]: _key(d) async for d in db.people.find({})}
    project.add("0001_people.py", PIPELINE_FILE.format(collection="people", pipeline=TAG_PIPELINE))
    project.add("0002_plain.py", PIPELINE_FILE.format(collection="plain", pipeline=TAG_PIPELINE))
    settings = project.settings()
    await command.up(settings)
    reports = {r.name: r for r in await bg.run(settings, ["0001_people.py", "0002_plain.py"], concurrency=2)}
    assert {name: r.status for name, r in reports.items()} == {"0001_people.py": "completed", "0002_plain.py": "completed"}

    # The counts and the documents are those of the untargeted run on the same data.
    counted = ("scanned", "migrated", "skipped", "conflicts", "failed")
    assert {k: reports["0001_people.py"].totals[k] for k in counted} == {k: reports["0002_plain.py"].totals[k] for k in counted}
    assert reports["0001_people.py"].totals["migrated"] == 119 and reports["0001_people.py"].totals["failed"] == 1
    people = await db.people.find({}, sort=[("_id", 1)]).to_list(None)
    plain = await db.plain.find({}, sort=[("_id", 1)]).to_list(None)
    assert people == plain
    assert next(d for d in people if d["_id"] == 45)["__v"] == 1
    (status,) = await bg.status(settings, "0001_people.py")
    assert [e["reason"] for e in status.doc_error_counts] == ["write"]

    # Every pipeline write filter carries the key of the documents it writes, as they were seeded.
    multi = [w for w in writes.statements if w.get("multi")]
    single = [w for w in writes.statements if not w.get("multi")]
    assert multi and single
    for write in multi:
        _, ids, keys = write["q"]["$and"]
        batch = ids["_id"]["$in"]
        assert sorted(_keys_of(keys), key=repr) == sorted({seeded[i] for i in batch}, key=repr)
    for write in single:
        _, guard = write["q"]["$and"]
        assert set(guard) == {"_id", "tenant", "n"} and _key(guard) == seeded[guard["_id"]]
    # The failing batch's documents went one by one: the one the pipeline cannot evaluate among them.
    assert 45 in {w["q"]["$and"][1]["_id"] for w in single}


# -- hashed shard keys: hash ranges drained through the index's bounds ----------------------


def _configure_hashed(project: Any) -> None:
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    with project.config.open("a", encoding="utf-8") as out:
        out.write('[mongoshift.shard_keys]\npeople = { tenant = "hashed" }\n')


@pytest.mark.parametrize("form", ["migrate", "pipeline", "transaction"])
async def test_a_hashed_key_drains_hash_ranges_and_writes_what_the_untargeted_path_writes(project, db, form: str) -> None:  # type: ignore[no-untyped-def]
    _configure_hashed(project)
    await _seed(db.people, 120, [("__v", 1), ("tenant", "hashed"), ("_id", 1)])
    await _seed(db.plain, 120, None)
    moved = 9 if form == "pipeline" else 13
    for name, collection in (("0001_people.py", "people"), ("0002_plain.py", "plain")):
        if form == "pipeline":
            source = PIPELINE_FILE.format(collection=collection, pipeline=KEY_PIPELINE)
        else:
            source = FILE.format(collection=collection)
            if form == "transaction":
                source = source.replace("batch_size=7,", "batch_size=7, transaction=True,")
        project.add(name, source)
    settings = project.settings()
    await command.up(settings)
    reports = {r.name: r for r in await bg.run(settings, ["0001_people.py", "0002_plain.py"], concurrency=2)}
    assert {name: r.status for name, r in reports.items()} == {"0001_people.py": "completed", "0002_plain.py": "completed"}

    # Read by hash range: every partition a range of the hash space, each document read once.
    stored = [p async for p in db["_mongoshift_background_partitions"].find({"background": "0001_people.py"})]
    assert len(stored) > 1 and all(p["scope"].get("ranges") and p["scope"]["key"] == [["tenant", "hashed"]] for p in stored)
    assert reports["0001_people.py"].totals["scanned"] == 120
    assert reports["0001_people.py"].totals["migrated"] == 119 and reports["0001_people.py"].totals["failed"] == 1

    people = await db.people.find({}, sort=[("_id", 1)]).to_list(None)
    plain = await db.plain.find({}, sort=[("_id", 1)]).to_list(None)
    assert [d for d in people if d["_id"] != moved] == [d for d in plain if d["_id"] != moved]
    pairs = [(a, b) for a, b in zip(people, plain, strict=False) if a["_id"] != moved]
    assert all(type(a.get("tenant")) is type(b.get("tenant")) and type(a["n"]) is type(b["n"]) for a, b in pairs)
    assert next(d for d in people if d["_id"] == moved)["__v"] == 1
    (status,) = await bg.status(settings, "0001_people.py")
    assert [e["reason"] for e in status.doc_error_counts] == ["shard-key-changed"]


async def test_a_key_hashed_on_id_is_read_by_id_ranges(project, db) -> None:  # type: ignore[no-untyped-def]
    """The version index of ``{_id: "hashed"}`` is ``{version, _id}``: it holds no hash to bound, so the
    pass is cut in ``_id`` ranges, and the writes still carry the key."""
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    with project.config.open("a", encoding="utf-8") as out:
        out.write('[mongoshift.shard_keys]\npeople = { _id = "hashed" }\n')
    await _seed(db.people, 60, None)
    project.add("0001_people.py", FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    (report,) = await bg.run(settings, ["0001_people.py"])
    assert report.status == "completed" and report.totals["migrated"] == 60
    stored = [p async for p in db["_mongoshift_background_partitions"].find({"background": "0001_people.py"})]
    assert stored and all(not p["scope"].get("ranges") and p["scope"]["key"] == [["_id", "hashed"]] for p in stored)


async def test_a_hash_range_partition_whose_index_was_dropped_fails_its_slice_saying_so(project, db) -> None:  # type: ignore[no-untyped-def]
    """A hash range has no filter form: without its index, a lane cannot read it (a ranged partition reads on without a hint)."""
    from bson import MaxKey, MinKey

    from mongoshift.background.lanes.lane import Lane
    from mongoshift.background.state.model import Scope
    from mongoshift.background.write.batch import BatchFailed

    _configure_hashed(project)
    await _seed(db.people, 10, [("__v", 1), ("tenant", "hashed"), ("_id", 1)])
    project.add("0001_people.py", FILE.format(collection="people"))
    settings = project.settings()
    await command.up(settings)
    hashed = Scope(None, key=(("tenant", "hashed"),), ranges=(((MinKey(),), (MaxKey(),)),))
    async with bg.open_engine(settings) as engine:
        spec = engine.spec("0001_people.py")
        lane = Lane(engine.context, "lane")
        assert await lane._hint(spec, hashed) == [("__v", 1), ("tenant", "hashed"), ("_id", 1)]
        await db.people.drop_index("__v_1_tenant_hashed__id_1")
        with pytest.raises(BatchFailed, match="create it again"):
            await lane._hint(spec, hashed)
