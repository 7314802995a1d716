"""Riding out a lost connection: a runner retries with backoff for a bounded time, then gives up.

A background run lasts hours, and a server that is slow for a while (an election, a
long command on a busy server, a network blip) is not a reason to stop it: the work is
idempotent from MongoDB's state, so a runner that could not reach the server goes on
where the state says once it can again. The failures of one outage are counted
together, whichever lane or the coordinator met them; the runner gives up (exit 5)
only when no request has succeeded for ``background_reconnect_seconds``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from pymongo.errors import PyMongoError

from ...project.server_errors import connection_words

log = logging.getLogger("mongoshift.background")

#: The first wait after a lost connection, doubled on each failure up to the cap.
FIRST_RETRY_MS = 500
RETRY_CAP_MS = 15_000


@dataclass
class Outage:
    """One process's connection trouble: since when nothing succeeded, and how many tries failed."""

    bound_s: float
    now: Callable[[], float]
    since: float | None = None
    tries: int = 0

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
            log.error("no request to MongoDB succeeded for %.0fs: giving up", now - self.since)
            raise exc
        return float(min(RETRY_CAP_MS, FIRST_RETRY_MS * 2 ** (self.tries - 1)))

    def ok(self) -> None:
        """A request succeeded: the outage, if there was one, is over."""
        if self.since is not None:
            log.info("the connection to MongoDB is back after %.0fs; going on", self.now() - self.since)
        self.since, self.tries = None, 0
