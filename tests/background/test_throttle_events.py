"""Throttle events: at most one every 10 s per lane, counting the changes folded into it."""

from __future__ import annotations

import itertools
import logging

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.lanes.lane import Lane
from mongoshift.background.state.events import Event, Events

from .conftest import background_file, seed

NAME = "0001_names.py"


async def test_a_lane_reports_its_throttle_changes_at_most_every_ten_seconds(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    await seed(db.people, 200)
    fast_project.add(NAME, background_file(batch_size=10, extra="adaptive=False, max_replication_lag_ms=False,"))
    s = fast_project.settings()
    await command.up(s)
    clock = [1000.0]  # the engine's time, moved by the health signal below: no test sleeps 10 s
    seen: list[tuple[float, Event]] = []
    asks = []

    def busy() -> int:
        """Before each batch: busy once (1 ms, and 3 s pass), then healthy."""
        asks.append(1)
        if len(asks) % 2:
            clock[0] += 3
            return 1
        return 0

    caplog.set_level(logging.DEBUG, logger="mongoshift.background")
    async with bg.open_engine(s, observers=[lambda event: seen.append((clock[0], event))]) as engine:
        engine.context.now = lambda: clock[0]
        spec = engine.spec(NAME).model_copy(update={"health": [busy]})
        state = (await engine.coordinator.step(NAME, spec)).state
        assert state is not None
        result = await Lane(engine.context, "lane-1").run_slice(state, spec, slice_ms=10**9)
    assert result.outcome == "done" and result.counters["migrated"] == 200

    waits = len(asks) // 2  # one health wait per batch: 21 (the last batch reads nothing)
    throttles = [(at, event) for at, event in seen if event.kind == "throttle"]
    assert waits == 21
    # Without the rate limit: one event per wait. With it: at t+3 s, then every 12 s (4 waits each).
    assert len(throttles) == 6, f"{len(throttles)} throttle events for {waits} changes"
    assert [event.data["changes"] for _, event in throttles] == [1, 4, 4, 4, 4, 4]
    assert all(event.data["change"] == "health" and event.data["overloads"] == 0 for _, event in throttles)
    assert [event.data["waited_ms"] for _, event in throttles] == [1, 4, 4, 4, 4, 4]
    times = [at for at, _ in throttles]
    assert all(later - earlier >= 10 for earlier, later in itertools.pairwise(times))
    lines = [r for r in caplog.records if r.name == "mongoshift.background" and " throttle (partition " in r.getMessage()]
    assert len(lines) == len(throttles) and all(r.levelno == logging.INFO for r in lines)  # a change of pace is news
    assert lines[1].getMessage() == (
        f"{NAME} throttle (partition 0): waited for the server's health signals (replication lag or a health check); "
        "4 changes since the last report, 0 overloads, 4 ms waited for health"
    )


def test_overloads_are_folded_and_logged_at_warning_once_per_report(caplog) -> None:  # type: ignore[no-untyped-def]
    from mongoshift.background.lanes.throttle import ThrottleReport

    clock = [0.0]
    report = ThrottleReport(lambda: clock[0])
    events: list[Event] = []
    fan = Events([events.append])
    caplog.set_level(logging.DEBUG, logger="mongoshift.background")
    for step in range(14):  # 14 changes in 5 s, as in the issue
        clock[0] = step * 5 / 14
        data = report.note("overload" if step % 2 else "slow", batch_size=10, pause_ms=100)
        if data is not None:
            fan.emit("throttle", NAME, **data)
    clock[0] = 10.0
    data = report.note("recover", batch_size=20, pause_ms=0)
    assert data is not None
    fan.emit("throttle", NAME, **data)
    assert [e.data for e in events] == [
        {"change": "slow", "batch_size": 10, "pause_ms": 100, "changes": 1, "overloads": 0},
        {"change": "recover", "batch_size": 20, "pause_ms": 0, "changes": 14, "overloads": 7},
    ]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "14 changes since the last report, 7 overloads" in warnings[0].getMessage()


SLOW_FILE = """
from mongoshift import Background

#: The engine's clock in this test: one second per document the transform sees, so a batch of
#: n documents takes n seconds to write whatever the machine's load.
CLOCK = [1000.0]

def migrate(doc, ctx):
    CLOCK[0] += 1
    doc["full_name"] = doc.pop("first") + " " + doc.pop("last")
    return doc

background = Background(collection="people", from_version=1, to_version=2, migrate=migrate, batch_size=16, pause_ms=0,
                        max_replication_lag_ms=False, adaptive={"target_latency_ms": 500, "min_batch_size": 10})
"""


async def test_each_change_of_pace_is_logged_at_info_with_why_and_the_new_size_and_pause(fast_project, db, caplog) -> None:  # type: ignore[no-untyped-def]
    """Every batch is slow (n seconds for n documents against a 500 ms target): after the first
    (warm-up), each window of three batches shrinks the size by a fifth at most, 16, 14, 12, 10;
    at the minimum the controller pauses instead, 100 ms, then 200."""
    await seed(db.people, 16 * 4 + 14 * 3 + 12 * 3 + 10 * 3 + 10 * 3)
    fast_project.add(NAME, SLOW_FILE)
    s = fast_project.settings()
    await command.up(s)
    seen: list[Event] = []
    caplog.set_level(logging.INFO, logger="mongoshift.background")
    async with bg.open_engine(s, observers=[seen.append]) as engine:
        spec = engine.spec(NAME)
        clock = spec.migrate.__globals__["CLOCK"]
        engine.context.now = lambda: clock[0]
        state = (await engine.coordinator.step(NAME, spec)).state
        assert state is not None
        result = await Lane(engine.context, "lane-1").run_slice(state, spec, slice_ms=10**9)
    assert result.outcome == "done" and result.counters["migrated"] == 202

    assert [e.data["size"] for e in seen if e.kind == "batch"] == [16] * 4 + [14] * 3 + [12] * 3 + [10] * 7  # the last read finds nothing
    throttles = [e.data for e in seen if e.kind == "throttle"]
    assert [(d["change"], d["batch_size"], d["pause_ms"], d["latency_ms"], d["target_ms"]) for d in throttles] == [
        ("slow", 14, 0, 16_000, 500),
        ("slow", 12, 0, 14_000, 500),
        ("slow", 10, 0, 12_000, 500),
        ("slow", 10, 100, 10_000, 500),
        ("slow", 10, 200, 10_000, 500),
    ]
    lines = [r for r in caplog.records if r.name == "mongoshift.background" and " throttle (partition " in r.getMessage()]
    assert [r.levelno for r in lines] == [logging.INFO] * 5
    assert [r.getMessage() for r in lines] == [
        (
            f"{NAME} throttle (partition 0): smaller, batches took {latency} ms on average to read, transform and write, over the 500 ms target; "
            f"{size}, adaptive pause {pause} ms before each batch; 1 change since the last report, 0 overloads"
        )
        # at the minimum (10) the size cannot shrink: the line says so instead of "now 10" again
        for latency, size, pause in (
            ("16,000", "batch size now 14", 0),
            ("14,000", "batch size now 12", 0),
            ("12,000", "batch size at its smallest, 10", 0),
            ("10,000", "batch size at its smallest, 10", 100),
            ("10,000", "batch size at its smallest, 10", 200),
        )
    ]
