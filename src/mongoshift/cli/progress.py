"""The live progress bar of background migrations: documents, rate and ETA.

It reads the status from the server once a second, so it counts the work of
every process, not only this one's lanes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from ..background import command as bg
from ..config import Settings


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
                done = (r.estimate - r.remaining) if r.estimate else r.totals["scanned"]
                rate = f"{r.rate_per_second:,.0f} docs/s" if r.rate_per_second else ""
                label = f"{r.name} [{r.status}, pass {r.pass_number}]"
                eta = _clock(r.eta_seconds)
                if r.name not in bars:
                    bars[r.name] = progress.add_task(label, total=total, rate=rate, eta=eta)
                progress.update(bars[r.name], completed=done, total=total, rate=rate, eta=eta, description=label)
            await asyncio.wait({task}, timeout=1.0)


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
