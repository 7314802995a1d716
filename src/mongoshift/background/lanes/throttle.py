"""Pacing the lanes: a fixed pause, the user's ``throttle(ctx)`` hook, and the adaptive controller.

The controller sizes a lane's batches so that it spends a target share of its time working,
like the batch optimizer of GitLab's batched background migrations. A lane's cycle is the wait
before a batch (``pause_ms``, the hook, the controller's own pause, health waits, the control
read) and the batch itself; its work is the batch's read, transform and write. Over the last
:data:`WINDOW` full batches at one size it judges that size, in this order:

1. an overloaded server (a write failed with :func:`~mongoshift.project.server_errors.overloaded`:
   a failing-over node, a time limit, an unconfirmed write concern) shrinks the batch at once,
   without waiting for the window; at the smallest size it lengthens the pause instead;
2. batches slower on average than ``target_latency_ms`` shrink it ("slow"; at the smallest size,
   a longer pause);
3. more than :data:`CONFLICT_SHARE` of the window's documents written by the application between
   their batch's read and write shrinks it ("conflicts": a smaller batch holds them for less);
4. a pause left by 1 or 2 is halved first ("recover");
5. a work share above the target band shrinks it, one below grows it ("shrink", "grow"), but
   never past ``target_latency_ms`` and never while health waits fall in the window.

Every change is a factor of at most :data:`STEP` either way (rounded to whole documents, at least
one), within ``[min_batch_size, max_batch_size]``. Durations are given to it, measured by the
lane on the engine's clock: the controller never reads a clock. Its state is saved on the
partition, so a resumed partition starts where the last lane left off, and a lane carries it
to the next partition it claims.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ...project.run import CancelSignal
from ...project.user_code import call
from ...schema.background import Adaptive

Change = Literal["grow", "shrink", "slow", "overload", "conflicts", "recover"]

#: A lane reports its throttle changes at most this often; the ones in between are counted in the next report.
THROTTLE_REPORT_SECONDS = 10.0

#: The largest factor of one change of the batch size, either way.
STEP = 1.2
#: Full batches at one size the controller averages before it judges that size.
WINDOW = 3
#: Percentage points either side of ``target_work_percent`` within which the size holds.
BAND = 5
#: The share of a window's documents that conflicted (the application wrote them mid-batch) over which the batch shrinks.
CONFLICT_SHARE = 0.05
#: The adaptive pause a slow or overloaded batch at the smallest size starts with (then doubles).
FIRST_PAUSE_MS = 100


#: Rounding slack: 12 / 1.2 is 10.000000000000002 in floating point, which must round to 10, not 11.
_EPSILON = 1e-9


def grown(size: int, factor: float) -> int:
    """``size`` times ``factor`` (capped at :data:`STEP`), in whole documents, at least one more."""
    return max(size + 1, math.floor(size * min(factor, STEP) + _EPSILON))


def shrunk(size: int, factor: float) -> int:
    """``size`` times ``factor`` (at least ``1 / STEP``), in whole documents, at least one fewer (never below 1)."""
    return max(1, min(size - 1, math.ceil(size * max(factor, 1 / STEP) - _EPSILON)))


@dataclass(frozen=True)
class Sample:
    """One full batch as the lane measured it."""

    work_ms: float  # its read, transform and write
    cycle_ms: float  # the waits before it and the whole batch (read, checkpoint, write)
    docs: int
    conflicts: int
    health_ms: float  # of the waits, those for health signals


class AdaptiveController:
    """The one controller of a lane's batch size and adaptive pause (see the module's docstring)."""

    def __init__(self, options: Adaptive, batch_size: int, saved: dict[str, Any] | None = None) -> None:
        self.options = options
        self.min_size, self.max_size = options.bounds(batch_size)
        self.size = self._bounded(batch_size)
        self.pause = 0
        self.warmed = False
        self.samples: list[Sample] = []
        self._waited_ms = 0.0
        self._health_ms = 0.0
        #: Why the size is what it is: the last change and the window's measures when it was made.
        self.reason = "start"
        self.work_percent: int | None = None
        self.batch_ms: int | None = None
        self.conflict_percent: int | None = None
        if saved:
            self.size = self._bounded(int(saved.get("batch_size", self.size)))
            self.pause = max(0, min(options.max_pause_ms, int(saved.get("pause_ms", 0))))
            self.reason = str(saved.get("reason", "resumed"))
            self.work_percent = _int_or_none(saved.get("work_percent"))
            self.batch_ms = _int_or_none(saved.get("batch_ms"))
            self.warmed = True

    def _bounded(self, size: int) -> int:
        return max(self.min_size, min(self.max_size, size))

    def batch_size(self) -> int:
        return self.size

    def pause_ms(self) -> int:
        return self.pause

    def pace(self) -> dict[str, int]:
        """The pace now: the batch size and the adaptive pause."""
        return {"batch_size": self.size, "pause_ms": self.pause}

    def state(self) -> dict[str, Any]:
        """What the partition keeps (and ``background status`` shows): the pace and why."""
        state: dict[str, Any] = {"batch_size": self.size, "pause_ms": self.pause, "reason": self.reason}
        if self.work_percent is not None:
            state["work_percent"] = self.work_percent
        if self.batch_ms is not None:
            state["batch_ms"] = self.batch_ms
        return state

    def why(self) -> dict[str, int]:
        """A change's measures and targets, for its ``throttle`` event: numbers only."""
        data = {
            "target_ms": self.options.target_latency_ms,
            "target_percent": self.options.target_work_percent,
            "min_batch_size": self.min_size,
            "max_batch_size": self.max_size,
        }
        if self.batch_ms is not None:
            data["latency_ms"] = self.batch_ms
        if self.work_percent is not None:
            data["work_percent"] = self.work_percent
        if self.conflict_percent:
            data["conflict_percent"] = self.conflict_percent
        return data

    def waited(self, ms: float, *, health_ms: float = 0.0) -> None:
        """Time the lane spent before its next batch (pauses, hook, health waits, control reads)."""
        self._waited_ms += max(0.0, ms)
        self._health_ms += max(0.0, health_ms)

    def record(
        self,
        work_ms: float,
        *,
        elapsed_ms: float | None = None,
        docs: int | None = None,
        conflicts: int = 0,
        overloaded: bool = False,
    ) -> Change | None:
        """Feed one batch: ``work_ms`` its read, transform and write, ``elapsed_ms`` the whole batch (with its
        checkpoint; ``work_ms`` when not given), ``docs`` how many it read (a batch that read fewer
        than the size, a partition's last, is not judged), ``conflicts`` how many documents the
        application wrote between the read and the write. Returns what changed, if anything."""
        cycle_ms = self._waited_ms + max(work_ms, elapsed_ms if elapsed_ms is not None else work_ms)
        health_ms, self._waited_ms, self._health_ms = self._health_ms, 0.0, 0.0
        if overloaded:
            self.warmed = True
            self.samples.clear()
            self.batch_ms = round(work_ms)
            return self._slower("overload")
        if not self.warmed:
            self.warmed = True  # the first batch pays for cold caches and connections
            return None
        read = self.size if docs is None else docs
        if read < self.size or read <= 0:
            return None
        self.samples.append(Sample(work_ms, cycle_ms, read, conflicts, health_ms))
        if len(self.samples) < WINDOW:
            return None
        del self.samples[:-WINDOW]
        return self._judge()

    def _judge(self) -> Change | None:
        window = self.samples
        work = sum(s.work_ms for s in window)
        cycle = sum(s.cycle_ms for s in window)
        if cycle <= 0:
            return None  # nothing was measured (a clock that did not move): no reason to change
        share = work / cycle
        mean_ms = work / len(window)
        conflicted = sum(s.conflicts for s in window) / max(1, sum(s.docs for s in window))
        target_ms = self.options.target_latency_ms
        target = self.options.target_work_percent / 100
        self.work_percent, self.batch_ms, self.conflict_percent = round(share * 100), round(mean_ms), math.ceil(conflicted * 100)
        if mean_ms > target_ms:
            return self._slower("slow", target_ms / mean_ms)
        if conflicted > CONFLICT_SHARE:
            return self._resized("conflicts", shrunk(self.size, 1 / STEP))
        if self.pause > 0:
            self.pause = self.pause // 2 if self.pause >= 2 * FIRST_PAUSE_MS else 0
            return self._changed("recover")
        if share * 100 > self.options.target_work_percent + BAND:
            return self._resized("shrink", shrunk(self.size, target / share))
        if share * 100 < self.options.target_work_percent - BAND and not any(s.health_ms for s in window):
            room = target_ms / mean_ms if mean_ms > 0 else STEP  # the batch time a grown batch would take stays within the target
            factor = min(target / share if share > 0 else STEP, room)
            if factor > 1 and (self.size + 1) * mean_ms / self.size <= target_ms:
                return self._resized("grow", grown(self.size, factor))
        return None

    def _slower(self, change: Change, factor: float = 1 / STEP) -> Change:
        """Shrink the batch; at the smallest size, lengthen the pause instead."""
        if self.size > self.min_size:
            self.size = self._bounded(shrunk(self.size, factor))
            return self._changed(change)
        self.pause = min(self.options.max_pause_ms, max(FIRST_PAUSE_MS, 2 * self.pause))
        return self._changed(change)

    def _resized(self, change: Change, size: int) -> Change | None:
        size = self._bounded(size)
        if size == self.size:
            return None
        self.size = size
        return self._changed(change)

    def _changed(self, change: Change) -> Change:
        self.samples.clear()  # measures of the old pace say nothing about the new one
        self.reason = change
        return change


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class ThrottleReport:
    """A lane's changes of pace, as at most one ``throttle`` event every ``interval_s``.

    An overloaded server can halve a batch every few seconds; one event (and one
    log line) per change would flood the log just when the operator reads it.
    The first change is reported at once; the ones within the interval after a
    report are folded into the next, which counts them.
    """

    now: Callable[[], float]
    interval_s: float = THROTTLE_REPORT_SECONDS
    _reported_at: float | None = field(default=None, init=False)
    _changes: int = field(default=0, init=False)
    _overloads: int = field(default=0, init=False)
    _waited_ms: float = field(default=0.0, init=False)

    def note(self, change: str, *, waited_ms: float = 0.0, **state: int) -> dict[str, Any] | None:
        """Count one change; the event's data when a report is due, else None.

        ``state`` is the pace after the change (batch size, pause); the report carries
        the latest ``change`` and, since the last report, how many ``changes`` (this one
        included), how many ``overloads`` and the health waits' total ``waited_ms``.
        """
        self._changes += 1
        self._overloads += change == "overload"
        self._waited_ms += waited_ms
        at = self.now()
        if self._reported_at is not None and at - self._reported_at < self.interval_s:
            return None
        data: dict[str, Any] = {"change": change, **state, "changes": self._changes, "overloads": self._overloads}
        if self._waited_ms:
            data["waited_ms"] = round(self._waited_ms)
        self._reported_at, self._changes, self._overloads, self._waited_ms = at, 0, 0, 0.0
        return data


