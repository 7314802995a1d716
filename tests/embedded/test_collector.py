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
    policy = Collector(young=1_000, growth=1.5, quiet_s=0.0)  # never busy: see the (bm) tests for the wait
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


def test_a_full_collection_is_due_once_the_survivors_have_grown_the_heap_by_half(collector: Collector) -> None:
    collector.collect()
    # The heap as the collection counted it: a young collection of another thread of this process (a driver's
    # monitor left by an earlier test) may freeze a few more objects before a count here (CI once saw 22).
    heap = collector.heap
    assert gc.get_freeze_count() >= heap
    assert collector.left in {-(-heap // 2), -(-heap // 2) + 1}  # ceil(0.5 * heap), counted after the collection
    kept = [Node() for _ in range(collector.left // 2)]
    gc.collect(0)  # half the allowance survives, and is counted
    assert not collector.due and not collector.collect_if_due()
    assert collector.left <= heap // 2 - len(kept) + 1
    kept += [Node() for _ in range(collector.left + 1)]
    gc.collect(0)  # the rest of it, and one more
    assert collector.due
    runs = collector.full_collections
    assert collector.collect_if_due()
    assert collector.full_collections == runs + 1 and not collector.due
    assert kept


def test_collections_that_free_what_they_find_do_not_bring_the_full_one_nearer(collector: Collector) -> None:
    """(ba) An update load frees nearly all it allocates: counted as a whole threshold per young
    collection, its collections made a full one due long before the heap had grown."""
    collector.collect()
    allowance = collector.left
    for _ in range(100_000):  # cyclic garbage only: about 200 automatic young collections, each finding it all
        cycle()
    assert not collector.due
    assert allowance - collector.left < allowance // 2


def test_survivors_that_replace_frozen_objects_do_not_make_a_full_collection_due(collector: Collector) -> None:
    """(bk) An update load: each new stored version survives a young collection and is frozen, while reference
    counting frees the frozen version it replaces. The count of survivors says due; the heap has not grown."""
    stored = [Node() for _ in range(20_000)]
    collector.collect()
    collector.left = 30_000  # a small allowance, whatever this process's heap: the replacements below exceed it
    for _ in range(3):  # replace every stored object, three times over: 3 x 20,000 survivors counted
        for index in range(len(stored)):
            stored[index] = Node()
        gc.collect(0)
    assert collector.due  # by the count of survivors alone
    runs = collector.full_collections
    assert not collector.collect_if_due()  # counted: not grown by half
    assert collector.full_collections == runs and collector.recounts == 1 and not collector.due
    grown = [Node() for _ in range(collector.left + 1_000)]  # now the heap really grows past half: the next check runs it
    gc.collect(0)
    assert collector.due and collector.collect_if_due() and collector.full_collections == runs + 1
    assert grown


def test_after_a_count_that_found_no_growth_the_allowance_grows_with_what_the_survivors_really_added(collector: Collector) -> None:
    """An update load's survivors replace frozen objects: counted again after the same small allowance, the heap
    was walked every few seconds for nothing (80 ms each at 100,000 documents). The next allowance is the room
    left divided by the share of survivors that grew the heap, but never more than the hard limit's room."""
    stored = [Node() for _ in range(20_000)]
    collector.collect()
    heap = collector.heap
    collector.left = collector._given = 30_000  # a small allowance: the replacements below exceed it
    for _ in range(3):
        for index in range(len(stored)):
            stored[index] = Node()
        gc.collect(0)
    assert collector.due and not collector.collect_if_due() and collector.recounts == 1
    live = gc.get_freeze_count()
    room, hard_room = 1.5 * heap - live, 3.0 * heap - live
    assert room < collector.left <= hard_room + 1  # more than the room (nearly nothing grew), within the hard bound
    kept = [Node() for _ in range(int(room) + 1_000)]  # now the heap really grows past half ...
    gc.collect(0)
    assert not collector.due  # ... and is not counted at once: the allowance says the survivors rarely add
    kept += [Node() for _ in range(collector.left + 1_000)]  # up to the hard limit's room: counted, and collected
    gc.collect(0)
    assert collector.due and collector.collect_if_due()
    assert kept and stored


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def busy_collector() -> Iterator[tuple[Collector, Clock]]:
    """A collector whose server counts as busy for 10 s after each young collection, on a clock the test moves."""
    clock = Clock()
    policy = Collector(young=1_000, growth=1.5, hard_growth=3.0, quiet_s=10.0, clock=clock)
    policy.install()
    try:
        yield policy, clock
    finally:
        policy.uninstall()


def test_a_due_full_collection_waits_while_the_server_is_busy(busy_collector: tuple[Collector, Clock]) -> None:
    """(bm) A full collection stops every command in flight: while young collections come (the server is
    loaded), a due one waits, and runs at the first check after a quiet spell."""
    collector, clock = busy_collector
    collector.collect()
    grown = [Node() for _ in range(collector.left + 1_000)]  # the heap grows by more than half...
    gc.collect(0)  # ...through a young collection: the server is busy now
    assert collector.due
    runs = collector.full_collections
    assert not collector.collect_if_due() and collector.deferred == 1
    assert collector.full_collections == runs and collector.due
    assert collector.next_check(1.0) < 1.0  # checked sooner while it waits
    clock.now += 5.0
    assert not collector.collect_if_due() and collector.deferred == 2
    clock.now += 10.0  # no young collection for 10 s: quiet
    assert collector.collect_if_due() and collector.full_collections == runs + 1
    assert not collector.due and collector.deferred == 0 and collector.next_check(1.0) == 1.0
    assert grown


def test_the_engines_commands_keep_a_due_full_collection_waiting(busy_collector: tuple[Collector, Clock]) -> None:
    """(bm) The engine's thread tells the collector of each command it runs, as it starts and as it ends:
    a server answering commands is busy even when they allocate too little for a young collection."""
    from mongoshift.embedded.engine_thread import EngineThread

    collector, clock = busy_collector
    collector.collect()
    grown = [Node() for _ in range(collector.left + 1_000)]
    gc.collect(0)
    clock.now += 20.0  # quiet since that collection
    engine = EngineThread(on_activity=collector.active)
    engine.start()
    told: list[float] = []

    async def command() -> None:
        told.append(collector.last_active)  # the start was told before the command ran

    try:
        asyncio.run(engine.run(command()))
    finally:
        engine.stop()
    assert told == [clock.now] and collector.last_active == clock.now
    runs = collector.full_collections
    assert not collector.collect_if_due() and collector.full_collections == runs
    clock.now += 20.0
    assert collector.collect_if_due() and collector.full_collections == runs + 1
    assert grown


def test_a_due_full_collection_runs_busy_or_not_once_the_heap_has_grown_past_the_hard_limit(
    busy_collector: tuple[Collector, Clock],
) -> None:
    collector, _ = busy_collector
    collector.collect()
    heap = collector.heap
    grown = [Node() for _ in range(heap // 2 + 1_000)]
    gc.collect(0)
    runs = collector.full_collections
    assert not collector.collect_if_due()  # grown by half, busy: it waits
    grown += [Node() for _ in range(2 * heap)]  # three times the heap now, still busy
    gc.collect(0)
    assert collector.collect_if_due() and collector.full_collections == runs + 1  # counted again: past the hard limit
    assert grown


def test_the_count_of_the_heap_does_not_make_a_busy_server_quiet(
    busy_collector: tuple[Collector, Clock], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """(bq) Counting the frozen heap holds the interpreter (80-300 ms for 100,000 documents), so no command
    starts or ends while it runs: a server busy as the check began is busy, however long the count took.
    Judged by the clock after the count, the B3 loop over 100,000 documents ran a full collection of its
    2.6 million objects (about 1 s) in the middle of the loop whenever a count took long enough."""
    collector, clock = busy_collector
    collector.collect()
    heap = collector.heap
    grown = [Node() for _ in range(heap // 2 + 1_000)]
    gc.collect(0)  # busy: a young collection just ran
    count = collector._count

    def slow_count() -> int:
        clock.now += 20.0  # a walk longer than the quiet time
        return count()

    monkeypatch.setattr(collector, "_count", slow_count)
    runs = collector.full_collections
    assert not collector.collect_if_due() and collector.deferred == 1 and collector.full_collections == runs
    assert grown


def test_a_waiting_collection_counts_the_heap_again_only_when_it_could_have_reached_the_hard_limit(
    busy_collector: tuple[Collector, Clock],
) -> None:
    """The heap is counted by walking it (80 ms at 100,000 documents): counted every second while a due
    collection waited through a busy run, that was 8 % of the server's time in the B3 loop."""
    collector, clock = busy_collector
    stored = [Node() for _ in range(20_000)]
    collector.collect()
    heap = collector.heap
    grown = [Node() for _ in range(heap // 2 + 1_000)]
    gc.collect(0)
    assert not collector.collect_if_due() and collector.deferred == 1  # grown by half, busy: it waits
    counts, runs = collector.counts, collector.full_collections
    for _ in range(5):  # an update load for many seconds: the survivors replace frozen objects
        for index in range(0, len(stored), 10):
            stored[index] = Node()
        gc.collect(0)
        clock.now += 2.0
        assert not collector.collect_if_due() and collector.due
    assert collector.counts == counts and collector.full_collections == runs
    clock.now += 20.0  # quiet: the waiting collection runs, with no count of the heap first
    assert collector.collect_if_due() and collector.counts == counts and collector.full_collections == runs + 1
    assert grown and stored


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
        collector.left, collector.heap = 0, 0  # due by the count, and the heap has grown past any limit
        async with asyncio.timeout(60):
            await ran.wait()
        assert collector.full_collections == runs + 1
        stop.set()
        async with asyncio.timeout(60):
            await task

    asyncio.run(scenario())


@pytest.mark.parametrize(("young", "growth", "hard"), [(0, 1.5, 3.0), (1_000, 1.0, 3.0), (1_000, 2.0, 1.5)])
def test_bad_settings_are_refused(young: int, growth: float, hard: float) -> None:
    with pytest.raises(ValueError):
        Collector(young=young, growth=growth, hard_growth=hard)
