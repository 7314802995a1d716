"""Run identity and cancellation: who is running, and whether the run should stop.

Every record a run writes (changelog, locks, background state, converge log)
carries the same :class:`RunInfo`; every long loop polls the same
:class:`CancelSignal`. Both belong to the project, not to one feature.
"""

from __future__ import annotations

import getpass
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # start-up time: the CLI imports CancelSignal without pydantic
    from .settings import Settings


@dataclass(frozen=True)
class RunInfo:
    """Who is running: stamped on every record a run writes."""

    run_id: str
    executed_by: str
    host: str
    environment: str


def run_info(settings: Settings, run_id: str | None = None) -> RunInfo:
    """This process's identity for one run (a fresh ``run_id`` unless one is given)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return RunInfo(
        run_id=run_id or uuid.uuid4().hex,
        executed_by=settings.executed_by or user,
        host=socket.gethostname(),
        environment=settings.environment,
    )


class CancelSignal:
    """Set when the run should stop (Ctrl-C, lost lock, timeout); safe across threads.

    Long migrations can poll ``ctx.cancelled.is_set()`` and stop early; the
    runner starts nothing after it is set, and records a migration that saw
    it and returned as failed, never applied (:class:`BodyCancel`).
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


class LinkedCancel(CancelSignal):
    """A signal of its own that also follows ``parent``: set when either is; setting it leaves ``parent`` alone.

    A session's background runner: ``runner.stop()`` stops the runner alone, while the session's
    ``cancel`` stops it with every call of the session.
    """

    def __init__(self, parent: CancelSignal) -> None:
        super().__init__()
        self._parent = parent

    def is_set(self) -> bool:
        if not self._event.is_set() and self._parent.is_set():
            self.set(self._parent.reason or "cancelled")
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        # threading has no wait on two events: the parent is looked at every 50 ms meanwhile
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self._event.wait(0.05 if remaining is None else min(remaining, 0.05))
        return True


class BodyCancel(CancelSignal):
    """``ctx.cancelled`` as one migration body sees the run's signal: the same signal, which also
    remembers whether the body saw it set (``is_set()``, ``wait()`` or ``if ctx.cancelled:``).

    A body that saw the stop may have returned early, so it is recorded failed; one that never
    looked ran to its end, and is recorded as usual.
    """

    def __init__(self, signal: CancelSignal) -> None:
        self._signal = signal
        #: The body saw the signal set.
        self.seen = False

    @property
    def reason(self) -> str | None:  # type: ignore[override]  # the run's reason, read-only here
        return self._signal.reason

    def set(self, reason: str) -> None:
        self._signal.set(reason)

    def is_set(self) -> bool:
        value = self._signal.is_set()
        self.seen = self.seen or value
        return value

    def wait(self, timeout: float | None = None) -> bool:
        value = self._signal.wait(timeout)
        self.seen = self.seen or value
        return value

    def __bool__(self) -> bool:
        return self.is_set()
