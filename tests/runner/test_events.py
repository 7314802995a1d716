"""Events on the migration line and ``ctx.log``, through the Python API (issue 14 items 1 and 2)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from bson import ObjectId

from mongoshift import api
from mongoshift.errors import ExecutionFailedError, LockHeldError
from mongoshift.project.events import Event

from .conftest import LOSES_LOCK

LOGS = """
from bson import ObjectId

async def up(ctx):
    ctx.log.info("copied", count=3, marker=ObjectId("{oid}"))
    ctx.logger.info("plain line")

def down(ctx):
    ctx.log.warning("undoing", count=3)
"""

SYNC_LOGS = """
def up(ctx):
    ctx.log.debug("sync side", rows=[1, 2])

def down(ctx):
    ctx.log.info("undoing sync")
"""

FLAKY_TXN = """
from pymongo.errors import PyMongoError

use_transaction = True

async def up(ctx):
    await ctx.db.items.insert_one({"n": ctx.attempt}, session=ctx.session)
    ctx.log.info("trying", attempt_seen=ctx.attempt)
    if ctx.attempt == 1:
        error = PyMongoError("a transient blip")
        error._add_error_label("TransientTransactionError")
        raise error
"""

FAILS_TXN = """
use_transaction = True

async def up(ctx):
    await ctx.db.items.insert_one({"n": 1}, session=ctx.session)
    ctx.log.error("about to fail", step=1)
    raise RuntimeError("no")
"""

OID = "65f000000000000000000001"


class Recorder:
    """An observer that keeps every event."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def kinds(self) -> list[tuple[str, str | None]]:
        return [(e.kind, e.migration) for e in self.events]

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]


def raising(event: Event) -> None:
    raise RuntimeError("a broken observer")


@pytest.fixture
def records() -> Iterator[list[logging.LogRecord]]:
    """The records of ``mongoshift`` loggers (CLI tests in this process may have stopped propagation)."""
    kept: list[logging.LogRecord] = []
    handler = logging.Handler(level=logging.DEBUG)
    handler.emit = kept.append  # type: ignore[method-assign]
    logger = logging.getLogger("mongoshift")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)  # ctx.log.debug must still be an event
    try:
        yield kept
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


async def test_up_and_down_emit_paired_events_with_one_run_id(project, db, records) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS.format(oid=OID))
    project.add("0002_sync.py", SYNC_LOGS)
    seen = Recorder()

    report = await api.up(project.settings(), observers=[raising, seen])

    assert [r.status for r in report.results] == ["applied", "applied"]  # the raising observer changed nothing
    assert seen.kinds() == [
        ("run_start", None),
        ("lock_acquired", None),
        ("migration_start", "0001_logs.py"),
        ("log", "0001_logs.py"),
        ("migration_end", "0001_logs.py"),
        ("migration_start", "0002_sync.py"),
        ("log", "0002_sync.py"),
        ("migration_end", "0002_sync.py"),
        ("run_end", None),
    ]
    assert {e.run_id for e in seen.events} == {report.run_id}
    end = seen.of("migration_end")[0].data
    assert end["outcome"] == "applied" and end["direction"] == "up" and isinstance(end["duration_ms"], int)
    assert seen.of("run_end")[0].data["outcome"] == "success"
    log = seen.of("log")[0].data
    assert (log["level"], log["message"], log["direction"], log["attempt"]) == ("info", "copied", "up", 1)
    assert log["data"] == {"count": 3, "marker": ObjectId(OID)}  # the BSON type is kept
    assert seen.of("log")[1].data["level"] == "debug"  # emitted whatever the log level
    assert report.to_json()["logs"][0]["data"] == {"count": 3, "marker": {"$oid": OID}}

    plain = next(r for r in records if r.getMessage() == "plain line")
    assert (plain.run_id, plain.migration, plain.direction, plain.attempt) == (report.run_id, "0001_logs.py", "up", 1)  # type: ignore[attr-defined]
    assert not any(r.getMessage().startswith("sync side") for r in records)  # below the level: an event, not a line

    back = Recorder()
    down = await api.down(project.settings(), observers=[back])
    assert [(e.migration, e.data["direction"]) for e in back.of("log")] == [("0002_sync.py", "down"), ("0001_logs.py", "down")]
    assert {e.data["outcome"] for e in back.of("migration_end")} == {"reverted"}
    assert {e.run_id for e in back.events} == {down.run_id} != {report.run_id}


