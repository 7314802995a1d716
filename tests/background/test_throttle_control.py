"""The throttle control (``ms.background.throttle``, ``background throttle``) and the throughput samples the lanes record."""

from __future__ import annotations

import json

import pytest

from mongoshift.api import connect, migrations as command
from mongoshift.errors import ThrottleInvalidError

from .conftest import background_file, seed

NAME = "0001_names.py"


async def test_a_throttle_is_recorded_like_a_control_and_the_lanes_work_at_its_batch_size(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    fast_project.add(NAME, background_file(batch_size=100, extra="adaptive=False,"))
    s = fast_project.settings()
    await command.up(s)
    async with connect(s) as ms:
        result = await ms.background.throttle(NAME, batch_size=10, reason="peak hours")
        assert (result.applied, result.throttle) == ("applied", {"batch_size": 10})
        again = await ms.background.throttle(NAME, batch_size=10)
        assert again.applied == "unchanged"
        (done,) = await ms.background.run([NAME])
        assert done.status == "completed"
        # 200 documents at 10 a batch: 20 batches (the file's 100 would have made 2 or 3).
        assert done.totals["batches"] >= 20
        (entry,) = [h for h in done.history if h["action"] == "throttle"]
        assert entry["reason"] == "peak hours" and entry["by"]
        samples = await ms.background.samples(NAME)
        assert sum(row["migrated"] for row in samples) == 200
        assert all(row["at"].tzinfo is not None for row in samples)
        cleared = await ms.background.throttle(NAME, clear=True)
        assert cleared.throttle is None and cleared.applied == "applied"


async def test_a_pause_set_by_throttle_reaches_a_running_lane(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """The control stamps the partitions: a lane reads the new pace at its next checkpoint."""
    await seed(db.people, 100)
    fast_project.add(NAME, background_file(batch_size=10, extra="adaptive=False,"))
    s = fast_project.settings()
    await command.up(s)
    async with connect(s) as ms:
        await ms.background.throttle(NAME, pause_ms=0, batch_size=5)
        (done,) = await ms.background.run([NAME])
        assert done.totals["batches"] >= 20
        state = await db["_mongoshift_background"].find_one({"_id": NAME}, {"throttle": 1})
        assert state["throttle"] == {"batch_size": 5, "pause_ms": 0}


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [({}, "give a batch size, a pause in milliseconds or both"),
     ({"batch_size": 0}, "throttle: batch_size must be a whole number from 1 to 10,000, not 0"),
     ({"pause_ms": -1}, "throttle: pause_ms must be a whole number from 0 to 3,600,000, not -1"),
     ({"batch_size": 10_001}, "batch_size must be"), ({"batch_size": "5"}, "not '5'"), ({"clear": True, "pause_ms": 5}, "alone")],
)
async def test_a_bad_throttle_is_refused_with_53(fast_project, db, kwargs, words) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(NAME, background_file())
    s = fast_project.settings()
    await command.up(s)
    async with connect(s) as ms:
        with pytest.raises(ThrottleInvalidError) as caught:
            await ms.background.throttle(NAME, **kwargs)
    assert caught.value.exit_code == 53 and words in caught.value.message
    assert "--" not in caught.value.message  # the Python caller's parameters, never the CLI's flags


def test_the_cli_sets_a_throttle_and_refuses_a_bad_one(fast_project, cli) -> None:  # type: ignore[no-untyped-def]
    fast_project.add(NAME, background_file())
    assert cli(fast_project, "up").returncode == 0
    bad = cli(fast_project, "background", "throttle", NAME, "--batch-size", "0", "--json")
    assert bad.returncode == 53 and json.loads(bad.stdout)["error"]["kind"] == "throttle_invalid"
    assert "throttle: --batch-size must be a whole number from 1 to 10,000, not 0" in json.loads(bad.stdout)["error"]["message"]
    ok = cli(fast_project, "background", "throttle", NAME, "--pause-ms", "250", "--reason", "night", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout) == {"name": NAME, "action": "throttle", "applied": "applied", "status": "pending", "throttle": {"pause_ms": 250}}
    said = cli(fast_project, "background", "throttle", NAME, "--batch-size", "50")
    assert said.returncode == 0 and said.stdout == f"{NAME}: throttle done; pace now batch size 50, pause 250 ms\n", said.stdout  # not batch_size 50
    cleared = cli(fast_project, "background", "throttle", NAME, "--clear")
    assert cleared.stdout == f"{NAME}: throttle done; pace now the file's\n", cleared.stdout
    assert cli(fast_project, "background", "throttle", NAME, "--batch-size", "50", "--pause-ms", "250").returncode == 0
    shown = cli(fast_project, "background", "status", NAME)  # the text view said only the file's size
    assert "batch size 50, pause 250 ms (set by 'background throttle'" in shown.stdout, shown.stdout


async def test_samples_of_one_bucket_add_up_in_one_entry_and_the_oldest_go(db) -> None:  # type: ignore[no-untyped-def]
    from datetime import UTC, datetime, timedelta

    from mongoshift.background.state import store as store_module
    from mongoshift.background.state.store import BackgroundStore

    store = BackgroundStore(db, "_bg")
    await store.states.insert_one({"_id": "m.py", "registration": "r1"})
    at = datetime(2026, 1, 1, 12, 0, 3, tzinfo=UTC)
    await store.add_sample("m.py", "r1", at, {"scanned": 5, "migrated": 4})
    await store.add_sample("m.py", "r1", at + timedelta(seconds=4), {"scanned": 1, "migrated": 1, "failed": 1})
    await store.add_sample("m.py", "r2", at, {"scanned": 100})  # another registration's lane: nothing
    rows = await store.samples("m.py")
    assert [(r["at"], r["scanned"], r["migrated"], r["failed"]) for r in rows] == [(at.replace(second=0), 6, 5, 1)]
    raw = (await store.states.find_one({"_id": "m.py"}))["samples"]
    assert len(raw) == 1
    kept = store_module.SAMPLES_KEPT
    try:
        store_module.SAMPLES_KEPT = 3
        for k in range(1, 5):
            await store.add_sample("m.py", "r1", at + timedelta(seconds=10 * k), {"scanned": k})
    finally:
        store_module.SAMPLES_KEPT = kept
    assert [r["scanned"] for r in await store.samples("m.py")] == [2, 3, 4]


async def test_a_new_registration_starts_at_the_files_pace(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """The operator's throttle belongs to a registration, as its totals do: the revert that down registers runs at the
    file's pace, and the old throttle is kept in ``previous``."""
    await seed(db.people, 20)
    fast_project.add(NAME, background_file(batch_size=100, extra="adaptive=False, revert=migrate,"))
    s = fast_project.settings()
    await command.up(s)
    async with connect(s) as ms:
        await ms.background.throttle(NAME, batch_size=10, pause_ms=1000)
        await command.down(s)
        (report,) = await ms.background.status(NAME)
        assert report.direction == "revert" and report.throttle is None
        state = await db["_mongoshift_background"].find_one({"_id": NAME})
        assert state["previous"]["throttle"] == {"batch_size": 10, "pause_ms": 1000}


async def test_a_lanes_samples_go_to_the_bucket_they_were_done_in(db) -> None:  # type: ignore[no-untyped-def]
    """Samples were stamped at their write: one written just after a bucket began and the next just before it ended
    both fell in it (two buckets' documents in one, a spike on the dashboard's chart beside an empty bucket)."""
    from datetime import UTC, datetime, timedelta
    from types import SimpleNamespace

    from mongoshift.background.lanes.context import EngineContext
    from mongoshift.background.lanes.lane import Lane
    from mongoshift.background.state.events import Events
    from mongoshift.background.state.store import BackgroundStore
    from mongoshift.project.run import CancelSignal

    store = BackgroundStore(db, "_bg")
    await store.states.insert_one({"_id": "m.py", "registration": "r1"})
    start = datetime(2026, 1, 1, 12, 0, 0, 100_000, tzinfo=UTC)
    clock = [start]
    engine = EngineContext(db=db, store=store, events=Events(), cancel=CancelSignal(), wall=lambda: clock[0])
    lane = Lane(engine, "lane")
    state = SimpleNamespace(name="m.py", registration="r1")
    done = 0
    # one batch of 100 documents a second from 12:00:00.1: a sample once the clock enters a new bucket, and at the end
    for second in range(1, 26):
        clock[0] = start + timedelta(seconds=second)
        done += 100
        await lane._sample(state, {"scanned": done})  # type: ignore[arg-type]
    await lane._sample(state, {"scanned": done}, force=True)  # the slice's end, at 12:00:25.1
    rows = [(row["at"].second, row["scanned"]) for row in await store.samples("m.py")]
    # 12:00:00 holds the batches done from 12:00:00.1 to the one that crossed 12:00:10 (at 12:00:10.1), and so on:
    # each bucket its own ten, never twenty beside an empty one
    assert rows == [(0, 1000), (10, 1000), (20, 500)], rows
