"""The background engine end to end against the server."""

from __future__ import annotations

import asyncio
import datetime
import logging

import pytest
from bson import Decimal128, Int64
from pymongo.errors import DuplicateKeyError

from mongoshift.api import background as bg, migrations as command

from ..conftest import until
from .conftest import background_file, seed


async def test_up_only_registers_then_run_rewrites_every_document(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 1500)
    fast_project.add("0001_names.py", background_file(batch_size=200))
    report = await command.up(fast_project.settings())
    assert report.results[0].status == "applied" and "registered" in (report.results[0].reason or "")
    assert await db.people.count_documents({"__v": 1}) == 1500  # nothing touched yet
    record = await db["_mongoshift_migrations"].find_one({"name": "0001_names.py"})
    assert record["kind"] == "background"

    (result,) = await bg.run(fast_project.settings(), ["0001_names"])
    assert result.status == "completed"
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 1500
    doc = await db.people.find_one({"_id": 7})
    assert doc["full_name"] == "F7 L7" and "first" not in doc and "last" not in doc
    assert result.totals["migrated"] == 1500 and result.totals["scanned"] == 1500
    assert result.rate_per_second and result.rate_per_second > 0


async def test_untouched_fields_keep_their_bson_types(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=datetime.UTC)
    await db.people.insert_one(
        {"_id": 1, "__v": 1, "__rev": 5, "first": "A", "last": "B", "big": Int64(2**53 + 1), "small": Int64(3),
         "price": Decimal128("10.10"), "ratio": 2.0, "at": when, "nested": {"x": Int64(1), "y": [1.0, 2]}}
    )
    fast_project.add("0001_names.py", background_file())
    await command.up(fast_project.settings())
    await bg.run(fast_project.settings(), ["0001_names.py"])
    raw = await db.people.with_options(codec_options=db.people.codec_options.with_options(type_registry=None)).find_one({"_id": 1})
    assert raw["__v"] == 2 and raw["__rev"] == 6
    assert type(raw["big"]) is Int64 and raw["big"] == 2**53 + 1
    assert type(raw["small"]) is Int64
    assert raw["price"] == Decimal128("10.10")
    assert type(raw["ratio"]) is float
    assert type(raw["nested"]["x"]) is Int64 and type(raw["nested"]["y"][0]) is float
    assert "first" not in raw and raw["full_name"] == "A B"


