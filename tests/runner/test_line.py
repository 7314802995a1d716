"""The migration line through the Python API, against the server."""

from __future__ import annotations

import json
import logging

import pytest

from mongoshift.api import migrations as command
from mongoshift.errors import (
    ExecutionFailedError,
    HookFailedError,
    InvalidExportError,
    IrreversibleMigrationError,
    RunAbortedError,
)
from mongoshift.project.run import CancelSignal

from .conftest import LOSES_LOCK

ASYNC_INSERT = """
description = "insert {tag}"

async def up(ctx):
    await ctx.db.items.insert_one({{"tag": "{tag}"}})

async def down(ctx):
    await ctx.db.items.delete_one({{"tag": "{tag}"}})
"""

SYNC_INSERT = """
def up(ctx):
    ctx.db.items.insert_one({{"tag": "{tag}", "sync": True}})

def down(ctx):
    ctx.db.items.delete_one({{"tag": "{tag}"}})
"""


async def tags(db) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted([d["tag"] async for d in db.items.find({}, {"tag": 1})])


async def changelog(db) -> dict[str, dict]:  # type: ignore[no-untyped-def, type-arg]
    return {d["name"]: d async for d in db["_mongoshift_migrations"].find()}


async def test_up_down_redo_and_history(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    project.add("0002_b.py", SYNC_INSERT.format(tag="b"))
    s = project.settings()

    report = await command.up(s)
    assert [(r.name, r.status, r.batch) for r in report.results] == [("0001_a.py", "applied", 1), ("0002_b.py", "applied", 1)]
    assert await tags(db) == ["a", "b"]
    records = await changelog(db)
    assert records["0001_a.py"]["description"] == "insert a"
    assert len(records["0001_a.py"]["checksum"]) == 64
    assert records["0001_a.py"]["applied_at"] is not None and records["0001_a.py"]["first_applied_at"] is not None

    project.add("0003_c.py", ASYNC_INSERT.format(tag="c"))
    assert [r.batch for r in (await command.up(s)).results] == [2]

    report = await command.down(s)  # the last batch only
    assert [r.name for r in report.results] == ["0003_c.py"]
    assert await tags(db) == ["a", "b"]

    report = await command.redo(s)
    assert [(r.name, r.direction) for r in report.results] == [("0002_b.py", "down"), ("0002_b.py", "up")]
    records = await changelog(db)
    assert records["0003_c.py"]["status"] == "reverted"  # kept, marked, never deleted
    assert records["0002_b.py"]["status"] == "applied"
    assert records["0002_b.py"]["first_applied_at"] <= records["0002_b.py"]["applied_at"]
    assert not {"reverted_at", "revert_run_id", "reverted_by", "revert_duration_ms"} & set(records["0002_b.py"])  # applied again: no revert on it

    rows = await command.status(s)
    assert [(r.name, r.state) for r in rows] == [("0001_a.py", "applied"), ("0002_b.py", "applied"), ("0003_c.py", "reverted")]


async def test_step_and_down_selectors(project, db) -> None:  # type: ignore[no-untyped-def]
    for i in range(1, 5):
        project.add(f"000{i}_m.py", ASYNC_INSERT.format(tag=f"t{i}"))
    s = project.settings()
    report = await command.up(s, step=True)
    assert [r.batch for r in report.results] == [1, 2, 3, 4]
    assert [r.name for r in (await command.down(s, steps=2)).results] == ["0004_m.py", "0003_m.py"]
    assert [r.name for r in (await command.up(s, to="0003_m")).results] == ["0003_m.py"]
    assert [r.name for r in (await command.down(s, to="0001_m.py")).results] == ["0003_m.py", "0002_m.py"]
    assert await tags(db) == ["t1"]


async def test_failure_is_recorded_and_stops_the_run(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_ok.py", ASYNC_INSERT.format(tag="ok"))
    project.add("0002_boom.py", "async def up(ctx):\n    raise ValueError('no good')\n")
    project.add("0003_never.py", ASYNC_INSERT.format(tag="never"))
    with pytest.raises(ExecutionFailedError) as info:
        await command.up(project.settings())
    assert "0002_boom.py" in info.value.message and "no good" in info.value.message
    assert [r["status"] for r in info.value.details["results"]] == ["applied", "failed"]
    records = await changelog(db)
    assert records["0002_boom.py"]["status"] == "failed" and "no good" in records["0002_boom.py"]["error"]
    assert "0003_never.py" not in records
    assert await tags(db) == ["ok"]
    rows = {r.name: r for r in await command.status(project.settings())}
    assert rows["0002_boom.py"].pending


async def test_broken_file_fails_before_anything_is_written(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_ok.py", ASYNC_INSERT.format(tag="ok"))
    project.add("0002_broken.py", "def up(ctx)\n    pass\n")
    with pytest.raises(InvalidExportError, match=r"0002_broken\.py"):
        await command.up(project.settings())
    assert await tags(db) == []
    assert await changelog(db) == {}


async def test_every_broken_file_is_named_not_only_the_first(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Exit 20 names each broken file a run would import (one edit per file, not one run per file), in the
    message and in ``details``, from ``up``, ``dry-run up`` and the Python API alike; nothing is written."""
    project.add("0001_ok.py", ASYNC_INSERT.format(tag="ok"))
    project.add("0002_syntax.py", "def up(ctx)\n    pass\n")
    project.add("0003_import.py", "import mongoshift_no_such_module\ndef up(ctx):\n    pass\n")
    project.add("0004_no_up.py", "description = 'nothing'\n")
    broken = ["0002_syntax.py", "0003_import.py", "0004_no_up.py"]
    with pytest.raises(InvalidExportError) as info:
        await command.up(project.settings())
    assert info.value.details["files"] == broken
    assert [p.split(":")[0] for p in info.value.details["problems"]] == broken
    assert all(name in info.value.message for name in broken)
    for args in (("up",), ("dry-run", "up")):
        result = cli(project, "--json", *args)
        assert result.returncode == 20, result.stderr
        error = json.loads(result.stdout)["error"]
        assert error["details"]["files"] == broken and "must define a function up(ctx)" in error["message"]
        assert all(name in result.stderr for name in broken)
    assert await tags(db) == [] and await changelog(db) == {}


async def test_strict_refuses_to_roll_back_or_redo_a_changed_file(project, db, cli) -> None:  # type: ignore[no-untyped-def]
    """Strict (the flag or the setting) holds for ``down``, ``redo`` and ``dry-run down`` as for ``up``: a file changed
    since it was applied is neither undone nor run again on a guess (exit 4, naming it); without strict, a warning."""
    from mongoshift.errors import ChecksumMismatchError

    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    project.add("0002_b.py", ASYNC_INSERT.format(tag="b"))
    await command.up(project.settings())
    project.add("0002_b.py", ASYNC_INSERT.format(tag="b") + "# edited after it was applied\n")
    before = await changelog(db)
    for call in (lambda s: command.down(s, strict=True), lambda s: command.redo(s, strict=True), lambda s: command.dry_run(s, "down", strict=True)):
        with pytest.raises(ChecksumMismatchError) as info:
            await call(project.settings())
        assert info.value.details["files"] == ["0002_b.py"] and "without --strict" in info.value.message
    for args in (("down", "--strict"), ("redo", "--strict"), ("dry-run", "down", "--strict"), ("redo", "0001_a", "--strict")):
        result = cli(project, "--json", *args)
        assert result.returncode == 4, (args, result.stderr)
        assert json.loads(result.stdout)["error"]["details"]["files"] == ["0002_b.py"]
    project.write_config(strict=True)
    for args in (("down",), ("redo",), ("dry-run", "down")):
        result = cli(project, *args)
        assert result.returncode == 4 and "strict setting off" in result.stderr, (args, result.stderr)
    assert await changelog(db) == before and await tags(db) == ["a", "b"]
    project.write_config()
    report = await command.redo(project.settings())  # without strict: redo is how a changed file runs again, said
    assert report.warnings == ["0002_b.py changed on disk after it was applied (checksum mismatch)"]
    assert [(r.name, r.status) for r in report.results] == [("0002_b.py", "reverted"), ("0002_b.py", "applied")]


async def test_down_without_down_is_irreversible(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_oneway.py", "async def up(ctx):\n    pass\n")
    s = project.settings()
    await command.up(s)
    with pytest.raises(IrreversibleMigrationError):
        await command.down(s)
    assert (await command.status(s))[0].state == "applied"


async def test_transaction_commits_body_and_record_together(project, db) -> None:  # type: ignore[no-untyped-def]
    await db.items.insert_one({"tag": "seed"})
    project.add(
        "0001_txn.py",
        """
        use_transaction = True

        async def up(ctx):
            assert ctx.session is not None and ctx.session.in_transaction
            await ctx.db.items.insert_one({"tag": "in-txn"}, session=ctx.session)
            raise RuntimeError("after the write")
        """,
    )
    project.add(
        "0002_sync_txn.py",
        """
        use_transaction = True

        def up(ctx):
            ctx.db.items.insert_one({"tag": "sync-txn"}, session=ctx.session)
        """,
    )
    s = project.settings()
    with pytest.raises(ExecutionFailedError):
        await command.up(s)
    assert await tags(db) == ["seed"]  # the write rolled back with the failure
    project.add("0001_txn.py", "use_transaction = True\nasync def up(ctx):\n    await ctx.db.items.insert_one({'tag': 'fixed'}, session=ctx.session)\n")
    await command.up(s)
    assert await tags(db) == ["fixed", "seed", "sync-txn"]
    assert {r["status"] for r in (await changelog(db)).values()} == {"applied"}


async def test_hooks_run_in_order_and_a_failing_hook_stops(project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    hooks = tmp_path / "hooks_file.py"
    hooks.write_text(
        """
calls = []

async def before_all(ctx):
    await ctx.db.hooklog.insert_one({"event": "before_all"})

def before_each(name, ctx, info):
    ctx.db.hooklog.insert_one({"event": "before_each", "name": name, "total": info["total"]})

async def after_each(name, duration_ms, ctx, info):
    await ctx.db.hooklog.insert_one({"event": "after_each", "name": name})

async def after_all(ctx, summary):
    await ctx.db.hooklog.insert_one({"event": "after_all", "success": summary["success"]})
"""
    )
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    await command.up(project.settings())
    events = [(d["event"], d.get("name")) async for d in db.hooklog.find().sort("_id", 1)]
    assert events == [("before_all", None), ("before_each", "0001_a.py"), ("after_each", "0001_a.py"), ("after_all", None)]

    hooks.write_text("def before_each(name, ctx, info):\n    raise RuntimeError('not today')\n")
    project.add("0002_b.py", ASYNC_INSERT.format(tag="b"))
    with pytest.raises(HookFailedError, match="not today"):
        await command.up(project.settings())
    assert await tags(db) == ["a"]


async def test_cancel_stops_at_the_next_boundary(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add(
        "0001_stops.py",
        "async def up(ctx):\n    await ctx.db.items.insert_one({'tag': 'first'})\n    ctx.cancelled.set('test asked to stop')\n",
    )
    project.add("0002_never.py", ASYNC_INSERT.format(tag="never"))
    with pytest.raises(RunAbortedError, match="test asked to stop") as info:
        await command.up(project.settings(), cancel=CancelSignal())
    assert [r["name"] for r in info.value.details["results"]] == ["0001_stops.py"]
    assert await tags(db) == ["first"]
    assert list(await changelog(db)) == ["0001_stops.py"]


# A body that sees the stop while it runs (here it asks for it itself, as a Ctrl-C would) and
# returns early, as the README advises: it must not be recorded as done.
CUT_SHORT = """
{txn}
{kw}def up(ctx):
    {aw}ctx.db.items.insert_one({{"tag": "half"}}, session=ctx.session)
    ctx.cancelled.set("interrupted by SIGINT")
    if ctx.cancelled.is_set():
        return
    {aw}ctx.db.items.insert_one({{"tag": "rest"}}, session=ctx.session)
"""


# The same body raising to stop early, as common as returning: the run was stopped (11), not failed (7).
RAISES_ON_STOP = CUT_SHORT.replace("        return\n", '        raise RuntimeError("stopping early")\n')
ENDINGS = {
    "returns": (CUT_SHORT, "saw that and returned; it is not recorded as applied"),
    "raises": (RAISES_ON_STOP, "and it raised RuntimeError: stopping early; it is recorded failed"),
}


@pytest.mark.parametrize("ending", sorted(ENDINGS))
@pytest.mark.parametrize("transaction", [False, True], ids=["plain", "transaction"])
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_body_that_stops_early_after_a_stop_is_not_recorded_applied(project, db, kind: str, transaction: bool, ending: str) -> None:  # type: ignore[no-untyped-def]
    aw, kw = ("await ", "async ") if kind == "async" else ("", "")
    body, said = ENDINGS[ending]
    project.add("0001_cut.py", body.format(txn=f"use_transaction = {transaction}", kw=kw, aw=aw))
    project.add("0002_never.py", ASYNC_INSERT.format(tag="never"))
    with pytest.raises(RunAbortedError, match=said) as info:
        await command.up(project.settings(), cancel=CancelSignal())
    assert info.value.exit_code == 11
    [result] = info.value.details["results"]
    assert (result["name"], result["status"], result["reason"]) == ("0001_cut.py", "failed", "cancelled")
    record = (await changelog(db))["0001_cut.py"]
    assert record["status"] == "failed" and "asked to stop" in record["error"]
    assert await tags(db) == ([] if transaction else ["half"])  # a transactional body is rolled back
    project.add("0001_cut.py", ASYNC_INSERT.format(tag="whole"))
    report = await command.up(project.settings(), cancel=CancelSignal())  # the next run runs it again
    assert [(r.name, r.status) for r in report.results] == [("0001_cut.py", "applied"), ("0002_never.py", "applied")]
    assert (await changelog(db))["0001_cut.py"]["status"] == "applied"


async def test_dry_run_writes_nothing(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    project.add("0002_b.py", "use_transaction = True\n" + ASYNC_INSERT.format(tag="b"))
    report = await command.dry_run(project.settings(), "up")
    assert [(r.name, r.batch, r.transaction) for r in report.rows] == [("0001_a.py", 1, False), ("0002_b.py", 1, True)]
    assert await tags(db) == [] and await changelog(db) == {}
    assert await db["_mongoshift_locks"].count_documents({}) == 0


async def test_timeout_fails_the_migration(project, db) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import MigrationTimeoutError

    project.write_config(migration_timeout_seconds=0.5)
    project.add("0001_slow.py", "import asyncio\nasync def up(ctx):\n    await asyncio.sleep(10)\n")
    with pytest.raises(MigrationTimeoutError):
        await command.up(project.settings())
    assert (await changelog(db))["0001_slow.py"]["status"] == "failed"


TRANSACTIONAL = "use_transaction = True\nasync def up(ctx):\n    await ctx.db.items.insert_one({'tag': 'x'}, session=ctx.session)\n"


async def test_server_without_transactions_gets_its_own_error(standalone_project, standalone_db) -> None:  # type: ignore[no-untyped-def]
    """A standalone server answers code 20 to the transaction's first statement."""
    from mongoshift.errors import TransactionsUnsupportedError

    standalone_project.add("0001_txn.py", TRANSACTIONAL)
    with pytest.raises(TransactionsUnsupportedError, match="replica set"):
        await command.up(standalone_project.settings())
    assert await tags(standalone_db) == []


def test_a_server_without_transactions_exits_15(standalone_project, cli) -> None:  # type: ignore[no-untyped-def]
    standalone_project.add("0001_txn.py", TRANSACTIONAL)
    result = cli(standalone_project, "up")
    assert result.returncode == 15, result.stderr
    assert "replica set" in result.stderr


async def test_a_server_without_transactions_is_refused_before_anything_runs(standalone_project, standalone_db, cli) -> None:  # type: ignore[no-untyped-def]
    """Every transactional file of the run is named up front (exit 15), by ``up`` and ``dry-run up`` alike: the
    files before the first one are not applied (the run used to apply them, then stop half way at it)."""
    from mongoshift.errors import TransactionsUnsupportedError

    standalone_project.add("0001_plain.py", ASYNC_INSERT.format(tag="plain"))
    standalone_project.add("0002_txn.py", TRANSACTIONAL)
    standalone_project.add("0003_plain.py", ASYNC_INSERT.format(tag="later"))
    standalone_project.add("0004_txn.py", TRANSACTIONAL.replace("async def", "def").replace("await ", ""))
    with pytest.raises(TransactionsUnsupportedError) as info:
        await command.up(standalone_project.settings())
    assert info.value.details["files"] == ["0002_txn.py", "0004_txn.py"]
    assert "0002_txn.py, 0004_txn.py" in info.value.message and "nothing was run" in info.value.message
    for args in (("up",), ("dry-run", "up")):
        result = cli(standalone_project, "--json", *args)
        assert result.returncode == 15, result.stderr
        assert json.loads(result.stdout)["error"]["details"]["files"] == ["0002_txn.py", "0004_txn.py"]
    assert await tags(standalone_db) == [] and await changelog(standalone_db) == {}
    # the setting asks for them too: the message names it as a way out
    standalone_project.write_config(use_transaction=True)
    result = cli(standalone_project, "dry-run", "up", "0001_plain")
    assert result.returncode == 15 and "use_transaction setting" in result.stderr
    assert cli(standalone_project, "up", "0001_plain").returncode == 15
    assert await tags(standalone_db) == []


@pytest.mark.parametrize("policy", ["abort", "warn"])
async def test_lost_lock_stops_or_warns(project, db, policy: str, lock_lost_seen) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.errors import LockLostError

    # The body returns once the heartbeat found the lock gone (not after 1.2 s, which a loaded machine's
    # heartbeat may not have renewed within), and a TTL a loaded machine renews within until then.
    project.write_config(lock_ttl_seconds=6, on_lock_lost=policy)
    project.add("0001_loses.py", LOSES_LOCK)
    project.add("0002_next.py", ASYNC_INSERT.format(tag="next"))
    if policy == "abort":
        with pytest.raises(LockLostError):
            await command.up(project.settings())
        assert list(await changelog(db)) == ["0001_loses.py"]
    else:
        await command.up(project.settings())
        assert await tags(db) == ["next"]
    assert lock_lost_seen.is_set()


# A body that never looks at ctx.cancelled runs to its end when the stop arrives: it is recorded
# as usual (recording it failed would run a finished, maybe not idempotent, body again).
NEVER_LOOKS = """
{txn}
{kw}def up(ctx):
    {aw}ctx.db.items.insert_one({{"tag": "half"}}, session=ctx.session)
    ctx.cancelled.set("interrupted by SIGINT")
    {aw}ctx.db.items.insert_one({{"tag": "rest"}}, session=ctx.session)
"""

# `if ctx.cancelled:` is a look too.
LOOKS_BY_TRUTH = """
def up(ctx):
    ctx.db.items.insert_one({"tag": "half"})
    ctx.cancelled.set("interrupted by SIGINT")
    if ctx.cancelled:
        return
    ctx.db.items.insert_one({"tag": "rest"})
"""


@pytest.mark.parametrize("transaction", [False, True], ids=["plain", "transaction"])
@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_body_that_never_looks_at_the_stop_runs_to_its_end_and_is_recorded(project, db, kind: str, transaction: bool) -> None:  # type: ignore[no-untyped-def]
    aw, kw = ("await ", "async ") if kind == "async" else ("", "")
    project.add("0001_whole.py", NEVER_LOOKS.format(txn=f"use_transaction = {transaction}", kw=kw, aw=aw))
    project.add("0002_never.py", ASYNC_INSERT.format(tag="never"))
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("mongoshift").addHandler(handler)
    try:
        with pytest.raises(RunAbortedError) as info:
            await command.up(project.settings(), cancel=CancelSignal())
    finally:
        logging.getLogger("mongoshift").removeHandler(handler)
    assert info.value.exit_code == 11
    [result] = info.value.details["results"]
    assert (result["name"], result["status"]) == ("0001_whole.py", "applied")
    # a --json reader learns it too: the result carries the warning the log line says (it had none)
    assert result["warnings"] == ["0001_whole.py ran to its end after the stop was asked (it did not look at ctx.cancelled): recorded applied"]
    assert (await changelog(db))["0001_whole.py"]["status"] == "applied"
    assert "0002_never.py" not in await changelog(db)
    assert sorted(await tags(db)) == ["half", "rest"]
    assert any("0001_whole.py ran to its end after the stop was asked" in line for line in said)


@pytest.mark.parametrize("command_name", ["up", "redo"])
async def test_a_stop_during_the_last_migration_still_ends_the_run_as_stopped(project, db, command_name: str) -> None:  # type: ignore[no-untyped-def]
    """The last (here the only) migration never looks at the stop and runs to its end: it is
    recorded, and the run still exits 11, so that a deploy script sees the Ctrl-C (it exited 0)."""
    body = NEVER_LOOKS.format(txn="", kw="", aw="") + "def down(ctx):\n    pass\n"
    if command_name == "redo":  # the first up runs without a stop, the redo's up is stopped
        body = body.replace('    ctx.cancelled.set', '    if ctx.db.items.count_documents({}) > 2:\n        ctx.cancelled.set')
    project.add("0001_whole.py", body)
    if command_name == "redo":
        await command.up(project.settings())
        run = command.redo(project.settings(), "0001_whole.py", cancel=CancelSignal())
    else:
        run = command.up(project.settings(), cancel=CancelSignal())
    with pytest.raises(RunAbortedError, match="during its last migration or hook, which ran to its end") as info:
        await run
    assert info.value.exit_code == 11
    assert [r["status"] for r in info.value.details["results"]][-1] == "applied"
    assert (await changelog(db))["0001_whole.py"]["status"] == "applied"


async def test_if_ctx_cancelled_is_a_look_at_the_stop(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_cut.py", LOOKS_BY_TRUTH)
    with pytest.raises(RunAbortedError, match="saw that and returned"):
        await command.up(project.settings(), cancel=CancelSignal())
    assert (await changelog(db))["0001_cut.py"]["status"] == "failed"
    assert await tags(db) == ["half"]


@pytest.mark.parametrize(
    ("hook", "said", "applied"),
    [
        # the hook ends, and its migration's body never starts (it ran, and was recorded)
        ("before_each(name, ctx, info)", "the rest were not started", []),
        # a deploy script must see the Ctrl-C (it exited 0)
        ("after_all(ctx, summary)", "during its last migration or hook", [("0001_a.py", "applied")]),
    ],
    ids=["before_each", "after_all"],
)
async def test_a_stop_during_a_hook_ends_the_run_as_stopped(project, db, tmp_path, hook: str, said: str, applied: list) -> None:  # type: ignore[no-untyped-def, type-arg]
    hooks = tmp_path / "stop_hooks.py"
    hooks.write_text(f"def {hook}:\n    ctx.cancelled.set('interrupted by SIGINT')\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    with pytest.raises(RunAbortedError, match=said) as info:
        await command.up(project.settings(), cancel=CancelSignal())
    assert info.value.exit_code == 11
    assert [(r["name"], r["status"]) for r in info.value.details["results"]] == applied
    assert (await tags(db) == []) == (applied == []) and ("0001_a.py" in await changelog(db)) == bool(applied)


async def test_a_failed_after_all_keeps_the_results(project, db, tmp_path, caplog) -> None:  # type: ignore[no-untyped-def]
    """After a run that succeeded, the hook's failure (12) carries what was applied; after a failed run, it is
    listed in the run's error (``later_errors``) and said in one line, without a traceback."""
    hooks = tmp_path / "failing_hooks.py"
    hooks.write_text("def after_all(ctx, summary):\n    raise RuntimeError('the report server is down')\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    with pytest.raises(HookFailedError) as info:
        await command.up(project.settings())
    assert [(r["name"], r["status"]) for r in info.value.details["results"]] == [("0001_a.py", "applied")]
    project.add("0002_b.py", "def up(ctx):\n    raise ValueError('no')\n")
    with caplog.at_level(logging.DEBUG, logger="mongoshift"), pytest.raises(ExecutionFailedError) as failed:
        await command.up(project.settings())
    assert [e["kind"] for e in failed.value.details["later_errors"]] == ["hook_failed"]
    said = [r for r in caplog.records if "after the run had already failed" in r.getMessage()]
    assert len(said) == 1 and said[0].exc_info is None


async def test_a_failed_on_error_hook_is_listed_with_the_failure_it_followed(project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The migration's failure decides the exit code (7); the ``on_error`` hook that failed after it was only
    logged, while ``later_errors`` is where a later failure is listed (``after_all`` is)."""
    hooks = tmp_path / "failing_on_error.py"
    hooks.write_text("def on_error(name, error, ctx):\n    raise RuntimeError('the pager is down')\n")
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", "def up(ctx):\n    raise ValueError('no')\n")
    with pytest.raises(ExecutionFailedError) as failed:
        await command.up(project.settings())
    later = failed.value.details["later_errors"]
    assert [(e["kind"], e["details"]["hook"]) for e in later] == [("hook_failed", "on_error")]
    assert "the pager is down" in later[0]["message"]


@pytest.mark.parametrize("kind", ["async def", "def"])
async def test_a_changelog_record_refused_in_a_transaction_is_not_blamed_on_the_body(project, db, kind: str) -> None:  # type: ignore[no-untyped-def]
    """The body succeeded and its record was refused (here by a validator): the error said "failed: WriteError"
    as if the migration's own code had raised; it names the changelog, and the transaction kept nothing."""
    await db.create_collection("_mongoshift_migrations", validator={"$jsonSchema": {"required": ["never_written"]}})
    wait = "await " if kind == "async def" else ""
    project.add("0001_txn.py", f"use_transaction = True\n\n{kind} up(ctx):\n    {wait}ctx.db.items.insert_one({{'tag': 'x'}}, session=ctx.session)\n")
    with pytest.raises(ExecutionFailedError) as failed:
        await command.up(project.settings())
    assert "ran, but its changelog record could not be written" in failed.value.message
    assert "rolled its changes back" in failed.value.message and failed.value.details["phase"] == "changelog-write"
    assert await tags(db) == []


async def test_a_failed_row_shows_no_applied_time_of_an_earlier_application(project, db) -> None:  # type: ignore[no-untyped-def]
    """Applied, rolled back, failed on the way up again: the record keeps the first applied_at, the row must not show it."""
    body = "def up(ctx):\n    if ctx.db.flags.count_documents({}):\n        raise ValueError('no')\n"
    project.add("0001_a.py", body + "\ndef down(ctx):\n    ctx.db.flags.insert_one({})\n")
    await command.up(project.settings())
    await command.down(project.settings())
    (reverted,) = await command.status(project.settings())
    assert (reverted.state, reverted.applied_at) == ("reverted", None)
    with pytest.raises(ExecutionFailedError):
        await command.up(project.settings())
    (failed,) = await command.status(project.settings())
    assert (failed.state, failed.applied_at) == ("failed", None)
    assert command.rows_to_json([failed])[0]["applied_at"] is None


async def test_an_exception_whose_str_raises_is_still_recorded_failed(project, db) -> None:  # type: ignore[no-untyped-def]
    """Describing it raised in turn: the run crashed (exit 1, "please report it") and no record said it failed."""
    project.add("0001_a.py", "class Odd(Exception):\n    def __str__(self):\n        raise ValueError('no text')\n\ndef up(ctx):\n    raise Odd()\n")
    with pytest.raises(ExecutionFailedError) as failed:
        await command.up(project.settings())
    assert "0001_a.py failed: Odd" in failed.value.message
    assert (await changelog(db))["0001_a.py"]["status"] == "failed"


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("def after_each(name):\n    pass\n", "after_each must take 4 arguments"),
        ("before_all = 'not a function'\n", "before_all is str, not a function"),
    ],
)
async def test_a_hook_that_cannot_be_called_is_refused_before_anything_runs(project, db, tmp_path, source: str, said: str) -> None:  # type: ignore[no-untyped-def]
    """A wrong ``after_each`` failed only once called: after its migration was applied (exit 12 half way)."""
    hooks = tmp_path / "wrong_hooks.py"
    hooks.write_text(source)
    project.write_config(hooks=str(hooks))
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    with pytest.raises(HookFailedError) as refused:
        await command.up(project.settings())
    assert said in refused.value.message and refused.value.details["problems"] == [said]
    assert await changelog(db) == {} and await tags(db) == []


async def test_a_record_with_fields_of_the_wrong_type_is_refused_naming_it(project, db) -> None:  # type: ignore[no-untyped-def]
    """A record edited by hand (``batch: "x"``): status showed it, while down and audit crashed (exit 1, "please
    report it"). A batch typed in mongosh (a double) is still one."""
    from mongoshift.errors import CollectionClashError

    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    project.add("0002_b.py", ASYNC_INSERT.format(tag="b"))
    await command.up(project.settings())
    await db["_mongoshift_migrations"].update_one({"name": "0001_a.py"}, {"$set": {"batch": 1.0}})
    assert [row.batch for row in await command.status(project.settings())] == [1, 1]
    await db["_mongoshift_migrations"].update_one({"name": "0002_b.py"}, {"$set": {"batch": "x", "applied_at": "yesterday"}})
    for call in (command.status, command.down):
        with pytest.raises(CollectionClashError) as refused:
            await call(project.settings())
        assert "the record of 0002_b.py" in refused.value.message and refused.value.details["fields"] == ["batch", "applied_at"]
    assert await tags(db) == ["a", "b"]


async def test_two_records_of_one_file_are_refused_naming_it(project, db) -> None:  # type: ignore[no-untyped-def]
    """Records copied in twice (a restore, a copy from another database, with the unique index gone): status showed
    whichever came last (here the failed copy over the applied record) and up failed building the index (exit 1,
    "the server refused an operation: DuplicateKeyError"), naming nothing to fix."""
    from mongoshift.errors import CollectionClashError

    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    await command.up(project.settings())
    records = db["_mongoshift_migrations"]
    await records.drop_index("name_unique")
    copy = await records.find_one({"name": "0001_a.py"}, {"_id": 0})
    await records.insert_one({**copy, "status": "failed"})
    project.add("0002_b.py", ASYNC_INSERT.format(tag="b"))
    for call, flags in ((command.status, {}), (command.up, {}), (command.up, {"ensure_indexes": False}), (command.down, {})):
        with pytest.raises(CollectionClashError) as refused:
            await call(project.settings(**flags))
        assert "more than one record of 0001_a.py" in refused.value.message
        assert refused.value.details == {"collection": "_mongoshift_migrations", "duplicates": ["0001_a.py"]}
    assert await tags(db) == ["a"]


# Counts the lock documents while the file imports: a file imported under the lock blocks the event loop that
# renews it, so an import slower than the lock's time-to-live (a heavy module, a loaded machine) lost the lock
# (exit 10) in a run that was doing nothing wrong.
IMPORT_COUNTS_LOCKS = """
from pymongo import MongoClient

with MongoClient({uri!r}) as _client, open({marker!r}, "a", encoding="utf-8") as _out:
    _out.write(str(_client[{db!r}]["_mongoshift_locks"].count_documents({{}})) + "\\n")

def up(ctx):
    pass

def down(ctx):
    pass
"""


async def test_down_and_redo_import_their_files_before_they_take_the_lock(project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    marker = tmp_path / "imports.txt"
    project.add("0001_a.py", IMPORT_COUNTS_LOCKS.format(uri=project.uri, marker=str(marker), db=project.db))
    s = project.settings()
    await command.up(s)
    assert (await command.redo(s)).results[-1].status == "applied"
    assert [r.status for r in (await command.up(s, "0001_a.py", force=True)).results] == ["applied"]
    assert [r.status for r in (await command.down(s)).results] == ["reverted"]
    assert marker.read_text(encoding="utf-8").split() == ["0"] * 4  # up, redo, up --force, down: each imported it unlocked


async def test_a_rollback_of_a_file_that_no_longer_imports_writes_nothing(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    s = project.settings()
    await command.up(s)
    project.add("0001_a.py", "def up(ctx)\n    pass\n")
    await db.drop_collection("_mongoshift_locks")
    for run in (command.down, command.redo):
        with pytest.raises(InvalidExportError, match=r"0001_a\.py"):
            await run(s)
    assert "_mongoshift_locks" not in await db.list_collection_names()  # refused before the lock was even taken


async def test_a_plain_line_never_reads_the_declaration_files(project, db) -> None:  # type: ignore[no-untyped-def]
    """docs/converge.md: the files of ``collections_dir`` are read only by a run that needs them (a converge, a
    background file); every plain step read them all, under the lock, and a broken one failed the line (exit 6)."""
    (project.root / "collections").mkdir()
    (project.root / "collections" / "users.py").write_text("collection = {'indexes': [\n", encoding="utf-8")
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    s = project.settings()
    assert [r.name for r in (await command.dry_run(s, "up")).rows] == ["0001_a.py"]  # as the real up, which runs
    assert [r.status for r in (await command.up(s)).results] == ["applied"]
    assert [r.status for r in (await command.redo(s)).results] == ["reverted", "applied"]
    assert [r.status for r in (await command.down(s)).results] == ["reverted"]


HOOKS_COUNT_LOCKS = """
from pymongo import MongoClient

with MongoClient({uri!r}) as _client, open({marker!r}, "a", encoding="utf-8") as _out:
    _out.write(str(_client[{db!r}]["_mongoshift_locks"].count_documents({{}})) + "\\n")

def before_all(ctx):
    pass
"""


async def test_the_hooks_module_is_imported_before_the_lock_is_taken(project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As the migration files (above): imported under the lock, a slow hooks module starved its renewal."""
    marker = tmp_path / "imports.txt"
    (project.root / "hooks.py").write_text(HOOKS_COUNT_LOCKS.format(uri=project.uri, marker=str(marker), db=project.db), encoding="utf-8")
    project.write_config(hooks="hooks.py")
    project.add("0001_a.py", ASYNC_INSERT.format(tag="a"))
    s = project.settings()
    await command.up(s)
    await command.redo(s)
    await command.up(s, "0001_a.py", force=True)
    await command.down(s)
    assert marker.read_text(encoding="utf-8").split() == ["0"] * 4  # up, redo, up --force, down: each imported it unlocked
