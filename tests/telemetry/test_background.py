"""Background migrations in OpenTelemetry: coordinate and slice spans, document counters, reclaims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opentelemetry.trace import SpanKind

from mongoshift import api

from ..background.conftest import background_file, seed
from .conftest import Telemetry

NAME = "0001_names.py"

#: One document (n == 7) cannot be migrated: the migration still completes (max_document_errors=1).
ONE_BAD = 'max_document_errors=1,\n'
BAD_MIGRATE = '''
def migrate(doc, ctx):
    if doc["n"] == 7:
        raise ValueError("not this one")
    doc["full_name"] = doc.pop("first", "") + " " + doc.pop("last", "")
    return doc
'''


def _with_one_bad(source: str) -> str:
    start = source.index("def migrate")
    end = source.index("background = Background")
    return source[:start] + BAD_MIGRATE.strip() + "\n\n" + source[end:]


async def test_an_inline_background_migration_nests_its_coordinate_and_slice_spans_under_the_migration(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_inline=True, background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    project.add(NAME, _with_one_bad(background_file(batch_size=50, extra=ONE_BAD)))
    await seed(db.people, 120)

    await api.up(project.settings(), observers=[telemetry.observer])

    assert await db.people.count_documents({"__v": 2}) == 119
    [migration] = telemetry.spans("mongoshift.migration")
    assert migration.attributes["mongoshift.kind"] == "background"
    coordinates = telemetry.spans("mongoshift.background.coordinate")
    slices = telemetry.spans("mongoshift.background.slice")
    assert coordinates and slices
    for span in coordinates + slices:
        assert span.parent is not None and span.parent.span_id == migration.context.span_id, span.name
        assert (span.attributes["mongoshift.migration"], span.attributes["db.namespace"]) == (NAME, project.db)
    assert "partitioned" in {e.name for s in coordinates for e in s.events}
    assert "completed" in {e.name for s in coordinates for e in s.events}
    done = [s for s in slices if s.attributes["mongoshift.outcome"] == "done"]
    assert sum(s.attributes["mongoshift.background.migrated"] for s in done) == 119
    assert all(s.attributes["mongoshift.background.txn_retries"] == 0 for s in done)  # a plain slice has none, and says so
    reads = [c for s in slices for c in telemetry.children(s) if c.kind == SpanKind.CLIENT and "find" in c.name]
    assert reads  # the lanes' own requests nest under their slice

    assert telemetry.total("mongoshift.background.documents.migrated") == 119
    assert telemetry.total("mongoshift.background.documents.failed") == 1
    assert telemetry.total("mongoshift.background.documents.conflicts") == 0
    batches = telemetry.points("mongoshift.background.write.batch.duration")
    assert sum(p.count for p in batches) == 3  # 50 + 50 + 20
    for name in ("mongoshift.background.write.batch.duration", "mongoshift.background.slice.duration", "mongoshift.background.documents.migrated"):
        for point in telemetry.points(name):
            assert (point.attributes["db.namespace"], point.attributes["mongoshift.migration"]) == (project.db, NAME)


async def test_a_runner_traces_each_step_and_slice_as_its_own_root_and_counts_reclaimed_leases(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    project.add(NAME, background_file(batch_size=10, max_parallel=2))
    await seed(db.people, 120)
    await api.up(project.settings())  # registers it (no observer of ours: nothing recorded)
    settings = project.settings()
    # One coordinator step plans the pass (a --once round would now work every partition its slice has time for).
    await api.coordinate_background(settings, NAME, observers=[telemetry.observer])
    partitions = db["_mongoshift_background_partitions"]
    stale = await partitions.find_one({"background": NAME, "status": {"$ne": "done"}, "lease": {"$exists": False}})
    assert stale is not None, "the step planned no open partition"
    dead = {"slot": 1, "token": "dead", "owner": "lane-dead", "runner": "dead", "ttl_ms": 1000}
    await partitions.update_one({"_id": stale["_id"]}, {"$set": {"lease": {**dead, "renewed_at": datetime.now(UTC) - timedelta(minutes=5)}}})

    [report] = await api.run_background(settings, observers=[telemetry.observer])

    assert report.status == "completed" and await db.people.count_documents({"__v": 2}) == 120
    assert telemetry.spans("mongoshift.run") == [] and telemetry.spans("mongoshift.migration") == []
    coordinates = telemetry.spans("mongoshift.background.coordinate")
    slices = telemetry.spans("mongoshift.background.slice")
    assert coordinates and slices and all(s.parent is None for s in coordinates + slices)  # nothing current in the caller
    assert {s.context.trace_id for s in slices}.isdisjoint({s.context.trace_id for s in coordinates})
    assert telemetry.total("mongoshift.background.reclaims") == 1
    assert telemetry.total("mongoshift.background.documents.migrated") == 120
    assert "reclaimed" in {e.name for s in coordinates + slices for e in s.events}


STEP_TXN = """
from mongoshift import Background

async def step(ctx):
    after = (ctx.checkpoint or {}).get("after", -1)
    ids = [d["_id"] async for d in ctx.db.people.find({"_id": {"$gt": after}}, {"_id": 1}, session=ctx.session).sort("_id", 1).limit(40)]
    if ids:
        await ctx.db.people.update_many({"_id": {"$in": ids}}, {"$inc": {"stepped": 1}}, session=ctx.session)
    return {"checkpoint": {"after": ids[-1] if ids else after}, "done": len(ids) < 40, "migrated": len(ids)}

background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0, transaction=True)
"""


async def test_a_step_is_counted_once_even_when_its_commit_is_retried(project, db, client, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    from ..conftest import fail_command

    project.write_config(background_lease_ttl_seconds=15, background_poll_seconds=0.2)
    await seed(db.people, 120, version=None)
    project.add(NAME, STEP_TXN)
    settings = project.settings()
    await api.up(settings)
    transient = {"failCommands": ["commitTransaction"], "errorCode": 112, "errorLabels": ["TransientTransactionError"]}
    seen: list[api.Event] = []
    async with fail_command(client, {"times": 2}, **transient):
        [report] = await api.run_background(settings, observers=[telemetry.observer, seen.append])

    assert report.status == "completed" and await db.people.count_documents({"stepped": 1}) == 120
    assert sum(e.data.get("migrated", 0) for e in seen if e.kind == "slice_end") == 120  # the retried attempts count nothing
    assert [e.data.get("migrated", 0) for e in seen if e.kind == "batch"] == [40, 40, 40, 0]  # the last call found none
    assert telemetry.total("mongoshift.background.documents.migrated") == 120


async def test_the_in_app_runner_records_on_the_applications_providers(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.2)
    project.add(NAME, background_file(batch_size=20))
    await seed(db.people, 60)
    settings = project.settings()
    await api.up(settings)

    runner = await api.start_background_runner(settings, observers=[telemetry.observer])
    try:
        for _ in range(600):
            if (await api.background_status(settings))[0].status == "completed":
                break
            await asyncio.sleep(0.05)
    finally:
        await runner.stop()

    assert await db.people.count_documents({"__v": 2}) == 60
    assert telemetry.total("mongoshift.background.documents.migrated") == 60
    slices = telemetry.spans("mongoshift.background.slice")
    assert slices and all(s.attributes["db.namespace"] == project.db for s in slices)
    assert telemetry.observer.db is None  # the runner works on its own bound copy
