"""The progress of ``background run`` never holds up its end (found in a user trial).

A status reading made while the server cannot be reached waits out the driver's server selection
(``connect_timeout_seconds``, 10 s by default): a run that gave up on the lost connection (exit 5)
exited that much later, after the reading in flight, with ``background_reconnect_seconds = 3``.
"""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from mongoshift.cli.progress import log_progress, show_progress


@pytest.mark.parametrize("shown", ["lines", "bar"])
async def test_a_reading_under_way_when_the_run_ends_is_dropped(shown: str) -> None:
    started, finish, never = asyncio.Event(), asyncio.Event(), asyncio.Event()
    cancelled: list[bool] = []

    async def status() -> list[Any]:
        started.set()
        try:
            await never.wait()  # a server that does not answer
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return []

    async def run() -> list[Any]:
        await finish.wait()
        raise ConnectionError("gave up")  # the run's own failure: exit 5

    task = asyncio.create_task(run())
    if shown == "lines":
        progress = asyncio.create_task(log_progress(status, task, 0.1))
    else:
        progress = asyncio.create_task(show_progress(status, task, Console(file=io.StringIO())))
    await started.wait()
    finish.set()
    await asyncio.wait_for(progress, 30)  # a bound against a hang, not a measure: it ends as soon as the run does
    assert cancelled == [True] and task.done()
    with pytest.raises(ConnectionError):
        await task
