"""Riding out a lost connection: a runner retries with backoff for a bounded time, then gives up.

A background run lasts hours, and a server that is slow for a while (an election, a
long command on a busy server, a network blip) is not a reason to stop it: the work is
idempotent from MongoDB's state, so a runner that could not reach the server goes on
where the state says once it can again. The failures of one outage are counted
together, whichever lane or the coordinator met them; the runner gives up (exit 5)
only when no request has succeeded for ``background_reconnect_seconds``.

While an outage lasts, the runner does not send its real requests again blindly: each one would
wait the driver's whole server selection (``connect_timeout_seconds``) before failing, and the
runner would give up that long past its bound. It sends a ``ping`` bounded by what is left of the
bound instead, and starts its round again only once one succeeds.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pymongo
from pymongo.errors import PyMongoError

from ...project.run import CancelSignal
from ...project.server_errors import connection_lost, connection_words
from .throttle import sleep

log = logging.getLogger("mongoshift.background")

#: The first wait after a lost connection, doubled on each failure up to the cap.
FIRST_RETRY_MS = 500
RETRY_CAP_MS = 15_000
#: The least time a probe of the server is given, however little of the bound is left.
PROBE_FLOOR_S = 0.5


@dataclass
class Outage:
    """One process's connection trouble: since when nothing succeeded, and how many tries failed."""

    bound_s: float
    now: Callable[[], float]
    since: float | None = None
    tries: int = 0
    #: Said once: every lane and the coordinator of the runner give up on the same outage.
    gave_up: bool = False

    def failed(self, exc: PyMongoError) -> float:
        """Note a failure; the milliseconds to wait before the next try, or ``exc`` again past the bound."""
        now = self.now()
        if self.since is None:
            self.since = now
            log.warning(
                "lost the connection to MongoDB (%s): retrying for up to %gs (background_reconnect_seconds)",
                connection_words(exc), self.bound_s,
            )
        self.tries += 1
        if now - self.since >= self.bound_s:
            if not self.gave_up:
                self.gave_up = True
                log.error("no request to MongoDB succeeded for %.0fs: giving up", now - self.since)
            raise exc
        return float(min(RETRY_CAP_MS, FIRST_RETRY_MS * 2 ** (self.tries - 1)))

    def left_s(self) -> float:
        """What is left of the bound, at least :data:`PROBE_FLOOR_S`: how long a probe may wait for a server."""
        spent = 0.0 if self.since is None else self.now() - self.since
        return max(PROBE_FLOOR_S, self.bound_s - spent)

    async def ride_out(self, exc: PyMongoError, probe: Callable[[], Awaitable[object]], cancel: CancelSignal) -> None:
        """Wait out the outage ``exc`` belongs to: back off, then ``probe`` the server within what is left of
        the bound, until a probe succeeds (return) or the bound is past (raise the last failure).

        A cancelled run returns at once: its caller sees the cancel."""
        while True:
            await sleep(self.failed(exc), cancel)
            if cancel.is_set():
                return
            try:
                with pymongo.timeout(self.left_s()):
                    await probe()
            except PyMongoError as again:
                if not connection_lost(again):
                    raise
                exc = again
                continue
            return

    def ok(self) -> None:
        """A request succeeded: the outage, if there was one, is over."""
        if self.since is not None:
            log.info("the connection to MongoDB is back after %.0fs; going on", self.now() - self.since)
        self.since, self.tries = None, 0
