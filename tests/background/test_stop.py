"""A stop request while a lane waits (its pause, a health signal) ends the wait and writes nothing more."""

from __future__ import annotations

import asyncio
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

import pytest

from mongoshift.api import background as bg, migrations as command
from mongoshift.background.state.events import Event

from ..conftest import until
from .conftest import background_file, seed

# The files below tell the test (sys.modules["mongoshift_test_stop"], the ``side`` fixture) when the lane
# has asked for its wait before the second batch: the hook and the health signal are called right
# before it. The hook then holds the lane until ``go`` is set (a test gives a control meanwhile).
LONG_PAUSE = background_file(batch_size=10, extra="adaptive=False, throttle=throttle,").replace("pause_ms=0", "pause_ms=60_000").replace(
    "background = Background(",
    "import sys\n\ndef throttle(context):\n    side = sys.modules['mongoshift_test_stop']\n    side.asked.append(1)\n"
    "    if len(side.asked) > 1:\n        side.waiting.set()\n        assert side.go.wait(60)\n    return 0\n\nbackground = Background(",
)

# Healthy for the first batch, then busy for a minute at every ask.
BUSY_AFTER_FIRST = background_file(batch_size=10, extra="adaptive=False, health=[busy],").replace(
    "background = Background(",
    "import sys\n\ndef busy():\n    side = sys.modules['mongoshift_test_stop']\n    side.asked.append(1)\n"
    "    if len(side.asked) == 1:\n        return 0\n    side.waiting.set()\n    return 60_000\n\nbackground = Background(",
)