async def sleep(ms: float, cancel: CancelSignal | None = None) -> None:
    """Sleep ``ms`` milliseconds, waking early when ``cancel`` is set."""
    remaining = ms / 1000
    while remaining > 0:
        if cancel is not None and cancel.is_set():
            return
        chunk = min(remaining, 0.1)
        await asyncio.sleep(chunk)
        remaining -= chunk


@dataclass
class ThrottleContext:
    """What a ``throttle(ctx)`` hook sees."""

    name: str
    collection: str
    generation: int
    partition: str
    batch_size: int
    cancelled: CancelSignal


async def before_batch(
    *,
    pause_ms: int,
    hook: Callable[..., Any] | None,
    context: ThrottleContext,
    adaptive_pause_ms: int,
    first: bool,
    cancel: CancelSignal | None,
) -> None:
    """The wait before one batch: the fixed pause (not before a lane's first), the hook, the controller."""
    total = 0.0 if first else float(pause_ms)
    if hook is not None:
        extra = await call(hook, context)  # a sync hook in a thread: one that blocks never stalls the lanes' loop
        if isinstance(extra, (int, float)) and not isinstance(extra, bool) and extra > 0:
            total += float(extra)
    total += adaptive_pause_ms
    if total > 0:
        await sleep(total, cancel)
