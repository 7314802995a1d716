"""A runner whose copy of the file differs from the registered one: wait a bounded time, or not at all."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes import drive as bg_runner
from mongoshift.errors import BackgroundFileChangedError

from ..conftest import until
from .conftest import background_file, seed

FAILING = background_file(batch_size=50).replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise ValueError('not yet')")


async def _registered(fast_project, db, source: str = background_file(batch_size=50)):  # type: ignore[no-untyped-def]
    await seed(db.people, 100)
    path = fast_project.add("0001_names.py", source)
    await command.up(fast_project.settings())
    return path


def _deploy_a_change(path) -> None:  # type: ignore[no-untyped-def]
    path.write_text(path.read_text() + "\n# deployed a fix\n")


def _says_it_waits(caplog) -> bool:  # type: ignore[no-untyped-def]
    return any("0001_names.py" in r.getMessage() and "waiting up to" in r.getMessage() for r in caplog.records)


async def test_a_failed_migration_whose_file_changed_reports_failed_at_once(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    path = await _registered(fast_project, db, FAILING)
    s = fast_project.settings()
    (failed,) = await bg.run(s, ["0001_names.py"])
    assert failed.status == "failed"
    _deploy_a_change(path)
    caplog.set_level(logging.INFO, logger="mongoshift")
    (report,) = await asyncio.wait_for(bg.run(s, ["0001_names.py"]), 60)  # it used to wait forever (the default 300 s)
    assert report.status == "failed"
    hint = " ".join(r.getMessage() for r in caplog.records if "differs" in r.getMessage())
    assert "background repin 0001_names.py" in hint and "background retry 0001_names.py" in hint


@pytest.mark.parametrize("status", ["cancelled", "completed"])
async def test_a_finished_migration_whose_file_changed_does_not_wait(fast_project, db, status: str) -> None:  # type: ignore[no-untyped-def]
    path = await _registered(fast_project, db)
    s = fast_project.settings()
    if status == "cancelled":
        await bg.apply_control(s, "0001_names.py", "cancel")
    else:
        await bg.run(s, ["0001_names.py"])
    _deploy_a_change(path)
    (report,) = await asyncio.wait_for(bg.run(s, ["0001_names.py"]), 60)  # not the default 300 s wait
    assert report.status == status


async def test_a_pending_migration_waits_at_most_the_bound_then_fails_with_what_to_do(fast_project, db, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(bg_runner, "CHECKSUM_WAIT_LOG_SECONDS", 0.3)
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=1.5)
    path = await _registered(fast_project, db)
    _deploy_a_change(path)
    caplog.set_level(logging.INFO, logger="mongoshift")
    started = asyncio.get_running_loop().time()
    with pytest.raises(BackgroundFileChangedError) as info:
        await asyncio.wait_for(bg.run(fast_project.settings(), ["0001_names.py"]), 20)
    waited = asyncio.get_running_loop().time() - started
    assert waited >= 1.5  # how much longer depends on the machine's load: bounded by the wait_for above
    assert info.value.exit_code == 38
    assert "background repin 0001_names.py" in info.value.message and "1.5" in info.value.message
    assert await db.people.count_documents({"__v": 2}) == 0  # nothing ran with the wrong code
    waits = [r for r in caplog.records if "0001_names.py" in r.getMessage() and "registered version" in r.getMessage()]
    assert "waiting up to 1.5s" in waits[0].getMessage()
    progress = [r for r in waits[1:] if "still waiting" in r.getMessage()]
    # every 0.3 s here (30 s by default), not on every 0.1 s poll: spaced at least that far apart, however
    # loaded the machine (a loaded one polls less often, so it may say it fewer times, never more often)
    assert 1 <= len(progress) <= waited / 0.3 + 1
    assert all(later.created - earlier.created >= 0.29 for earlier, later in itertools.pairwise(progress))
    assert all("s of 1.5s" in r.getMessage() for r in progress)


async def test_a_deploy_that_finishes_within_the_bound_runs_the_migration(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=30)
    path = await _registered(fast_project, db)
    registered = path.read_text()
    _deploy_a_change(path)
    caplog.set_level(logging.INFO, logger="mongoshift")
    run = asyncio.create_task(bg.run(fast_project.settings(), ["0001_names.py"]))
    # The run has seen the changed file and waits (it says so), not 0.5 s, within which a loaded machine's
    # run may not have read the file yet: the rollback below would then not be one it waited for.
    await until("the run waits for the registered file", lambda: _says_it_waits(caplog) or run.done())
    assert not run.done()
    path.write_text(registered)  # the rollout was rolled back: the registered file is here again
    (report,) = await asyncio.wait_for(run, 30)
    assert report.status == "completed" and await db.people.count_documents({"__v": 2}) == 100


def test_background_run_exits_38_after_the_bound_and_32_for_a_failed_one(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=1)
    people = sync_client[fast_project.db].people
    people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(20)])
    path = fast_project.add("0001_names.py", background_file(batch_size=50))
    assert cli(fast_project, "up").returncode == 0
    _deploy_a_change(path)
    pending = cli(fast_project, "background", "run", "0001_names", "--json")
    assert pending.returncode == 38, pending.stderr[-2000:]
    assert "repin" in __import__("json").loads(pending.stdout)["error"]["message"]

    path2 = fast_project.add("0002_fails.py", FAILING.replace('collection="people"', 'collection="others"'))
    sync_client[fast_project.db].others.insert_many([{"_id": i, "__v": 1, "__rev": 1} for i in range(5)])
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "run", "0002_fails").returncode == 32
    _deploy_a_change(path2)
    failed = cli(fast_project, "background", "run", "0002_fails")  # it used to wait forever
    assert failed.returncode == 32
    assert "background repin 0002_fails.py" in failed.stderr and "background retry 0002_fails.py" in failed.stderr


def test_a_fix_deployed_after_documents_failed_is_followed_by_the_retry_that_takes_them_up(fast_project, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    """The warning said "repin, then 'background retry NAME'": followed literally, a plain retry leaves the failed
    documents out and fails again on them; it names ``--from-start``, as the failure's own message does."""
    fast_project.write_config(background_lease_ttl_seconds=2, background_poll_seconds=0.1, background_checksum_wait_seconds=1)
    sync_client[fast_project.db].people.insert_many([{"_id": i, "first": "a", "last": "b", "__v": 1, "__rev": 1} for i in range(5)])
    path = fast_project.add("0001_names.py", FAILING)
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "run", "0001_names").returncode == 32
    path.write_text(background_file(batch_size=50))  # the fix
    told = cli(fast_project, "background", "run", "0001_names")
    assert told.returncode == 32
    said = "'mongoshift background repin 0001_names.py' (or deploy the registered file), then 'mongoshift background retry 0001_names.py --from-start'"
    assert said in told.stderr, told.stderr
    assert cli(fast_project, "background", "repin", "0001_names", "--yes").returncode == 0
    assert cli(fast_project, "background", "retry", "0001_names", "--from-start", "--yes").returncode == 0
    assert cli(fast_project, "background", "run", "0001_names").returncode == 0
    assert sync_client[fast_project.db].people.count_documents({"__v": 2}) == 5