async def test_a_retried_transaction_logs_again_with_attempt_2(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_flaky.py", FLAKY_TXN)
    seen = Recorder()
    await api.up(project.settings(), observers=[seen])
    assert [(e.data["attempt"], e.data["data"]) for e in seen.of("log")] == [(1, {"attempt_seen": 1}), (2, {"attempt_seen": 2})]
    assert [e.kind for e in seen.events].count("migration_start") == 1
    assert [d["n"] async for d in db.items.find()] == [2]  # attempt 1 was rolled back


async def test_a_rolled_back_failure_keeps_its_logs_and_ends_failed(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_fails.py", FAILS_TXN)
    seen = Recorder()
    with pytest.raises(ExecutionFailedError) as failure:
        await api.up(project.settings(), observers=[seen])
    assert await db.items.count_documents({}) == 0  # the transaction was rolled back
    assert [e.data["message"] for e in seen.of("log")] == ["about to fail"]
    assert failure.value.details["logs"][0]["data"] == {"step": 1}
    end = seen.of("migration_end")[0].data
    assert (end["outcome"], end["error_kind"]) == ("failed", "execution_failed") and "no" in end["error"]
    run_end = seen.of("run_end")[0].data
    assert (run_end["outcome"], run_end["error_kind"]) == ("failed", "execution_failed")


async def test_a_dry_run_emits_nothing(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS.format(oid=OID))
    seen = Recorder()
    report = await api.dry_run(project.settings(), "up", observers=[seen])
    assert [r.name for r in report.rows] == ["0001_logs.py"] and seen.events == []


async def test_lock_refused_and_waited(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS.format(oid=OID))
    locks = db["_mongoshift_locks"]
    far = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "someone", "ttl_ms": 60_000}
    await locks.insert_one({**far, "expires_at": _in(60)})
    seen = Recorder()
    with pytest.raises(LockHeldError):
        await api.up(project.settings(), observers=[seen])
    assert [k for k, _ in seen.kinds()] == ["run_start", "lock_refused", "run_end"]
    assert seen.of("run_end")[0].data["error_kind"] == "lock_held"

    # the holder lets go only once the run has said it waits (on a loaded machine a lock expiring at
    # a set time could expire before the run even asks for it)
    seen = Recorder()
    waiting = asyncio.Event()

    def observe(event: Event) -> None:
        seen(event)
        if event.kind == "lock_waited":
            waiting.set()

    run = asyncio.create_task(api.up(project.settings(), observers=[observe], lock=api.Lock(wait=60)))
    await asyncio.wait_for(waiting.wait(), 30)
    await locks.update_one({"_id": "migration_lock"}, {"$set": {"expires_at": _in(-1)}})
    await run
    assert [k for k, _ in seen.kinds()][:3] == ["run_start", "lock_waited", "lock_acquired"]
    assert seen.of("lock_acquired")[0].data["waited_ms"] > 0


def _in(seconds: float) -> Any:
    from datetime import UTC, datetime, timedelta

    return datetime.now(UTC) + timedelta(seconds=seconds)


async def test_a_converge_is_bracketed_by_its_events(project, db) -> None:  # type: ignore[no-untyped-def]
    seen = Recorder()
    await api.converge(project.settings(), observers=[seen])
    assert [k for k, _ in seen.kinds()] == ["run_start", "lock_acquired", "converge_start", "converge_end", "run_end"]
    assert seen.of("converge_end")[0].data["outcome"] == "success"


class Scoped:
    """A tracer-like observer: its scope is around the body (entered before, left after it)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.trail: list[str] = []

    def __call__(self, event: Event) -> None:
        self.trail.append(event.kind)

    def migration_scope(self, event: Event) -> Any:
        from contextlib import contextmanager

        @contextmanager
        def scope() -> Iterator[None]:
            if self.fail:
                raise RuntimeError("a tracer that cannot start a span")
            self.trail.append("enter")
            yield
            self.trail.append("exit")

        return scope()


@pytest.mark.parametrize("fail", [False, True])
async def test_an_observer_scope_wraps_each_body_and_cannot_break_it(project, db, fail: bool) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_logs.py", LOGS.format(oid=OID))
    tracer = Scoped(fail)
    report = await api.up(project.settings(), observers=[tracer])
    assert [r.status for r in report.results] == ["applied"]
    assert await db["_mongoshift_migrations"].count_documents({}) == 1  # once, whatever the scope did
    body = ["log"] if fail else ["enter", "log", "exit"]
    assert tracer.trail == ["run_start", "lock_acquired", "migration_start", *body, "migration_end", "run_end"]


async def test_a_lost_lock_is_an_event(project, db, lock_lost_seen) -> None:  # type: ignore[no-untyped-def]
    # The body returns once the heartbeat found the lock gone: with warn nothing else looks (a 1.2 s sleep
    # raced the heartbeat, and a 1 s TTL let a slow renewal give the lock up for another reason).
    project.write_config(lock_ttl_seconds=6, on_lock_lost="warn")
    project.add("0001_loses.py", LOSES_LOCK)
    seen = Recorder()
    await api.up(project.settings(), observers=[seen])
    lost = seen.of("lock_lost")
    assert len(lost) == 1 and lost[0].data["policy"] == "warn" and "cleared" in lost[0].data["reason"]
    assert seen.kinds().index(("lock_lost", None)) < seen.kinds().index(("migration_end", "0001_loses.py"))


READS_SCOPE = """
import sys

{prefix}def up(ctx):
    ctx.log.info("inside", current=sys.modules["mongoshift_test_scope"].current.get(None))
"""


async def test_what_a_scope_makes_current_is_current_in_sync_and_async_bodies(project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The seam an OpenTelemetry span needs: active around the body, also in a sync body's worker thread."""
    import contextvars
    import sys
    import types
    from contextlib import contextmanager

    current: contextvars.ContextVar[str] = contextvars.ContextVar("current")
    monkeypatch.setitem(sys.modules, "mongoshift_test_scope", types.SimpleNamespace(current=current))

    class Tracer:
        def __call__(self, event: Event) -> None:
            pass

        @contextmanager
        def migration_scope(self, event: Event) -> Iterator[None]:
            token = current.set(f"span of {event.migration}")
            try:
                yield
            finally:
                current.reset(token)

    project.add("0001_async.py", READS_SCOPE.format(prefix="async "))
    project.add("0002_sync.py", READS_SCOPE.format(prefix=""))
    project.add("0003_sync_txn.py", "use_transaction = True\n" + READS_SCOPE.format(prefix=""))
    report = await api.up(project.settings(), observers=[Tracer()])
    assert [(e.migration, e.data["data"]["current"]) for e in report.logs] == [
        ("0001_async.py", "span of 0001_async.py"),
        ("0002_sync.py", "span of 0002_sync.py"),
        ("0003_sync_txn.py", "span of 0003_sync_txn.py"),
    ]
    assert current.get(None) is None  # left again


async def test_an_observer_that_fails_while_a_migration_failed_logs_no_secret_of_the_migrations_error(project, db, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    """The events emitted while a migration's error is handled chained that error to the observer's
    failure, and ``log.exception`` printed it whole through the application's own logging: the
    migration's message, a URI's password in it, unmasked."""
    project.add("0001_leaks.py", 'def up(ctx):\n    raise ValueError("nope mongodb://u:obs-hunter15@127.0.0.1:1")\n')

    def broken(event: Event) -> None:
        raise RuntimeError("a broken observer")

    caplog.set_level(logging.DEBUG, logger="mongoshift")
    with pytest.raises(ExecutionFailedError):
        await api.up(project.settings(), observers=[broken])
    failures = [r for r in caplog.records if "an event observer failed" in r.getMessage()]
    assert failures and all(r.exc_info is None for r in failures)  # nothing for a handler to print raw
    said = "\n".join(caplog.text.splitlines() + [r.getMessage() for r in failures])
    assert "obs-hunter15" not in said and "a broken observer" in said and "Traceback" in said


SECRET_LINE = """
def up(ctx):
    ctx.log.warning("using mongodb://app:s3cret@db.internal/prod?tlsCertificateKeyFilePassword=hunter2")
    raise RuntimeError("no")
"""


async def test_a_logged_secret_is_masked_everywhere_the_line_goes(project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """The run log stored the line masked; the event, the failure's details and the logger did not."""
    project.add("0001_secret.py", SECRET_LINE)
    seen = Recorder()
    with caplog.at_level(logging.WARNING), pytest.raises(ExecutionFailedError) as failure:
        await api.up(project.settings(), observers=[seen])
    masked = "using mongodb://***@db.internal/prod?tlsCertificateKeyFilePassword=***"
    assert [e.data["message"] for e in seen.of("log")] == [masked]
    assert failure.value.details["logs"][0]["message"] == masked
    assert masked in caplog.text and "s3cret" not in caplog.text and "hunter2" not in caplog.text


async def test_a_stop_while_waiting_for_the_lock_ends_the_wait(project, db) -> None:  # type: ignore[no-untyped-def]
    """Ctrl-C during ``up --wait``: the run stops waiting at once (11), nothing ran; it waited for the lock to free."""
    from mongoshift.errors import RunAbortedError
    from mongoshift.project.run import CancelSignal

    project.add("0001_logs.py", LOGS.format(oid=OID))
    locks = db["_mongoshift_locks"]
    far = {"_id": "migration_lock", "owner": "other", "nonce": "n", "host": "h", "pid": 1, "executed_by": "someone", "ttl_ms": 600_000}
    await locks.insert_one({**far, "expires_at": _in(600)})
    waiting = asyncio.Event()
    cancel = CancelSignal()

    def observe(event: Event) -> None:
        if event.kind == "lock_waited":
            waiting.set()

    run = asyncio.create_task(api.up(project.settings(), observers=[observe], lock=api.Lock(wait=600), cancel=cancel))
    await asyncio.wait_for(waiting.wait(), 30)
    cancel.set("interrupted by SIGINT")
    with pytest.raises(RunAbortedError, match="while waiting for the migration lock") as stopped:
        await asyncio.wait_for(run, 60)  # a bound far below the 600 s wait: the stop ended it
    assert stopped.value.exit_code == 11
    assert await db["_mongoshift_migrations"].count_documents({}) == 0


LONG_LINE = """
def up(ctx):
    ctx.log.info("x" * 5000 + " mongodb://app:s3cret@db.internal/", note="y" * 1500, short="kept")
"""


async def test_a_long_log_line_says_it_was_cut_and_how_long_it_was(project, db, sync_client) -> None:  # type: ignore[no-untyped-def]
    """Cut at 1,000 characters with a lone "…", the reader could not tell a cut line from one that ended so."""
    project.add("0001_long.py", LONG_LINE)
    seen = Recorder()
    report = await api.up(project.settings(), observers=[seen])
    (event,) = seen.of("log")
    message, data = event.data["message"], event.data["data"]
    assert len(message) <= 1000 and message.startswith("x" * 900)
    assert message.endswith("… [cut: 5,034 characters]"), message[-60:]
    assert data["note"].endswith("… [cut: 1,500 characters]") and len(data["note"]) <= 1000 and data["short"] == "kept"
    (stored,) = sync_client[project.db]["_mongoshift_run_log"].find({"run_id": report.run_id})
    assert stored["message"] == message and "s3cret" not in str(stored)
