"""The server process's policy for Python's cyclic garbage collector.

The server keeps every stored document, index entry and change-history event as Python objects: about
27 tracked containers a document once stored, 8 more a guarded update. CPython's generational
collector walks each long-lived object once as it leaves the young generation, once more in a middle
collection, and again in every full collection, which it runs whenever the long-lived heap has grown
by a quarter: about six walks an object over its life. In the B3 loop over 20,000 freshly inserted
documents that was one middle collection of the inserted documents (about 250 ms) and a young one, some
6 % of the server's CPU (docs/performance.md, fix (aw)).

:class:`Collector` keeps the young collections (threshold :data:`YOUNG_THRESHOLD`, fix (ak)) and
freezes what survives each automatic collection (``gc.freeze``): frozen objects are left out of every
later collection. Reference counting frees frozen objects like any other; only cyclic garbage among
frozen objects would stay. So once the collections have frozen enough survivors to grow the frozen heap
by half (:data:`GROWTH`) since the last full collection, :meth:`Collector.collect_if_due` thaws
everything and runs one full collection, then freezes the survivors again: cyclic garbage lives at
most until the heap has grown by half, and a long-lived object is walked about three times instead
of six. The server runs that check once a second (:func:`watch`), outside the collector's callback,
where a collection cannot start.

The survivors are counted, not bounded: a collection leaves them in the next generation (everything
older is frozen), so counting that generation after each one costs a walk of the survivors alone. An
update-heavy load (the B3 loop, the demo) frees nearly all it allocates; counted as a full
threshold per young collection, as at first, it ran a full collection of a 100,000-document
collection's heap (2.4 million objects, 1.2 s) in a loop that had grown the heap by 1 %
(docs/performance.md, "Fixes (ba)–(be)"). Its survivors are the new stored versions, and reference
counting frees the frozen versions they replace, which no count sees: so a full collection that the
survivors' count makes due runs only once the frozen heap, counted then, has really grown by half
(fix (bk); without it the B3 loop over 100,000 documents ran one full collection, 9 µs a document).

A full collection stops the whole server (0.3–0.8 s once a run of 20,000 documents has grown the heap):
every command in flight waits for it. So a collection that is due waits while the server is busy (a
command started or ended within the last :data:`QUIET_S` seconds: :meth:`Collector.active`, which the
engine's thread calls, or a young collection), and runs at the first check that finds it quiet (the
checks come every :data:`DEFERRED_CHECK_S` meanwhile: the pause between a load's seeding and its run,
between two runs), or at once when the frozen heap has grown to :data:`HARD_GROWTH` times its size after
the last one, busy or not (fix (bm): the engine's runs of the bench at 20,000 documents met one such
stop in two).
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Callable
from typing import Any

#: Objects allocated (net of those freed) between two young collections (fix (ak)): mongoeco
#: allocates some hundred containers per document it reads or writes, nearly all freed by reference
#: counting, so the default (2,000) ran a young collection every few documents.
YOUNG_THRESHOLD = 100_000
#: A full collection runs once the collections have grown the frozen heap by this factor.
GROWTH = 1.5
#: Seconds between two checks of :func:`watch`.
CHECK_INTERVAL_S = 1.0
#: A due full collection waits while a command or a young collection ran within this many seconds (busy)...
QUIET_S = 0.25
#: ...checked this often meanwhile, so that a pause between two loads is found...
DEFERRED_CHECK_S = 0.1
#: ...but not once the frozen heap has grown by this factor since the last full collection.
HARD_GROWTH = 3.0


class Collector:
    """Young collections, survivors frozen, a full collection per growth of the heap by :data:`GROWTH`.

    ``left`` is the number of objects the collections may still freeze before a full one is due:
    ``(growth - 1) × heap``, the heap counted after the last full collection (one walk of it, after a
    collection that has just walked it all anyway), less each collection's survivors."""

    def __init__(
        self, *, young: int = YOUNG_THRESHOLD, growth: float = GROWTH, hard_growth: float = HARD_GROWTH,
        quiet_s: float = QUIET_S, clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if young < 1 or growth <= 1 or hard_growth < growth or quiet_s < 0:
            raise ValueError("the collector needs a positive young threshold, a growth above 1, a hard growth not below it, a quiet time >= 0")
        self.young = young
        self.growth = growth
        self.hard_growth = hard_growth
        self.quiet_s = quiet_s
        self.clock = clock
        self.last_active = -math.inf  # when a command last started or ended, or an automatic collection ran
        self.deferred = 0  # checks that found a full collection due and the server busy
        self.left = 0  # objects that may still be frozen before the next full collection
        self.heap = 0  # the frozen heap after the last full collection
        self.recounts = 0  # times a full collection was due by the count of survivors, but the heap had not grown
        self.counts = 0  # walks of the frozen heap (gc.get_freeze_count)
        self._counted = 0  # the frozen heap at the last count
        self._given = 0  # the allowance ``left`` was given at the last count
        self.full_collections = 0
        self._thresholds: tuple[int, int, int] | None = None
        self._collecting = False

    def install(self) -> None:
        """Take over this process's collector (the server's own process: the policy is process-wide)."""
        if self._thresholds is not None:
            return
        self._thresholds = gc.get_threshold()
        gc.set_threshold(self.young, *self._thresholds[1:])
        gc.callbacks.append(self._after)
        self.collect()

    def uninstall(self) -> None:
        """Give the process its collector back: thresholds as they were, nothing frozen."""
        if self._thresholds is None:
            return
        gc.callbacks.remove(self._after)
        gc.set_threshold(*self._thresholds)
        self._thresholds = None
        gc.unfreeze()

    @property
    def due(self) -> bool:
        """A full collection is to be run: the survivors' count says the heap may have grown, or one waits for a pause."""
        return self._thresholds is not None and (self.left <= 0 or self.deferred > 0)

    def collect(self) -> int:
        """Thaw, run a full collection, freeze the survivors: the number of unreachable objects found."""
        self._collecting = True
        try:
            gc.unfreeze()
            found = gc.collect()
            gc.freeze()
        finally:
            self._collecting = False
        self.full_collections += 1
        self.deferred = 0
        self.heap = self._counted = gc.get_freeze_count()
        self.left = self._given = max(1, math.ceil((self.growth - 1) * self.heap))
        return found

    def collect_if_due(self) -> bool:
        """A full collection when the frozen heap has really grown by :data:`GROWTH`, at a quiet moment.

        The survivors counted after each collection only ever add: the frozen objects that reference
        counting frees meanwhile (the stored versions an update replaces) are not subtracted. So when
        the count says due, the frozen heap is counted (one walk of its list, about a tenth of a full
        collection's cost: 80 ms for the 2.6 million objects of 100,000 documents); if it has not grown
        that much, the next allowance is the room left, scaled by what the survivors really added
        (:meth:`_allowance`). A collection that is due and waits for a pause
        counts the heap again only once the survivors since the last count could have reached
        :data:`HARD_GROWTH` (a count a second, as at first, was 8 % of the server's time in the B3 loop
        over 100,000 documents, which seeds the heap past the growth and then stays busy for its run)."""
        if self._thresholds is None:
            return False
        # (bq) Quiet or busy as the check began: counting the heap holds the interpreter (80-300 ms at
        # 100,000 documents), so no command can start or end meanwhile, and a clock read after it
        # found every load quiet and ran the full collection in the middle of it.
        now = self.clock()
        hard = False
        if not self.deferred:
            if self.left > 0:
                return False
            live = self._count()
            limit = self.growth * self.heap
            if live < limit:
                self.recounts += 1
                self.left = self._allowance(live, limit)
                return False
            hard = live >= self.hard_growth * self.heap
        elif self.left <= 0:
            live = self._count()
            hard = live >= self.hard_growth * self.heap
        if not hard and now - self.last_active < self.quiet_s:
            if self.left <= 0:  # counted just now: the survivors that may come before the hard limit
                self.left = max(1, math.ceil(self.hard_growth * self.heap - live))
            self.deferred += 1
            return False  # (bm) busy: at the next quiet check
        self.collect()
        return True

    def _count(self) -> int:
        self.counts += 1
        return gc.get_freeze_count()

    def _allowance(self, live: int, limit: float) -> int:
        """The survivors to count before the heap is counted again, after a count found it under ``limit``.

        The survivors since the last count overstate its growth by as much as reference counting freed
        meanwhile (an update load: nearly all of it), so the room left is scaled by the share of them that
        really grew the heap; never by more than what would take the heap to :data:`HARD_GROWTH` if every
        survivor from now on stayed (the bound a waiting collection keeps too)."""
        spent = self._given - self.left  # survivors counted since the last count (left is <= 0 now)
        share = min(1.0, max(0.001, (live - self._counted) / spent)) if spent > 0 else 1.0
        hard_room = self.hard_growth * self.heap - live
        left = max(1, math.ceil(min((limit - live) / share, hard_room)))
        self._given, self._counted = left, live
        return left

    def active(self) -> None:
        """A command started or ended: the server is busy (any thread may call it)."""
        self.last_active = self.clock()

    def next_check(self, interval: float) -> float:
        """Seconds until :func:`watch` should check again: sooner while a due collection waits for a pause."""
        return min(interval, DEFERRED_CHECK_S) if self.deferred else interval

    def _after(self, phase: str, info: dict[str, Any]) -> None:
        # Called by the collector before and after each collection; none can start from here.
        if phase != "stop" or self._collecting:
            return
        # Everything older than this collection's generation was frozen after the last one, so its
        # survivors are the only objects in the older generations.
        self.left -= sum(len(gc.get_objects(generation)) for generation in range(1, 3))
        self.last_active = self.clock()
        gc.freeze()


async def watch(collector: Collector, stop: asyncio.Event, interval: float = CHECK_INTERVAL_S) -> None:
    """Run the collector's full collections when due, until ``stop`` is set."""
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), collector.next_check(interval))
        except TimeoutError:
            collector.collect_if_due()