async def test_an_application_write_mid_batch_is_never_lost(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """The transform sees an old copy; the application bumps the revision before the write lands."""
    await seed(db.people, 50)
    fast_project.add(
        "0001_names.py",
        background_file(
            batch_size=50,
            extra="",
        ).replace(
            "def migrate(doc, ctx):",
            "import pymongo\n_app = {}\n\ndef migrate(doc, ctx):\n"
            "    if doc['_id'] == 10 and not _app:\n"
            "        _app['c'] = pymongo.MongoClient(URI)\n"
            "        _app['c'][DB].people.update_one({'_id': 10}, {'$set': {'email': 'app@example.com'}, '$inc': {'__rev': 1}})\n",
        ).replace("from mongoshift import Background", f"from mongoshift import Background\nURI = {fast_project.uri!r}\nDB = {fast_project.db!r}"),
    )
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    doc = await db.people.find_one({"_id": 10})
    assert doc["email"] == "app@example.com"  # the application's write survived
    assert doc["full_name"] == "F10 L10" and doc["__v"] == 2 and doc["__rev"] == 3
    assert result.totals["retried"] >= 1 and result.status == "completed"
    assert await db.people.count_documents({"__v": 2}) == 50


async def test_thirty_concurrent_claims_give_exactly_max_parallel_leases(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.lanes.lane import Lane

    await seed(db.people, 3000)
    fast_project.add("0001_names.py", background_file(batch_size=50, max_parallel=4, extra="partitions={'min_partition_docs': 50},"))
    await command.up(fast_project.settings())
    async with bg.open_engine(fast_project.settings()) as engine:
        spec = engine.spec("0001_names.py")
        decision = await engine.coordinator.step("0001_names.py", spec)
        assert decision.next == "process" and decision.state is not None
        assert decision.state.plan["partitions"] == 16
        state = decision.state
        claims = await asyncio.gather(
            *(engine.store.claim(state, slots=list(range(4)), owner=f"lane-{i}", ttl_ms=30_000) for i in range(30))
        )
        won = [c for c in claims if c not in (None, False)]
        assert len(won) == 4
        assert sorted(lease.slot for lease, _ in won) == [0, 1, 2, 3]
        assert await engine.store.live_leases("0001_names.py") == 4
        assert Lane  # the lanes use this same claim


async def test_a_claim_with_no_open_partition_is_exhausted_even_past_a_taken_slot(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Not "busy": a lane told busy waits a poll before it looks again, so the run would end a poll late."""
    await seed(db.people, 100)
    fast_project.add("0001_names.py", background_file(batch_size=50, max_parallel=2))
    await command.up(fast_project.settings())
    async with bg.open_engine(fast_project.settings()) as engine:
        decision = await engine.coordinator.step("0001_names.py", engine.spec("0001_names.py"))
        assert decision.state is not None and decision.state.plan["partitions"] == 1
        first = await engine.store.claim(decision.state, slots=[0, 1], owner="lane-a", ttl_ms=30_000)
        assert first not in (None, False)
        # The race: slot 0 is refused as taken while a partition was still open; by the next slot,
        # lane-a has taken the last open partition.
        partitions = engine.store.partitions
        real = partitions.find_one_and_update
        calls = 0

        async def taken_once(*args, **kwargs):  # type: ignore[no-untyped-def]
            nonlocal calls
            calls += 1
            if calls == 1:
                raise DuplicateKeyError("E11000 duplicate key error (lease_slot)")
            return await real(*args, **kwargs)

        partitions.find_one_and_update = taken_once  # type: ignore[method-assign]
        try:
            assert await engine.store.claim(decision.state, slots=[0, 1], owner="lane-b", ttl_ms=30_000) is None
        finally:
            del partitions.find_one_and_update
        assert calls == 2


async def test_document_errors_within_budget_complete_with_a_warning(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 600)
    source = background_file(batch_size=100, extra="max_document_errors=10,").replace(
        "def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] % 100 == 0:\n        raise ValueError('cannot split')"
    )
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed"
    assert result.failed_documents == 6
    assert await db.people.count_documents({"__v": 1}) == 6  # left alone, excluded from later passes
    assert result.pass_number == 1
    assert result.doc_errors and result.doc_errors[-1]["reason"] == "transform"


async def test_document_errors_over_budget_fail_the_migration(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 600)
    source = background_file(batch_size=100, extra="max_document_errors=2,").replace(
        "def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] % 50 == 0:\n        raise ValueError('cannot split')"
    )
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "failed"
    assert "max_document_errors" in (result.last_error or "")
    # a failed migration's elapsed time and rate end when it failed (they went on growing and falling)
    from datetime import UTC, datetime, timedelta

    from mongoshift.background.inspect.status import report

    async with bg.open_engine(fast_project.settings()) as engine:
        state = await engine.store.state("0001_names.py")
        later = datetime.now(UTC) + timedelta(hours=1)
        now, hour_later = await report(engine.store, state), await report(engine.store, state, now=later)
    assert now.elapsed_seconds is not None and now.elapsed_seconds < 600
    assert (hour_later.elapsed_seconds, hour_later.rate_per_second) == (now.elapsed_seconds, now.rate_per_second)


async def test_duplicate_keys_and_validator_refusals_fail_only_their_document(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await db.people.create_index("slug", unique=True, sparse=True)
    await seed(db.people, 40)
    source = background_file(batch_size=40, extra="max_document_errors=5,").replace(
        "    return doc", "    doc['slug'] = 'same' if doc['_id'] in (3, 4) else f\"s{doc['_id']}\"\n    return doc"
    )
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed" and result.failed_documents == 1
    assert await db.people.count_documents({"__v": 2}) == 39
    assert "duplicate key" in result.doc_errors[-1]["error"] and "same" not in result.doc_errors[-1]["error"]


async def test_late_old_shape_writes_get_another_pass(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    source = background_file(batch_size=100).replace(
        "def migrate(doc, ctx):",
        "import pymongo\n_c = {}\ndef migrate(doc, ctx):\n"
        "    if doc['_id'] == 5 and not _c:\n"
        "        _c['c'] = pymongo.MongoClient(URI)\n"
        "        _c['c'][DB].people.insert_one({'_id': 10_000, 'first': 'late', 'last': 'writer', '__v': 1, '__rev': 1})\n",
    ).replace("from mongoshift import Background", f"from mongoshift import Background\nURI = {fast_project.uri!r}\nDB = {fast_project.db!r}")
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "completed"
    assert (await db.people.find_one({"_id": 10_000}))["full_name"] == "late writer"
    assert result.pass_number >= 1 and result.totals["migrated"] == 301


async def test_an_old_writer_that_never_stops_fails_after_max_passes(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 20)
    source = background_file(batch_size=100, extra="max_passes=2,").replace(
        "def migrate(doc, ctx):",
        "import pymongo, itertools\n_c = {}\n_n = itertools.count(100_000)\ndef migrate(doc, ctx):\n"
        "    _c.setdefault('c', pymongo.MongoClient(URI))\n"
        "    _c['c'][DB].people.insert_one({'_id': next(_n), 'first': 'old', 'last': 'app', '__v': 1, '__rev': 1})\n",
    ).replace("from mongoshift import Background", f"from mongoshift import Background\nURI = {fast_project.uri!r}\nDB = {fast_project.db!r}")
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "failed" and result.pass_number == 2
    assert "old version of the application" in (result.last_error or "")


async def test_revert_brings_documents_back(fast_project, db, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    source = background_file(batch_size=100, extra="revert=revert,").replace(
        "background = Background(",
        "def revert(doc, ctx):\n    doc['first'], doc['last'] = doc.pop('full_name').split(' ')\n    return doc\n\nbackground = Background(",
    )
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, ["0001_names.py"])
    caplog.set_level(logging.INFO, logger="mongoshift")
    report = await command.down(s)
    assert report.results[0].reason == "revert registered"
    # the line says it once: the engine's own "registered" line is left to -v (it said it twice)
    assert not [r for r in caplog.records if r.levelno >= logging.INFO and "revert is registered" in r.getMessage()]
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.direction == "revert"
    doc = await db.people.find_one({"_id": 42})
    assert doc["first"] == "F42" and doc["last"] == "L42" and "full_name" not in doc
    assert doc["__v"] == 1 and doc["__rev"] == 3


async def test_one_way_migration_is_withdrawn_only_before_it_rewrites(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import IrreversibleMigrationError

    await seed(db.people, 50)
    fast_project.add("0001_names.py", background_file())
    s = fast_project.settings()
    await command.up(s)
    assert (await command.down(s)).results[0].reason == "withdrawn (nothing was rewritten)"
    assert await db["_mongoshift_background"].count_documents({}) == 0
    await command.up(s)
    await bg.run(s, ["0001_names.py"])
    with pytest.raises(IrreversibleMigrationError):
        await command.down(s)
    assert (await db["_mongoshift_migrations"].find_one({"name": "0001_names.py"}))["status"] == "applied"


REVERSIBLE_LATER = """
from mongoshift import Background

def migrate(doc, ctx):
    doc["tier"] = "free"
    return doc

def revert(doc, ctx):
    doc.pop("tier", None)
    return doc

background = Background(collection="people", from_version=2, to_version=3, migrate=migrate, revert=revert, pause_ms=0)
"""


async def test_a_rollback_that_reaches_a_one_way_migration_is_refused_before_anything_runs(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """``down`` over a reversible background migration and, before it, a one-way one that rewrote
    documents: refused (13) before the first step, as ``dry-run down`` says; it registered the first
    one's revert, then refused, leaving a rollback half done."""
    from mongoshift.errors import IrreversibleMigrationError

    await seed(db.people, 50)
    fast_project.add("0001_names.py", background_file())
    fast_project.add("0002_tier.py", REVERSIBLE_LATER)
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, ["0001_names.py"])
    await bg.run(s, ["0002_tier.py"])
    with pytest.raises(IrreversibleMigrationError, match=r"0001_names\.py has no revert") as previewed:
        await command.dry_run(s, "down", steps=2)
    assert previewed.value.exit_code == 13
    with pytest.raises(IrreversibleMigrationError, match=r"0001_names\.py has no revert"):
        await command.down(s, steps=2)
    records = {r["name"]: r["status"] async for r in db["_mongoshift_migrations"].find()}
    assert records == {"0001_names.py": "applied", "0002_tier.py": "applied"}
    states = {r["_id"]: r["direction"] async for r in db["_mongoshift_background"].find()}
    assert states == {"0001_names.py": "forward", "0002_tier.py": "forward"}  # no revert registered
    assert (await command.down(s, steps=1)).results[0].reason == "revert registered"  # the reversible one alone still rolls back


async def test_up_force_registers_again_and_keeps_history(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 10)
    fast_project.add("0001_names.py", background_file())
    s = fast_project.settings()
    await command.up(s)
    await bg.run(s, ["0001_names.py"])
    first = await db["_mongoshift_background"].find_one({"_id": "0001_names.py"})
    await command.up(s, target="0001_names.py", force=True)
    second = await db["_mongoshift_background"].find_one({"_id": "0001_names.py"})
    assert second["registration"] != first["registration"] and second["status"] == "pending"
    assert second["previous"]["status"] == "completed" and second["previous"]["totals"]["migrated"] == 10
    assert [h["action"] for h in second["history"]][:1] == ["register"]


async def test_step_migration_checkpoints_and_resumes(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 230, version=None)
    fast_project.add(
        "0001_step.py",
        """
        from mongoshift import Background

        async def step(ctx):
            after = (ctx.checkpoint or {}).get("after", -1)
            ids = [d["_id"] async for d in ctx.db.people.find({"_id": {"$gt": after}}, {"_id": 1}).sort("_id", 1).limit(50)]
            if ids:
                await ctx.db.people.update_many({"_id": {"$in": ids}}, {"$inc": {"stepped": 1}})
            await ctx.db.calls.insert_one({"after": after})
            if after == 99:
                ctx.cancelled.set("simulated stop")
            return {"checkpoint": {"after": ids[-1] if ids else after}, "done": len(ids) < 50, "migrated": len(ids)}

        background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0)
        """,
    )
    s = fast_project.settings()
    await command.up(s)
    (stopped,) = await bg.run(s, ["0001_step.py"])
    assert stopped.status == "running"
    assert await db.people.count_documents({"stepped": 1}) == 150
    (result,) = await bg.run(s, ["0001_step.py"])
    assert result.status == "completed"
    assert await db.people.count_documents({"stepped": 1}) == 230  # every document exactly once
    assert await db.people.count_documents({"stepped": {"$gt": 1}}) == 0
    assert [c["after"] async for c in db.calls.find().sort("_id", 1)] == [-1, 49, 99, 149, 199]
    assert result.totals["migrated"] == 230


async def test_a_step_that_reports_only_migrated_shows_progress_and_a_rate(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A step returning the documented ``migrated`` alone counts it as scanned too: a stopped run's
    progress, rate and progress line were ``0/? documents, 0.0 docs/s`` after 150 documents."""
    from mongoshift.cli.progress import progress_line

    fast_project.add(
        "0001_step.py",
        """
        from mongoshift import Background

        async def step(ctx):
            after = (ctx.checkpoint or {}).get("after", 0)
            if after == 150:
                ctx.cancelled.set("simulated stop")
            counts = {"scanned": 7} if after >= 200 else {}
            return {"checkpoint": {"after": after + 50}, "done": after + 50 >= 250, "migrated": 50, **counts}

        background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0)
        """,
    )
    s = fast_project.settings()
    await command.up(s)
    (stopped,) = await bg.run(s, ["0001_step.py"])
    assert stopped.status == "running" and stopped.totals["migrated"] == 200
    assert stopped.totals["scanned"] == 200 and stopped.progress() == (200, 0)
    assert stopped.rate_per_second is not None and stopped.rate_per_second > 0
    assert progress_line(stopped, None, None).startswith("0001_step.py: 200/? documents")
    (done,) = await bg.run(s, ["0001_step.py"])
    assert done.status == "completed" and done.totals["migrated"] == 250
    assert done.totals["scanned"] == 207  # a step that says what it scanned keeps its own count


async def test_controls_through_the_api(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import BackgroundConflictError, NotAppliedError

    await seed(db.people, 100)
    fast_project.add("0001_names.py", background_file(batch_size=10))
    s = fast_project.settings()
    await command.up(s)
    assert (await bg.apply_control(s, "0001_names", "pause", reason="maintenance")).applied == "applied"
    assert (await bg.apply_control(s, "0001_names", "pause")).applied == "unchanged"
    (paused,) = await bg.run(s, ["0001_names"])
    assert paused.status == "paused" and await db.people.count_documents({"__v": 2}) == 0
    await bg.apply_control(s, "0001_names", "resume")
    await bg.apply_control(s, "0001_names", "cancel")
    with pytest.raises(BackgroundConflictError):
        await bg.apply_control(s, "0001_names", "pause")
    await bg.apply_control(s, "0001_names", "retry")
    (done,) = await bg.run(s, ["0001_names"])
    assert done.status == "completed"
    with pytest.raises(BackgroundConflictError):
        await bg.apply_control(s, "0001_names", "resume")
    with pytest.raises(NotAppliedError):
        await bg.apply_control(s, "0099_nothing", "pause")
    history = (await db["_mongoshift_background"].find_one({"_id": "0001_names.py"}))["history"]
    assert [h["action"] for h in history] == ["register", "pause", "resume", "cancel", "retry", "start", "complete"]
    assert history[1]["reason"] == "maintenance" and history[1]["by"]


async def test_in_application_runner_runs_and_stops(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    fast_project.add("0001_names.py", background_file(batch_size=50))
    s = fast_project.settings()
    await command.up(s)
    runner = await bg.start_background_runner(s, concurrency=1)

    async def all_migrated() -> bool:
        return await db.people.count_documents({"__v": 2}) == 300

    # Not 200 polls (a budget of about 20 s, which a loaded machine may need more than): the bound only ends a hang.
    await until("the runner migrated all 300", all_migrated, bound=120)
    await runner.stop()
    assert not runner.running
    assert await db.people.count_documents({"__v": 2}) == 300
    assert await db["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("bogus_key=1,", "background.bogus_key: unknown setting"),
        ("write_concern={'w': 0},", "w: 0 is refused"),
        ("filter={'__v': {'$gt': 0}},", "filter may not name __v: the engine matches the version itself"),
        ("filter={'__rev': {'$gt': 1}},", "filter may not name __rev: the engine guards its writes by it"),
        ("filter={'$expr': {'$eq': ['$__v', 1]}},", "filter may not name __v"),  # a field path in $expr names it too
        ("filter={'$or': [{'a': 1}, {'__v.x': 1}]},", "filter may not name __v"),
        ("batch_size=0,", "background.batch_size"),
    ],
)
async def test_bad_specs_fail_at_registration(fast_project, db, extra: str, message: str) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import InvalidExportError

    fast_project.add("0001_names.py", background_file(extra=extra).replace("    batch_size=200,\n", "" if "batch_size" in extra else "    batch_size=200,\n"))
    with pytest.raises(InvalidExportError, match=message.replace("(", r"\(")):
        await command.up(fast_project.settings())
    assert await db["_mongoshift_background"].count_documents({}) == 0


async def test_a_filter_may_name_a_field_of_an_array_element_called_like_the_version(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """``a.__v`` inside ``$elemMatch`` is an element's field, not the document's version: it was refused."""
    fast_project.add("0001_names.py", background_file(extra="filter={'tags': {'$elemMatch': {'__v': 1}}},"))
    await command.up(fast_project.settings())



async def test_from_equal_to_and_mixed_exports_are_refused(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import InvalidExportError

    fast_project.add("0001_names.py", background_file().replace("to_version=2", "to_version=1"))
    with pytest.raises(InvalidExportError, match="from_version and to_version must differ"):
        await command.up(fast_project.settings())
    fast_project.add("0001_names.py", background_file() + "\ndef up(ctx):\n    pass\n")
    with pytest.raises(InvalidExportError, match="declares background and also up"):
        await command.up(fast_project.settings())


async def test_a_lane_that_lost_its_lease_stops_at_the_fenced_checkpoint(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.lanes.lane import Lane

    await seed(db.people, 300)
    fast_project.add("0001_names.py", background_file(batch_size=100))
    await command.up(fast_project.settings())
    async with bg.open_engine(fast_project.settings()) as engine:
        spec = engine.spec("0001_names.py")
        decision = await engine.coordinator.step("0001_names.py", spec)
        state = decision.state
        claimed = await engine.store.claim(state, slots=[0], owner="stalled", ttl_ms=60_000)
        assert claimed not in (None, False)
        lease, _partition = claimed
        # An operator (or the reaper, after a stall) takes the lease away.
        await engine.store.partitions.update_one({"_id": lease.partition_id}, {"$unset": {"lease": ""}})
        assert not await engine.store.checkpoint(lease, cursor={"last_id": 99}, counters={"migrated": 100}, done=False)
        part = await engine.store.partitions.find_one({"_id": lease.partition_id})
        assert part["counters"]["migrated"] == 0 and not part.get("cursor")
        result = await Lane(engine.context, "fresh").run_slice(state, spec)
        assert result.outcome == "done" and result.counters["migrated"] == 300


async def test_migrate_batch_and_a_wrong_result_count_fails_the_partition(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 120)
    good = '''
from mongoshift import Background

async def migrate_batch(docs, ctx):
    out = []
    for doc in docs:
        if doc["_id"] == 7:
            out.append(ValueError("seven"))
            continue
        doc["tag"] = "batch"
        out.append(doc)
    return out

background = Background(collection="people", from_version=1, to_version=2, migrate_batch=migrate_batch,
                        batch_size=50, pause_ms=0, max_document_errors=1)
'''
    fast_project.add("0001_batch.py", good)
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_batch.py"])
    assert result.status == "completed" and result.failed_documents == 1
    assert await db.people.count_documents({"tag": "batch", "__v": 2}) == 119

    wrong = good.replace('collection="people"', 'collection="people2"').replace("return out", "return out[:-1]")
    fast_project.add("0002_wrong.py", wrong.replace("max_document_errors=1", "max_document_errors=1, max_slice_failures=2"))
    await seed(db.people2, 60)
    await command.up(s)
    (failed,) = await bg.run(s, ["0002_wrong.py"])
    assert failed.status == "failed"
    assert "returned 49 results for 50 documents" in (failed.last_error or "")


async def test_slices_that_failed_on_a_wrong_result_count_count_no_batch(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """Each failed slice left its unwritten batch in flight; the next holder counted it a batch (status read
    "2 batches" beside "failed 3 slices", none written). A batch nothing of which was written is no batch."""
    await seed(db.people, 30)
    fast_project.add("0001_wrong.py", '''
from mongoshift import Background

def migrate_batch(docs, ctx):
    return docs[:-1]

background = Background(collection="people", from_version=1, to_version=2, migrate_batch=migrate_batch, batch_size=10, pause_ms=0)
''')
    s = fast_project.settings()
    await command.up(s)
    (failed,) = await bg.run(s, ["0001_wrong.py"])
    assert failed.status == "failed" and "failed 3 slices in a row" in (failed.last_error or "")
    state = await db["_mongoshift_background"].find_one({"_id": "0001_wrong.py"})
    assert state["totals"]["batches"] == 0 and state["totals"]["scanned"] == 0
    (part,) = [p async for p in db["_mongoshift_background_partitions"].find({"background": "0001_wrong.py"})]
    assert part["counters"].get("batches", 0) == 0 and part["failures"] == 3


@pytest.mark.parametrize("taken", [False, True])
async def test_a_slice_that_failed_after_its_lease_lapsed_counts_towards_max_slice_failures(fast_project, db, monkeypatch, taken: bool) -> None:  # type: ignore[no-untyped-def]
    """The release is fenced by the lease: a slice that failed once its lease was reaped (or taken) was never counted,
    so a partition whose slices outlive their lease failed forever without failing. The failure is the partition's;
    the lapse alone is not one (the reaper counts none)."""
    from mongoshift.background.lanes.lane import Lane
    from mongoshift.background.lanes.modes import PlainBatches

    await seed(db.people, 50)
    fast_project.add("0001_names.py", background_file(batch_size=10, extra="max_slice_failures=2,"))
    await command.up(fast_project.settings())
    async with bg.open_engine(fast_project.settings()) as engine:
        spec = engine.spec("0001_names.py")
        state = (await engine.coordinator.step("0001_names.py", spec)).state
        partitions = engine.store.partitions

        async def lapses_then_fails(self, work, cursor, size, **_):  # type: ignore[no-untyped-def]
            lease = {"$set": {"lease.token": "another"}} if taken else {"$unset": {"lease": ""}}
            await partitions.update_one({"_id": work.lease.partition_id}, lease)
            raise RuntimeError("the batch broke")

        monkeypatch.setattr(PlainBatches, "advance", lapses_then_fails)
        for expected in (1, 2):
            if taken:  # the other holder lets go in between, so the next slice can claim
                await partitions.update_many({"background": "0001_names.py"}, {"$unset": {"lease": ""}})
            result = await Lane(engine.context, f"lane{expected}").run_slice(state, spec)
            assert result.outcome == "error"
            (part,) = [p async for p in partitions.find({"background": "0001_names.py", "generation": state.generation})]
            assert part["failures"] == expected and "the batch broke" in part["last_error"]
        assert part["status"] == "failed"


async def test_throttle_hook_sees_the_batch_and_adds_a_pause(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    source = background_file(batch_size=25, extra="throttle=throttle, adaptive=False,").replace(
        "background = Background(",
        "def throttle(ctx):\n    assert ctx.collection == 'people' and ctx.batch_size == 25\n    return 50\n\nbackground = Background(",
    )
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    started = asyncio.get_running_loop().time()
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed"
    assert asyncio.get_running_loop().time() - started >= 0.2  # 5 batches x 50 ms asked for by the hook


async def test_retry_from_start_forgets_failed_documents(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    path = fast_project.add(
        "0001_names.py",
        background_file(batch_size=50, extra="max_document_errors=5,").replace(
            "def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] < 3:\n        raise ValueError('not yet')"
        ),
    )
    s = fast_project.settings()
    await command.up(s)
    (first,) = await bg.run(s, ["0001_names.py"])
    assert first.status == "completed" and first.failed_documents == 3
    path.write_text(background_file(batch_size=50, extra="max_document_errors=5,"))  # the fix is deployed
    await bg.repin(s, "0001_names.py")
    await bg.apply_control(s, "0001_names.py", "retry", from_start=True)
    (second,) = await bg.run(s, ["0001_names.py"])
    assert second.status == "completed" and second.failed_documents == 0
    assert await db.people.count_documents({"__v": 2}) == 100


async def test_mixed_id_types_get_their_own_partitions(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    from bson import ObjectId

    ids = [*range(300), *(f"s{i:04d}" for i in range(300)), *(ObjectId() for _ in range(300)), 1.5, Int64(10**12)]
    await db.people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in ids])
    await db.people.create_index([("__v", 1), ("_id", 1)])
    fast_project.add("0001_names.py", background_file(batch_size=50, max_parallel=4, extra="partitions={'min_partition_docs': 50},"))
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"], concurrency=4)
    assert result.status == "completed" and result.totals["migrated"] == len(ids)
    assert await db.people.count_documents({"__v": 2}) == len(ids)
    rows = await bg.partitions(s, "0001_names.py")
    assert {r.bracket for r in rows} == {"number", "string", "objectId"}
    assert all(r.status == "done" for r in rows) and len(rows) > 3


async def test_a_step_checkpoint_over_64_kib_is_refused(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(
        "0001_step.py",
        """
        from mongoshift import Background

        def step(ctx):
            return {"checkpoint": {"blob": "x" * 70_000}, "done": False}

        background = Background(collection="people", from_version=0, to_version=1, step=step, pause_ms=0, max_slice_failures=1)
        """,
    )
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_step.py"])
    assert result.status == "failed" and "64 KiB" in (result.last_error or "")


BUSY_THREE_TIMES = """
_asked = 0

def busy():
    global _asked
    _asked += 1
    return 100 if _asked <= 3 else 0

"""


async def test_health_signals_hold_batches_until_healthy(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A user signal (say, the application's latency) pauses the lanes; the lag reader is off quietly here."""
    await seed(db.people, 60)
    # The signal says "wait 100 ms" three times, then healthy; the transform fails any document it gets
    # before that (the run would then fail), so what is checked is the order, not how long it took.
    source = (
        background_file(batch_size=30, extra="health=[busy],")
        .replace("background = Background(", BUSY_THREE_TIMES + "background = Background(")
        .replace("def migrate(doc, ctx):\n", "def migrate(doc, ctx):\n    assert _asked > 3, 'a batch before the signal said healthy'\n")
    )
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    (result,) = await bg.run(s, ["0001_names.py"])
    assert result.status == "completed" and result.totals["migrated"] == 60


async def test_a_changed_file_waits_until_repinned(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    path = fast_project.add("0001_names.py", background_file(batch_size=50))
    s = fast_project.settings()
    await command.up(s)
    path.write_text(path.read_text() + "\n# deployed a fix\n")  # a rolling deploy changed the file
    caplog.set_level(logging.INFO, logger="mongoshift")
    run = asyncio.create_task(bg.run(s, ["0001_names.py"]))
    # Until the run says it waits for the file (not 1 s, within which a loaded machine's run may not have
    # read it yet: the repin below would then come before the run saw the change).
    await until("the run waits for the registered file", lambda: run.done() or any("waiting up to" in r.getMessage() for r in caplog.records))
    assert not run.done() and await db.people.count_documents({"__v": 2}) == 0  # waiting, not running
    result = await bg.repin(s, "0001_names.py", reason="deploy 42")
    assert result.applied == "applied" and not result.replan
    (report,) = await asyncio.wait_for(run, 30)
    assert report.status == "completed" and await db.people.count_documents({"__v": 2}) == 100
    record = await db["_mongoshift_migrations"].find_one({"name": "0001_names.py"})
    assert record["checksum"] == result.checksum  # status shows the file as ok again


async def test_repin_with_a_new_max_parallel_recuts_the_same_pass(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 400)
    path = fast_project.add("0001_names.py", background_file(batch_size=50, extra="partitions={'min_partition_docs': 50},"))
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as engine:
        state = (await engine.coordinator.step("0001_names.py", engine.spec("0001_names.py"))).state
    assert state.plan["partitions"] == 1 and state.generation == 1
    path.write_text(background_file(batch_size=50, max_parallel=4, extra="partitions={'min_partition_docs': 50},"))
    result = await bg.repin(s, "0001_names.py")
    assert result.replan
    (report,) = await bg.run(s, ["0001_names.py"], concurrency=4)
    assert report.status == "completed" and report.pass_number == 1 and report.generation == 2
    assert report.partitions_total > 1 and report.totals["migrated"] == 400


async def test_more_lanes_asked_than_the_file_allows_is_said_once(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """``--concurrency 3`` on a file with ``max_parallel=2`` runs two lanes, and says why (it was silent)."""
    await seed(db.people, 50)
    fast_project.add("0001_names.py", background_file(batch_size=10, max_parallel=2))
    assert cli(fast_project, "up").returncode == 0
    result = cli(fast_project, "background", "run", "0001_names", "--concurrency", "3")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("0001_names.py: 2 lanes, not 3: the file's max_parallel is 2") == 1, result.stderr
    assert await db.people.count_documents({"__v": 2}) == 50
    quiet = cli(fast_project, "background", "run", "0001_names", "--concurrency", "2")
    assert "lanes, not" not in quiet.stderr


async def test_a_partitions_last_batch_over_budget_fails_the_migration_at_once(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """The batch that closes a partition is judged against ``max_document_errors`` like any other.

    It was not: the lane went on to the next partitions and the migration failed only when a later
    batch failed a document, or at the pass's end, having rewritten the rest of the collection; a stop
    in between left it ``running`` with more failed documents than its budget.
    """
    # two partitions, one per _id type (one lane, over_partition=1), the larger first: numbers, then strings
    await seed(db.people, 390)
    await db.people.insert_many([{"_id": f"s{i:03}", "first": "F", "last": "L", "__v": 1, "__rev": 1} for i in range(300)])
    source = background_file(batch_size=100, extra="max_document_errors=2, adaptive=False, partitions=Partitions(over_partition=1),")
    source = source.replace("from mongoshift import Background", "from mongoshift import Background, Partitions")
    # three documents of the numbers' last batch (ids 300-389, a short batch that closes the partition) fail
    source = source.replace(
        "def migrate(doc, ctx):", "def migrate(doc, ctx):\n    if doc['_id'] in (350, 360, 370):\n        raise ValueError('cannot split')"
    )
    fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    (result,) = await bg.run(fast_project.settings(), ["0001_names.py"])
    assert result.status == "failed" and "max_document_errors" in (result.last_error or "")
    assert await db.people.count_documents({"__v": 2, "_id": {"$type": "number"}}) == 387
    assert await db.people.count_documents({"__v": 2, "_id": {"$type": "string"}}) == 0
