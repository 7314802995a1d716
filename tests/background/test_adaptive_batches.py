"""The adaptive batch size on the embedded server: it grows on an idle one, it resumes where it was,
``adaptive=False`` keeps it fixed, and ``background status`` says what it is and why.

The engine's clock is the test's (``CLOCK``): a throttle hook moves it 200 ms before each batch (a
pause), the transform 1 ms per document (the work). What the controller measures is therefore the
same on any machine under any load: the test waits on the lane's batches, never on time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.lane import Lane
from mongoshift.background.state.events import Event
from mongoshift.cli.background_view import details

from .conftest import seed

NAME = "0001_names.py"

FILE = """
from mongoshift import Background

CLOCK = [1000.0]

def throttle(ctx):
    CLOCK[0] += 0.2  # a 200 ms wait before each batch, on the engine's clock
    return 0

def migrate(doc, ctx):
    CLOCK[0] += 0.001  # 1 ms of work per document
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, throttle=throttle,
                        batch_size=10, pause_ms=0, max_replication_lag_ms=False, {adaptive})
"""

@asynccontextmanager
async def on_the_files_clock(s, seen: list[Event]) -> AsyncIterator[tuple[Any, Any, Any]]:  # type: ignore[no-untyped-def]
    """An engine whose clock is the migration file's ``CLOCK``, its spec, and the migration's first pass planned."""
    async with bg.open_engine(s, observers=[seen.append]) as engine:
        spec = engine.spec(NAME)
        clock = spec.migrate.__globals__["CLOCK"]
        engine.context.now = lambda: clock[0]
        state = (await engine.coordinator.step(NAME, spec)).state
        assert state is not None
        yield engine, spec, state


#: A batch of n documents is n ms of work in a 200 + n ms cycle: far under 90%, so each window of
#: three full batches grows the size by a fifth, from batch_size (10) to its default bound (100).
GROWING = [10] + [s for s in (10, 12, 14, 16, 19, 22, 26, 31, 37, 44, 52, 62, 74, 88) for _ in range(3)]


async def test_the_batch_size_grows_on_an_idle_server_to_its_bound_and_status_says_why(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 2000)
    fast_project.add(NAME, FILE.replace("{adaptive}", ""))
    s = fast_project.settings()
    await command.up(s)
    seen: list[Event] = []
    async with on_the_files_clock(s, seen) as (engine, spec, state):
        # A slice of 6 s on the engine's clock, then another by a new lane: it starts from what the
        # partition saved, not from batch_size, and without a warm-up batch.
        first = await Lane(engine.context, "lane-1").run_slice(state, spec, slice_ms=6000)
        assert first.outcome == "yielded"
        [between] = await bg.status(s, NAME)
        second = await Lane(engine.context, "lane-2").run_slice(state, spec, slice_ms=10**9)
    assert second.outcome == "done" and first.counters["migrated"] + second.counters["migrated"] == 2000

    sizes = [e.data["size"] for e in seen if e.kind == "batch"]
    assert sizes[: len(GROWING)] == GROWING
    assert sizes[len(GROWING) :] == [100] * 4 + [100]  # 2000 - 1531 documents at the bound; the last read is short
    # The growth went on across the two lanes: the second neither started over from 10 nor spent a
    # warm-up batch (either would break the runs of three above).
    assert first.counters["batches"] >= 10 and second.counters["batches"] >= 10

    # Between the slices, status showed the partition's size and why, from its saved state.
    sizing = between.batch_size
    assert sizing["mode"] == "adaptive" and (sizing["start"], sizing["min"], sizing["max"]) == (10, 10, 100)
    [lane] = sizing["lanes"]
    assert lane["reason"] == "grow" and lane["leased"] is False and 10 < lane["batch_size"] < 100
    assert lane["work_percent"] < 85
    rows = [value for label, value in details(between) if label == "batch size"]
    assert rows == [
        "adaptive from 10, within 10–100: aims at 90% of a lane's time reading and writing, batches within 500 ms",
        f"partition {lane['partition']}: {lane['batch_size']:,} (grew, the lane worked {lane['work_percent']}% of its time, under 90%)",
    ]
    throttles = [e.data for e in seen if e.kind == "throttle"]
    assert throttles and all(t["change"] == "grow" for t in throttles)  # folded: at most one every 10 s of the clock
    assert sum(t["changes"] for t in throttles) <= 14 and all(t["target_percent"] == 90 and t["work_percent"] < 85 for t in throttles)


async def test_adaptive_false_keeps_batch_size_whatever_the_batches_take(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 300)
    fast_project.add(NAME, FILE.replace("{adaptive}", "adaptive=False"))
    s = fast_project.settings()
    await command.up(s)
    seen: list[Event] = []
    async with on_the_files_clock(s, seen) as (engine, spec, state):
        result = await Lane(engine.context, "lane-1").run_slice(state, spec, slice_ms=10**9)
        [report] = await bg.status(s, NAME)
    assert result.outcome == "done" and result.counters["migrated"] == 300
    assert [e.data["size"] for e in seen if e.kind == "batch"] == [10] * 31  # the last read finds nothing
    assert not [e for e in seen if e.kind == "throttle"]
    assert report.batch_size == {"mode": "fixed", "start": 10}
    assert [value for label, value in details(report) if label == "batch size"] == ["10, fixed (adaptive=False)"]


async def test_an_unpaced_lanes_pause_is_its_checkpoints_round_trip(fast_project, db, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """With ``pause_ms=0`` and no hook, the checkpoint's round trip is the lane's pause (docs/background.md, "Batch
    size"): a checkpoint of 200 ms on the engine's clock grows the batches as a 200 ms pause does. Two ways this
    broke: the next batch read ahead at the size of the one before (stop 53's read ahead: the size never grew), and
    a round trip hidden inside the batch's work (stop 54 tried one: the transform ran while the checkpoint was in
    flight), which left the lane working all its cycle and shrank its batches to the minimum."""
    await seed(db.people, 2000)
    unpaced = FILE.replace("throttle=throttle,", "").replace("{adaptive}", "")
    fast_project.add(NAME, unpaced)
    s = fast_project.settings()
    await command.up(s)
    seen: list[Event] = []
    async with on_the_files_clock(s, seen) as (engine, spec, state):
        clock = spec.migrate.__globals__["CLOCK"]
        checkpoint = engine.store.checkpoint

        async def round_trip(lease, **kwargs):  # type: ignore[no-untyped-def]
            if kwargs.get("intent") is not None:  # a batch's checkpoint, between its read and its write
                clock[0] += 0.2
            return await checkpoint(lease, **kwargs)

        monkeypatch.setattr(engine.store, "checkpoint", round_trip)
        result = await Lane(engine.context, "lane-1").run_slice(state, spec, slice_ms=10**9)
    assert result.outcome == "done" and result.counters["migrated"] == 2000
    # As the paced lane's growth, each size a batch longer: the batch read ahead when the size changed was read at
    # the old one (and is not judged). The read ahead after it takes the new size: it took the old one for ever, so
    # an unpaced lane's batches never grew.
    sizes = [e.data["size"] for e in seen if e.kind == "batch"]
    unpaced_growth = [10] + [s for s in (10, 12, 14, 16, 19, 22, 26, 31, 37, 44, 52, 62, 74, 88) for _ in range(4)]
    assert sizes[: len(unpaced_growth)] == unpaced_growth, sizes
