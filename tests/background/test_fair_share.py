"""Lanes shared fairly between runners: one that comes second still gets its share of ``max_parallel``."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
import types
from collections import Counter
from contextlib import AsyncExitStack
from typing import Any

import pytest

from mongoshift.api import migrations as command
from mongoshift.background.lanes.engine import open_engine
from mongoshift.background.state.events import Event

from .conftest import seed

BUMP_FILE = """
import fair_share_gate
from mongoshift import Background

def migrate(doc, ctx):
    doc["n"] = doc["n"] + 1
    return doc

async def throttle(ctx):
    await fair_share_gate.opened.wait()  # the test holds the lanes here until the second runner is in line

background = Background(
    collection="people",
    from_version={source},
    to_version={target},
    migrate=migrate,
    batch_size=20,
    pause_ms=150,
    slice_ms=1000,
    max_parallel=2,
    adaptive=False,
    throttle=throttle,
    partitions={{"min_partition_docs": 20}},
)
"""

RUNS = 3
DOCS = 1200


@pytest.fixture
def gate(monkeypatch):  # type: ignore[no-untyped-def]
    """The module the migration files' throttle hook waits on (``opened``, an asyncio event)."""
    module = types.ModuleType("fair_share_gate")
    module.opened = asyncio.Event()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fair_share_gate", module)
    return module


async def _until(check: Any, what: str, bound: float = 60) -> None:
    """Until ``await check()`` is true; ``bound`` only ends a hang, it is no budget."""
    deadline = time.monotonic() + bound
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


@pytest.mark.slow  # two runners over three runs of 1,200 paced documents
async def test_a_second_runner_gets_its_share_of_the_lanes(fast_project, db, gate) -> None:  # type: ignore[no-untyped-def]
    """Two runners (two connections, two run identities) of concurrency 2 on migrations of
    max_parallel 2: the second starts once the first holds both lanes, and still works its share
    of the slices, run after run.

    The first runner's lanes wait in the file's throttle hook, holding both lanes, until the second
    has asked for a lane (or holds one): however slowly the second starts on a loaded machine, the
    first cannot finish the run alone before the second is in line."""
    await seed(db.people, DOCS)
    settings = fast_project.settings(background_poll_seconds=0.5)
    slices: dict[str, Counter[str]] = {"first": Counter(), "second": Counter()}

    def counter(who: str):  # type: ignore[no-untyped-def]
        def observe(event: Event) -> None:
            if event.kind == "slice_end":
                slices[who][event.migration] += 1

        return observe

    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(open_engine(settings, observers=[counter("first")]))
        second = await stack.enter_async_context(open_engine(settings, observers=[counter("second")]))

        async def held(runner: str) -> int:
            return await db["_mongoshift_background_partitions"].count_documents({"lease.runner": runner})

        for run in range(1, RUNS + 1):
            name = f"000{run}_bump.py"
            fast_project.add(name, BUMP_FILE.format(source=run, target=run + 1))
            await command.up(settings)
            gate.opened.clear()  # type: ignore[attr-defined]
            started = asyncio.create_task(first.run_one(name, 2))

            async def first_holds_both() -> bool:
                return await held(first.context.runner) == 2

            await _until(first_holds_both, "the first runner never held both lanes")
            joined = asyncio.create_task(second.run_one(name, 2))

            async def second_in_line(name: str = name) -> bool:
                state = await db["_mongoshift_background"].find_one({"_id": name}, {"asking": 1})
                return second.context.runner in ((state or {}).get("asking") or {}) or await held(second.context.runner) > 0

            await _until(second_in_line, "the second runner never asked for a lane")
            gate.opened.set()  # type: ignore[attr-defined]
            await asyncio.wait_for(asyncio.gather(started, joined), timeout=120)
            assert (await first.store.state(name)).status == "completed"  # type: ignore[union-attr]
            assert await db.people.count_documents({"__v": run + 1}) == DOCS

    runs = [{who: slices[who][f"000{run}_bump.py"] for who in slices} for run in range(1, RUNS + 1)]
    total = {who: sum(done[who] for done in runs) for who in slices}
    # Once the second asks, each runner holds one lane while the other waits: both work in every
    # run, and over the runs neither is left with less than a quarter of the slices (a runner left
    # out, the fault this guards against, gets none).
    assert all(min(done.values()) >= 1 for done in runs), runs
    assert min(total.values()) >= 0.25 * sum(total.values()), runs


