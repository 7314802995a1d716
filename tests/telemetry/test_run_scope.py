"""What a run's telemetry holds and leaves out (issue 24 item 24): the lock it took, skipped or was
refused, a migration stopped by its ``before_each`` hook, ``baseline``, and the driver's spans of
the run's set-up and tear-down."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from mongoshift import api
from mongoshift.errors import ConfigInvalidError, ConnectionFailedError, HookFailedError, LockHeldError

from ..conftest import Project
from .conftest import Telemetry

BODY = """
async def up(ctx):
    await ctx.db.items.insert_one({"from": "%s"})

async def down(ctx):
    await ctx.db.items.delete_many({})
"""


async def _hold_the_lock(db) -> None:  # type: ignore[no-untyped-def]
    held = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "x", "ttl_ms": 60_000}
    await db["_mongoshift_locks"].insert_one({**held, "expires_at": datetime.now(UTC) + timedelta(seconds=60)})


async def test_a_run_refused_the_lock_is_marked_refused_and_records_no_run_duration(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", BODY % "first")
    await _hold_the_lock(db)

    with pytest.raises(LockHeldError):
        await api.up(project.settings(), observers=[telemetry.observer])

    [run] = telemetry.spans("mongoshift.run")  # kept on purpose: it holds the set-up's requests and the refusal
    assert run.attributes["mongoshift.lock"] == "refused" and run.status.status_code == StatusCode.ERROR
    assert telemetry.points("mongoshift.run.duration") == []  # it did not run: lock.refused counts it
    assert telemetry.total("mongoshift.lock.refused") == 1
    [acquire] = telemetry.points("mongoshift.lock.acquire.duration")
    assert acquire.attributes["mongoshift.outcome"] == "refused"


async def test_a_run_without_the_lock_says_so_on_its_span_and_its_duration(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", BODY % "first")

    await api.up(project.settings(), lock=api.Lock(take=False), observers=[telemetry.observer])
    await api.down(project.settings(), observers=[telemetry.observer])

    runs = telemetry.spans("mongoshift.run")
    assert [(r.attributes["mongoshift.command"], r.attributes["mongoshift.lock"]) for r in runs] == [("up", "skipped"), ("down", "taken")]
    points = {p.attributes["mongoshift.command"]: p.attributes["mongoshift.lock"] for p in telemetry.points("mongoshift.run.duration")}
    assert points == {"up": "skipped", "down": "taken"}


async def test_a_run_that_never_connected_names_no_lock_it_never_took(tmp_path, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    """An ``up`` against a server that refuses every connection fails before any lock is tried: its span and its
    duration say nothing of a lock (they said ``taken``), and no lock instrument records anything."""
    unreachable = Project(tmp_path, "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=500", "app")
    unreachable.add("0001_first.py", BODY % "first")

    with pytest.raises(ConnectionFailedError):
        await api.up(unreachable.settings(), observers=[telemetry.observer])

    [run] = telemetry.spans("mongoshift.run")
    assert "mongoshift.lock" not in run.attributes and run.attributes["mongoshift.outcome"] == "failed"
    [point] = telemetry.points("mongoshift.run.duration")
    assert "mongoshift.lock" not in point.attributes and point.attributes["error.type"] == "connection_failed"
    assert telemetry.points("mongoshift.lock.acquire.duration") == []


async def test_a_migration_whose_before_each_hook_failed_has_its_failed_span_and_duration(project, db, tmp_path, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    hooks = tmp_path / "failing_hooks.py"
    hooks.write_text("def before_each(name, ctx, info):\n    ctx.db.hooklog.insert_one({'name': name})\n    raise RuntimeError('not today')\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_first.py", BODY % "first")

    with pytest.raises(HookFailedError):
        await api.up(project.settings(), observers=[telemetry.observer])

    [migration] = telemetry.spans("mongoshift.migration")
    assert migration.attributes["mongoshift.migration"] == "0001_first.py"
    assert migration.status.status_code == StatusCode.ERROR and migration.attributes["error.type"] == "hook_failed"
    [insert] = [s for s in telemetry.children(migration) if s.kind == SpanKind.CLIENT and "insert" in s.name]  # the hook's request
    assert insert.context.trace_id == migration.context.trace_id
    [point] = telemetry.points("mongoshift.migration.duration")
    assert (point.attributes["mongoshift.outcome"], point.attributes["error.type"]) == ("failed", "hook_failed")
    assert await db.items.count_documents({}) == 0  # the body never ran


async def test_baseline_is_a_run_with_its_span_and_its_observers(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", BODY % "first")
    seen: list[str] = []

    report = await api.baseline(project.settings(), "0001_first.py", observers=[telemetry.observer, lambda e: seen.append(e.kind)])

    assert seen == ["run_start", "lock_acquired", "run_end"]
    [run] = telemetry.spans("mongoshift.run")
    assert (run.attributes["mongoshift.command"], run.attributes["mongoshift.outcome"]) == ("baseline", "success")
    assert [p.attributes["mongoshift.command"] for p in telemetry.points("mongoshift.run.duration")] == ["baseline"]
    assert [r.name for r in report.adopted] == ["0001_first.py"]
    with pytest.raises(ConfigInvalidError):
        await api.baseline(project.settings(), "0001_first.py", observers="not a list")  # type: ignore[arg-type]


async def test_a_baseline_dry_run_records_nothing(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", BODY % "first")
    await api.baseline(project.settings(), "0001_first.py", dry_run=True, observers=[telemetry.observer])
    assert telemetry.ours() == []


async def test_the_driver_spans_of_a_runs_set_up_and_tear_down_are_inside_its_run_span(project, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", BODY % "first")

    await api.up(project.settings(), observers=[telemetry.observer])

    [run] = telemetry.spans("mongoshift.run")
    requests = [s for s in telemetry.spans() if s.kind == SpanKind.CLIENT]
    names = {s.name.rsplit(".", 1)[-1] for s in requests}
    assert {"ping", "listCollections", "createIndexes", "endSessions"} <= names, sorted(names)
    outside = [s.name for s in requests if s.context.trace_id != run.context.trace_id or s.parent is None]
    assert outside == []
    # the set-up's and tear-down's requests are the run span's own children
    direct = {s.name.rsplit(".", 1)[-1] for s in telemetry.children(run) if s.kind == SpanKind.CLIENT}
    assert {"ping", "listCollections", "createIndexes", "endSessions"} <= direct, sorted(direct)
