"""Pacing the lanes: a fixed pause, the user's ``throttle(ctx)`` hook, and the adaptive controller.

The controller is additive-increase / multiplicative-decrease on the write
latency of each batch: a slow or overloaded batch halves the batch size (at
the minimum it pauses longer instead), a fast one first shortens the pause,
then grows the size by a twentieth of the maximum. Its state is saved on the
partition so a resumed partition starts where the last lane left off.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ...project.run import CancelSignal
from ...schema.background import Adaptive

Change = Literal["slow", "overload", "recover"]

#: A lane reports its throttle changes at most this often; the ones in between are counted in the next report.
THROTTLE_REPORT_SECONDS = 10.0


class AdaptiveController:
    def __init__(self, options: Adaptive, batch_size: int, saved: dict[str, Any] | None = None) -> None:
        self.options = options
        self.max_size = options.max_batch_size or batch_size
        self.min_size = min(options.min_batch_size, self.max_size)
        self.step = max(1, self.max_size // 20)
        self.size = self.max_size
        self.pause = 0
        self.warmed = False
        #: The write latency last fed to :meth:`record`: the ``why`` of a change, for its log line.
        self.latency_ms: float | None = None
        if saved:
            self.size = max(self.min_size, min(self.max_size, int(saved.get("batch_size", self.size))))
            self.pause = max(0, min(options.max_pause_ms, int(saved.get("pause_ms", 0))))
            self.warmed = True

    def batch_size(self) -> int:
        return self.size

    def pause_ms(self) -> int:
        return self.pause

    def state(self) -> dict[str, int]:
        return {"batch_size": self.size, "pause_ms": self.pause}

    def record(self, latency_ms: float, *, overloaded: bool = False) -> Change | None:
        """Feed one batch's write latency; returns what changed, if anything."""
        self.latency_ms = latency_ms
        if not self.warmed and not overloaded:
            self.warmed = True  # the first batch pays for cold caches and connections
            return None
        self.warmed = True
        if overloaded or latency_ms > self.options.target_latency_ms:
            if self.size > self.min_size:
                self.size = max(self.min_size, self.size // 2)
            else:
                self.pause = min(self.options.max_pause_ms, max(100, 2 * self.pause))
            return "overload" if overloaded else "slow"
        if self.pause > 0:
            self.pause = self.pause // 2 if self.pause >= 200 else 0
            return "recover"
        if self.size < self.max_size:
            self.size = min(self.max_size, self.size + self.step)
            return "recover"
        return None


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
        extra = hook(context)
        if inspect.isawaitable(extra):
            extra = await extra
        if isinstance(extra, (int, float)) and not isinstance(extra, bool) and extra > 0:
            total += float(extra)
    total += adaptive_pause_ms
    if total > 0:
        await sleep(total, cancel)
