"""(aw) The server process's garbage-collector policy: survivors frozen, a full collection per growth."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator

import pytest

from mongoshift.embedded.collector import Collector, watch


class Node:
    """A container that can be part of a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture
def collector() -> Iterator[Collector]:
    thresholds = gc.get_threshold()
    policy = Collector(young=1_000, growth=1.5)
    policy.install()
    try:
        yield policy
    finally:
        policy.uninstall()
        assert gc.get_threshold() == thresholds


def cycle() -> Node:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return first


def test_what_survives_a_collection_is_frozen(collector: Collector) -> None:
    kept = [Node() for _ in range(100)]
    before = gc.get_freeze_count()
    gc.collect(0)  # a young collection: what it leaves alive is frozen
    assert gc.get_freeze_count() >= before + len(kept)
    assert gc.get_threshold()[0] == 1_000


def test_cyclic_garbage_frozen_alive_is_freed_by_the_full_collection(collector: Collector) -> None:
    alive = cycle()
    ref = weakref.ref(alive)
    gc.collect(0)  # the cycle is alive: frozen with the rest
    del alive  # now cyclic garbage, which reference counting cannot free
    gc.collect()  # frozen objects are left out of every collection: the garbage stays
    assert ref() is not None
    collector.collect()
    assert ref() is None


def test_a_full_collection_is_due_once_the_heap_may_have_grown_by_half(collector: Collector) -> None:
    collector.collect()
    heap = gc.get_freeze_count()
    expected = -(-(heap // 2) // 1_000)  # ceil(0.5 * heap / young), the heap counted after the collection
    assert collector.left in {expected, expected + 1}
    steps = collector.left
    for _ in range(steps - 1):
        gc.collect(0)
    assert not collector.due
    assert not collector.collect_if_due()
    gc.collect(0)
    assert collector.due
    runs = collector.full_collections
    assert collector.collect_if_due()
    assert collector.full_collections == runs + 1 and not collector.due


def test_uninstalled_nothing_stays_frozen() -> None:
    policy = Collector(young=1_000)
    policy.install()
    kept = [Node() for _ in range(10)]
    gc.collect(0)
    assert gc.get_freeze_count() > 0
    policy.uninstall()
    assert gc.get_freeze_count() == 0 and policy._after not in gc.callbacks
    assert kept


def test_the_watch_runs_a_due_collection_and_ends_with_stop(collector: Collector) -> None:
    async def scenario() -> None:
        ran = asyncio.Event()
        collect = collector.collect

        def collected() -> int:
            found = collect()
            ran.set()
            return found

        collector.collect = collected  # type: ignore[method-assign]
        stop = asyncio.Event()
        task = asyncio.create_task(watch(collector, stop, interval=0.01))
        runs = collector.full_collections
        collector.left = 0
        async with asyncio.timeout(60):
            await ran.wait()
        assert collector.full_collections == runs + 1
        stop.set()
        async with asyncio.timeout(60):
            await task

    asyncio.run(scenario())


@pytest.mark.parametrize(("young", "growth"), [(0, 1.5), (1_000, 1.0)])
def test_bad_settings_are_refused(young: int, growth: float) -> None:
    with pytest.raises(ValueError):
        Collector(young=young, growth=growth)
