"""Progress of background migrations: a live bar on a terminal, a plain line per interval otherwise.

Both read the status from the server, so they count the work of every process,
not only this one's lanes. The lines are for CI logs and Kubernetes pods, where a
bar would be noise: one line each, plain text, counts and names only. Their rate and
ETA come from the readings of the last minute (:class:`RecentRate`), not from the
average since the start, so a run the throttle slowed down shows it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..background.inspect.status import BackgroundReport
from ..project.wording import clock, plural
from .background_view import done_of

log = logging.getLogger("mongoshift.background.progress")

#: Reads every background migration's report (``ms.background.status`` of the run's session).
StatusReader = Callable[[], Awaitable[list[BackgroundReport]]]

#: Statuses after which a migration's line is written once more, then no longer.
_FINAL = frozenset({"completed", "failed", "cancelled", "paused"})


#: The stretch of recent readings the progress's rate and ETA are computed over.
RATE_WINDOW_SECONDS = 60.0
#: The shortest stretch a rate is computed over: a run's last line (its own counters) can follow a
#: status reading (the checkpointed ones, a batch behind) by milliseconds, and a batch over that
#: gap read as tens of thousands of documents a second with an ETA of zero.
MIN_RATE_SPAN_SECONDS = 1.0


class RecentRate:
    """Each migration's rate and ETA over its readings of the last ``window`` seconds.

    A reading is (when, documents scanned over every pass). The rate is the change from the
    oldest reading still in the window to the newest, so it drops as soon as the lanes slow
    down, where an average since the start would stay high for minutes. With fewer than two
    readings (the first line) nothing is known yet. ``now`` is injectable for tests.
    """

    def __init__(self, now: Callable[[], float] = time.monotonic, window: float = RATE_WINDOW_SECONDS) -> None:
        self.now = now
        self.window = window
        self._readings: dict[str, deque[tuple[float, int]]] = {}

    def observe(self, r: BackgroundReport) -> tuple[float | None, float | None]:
        """Take ``r`` as a reading; its documents per second and seconds left (None: not known)."""
        at, scanned = self.now(), r.totals["scanned"]
        readings = self._readings.setdefault(r.name, deque())
        if readings and scanned < readings[-1][1]:  # counted anew (retry --from-start): the old readings no longer apply
            readings.clear()
        readings.append((at, scanned))
        while len(readings) > 2 and readings[1][0] <= at - self.window:
            readings.popleft()
        since, before = readings[0]
        if at - since < MIN_RATE_SPAN_SECONDS:
            return None, None
        rate = (scanned - before) / (at - since)
        eta = r.remaining / rate if rate > 0 and r.status in ("pending", "running") else None
        return rate, eta


def per_second(rate: float | None) -> str:
    """``1,234 docs/s``; a decimal below 10, so that a throttled crawl does not read as a stop."""
    if rate is None:
        return "-"
    return f"{rate:,.1f} docs/s" if rate < 10 else f"{rate:,.0f} docs/s"


async def _reading(status: StatusReader, task: asyncio.Task[Any]) -> list[BackgroundReport] | None:
    """One status reading, or None when it failed or ``task`` (the run) ended first.

    The run's end never waits for a reading: one made while the server cannot be reached waits out
    the driver's server selection (``connect_timeout_seconds``), and the run that gave up on it (exit 5)
    would otherwise exit that much later; it is cancelled instead."""
    reading = asyncio.ensure_future(status())
    await asyncio.wait({task, reading}, return_when=asyncio.FIRST_COMPLETED)
    if not reading.done():
        reading.cancel()
        await asyncio.wait({reading})
        return None
    if reading.cancelled() or reading.exception() is not None:  # a progress line is never worth failing the run
        return None
    return reading.result()


async def show_progress(status: StatusReader, task: asyncio.Task[Any], console: Console, names: list[str] | None = None) -> None:
    wanted = {n.removesuffix(".py") for n in names} if names else None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("ETA {task.fields[eta]}"),
    )
    recent = RecentRate()
    with Progress(*columns, console=console, transient=False) as progress:
        bars: dict[str, Any] = {}
        while not task.done():
            for r in await _reading(status, task) or []:
                if wanted is not None and r.name.removesuffix(".py") not in wanted:
                    continue
                if r.status == "completed" and r.name not in bars:
                    continue
                done, estimate = done_of(r)
                total = estimate or None
                per_s, left = recent.observe(r)
                rate, eta = per_second(per_s), clock(left)
                label = f"{r.name} [{r.status}, pass {r.pass_number}]"
                if r.name not in bars:
                    bars[r.name] = progress.add_task(label, total=total, rate=rate, eta=eta)
                progress.update(bars[r.name], completed=done, total=total, rate=rate, eta=eta, description=label)
            await asyncio.wait({task}, timeout=1.0)


FIRST_LINE_AFTER = 2.0


def progress_line(r: BackgroundReport, rate: float | None, eta: float | None) -> str:
    """``NAME: done/total documents (pct), rate, ETA, pass, status``: no id, no document value.

    ``rate`` and ``eta`` are the recent ones (:class:`RecentRate`), not the report's averages."""
    done, estimate = done_of(r)
    total = plural(estimate, "document") if estimate else "? documents"
    percent = f"{min(100, done * 100 // estimate)}%" if estimate else "-"
    return f"{r.name}: {done:,}/{total} ({percent}), {per_second(rate)}, ETA {clock(eta)}, pass {r.pass_number}, {r.status}"


async def log_progress(status: StatusReader, task: asyncio.Task[Any], interval: float, names: list[str] | None = None) -> None:
    """Until ``task`` ends, every ``interval`` seconds one INFO line per migration of the run.

    A migration is logged while it is under way, and once more when it reaches an end state
    (from the run's own reports when the run ends). The first lines come after at most
    ``FIRST_LINE_AFTER`` seconds, so that a run planning a large collection says so at once
    rather than staying silent for a whole interval.
    A status read that fails is skipped: the next interval tries again; one still under way when the
    run ends is dropped (:func:`_reading`).
    """
    wanted = {n.removesuffix(".py") for n in names} if names else None
    active: set[str] = set()
    recent = RecentRate()
    wait = min(interval, FIRST_LINE_AFTER)
    while True:
        await asyncio.wait({task}, timeout=wait)
        wait = interval
        if task.done():
            if not task.cancelled() and task.exception() is None:
                for r in task.result():  # the last line of each one logged: how it ended
                    if r.name in active:
                        log.info("progress %s", progress_line(r, *recent.observe(r)))
            return
        reports = await _reading(status, task)
        if reports is None:
            continue
        for r in reports:
            if wanted is not None and r.name.removesuffix(".py") not in wanted:
                continue
            if r.status not in _FINAL:
                active.add(r.name)
            elif r.name in active:
                active.discard(r.name)
            else:
                continue
            log.info("progress %s", progress_line(r, *recent.observe(r)))