@pytest.fixture
def side(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    ns = types.SimpleNamespace(asked=[], waiting=threading.Event(), go=threading.Event())
    monkeypatch.setitem(sys.modules, "mongoshift_test_stop", ns)
    return ns


def recorded_calls(monkeypatch: pytest.MonkeyPatch, owner: type, name: str, when: Callable[[Any, Any], bool]) -> list[Any]:
    """Wrap the async method ``owner.name``; the results of the calls that ``when(self, result)`` accepts
    are appended to the list returned."""
    seen: list[Any] = []
    method = getattr(owner, name)

    async def recorded(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = await method(self, *args, **kwargs)
        if when(self, result):
            seen.append(result)
        return result

    monkeypatch.setattr(owner, name, recorded)
    return seen


async def run_until_three(settings: Any, name: str, seen: list[Any], what: str) -> None:
    """Run ``name`` until ``seen`` holds three calls (once would not show that the run says why it waits
    once only; a wall-clock wait would not show that a loaded machine's run got there), then stop it."""
    from mongoshift.project.run import CancelSignal

    cancel = CancelSignal()
    run = asyncio.create_task(bg.run(settings, [name], cancel=cancel))
    await until(what, lambda: len(seen) >= 3 or run.done())
    cancel.set("test")
    await run


async def _waiting_after_one_batch(fast_project, db, source: str, side, events: list[Event] | None = None):  # type: ignore[no-untyped-def]
    """An in-app runner whose one lane wrote its first batch of 10 and now waits before the next."""
    await seed(db.people, 100)
    fast_project.add("0001_names.py", source)
    s = fast_project.settings()
    await command.up(s)
    first_batch = asyncio.Event()

    def observe(event: Event) -> None:
        if events is not None:
            events.append(event)
        if event.kind == "batch":
            first_batch.set()

    runner = await bg.start_background_runner(s, observers=[observe])
    await asyncio.wait_for(first_batch.wait(), 60)
    # Not a fixed 0.5 s, which a loaded machine's lane may not have reached its wait within.
    await until("the lane waits before its second batch", side.waiting.is_set)
    return s, runner


@pytest.mark.parametrize("source", [LONG_PAUSE, BUSY_AFTER_FIRST], ids=["pause_ms", "health"])
async def test_stop_during_a_wait_writes_no_further_batch(fast_project, db, source: str, side) -> None:  # type: ignore[no-untyped-def]
    side.go.set()  # the hook lets the lane go on into its minute-long pause at once
    _, runner = await _waiting_after_one_batch(fast_project, db, source, side)
    written = await db.people.count_documents({"__v": 2})
    assert written == 10

    loop = asyncio.get_running_loop()
    started = loop.time()
    await runner.stop()
    # Half the minute-long wait: a stop that waited it out takes longer, however loaded the machine; one that
    # cut it short takes a fraction of a second, and a loaded machine's need not fit in a few seconds.
    assert loop.time() - started < 30, "the stop waited out the pause instead of cutting it short"
    assert not runner.running
    assert await db.people.count_documents({"__v": 2}) == written, "a batch was written after the stop"
    assert await db["_mongoshift_background_partitions"].count_documents({"lease": {"$exists": True}}) == 0


async def test_a_pause_given_during_a_long_wait_writes_no_further_batch(fast_project, db, side) -> None:  # type: ignore[no-untyped-def]
    events: list[Event] = []
    s, runner = await _waiting_after_one_batch(fast_project, db, LONG_PAUSE.replace("pause_ms=60_000", "pause_ms=3_000"), side, events)
    try:
        assert await db.people.count_documents({"__v": 2}) == 10
        # Given while the lane waits (its hook holds it until then), not raced against its 3 s pause.
        assert (await bg.apply_control(s, "0001_names.py", "pause")).applied == "applied"
        side.go.set()
        # Until the lane has looked at the control again after the wait (its slice ends), not for 4.5 s.
        ends = await until("the lane's slice ends", lambda: [e for e in events if e.kind == "slice_end"])
        assert ends[0].data["outcome"] == "paused"
        assert await db.people.count_documents({"__v": 2}) == 10, "a batch was written after the pause"
    finally:
        side.go.set()
        await runner.stop()
    assert (await bg.status(s, "0001_names.py"))[0].status == "paused"


async def test_a_runner_says_why_it_waits_while_another_holds_the_coordinator_lock(fast_project, db, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A killed runner's coordinator lock holds the next run up to the lease TTL: it must say so, not sit silent at pass 0."""
    import logging

    from mongoshift.background.state.store import lock_id
    from mongoshift.project.lock import LeaseLock

    await seed(db.people, 20)
    fast_project.add("0001_names.py", background_file(batch_size=10))
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as other:  # another runner's identity holds the lock
        assert await other.session.new_lock(lock_id("0001_names.py"), ttl_seconds=60).try_acquire()
        refused = recorded_calls(monkeypatch, LeaseLock, "try_acquire", lambda lock, taken: not taken and lock.lock_id == lock_id("0001_names.py"))
        caplog.set_level(logging.INFO, logger="mongoshift.background")
        await run_until_three(s, "0001_names.py", refused, "the run was refused the coordinator lock three times")
    assert len(refused) >= 3
    said = [r.getMessage() for r in caplog.records if "coordinator lock" in r.getMessage()]
    assert len(said) == 1 and "background_lease_ttl_seconds" in said[0]
    assert await db.people.count_documents({"__v": 2}) == 0



async def test_a_runner_says_why_it_waits_while_other_runners_lease_every_lane(fast_project, db, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run started right after a ``kill -9`` finds the killed runner's partition lease still live for up to
    the lease TTL: it must say why nothing moves, once, not sit silent at its last progress line."""
    import logging

    from mongoshift.background.lanes.coordinator import Coordinator

    await seed(db.people, 20)
    fast_project.add("0001_names.py", background_file(batch_size=10))
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as other:  # a killed runner's lane: it holds the one lane and never renews it
        decision = await other.coordinator.step("0001_names.py", other.spec("0001_names.py"))
        assert decision.state is not None and decision.lanes == 1
        assert await other.store.claim(decision.state, slots=[0], owner="killed-lane", ttl_ms=600_000, runner="killed")
        steps = recorded_calls(monkeypatch, Coordinator, "step", lambda _, decided: decided.next == "process" and decided.lanes == 0)
        caplog.set_level(logging.INFO, logger="mongoshift.background")
        await run_until_three(s, "0001_names.py", steps, "the run found every lane leased three times")
    said = [r.getMessage() for r in caplog.records if "leased by another runner" in r.getMessage()]  # the one lane
    assert len(steps) >= 3
    assert len(said) == 1 and "background_lease_ttl_seconds" in said[0], said
    assert await db.people.count_documents({"__v": 2}) == 0


async def test_a_runner_with_free_lanes_says_why_it_waits_while_every_open_partition_is_leased(fast_project, db, caplog, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A runner killed (``kill -9``) while it held the pass's last partitions leaves lanes free but nothing to claim
    until its leases lapse: a runner with lanes free must say why its count stands still, once, rather than show
    a frozen count with an ETA of seconds for up to the lease TTL."""
    import logging

    from mongoshift.background.lanes.lane import Lane

    await seed(db.people, 20)
    fast_project.add("0001_names.py", background_file(batch_size=10, max_parallel=2))
    s = fast_project.settings()
    await command.up(s)
    async with bg.open_engine(s) as other:  # a killed runner's lane: it holds the one open partition and never renews it
        decision = await other.coordinator.step("0001_names.py", other.spec("0001_names.py"))
        assert decision.state is not None and decision.lanes == 1
        assert await other.store.claim(decision.state, slots=[0], owner="killed-lane", ttl_ms=600_000, runner="killed")
        busy = recorded_calls(monkeypatch, Lane, "run_slice", lambda _, result: result.outcome == "busy")
        caplog.set_level(logging.INFO, logger="mongoshift.background")
        await run_until_three(s, "0001_names.py", busy, "the run's lane found the one open partition leased three times")
    said = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert len(busy) >= 3
    assert len(said) == 1 and "every open partition is leased by another runner" in said[0] and "background_lease_ttl_seconds" in said[0], said
    assert await db.people.count_documents({"__v": 2}) == 0


async def test_a_stop_before_a_migration_starts_reports_it_not_ended(fast_project, db) -> None:  # type: ignore[no-untyped-def]
    """A Ctrl-C that came before a migration of the run started (a slow start, or between two named ones) left it out
    of the reports: ``background run`` then printed ``{"background": []}`` and exited 0, as if it were done."""
    from mongoshift.cli.background import run_verdict
    from mongoshift.errors import RunAbortedError
    from mongoshift.project.run import CancelSignal

    await seed(db.people, 30)
    fast_project.add("0001_names.py", background_file(batch_size=10))
    await command.up(fast_project.settings())
    cancel = CancelSignal()
    cancel.set("test: before the run")
    reports = await bg.run(fast_project.settings(), ["0001_names.py"], cancel=cancel, client=db.client)  # connected already
    assert [(r.name, r.status) for r in reports] == [("0001_names.py", "pending")]
    assert isinstance(run_verdict(reports, interrupted=True), RunAbortedError)  # exit 11, naming it as stopped
    assert await db.people.count_documents({"__v": 2}) == 0
