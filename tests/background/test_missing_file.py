"""A registered migration whose file is not in this runner's folder (a rolling deploy half done):
wait for it, bounded, and let every other migration run meanwhile."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.errors import FileNotFoundMigrationError

from .conftest import background_file, seed

OTHER = background_file(batch_size=50).replace('collection="people"', 'collection="others"')


async def _registered(fast_project, db, wait_seconds: float):  # type: ignore[no-untyped-def]
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=wait_seconds)
    await seed(db.people, 100)
    path = fast_project.add("0001_names.py", background_file(batch_size=50))
    await command.up(fast_project.settings())
    return path


async def test_a_missing_file_is_waited_for_and_runs_once_it_is_deployed(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    path = await _registered(fast_project, db, 30)
    source = path.read_text()
    path.unlink()  # this pod has the older release: the file is not here yet
    caplog.set_level(logging.INFO, logger="mongoshift")
    run = asyncio.create_task(bg.run(fast_project.settings(), ["0001_names.py"]))

    loop, said = asyncio.get_running_loop(), asyncio.Event()

    class Said(logging.Handler):  # a state (the run says it waits), not a time: the machine may be loaded
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "0001_names.py" in message and "not in the migrations folder" in message and "waiting up to 30s" in message:
                loop.call_soon_threadsafe(said.set)

    handler = Said()
    logging.getLogger("mongoshift").addHandler(handler)
    try:
        await asyncio.wait({asyncio.ensure_future(said.wait()), run}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    finally:
        logging.getLogger("mongoshift").removeHandler(handler)
    assert said.is_set() and not run.done()  # it used to exit 8 at once
    path.write_text(source)  # the rollout reaches this pod
    (report,) = await asyncio.wait_for(run, 60)
    assert report.status == "completed" and await db.people.count_documents({"__v": 2}) == 100


@pytest.mark.parametrize("status", ["cancelled", "paused"])
async def test_a_stopped_migration_whose_file_is_missing_does_not_wait(fast_project, db, status: str) -> None:  # type: ignore[no-untyped-def]
    path = await _registered(fast_project, db, 300)
    await bg.apply_control(fast_project.settings(), "0001_names.py", "cancel" if status == "cancelled" else "pause")
    path.unlink()
    (report,) = await asyncio.wait_for(bg.run(fast_project.settings(), ["0001_names.py"]), 10)
    assert report.status == status


def test_a_named_run_waits_out_the_bound_then_exits_8_naming_the_file(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=1.5)
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "Ada", "last": "Lovelace", "__v": 1, "__rev": 1} for i in range(20)])
    path = fast_project.add("0001_names.py", background_file(batch_size=50))
    assert cli(fast_project, "up").returncode == 0
    path.unlink()
    started = time.monotonic()
    result = cli(fast_project, "background", "run", "0001_names", "--json")
    assert result.returncode == 8, result.stderr[-2000:]
    assert time.monotonic() - started >= 1.5
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "file_not_found" and error["details"]["file"] == "0001_names.py"
    assert error["details"]["missing"] == ["0001_names.py"]
    assert "0001_names.py" in error["message"] and "after 1.5s" in error["message"]
    assert "waiting up to 1.5s" in result.stderr
    assert "Lovelace" not in result.stdout + result.stderr
    assert sync_client[fast_project.db].people.count_documents({"__v": 2}) == 0


def test_run_all_runs_the_others_then_reports_the_missing_file(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=1)
    db = sync_client[fast_project.db]
    db.people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(20)])
    db.others.insert_many([{"_id": i, "first": "c", "last": "d", "__v": 1, "__rev": 1} for i in range(30)])
    missing = fast_project.add("0001_names.py", background_file(batch_size=50))
    fast_project.add("0002_others.py", OTHER)
    assert cli(fast_project, "up").returncode == 0
    missing.unlink()  # the first in name order: it used to stop --all before the second ran
    result = cli(fast_project, "background", "run", "--all", "--json")
    assert result.returncode == 8, result.stderr[-2000:]
    assert db.others.count_documents({"__v": 2}) == 30  # the other one ran to the end
    error = json.loads(result.stdout)["error"]
    assert error["details"]["missing"] == ["0001_names.py"]
    assert [(r["name"], r["status"]) for r in error["details"]["background"]] == [("0002_others.py", "completed")]
    assert "0002_others.py completed" in error["message"]


async def test_the_api_raises_the_missing_file_after_running_the_others(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    path = await _registered(fast_project, db, 0.5)
    await seed(db.others, 30)
    fast_project.add("0002_others.py", OTHER)
    await command.up(fast_project.settings())
    path.unlink()
    with pytest.raises(FileNotFoundMigrationError) as info:
        await asyncio.wait_for(bg.run(fast_project.settings()), 30)
    assert info.value.exit_code == 8
    assert [r["status"] for r in info.value.details["background"]] == ["completed"]
    assert await db.others.count_documents({"__v": 2}) == 30
