"""Spans of the migration line (issue 14 item 3): the tree of an ``up``, attributes, failures, converge."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from mongoshift import api
from mongoshift.errors import ExecutionFailedError

from .conftest import Telemetry

ASYNC_BODY = """
async def up(ctx):
    await ctx.db.items.insert_one({"from": "%s"})
"""

SYNC_BODY = """
def up(ctx):
    ctx.db.items.insert_one({"from": "%s"})
"""

FAILS = """
async def up(ctx):
    await ctx.db.items.insert_one({"from": "fails"})
    raise RuntimeError("cannot reach mongodb://admin:hunter2@db.internal:27017/app")
"""


def _three(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", ASYNC_BODY % "first")
    project.add("0002_second.py", SYNC_BODY % "second")  # a plain def: its body runs in a worker thread
    project.add("0003_third.py", ASYNC_BODY % "third")


async def test_an_up_of_three_is_one_run_span_with_three_migration_spans_holding_the_driver_spans(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    _three(project)

    report = await api.up(project.settings(), observers=[telemetry.observer])

    [run] = telemetry.spans("mongoshift.run")
    assert run.parent is None  # nothing was current in the caller
    migrations = telemetry.spans("mongoshift.migration")
    assert [m.attributes["mongoshift.migration"] for m in migrations] == ["0001_first.py", "0002_second.py", "0003_third.py"]
    assert all(m.parent is not None and m.parent.span_id == run.context.span_id for m in migrations)
    for migration in migrations:
        inserts = [s for s in telemetry.children(migration) if s.kind == SpanKind.CLIENT and "insert" in s.name]
        assert len(inserts) == 1, f"{migration.attributes['mongoshift.migration']}: {[s.name for s in telemetry.children(migration)]}"
        assert inserts[0].context.trace_id == run.context.trace_id
    assert run.attributes["db.namespace"] == project.db and run.attributes["db.system.name"] == "mongodb"
    assert (run.attributes["mongoshift.command"], run.attributes["mongoshift.outcome"]) == ("up", "success")
    assert run.attributes["mongoshift.run_id"] == report.run_id
    assert [e.name for e in run.events] == ["lock_acquired"]
    first = migrations[0].attributes
    assert (first["db.namespace"], first["mongoshift.direction"], first["mongoshift.outcome"], first["mongoshift.kind"]) == (
        project.db, "up", "applied", "migration",
    )
    assert first["mongoshift.batch"] == report.results[0].batch
    assert all(s.status.status_code == StatusCode.UNSET for s in telemetry.ours())  # never OK, never an error here


async def test_a_failing_migration_is_an_error_with_a_redacted_message_and_its_exit_code_kind(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_first.py", ASYNC_BODY % "first")
    project.add("0002_fails.py", FAILS)

    with pytest.raises(ExecutionFailedError):
        await api.up(project.settings(), observers=[telemetry.observer])

    first, failed = telemetry.spans("mongoshift.migration")
    assert first.status.status_code == StatusCode.UNSET and "error.type" not in first.attributes
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.attributes["error.type"] == "execution_failed" and failed.attributes["mongoshift.outcome"] == "failed"
    assert "RuntimeError" in (failed.status.description or "")
    [run] = telemetry.spans("mongoshift.run")
    assert run.status.status_code == StatusCode.ERROR and run.attributes["error.type"] == "execution_failed"
    for span in (failed, run):
        assert "hunter2" not in (span.status.description or "")
        assert span.events == () or all(e.name != "exception" for e in span.events)  # no unredacted exception text
    [insert] = [s for s in telemetry.children(failed) if "insert" in s.name]  # its body's request, under it
    assert insert.kind == SpanKind.CLIENT


async def test_a_refused_lock_is_an_error_run_span_without_migrations(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    project.add("0001_first.py", ASYNC_BODY % "first")
    held = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "x", "ttl_ms": 60_000}
    await db["_mongoshift_locks"].insert_one({**held, "expires_at": datetime.now(UTC) + timedelta(seconds=60)})

    with pytest.raises(api.MongoshiftError):
        await api.up(project.settings(), observers=[telemetry.observer])

    [run] = telemetry.ours()
    assert run.name == "mongoshift.run" and run.attributes["error.type"] == "lock_held"
    assert [e.name for e in run.events] == ["lock_refused"]
    assert telemetry.total("mongoshift.lock.refused") == 1


async def test_a_converge_span_is_a_child_of_its_run(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    await api.converge(project.settings(), observers=[telemetry.observer])
    [run] = telemetry.spans("mongoshift.run")
    [converge] = telemetry.spans("mongoshift.converge")
    assert converge.parent is not None and converge.parent.span_id == run.context.span_id
    assert (run.attributes["mongoshift.command"], converge.attributes["mongoshift.trigger"]) == ("converge", "converge")
    assert converge.attributes["db.namespace"] == project.db
    assert [p.attributes["mongoshift.outcome"] for p in telemetry.points("mongoshift.converge.duration")] == ["success"]


async def test_read_only_calls_and_dry_runs_record_nothing(project, db, telemetry: Telemetry) -> None:  # type: ignore[no-untyped-def]
    _three(project)
    settings = project.settings()
    await api.dry_run(settings, "up", observers=[telemetry.observer])
    await api.status(settings)
    await api.list_migrations(settings)
    await api.lock_status(settings)
    await api.audit(settings)
    await api.plan_converge(settings)
    assert telemetry.ours() == []
    assert telemetry.metric_names() == set()
