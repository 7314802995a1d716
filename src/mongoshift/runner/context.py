"""What a migration function receives, and how sync and async functions are called.

A migration author writes ``def up(ctx)`` or ``async def up(ctx)``. An async
function gets the async driver objects and runs on the event loop; a sync one
gets pymongo's sync objects and runs in a worker thread, so the lock heartbeat
keeps beating while it works.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Direction = Literal["up", "down"]


class CancelSignal:
    """Set when the run should stop (Ctrl-C, lost lock, timeout); safe across threads.

    Long migrations can poll ``ctx.cancelled.is_set()`` and stop early; the
    runner itself only acts on it between migrations.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: str | None = None

    def set(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)


@dataclass
class MigrationContext:
    """Passed to ``up(ctx)``/``down(ctx)`` and to hooks.

    ``db``/``client``/``session`` are async driver objects for an ``async def``
    function and sync ones for a plain ``def``; ``session`` is set only inside a
    transaction and must be passed to every operation that belongs to it.
    """

    db: Any
    client: Any
    run_id: str
    logger: logging.Logger
    cancelled: CancelSignal
    name: str | None = None
    direction: Direction | None = None
    session: Any = None
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class UserCodeExit(Exception):
    """User code (a migration or a hook) raised ``SystemExit`` or ``KeyboardInterrupt``.

    Such code does not decide how mongoshift ends: ``sys.exit(0)`` after half
    the writes must not look like success, nor ``sys.exit(3)`` like a held
    lock. It is turned into an ordinary failure of that code; a real Ctrl-C
    never arrives this way, the CLI's signal handler sets ``ctx.cancelled``.
    """

    @classmethod
    def of(cls, exc: BaseException) -> UserCodeExit:
        if isinstance(exc, SystemExit):
            return cls(f"sys.exit({exc.code!r}) was called; raise an exception to fail a migration")
        return cls(f"{type(exc).__name__} was raised")


def guard_exit(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with ``SystemExit``/``KeyboardInterrupt`` turned into :class:`UserCodeExit` (sync or async)."""
    if is_async(fn):

        async def guarded_async(*args: Any) -> Any:
            try:
                return await fn(*args)
            except (SystemExit, KeyboardInterrupt) as exc:
                raise UserCodeExit.of(exc) from None

        return guarded_async

    def guarded(*args: Any) -> Any:
        try:
            return fn(*args)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise UserCodeExit.of(exc) from None

    return guarded


def is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    """Await an async function; run a sync one in a thread. ``sys.exit`` inside either is a failure."""
    try:
        if is_async(fn):
            return await fn(*args)
        result = await asyncio.to_thread(fn, *args)
        if inspect.isawaitable(result):  # a sync function that returned a coroutine
            return await result
        return result
    except (SystemExit, KeyboardInterrupt) as exc:
        raise UserCodeExit.of(exc) from None
