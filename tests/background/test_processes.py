"""Background migrations across processes: shared leases, kill -9, the command line."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from ..conftest import start_cli
from .conftest import background_file, seed


def wait_for_migrated(collection, count: int, proc: subprocess.Popen[str], timeout: float = 60) -> None:  # type: ignore[no-untyped-def]
    """Until ``count`` documents have the new shape, while ``proc`` is still running."""
    deadline = time.monotonic() + timeout
    while collection.count_documents({"__v": 2}) < count:
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)


@pytest.mark.slow  # 8,000 documents through two processes
async def test_two_processes_with_four_lanes_each_rewrite_every_document_once(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 8_000)
    fast_project.add(
        "0001_names.py", background_file(batch_size=100, max_parallel=8, extra="partitions={'min_partition_docs': 100},")
    )
    assert cli(fast_project, "up").returncode == 0
    procs = [start_cli(fast_project, "background", "run", "0001_names", "--concurrency", "4", "--json") for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1][-2000:] for o in outputs]
    assert await db.people.count_documents({"__v": 2, "__rev": 2}) == 8_000  # revision +1: rewritten exactly once
    assert await db.people.count_documents({"__rev": {"$ne": 2}}) == 0
    report = json.loads(outputs[0][0])["background"][0]
    assert report["status"] == "completed" and report["totals"]["migrated"] == 8_000
    partitions = db["_mongoshift_background_partitions"]
    assert await partitions.count_documents({"lease": {"$exists": True}}) == 0  # every lease released
    processes = {who async for p in partitions.find() for who in p.get("claimed_by", [])}
    assert len(processes) == 2  # both processes did part of the work


@pytest.mark.slow  # kill -9 of a process with lanes, then a second process over 4,000 documents
async def test_a_killed_lane_process_is_resumed_from_its_checkpoint(fast_project, db, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 4_000)
    fast_project.add("0001_names.py", background_file(batch_size=50, max_parallel=2, extra="partitions={'min_partition_docs': 50}, adaptive=False,"))
    assert cli(fast_project, "up").returncode == 0
    victim = start_cli(fast_project, "background", "run", "0001_names", "--concurrency", "2")
    people = sync_client[fast_project.db].people
    wait_for_migrated(people, 600, victim)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    partitions = sync_client[fast_project.db]["_mongoshift_background_partitions"]
    assert partitions.count_documents({"lease": {"$exists": True}}) >= 1  # the dead lanes' leases are still there
    survivor = cli(fast_project, "background", "run", "0001_names", "--concurrency", "2", "--json")
    assert survivor.returncode == 0, survivor.stderr[-2000:]
    assert people.count_documents({"__v": 2, "__rev": 2}) == 4_000
    assert sum(p.get("reclaims", 0) for p in partitions.find()) >= 1  # reaped after the TTL, in server time
    report = json.loads(survivor.stdout)["background"][0]
    assert report["status"] == "completed"
    assert report["totals"]["migrated"] == 4_000  # the batches the dead lanes wrote without their bookkeeping are counted


async def test_controls_and_exit_codes_from_the_command_line(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    fast_project.add("0001_names.py", background_file(batch_size=50))
    assert cli(fast_project, "up").returncode == 0
    assert cli(fast_project, "background", "status", "--check").returncode == 31
    assert cli(fast_project, "background", "run").returncode == 6
    assert cli(fast_project, "background", "pause", "0099_missing").returncode == 9
    paused = cli(fast_project, "background", "pause", "0001_names", "--reason", "night", "--json")
    assert paused.returncode == 0 and json.loads(paused.stdout)["applied"] == "applied"
    assert json.loads(cli(fast_project, "background", "pause", "0001_names", "--json").stdout)["applied"] == "unchanged"
    assert cli(fast_project, "background", "cancel", "0001_names").returncode == 42  # not interactive: needs --yes
    assert cli(fast_project, "background", "cancel", "0001_names", "--yes").returncode == 0
    assert cli(fast_project, "background", "resume", "0001_names").returncode == 33
    assert cli(fast_project, "background", "retry", "0001_names").returncode == 0
    run = cli(fast_project, "background", "run", "--all")
    assert run.returncode == 0, run.stderr
    assert cli(fast_project, "background", "status", "0001_names", "--check").returncode == 0
    parts = json.loads(cli(fast_project, "background", "status", "0001_names", "--partitions", "--json").stdout)["partitions"]
    assert parts and all(p["status"] == "done" for p in parts)
    status = json.loads(cli(fast_project, "background", "status", "--json").stdout)["background"][0]
    assert status["totals"]["migrated"] == 200 and status["rate_per_second"] > 0


async def test_a_failed_migration_exits_32(fast_project, db, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 50)
    fast_project.add("0001_names.py", background_file().replace("def migrate(doc, ctx):", "def migrate(doc, ctx):\n    raise RuntimeError('bad')"))
    assert cli(fast_project, "up").returncode == 0
    run = cli(fast_project, "background", "run", "0001_names")
    assert run.returncode == 32 and "max_document_errors" in run.stderr
    assert cli(fast_project, "background", "status", "--check").returncode == 32


async def test_ctrl_c_stops_the_lanes_and_a_later_run_continues(fast_project, db, sync_client, cli) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 3_000)
    fast_project.add("0001_names.py", background_file(batch_size=50, extra="adaptive=False,"))
    assert cli(fast_project, "up").returncode == 0
    proc = start_cli(fast_project, "background", "run", "0001_names", "--json")
    people = sync_client[fast_project.db].people
    wait_for_migrated(people, 300, proc)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 11, err[-2000:]
    assert json.loads(out)["error"]["kind"] == "aborted"
    # It says what it does: the lanes' batch and leases, not the migration line's wording.
    assert "mongoshift: stopping: each lane finishes the batch it is writing, checkpoints it and releases its lease" in err
    assert "after the current migration" not in err
    assert sync_client[fast_project.db]["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0
    assert 0 < people.count_documents({"__v": 2}) < 3_000
    assert cli(fast_project, "background", "run", "0001_names").returncode == 0
    assert people.count_documents({"__v": 2, "__rev": 2}) == 3_000


def test_create_background_writes_a_skeleton_that_refuses_todo(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    created = cli(fast_project, "create", "split names", "--background", "--json")
    assert created.returncode == 0
    name = json.loads(created.stdout)["file"]
    assert "Background(" in (fast_project.migrations / name).read_text()
    refused = cli(fast_project, "up")
    assert refused.returncode == 20 and "TODO" in refused.stderr
