"""The ``throttle(ctx)`` hook before each batch: what it returns adds to the pause, and a sync one
that blocks (a metrics request, a sleep) runs in a worker thread, never on the loop that renews the
lanes' leases (docs/background.md, "Throttling")."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from mongoshift.background.lanes.throttle import ThrottleContext, before_batch
from mongoshift.project.run import CancelSignal


def _context() -> ThrottleContext:
    return ThrottleContext("0001_bump.py", "people", 1, "3", 100, CancelSignal())


async def _blocked_until_the_loop_lets_it_go(call: Any) -> list[bool]:
    """Run ``call(hook)`` whose hook blocks its thread until this coroutine, on the loop, releases it.

    Were the hook run on the loop, this coroutine could not run while it blocks: the hook's wait
    would end by its own bound, unreleased, and the list would say False."""
    entered, release, released = threading.Event(), threading.Event(), []

    def hook(*_: Any) -> int:
        entered.set()
        released.append(release.wait(timeout=30))
        return 1

    task = asyncio.create_task(call(hook))
    assert await asyncio.to_thread(entered.wait, 30)
    release.set()
    await task
    return released


async def test_a_blocking_sync_hook_leaves_the_loop_free() -> None:
    async def throttle_with(hook: Any) -> None:
        await before_batch(pause_ms=0, hook=hook, context=_context(), adaptive_pause_ms=0, first=True, cancel=None)

    assert await _blocked_until_the_loop_lets_it_go(throttle_with) == [True]


async def test_a_blocking_sync_health_signal_leaves_the_loop_free() -> None:
    from mongoshift.background.lanes.health import CallableSignal

    async def ask(hook: Any) -> None:
        assert await CallableSignal(hook).wait_ms() == 1

    assert await _blocked_until_the_loop_lets_it_go(ask) == [True]


async def test_the_hooks_answer_adds_to_the_pause_and_an_async_hook_runs_on_the_loop(monkeypatch: Any) -> None:
    from mongoshift.background.lanes import throttle

    slept: list[float] = []

    async def sleep(ms: float, cancel: Any) -> None:
        slept.append(ms)

    monkeypatch.setattr(throttle, "sleep", sleep)
    seen: list[int] = []

    async def hook(ctx: ThrottleContext) -> int:
        seen.append(threading.get_ident())
        assert (ctx.partition, ctx.batch_size) == ("3", 100)
        return 250

    await before_batch(pause_ms=100, hook=hook, context=_context(), adaptive_pause_ms=40, first=False, cancel=None)
    await before_batch(pause_ms=100, hook=lambda ctx: True, context=_context(), adaptive_pause_ms=0, first=True, cancel=None)
    assert seen == [threading.get_ident()] and slept == [390]  # True is no number of ms; a lane's first batch has no pause
