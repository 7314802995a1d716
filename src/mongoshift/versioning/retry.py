"""Run a read-modify-write again when a guarded write lost a race.

The function must do the whole cycle (read, decide, guarded write): retrying
only the write would replay a decision taken on stale data. Only a
``RevisionConflictError`` with reason ``"conflict"`` is retried; a vanished
document or any other error is raised at once. The pause and the randomness
are injected, so tests run without waiting and without chance.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .errors import RevisionConflictError
from .fields import check_number


@dataclass(frozen=True)
class Backoff:
    """The pause before retry ``n`` (1, 2, ...): uniform between ``first`` and
    ``min(cap, first * 2**n)`` seconds, so writers that collided spread apart."""

    first: float = 0.01
    cap: float = 1.0

    def delay(self, retry: int, rand: Callable[[], float]) -> float:
        high = max(self.first, min(self.cap, self.first * 2.0**retry))
        return self.first + rand() * (high - self.first)


DEFAULT_BACKOFF = Backoff()


def _retryable(exc: RevisionConflictError, attempt: int, attempts: int) -> bool:
    return exc.reason == "conflict" and attempt < attempts


async def retry_on_conflict[T](
    fn: Callable[[], Awaitable[T]],
    attempts: int = 3,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """Await ``fn()`` up to ``attempts`` times while it loses revision conflicts; returns its result
    or raises the last conflict."""
    if check_number(attempts, "attempts") < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 1
    while True:
        try:
            return await fn()
        except RevisionConflictError as exc:
            if not _retryable(exc, attempt, attempts):
                raise
        await sleep(backoff.delay(attempt, rand))
        attempt += 1


def retry_on_conflict_sync[T](
    fn: Callable[[], T],
    attempts: int = 3,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
    sleep: Callable[[float], object] = time.sleep,
    rand: Callable[[], float] = random.random,
) -> T:
    """The blocking form of :func:`retry_on_conflict`."""
    if check_number(attempts, "attempts") < 1:
        raise ValueError("attempts must be at least 1")
    attempt = 1
    while True:
        try:
            return fn()
        except RevisionConflictError as exc:
            if not _retryable(exc, attempt, attempts):
                raise
        sleep(backoff.delay(attempt, rand))
        attempt += 1
