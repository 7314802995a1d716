"""The run log: each run's ``ctx.log`` lines stored per run id, bounded, redacted, and never a reason for a run to fail."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import OperationFailure

from mongoshift import api
from mongoshift.errors import ConfigInvalidError, ExecutionFailedError
from mongoshift.project import run_log

LEVELS = """
async def up(ctx):
    ctx.log.debug("looking", count=1)
    ctx.log.info("copied", secret_value="kept out")
    ctx.log.warning("slow: mongodb://admin:hunter2@db.example/app password=hunter2")
    ctx.log.error("gave up on one")
"""

SYNC = """
def up(ctx):
    ctx.log.info("from the worker thread")
"""

FAILS = """
def up(ctx):
    ctx.log.info("before the failure")
    raise RuntimeError("no")
"""

MANY = """
def up(ctx):
    for i in range({n}):
        ctx.log.info(f"line {{i}}")
"""


async def test_a_runs_lines_are_stored_in_order_with_their_level_and_redacted(project, db) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_levels.py", LEVELS)
    project.add("0002_sync.py", SYNC)
    report = await api.up(project.settings())
    assert report.warnings == []
    lines = await api.run_log(project.settings(), report.run_id)
    assert [(line.seq, line.migration, line.level) for line in lines] == [
        (1, "0001_levels.py", "debug"), (2, "0001_levels.py", "info"), (3, "0001_levels.py", "warning"),
        (4, "0001_levels.py", "error"), (5, "0002_sync.py", "info"),
    ]
    assert [line.message for line in lines][:2] == ["looking", "copied"]
    assert "hunter2" not in lines[2].message and "mongodb://***@db.example/app" in lines[2].message
    assert {line.direction for line in lines} == {"up"} and {line.run_id for line in lines} == {report.run_id}
    stored = await db[project.settings().run_log_collection].find_one({"seq": 2})
    assert "kept out" not in str(stored)  # a line's data is the author's: never stored
    async with api.connect(project.settings()) as ms:
        assert [line.seq for line in await ms.run_log(report.run_id)] == [1, 2, 3, 4, 5]
        assert await ms.run_log("no-such-run") == []
        rows = {row.name: row for row in await ms.status()}
    assert rows["0001_levels.py"].run_id == report.run_id  # the status names the run that applied a file


async def test_a_failed_run_keeps_the_lines_it_logged(project) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_fails.py", FAILS)
    with pytest.raises(ExecutionFailedError):
        await api.up(project.settings())
    (row,) = await api.status(project.settings())
    assert row.state == "failed" and row.run_id
    assert [(line.level, line.message) for line in await api.run_log(project.settings(), row.run_id)] == [("info", "before the failure")]


async def test_a_run_keeps_at_most_its_bound_and_says_how_many_more(project, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(run_log, "MAX_LINES", 7)
    monkeypatch.setattr(run_log, "BATCH", 3)  # several batches, written from the worker thread's lines
    project.add("0001_many.py", MANY.format(n=12))
    report = await api.up(project.settings())
    lines = await api.run_log(project.settings(), report.run_id)
    assert [line.message for line in lines[:7]] == [f"line {i}" for i in range(7)]
    assert [line.seq for line in lines] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert lines[7].level == "warning" and lines[7].message.startswith("5 more log lines of this run were not kept")


async def test_a_failed_write_of_the_log_is_a_warning_never_the_runs_failure(project, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    original = AsyncCollection.insert_many
    refused = project.settings().run_log_collection

    async def insert_many(self: AsyncCollection[Any], documents: Any, *args: Any, **kwargs: Any) -> Any:
        if self.name == refused:
            raise OperationFailure("not authorized to insert", 13)
        return await original(self, documents, *args, **kwargs)

    monkeypatch.setattr(AsyncCollection, "insert_many", insert_many)
    project.add("0001_levels.py", LEVELS)
    report = await api.up(project.settings())
    assert [r.status for r in report.results] == ["applied"]
    (warning,) = report.warnings
    assert warning.startswith(f"4 ctx.log lines of this run could not be stored in {refused}") and "hunter2" not in warning
    monkeypatch.setattr(AsyncCollection, "insert_many", original)
    assert await api.run_log(project.settings(), report.run_id) == []


@pytest.mark.parametrize("run_id", ["", "   ", "x" * 201, 7])
async def test_a_bad_run_id_is_refused(project, run_id: Any) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigInvalidError, match="a run id is") as info:
        await api.run_log(project.settings(), run_id)
    assert info.value.exit_code == 6


def test_the_cli_shows_a_runs_lines(project, cli) -> None:  # type: ignore[no-untyped-def]
    project.add("0001_levels.py", LEVELS)
    up = cli(project, "up", "--json")
    assert up.returncode == 0, up.stderr
    run_id = json.loads(up.stdout)["run_id"]
    shown = cli(project, "run-log", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    document = json.loads(shown.stdout)
    assert document["run_id"] == run_id
    assert [(line["seq"], line["level"]) for line in document["lines"]] == [(1, "debug"), (2, "info"), (3, "warning"), (4, "error")]
    assert "hunter2" not in shown.stdout
    text = cli(project, "run-log", run_id)
    assert text.returncode == 0 and "gave up on one" in text.stdout and "warning" in text.stdout
    unknown = cli(project, "run-log", "no-such-run")
    assert unknown.returncode == 0 and "no log line is stored for this run" in unknown.stdout
    assert cli(project, "run-log", " ").returncode == 6


async def test_a_per_migration_hooks_lines_belong_to_its_migration(project, db, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``before_each`` / ``after_each`` run inside the migration's span and events: their ``ctx.log`` lines
    were stored without the migration (and direction), as if the run had logged them."""
    hooks = tmp_path / "logging_hooks.py"
    hooks.write_text(
        "def before_all(ctx):\n    ctx.log.info('all')\n"
        "def before_each(name, ctx, info):\n    ctx.log.info('before')\n"
        "def after_each(name, duration_ms, ctx, info):\n    ctx.log.info('after')\n"
    )
    project.write_config(hooks=str(hooks))
    project.add("0001_sync.py", SYNC)
    report = await api.up(project.settings())
    lines = await api.run_log(project.settings(), report.run_id)
    assert [(line.message, line.migration, line.direction) for line in lines] == [
        ("all", None, None), ("before", "0001_sync.py", "up"), ("from the worker thread", "0001_sync.py", "up"), ("after", "0001_sync.py", "up"),
    ]