async def test_an_ask_holds_the_others_to_their_share_until_it_lapses_or_is_withdrawn(fast_project, db, gate) -> None:  # type: ignore[no-untyped-def]
    """A runner that waits for a lane (and may die waiting) limits the others only while its ask is live."""
    from mongoshift.background.lanes.share import may_claim

    await seed(db.people, 200)
    fast_project.add("0001_bump.py", BUMP_FILE.format(source=1, target=2))
    settings = fast_project.settings()
    await command.up(settings)
    async with open_engine(settings) as engine:
        name, store = "0001_bump.py", engine.store
        assert (await engine.coordinator.step(name, engine.spec(name))).next == "process"
        state = await store.state(name)
        assert state is not None
        assert await store.claim(state, slots=[0, 1], owner="lane-a", ttl_ms=60_000, runner="a")
        assert await may_claim(store, name, "a", 2)  # alone: every lane
        await store.ask(name, "b", ttl_ms=1_000)
        assert not await may_claim(store, name, "a", 2)  # "a" holds its share, 1 of 2, while "b" waits
        assert await may_claim(store, name, "b", 2)
        await asyncio.sleep(1.2)  # "b" stopped asking without a word (it died): its ask lapses
        assert await may_claim(store, name, "a", 2)
        assert "b" not in ((await db["_mongoshift_background"].find_one({"_id": name})).get("asking") or {})
        await store.ask(name, "b", ttl_ms=60_000)
        assert not await may_claim(store, name, "a", 2)
        await store.stop_asking(name, "b")  # it left: the others take its share at once
        assert await may_claim(store, name, "a", 2)


async def test_two_lanes_of_one_runner_that_claim_together_take_one_share(fast_project, db, gate) -> None:  # type: ignore[no-untyped-def]
    """Two lanes that end their slices together judge their share one after the other: counted on
    the same leases, both would claim again and keep the waiting runner out for another slice."""
    from mongoshift.background.lanes.lane import Lane

    gate.opened.set()  # type: ignore[attr-defined]
    await seed(db.people, 200)
    fast_project.add("0001_bump.py", BUMP_FILE.format(source=1, target=2))
    settings = fast_project.settings()
    await command.up(settings)
    async with open_engine(settings) as engine:
        name = "0001_bump.py"
        spec = engine.spec(name)
        state = (await engine.coordinator.step(name, spec)).state
        assert state is not None
        await engine.store.ask(name, "another-runner", ttl_ms=60_000)
        # Both lanes count the leases before either claims, as on a slow connection; the count waits
        # for the other lane's, and gives up waiting when that lane waits its turn to judge instead.
        counted, both = 0, asyncio.Event()
        leases_by_runner = engine.store.leases_by_runner

        async def count_together(name: str) -> Counter[str | None]:
            nonlocal counted
            counted += 1
            if counted == 2:
                both.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(both.wait(), 0.5)
            return await leases_by_runner(name)

        engine.store.leases_by_runner = count_together  # type: ignore[method-assign]
        lanes = [Lane(engine.context, f"lane-{n}") for n in (1, 2)]
        results = await asyncio.gather(*(lane.run_slice(state, spec, slice_ms=1) for lane in lanes))
    assert sorted(result.outcome for result in results) == ["busy", "yielded"], results


def test_a_run_id_that_is_no_plain_token_names_the_runner_by_its_hash() -> None:
    from mongoshift.background.lanes.engine import runner_key

    assert runner_key("3f2a9c") == "3f2a9c"
    for odd in ("deploy.42", "$job", "a" * 65, ""):
        key = runner_key(odd)
        assert key != odd and len(key) == 32 and "." not in key and "$" not in key
    assert runner_key("deploy.42") == runner_key("deploy.42")
