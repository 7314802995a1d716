"""Progress of background migrations: a live bar on a terminal, a plain line per interval otherwise.

Both read the status from the server, so they count the work of every process,
not only this one's lanes. The lines are for CI logs and Kubernetes pods, where a
bar would be noise: one line each, plain text, counts and names only.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..api import background as bg
from ..background.status import BackgroundReport
from ..project.settings import Settings
from .background_view import clock

log = logging.getLogger("mongoshift.background.progress")

#: Statuses after which a migration's line is written once more, then no longer.
_FINAL = frozenset({"completed", "failed", "cancelled", "paused"})


async def show_progress(settings: Settings, task: asyncio.Task[Any], console: Console, names: list[str] | None = None) -> None:
    wanted = {n.removesuffix(".py") for n in names} if names else None
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("ETA {task.fields[eta]}"),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        bars: dict[str, Any] = {}
        while not task.done():
            try:
                reports = await bg.status(settings)
            except Exception:
                reports = []
            for r in reports:
                if wanted is not None and r.name.removesuffix(".py") not in wanted:
                    continue
                if r.status == "completed" and r.name not in bars:
                    continue
                total = r.estimate or None
                done = _done(r)
                rate = f"{r.rate_per_second:,.0f} docs/s" if r.rate_per_second else ""
                label = f"{r.name} [{r.status}, pass {r.pass_number}]"
                eta = clock(r.eta_seconds)
                if r.name not in bars:
                    bars[r.name] = progress.add_task(label, total=total, rate=rate, eta=eta)
                progress.update(bars[r.name], completed=done, total=total, rate=rate, eta=eta, description=label)
            await asyncio.wait({task}, timeout=1.0)


FIRST_LINE_AFTER = 2.0


def _done(r: BackgroundReport) -> int:
    return (r.estimate - r.remaining) if r.estimate else r.totals["scanned"]


def progress_line(r: BackgroundReport) -> str:
    """``NAME: done/total documents (pct), rate, ETA, pass, status``: no id, no document value."""
    done = _done(r)
    total = f"{r.estimate:,}" if r.estimate else "?"
    percent = f"{min(100, done * 100 // r.estimate)}%" if r.estimate else "-"
    rate = f"{r.rate_per_second:,.0f} docs/s" if r.rate_per_second else "-"
    return f"{r.name}: {done:,}/{total} documents ({percent}), {rate}, ETA {clock(r.eta_seconds)}, pass {r.pass_number}, {r.status}"


async def log_progress(settings: Settings, task: asyncio.Task[Any], interval: float, names: list[str] | None = None) -> None:
    """Until ``task`` ends, every ``interval`` seconds one INFO line per migration of the run.

    A migration is logged while it is under way, and once more when it reaches an end state
    (from the run's own reports when the run ends). The first lines come after at most
    ``FIRST_LINE_AFTER`` seconds, so that a run planning a large collection says so at once
    rather than staying silent for a whole interval.
    A status read that fails is skipped: the next interval tries again.
    """
    wanted = {n.removesuffix(".py") for n in names} if names else None
    active: set[str] = set()
    wait = min(interval, FIRST_LINE_AFTER)
    while not task.done():
        await asyncio.wait({task}, timeout=wait)
        wait = interval
        if task.done():
            if not task.cancelled() and task.exception() is None:
                for r in task.result():  # the last line of each one logged: how it ended
                    if r.name in active:
                        log.info("progress %s", progress_line(r))
            return
        try:
            reports = await bg.status(settings)
        except Exception:  # noqa: BLE001 - a progress line is never worth failing the run
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
            log.info("progress %s", progress_line(r))
