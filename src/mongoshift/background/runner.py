"""Running background migrations in this process: a coordinator loop and up to N lanes.

Several processes (on several machines) can run the same migration: the
leases share the partitions out and the slot index caps the lanes at
``max_parallel`` across all of them.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field

from pymongo.errors import PyMongoError

from ..errors import BackgroundFileChangedError
from ..schema.background import Background
from .coordinator import Coordinator
from .engine import EngineContext
from .lane import Lane
from .model import TERMINAL, State
from .throttle import sleep

log = logging.getLogger("mongoshift.background")

#: How often a runner waiting for a changed file says it still waits (each poll would be noise).
CHECKSUM_WAIT_LOG_SECONDS = 30.0


@dataclass
class MigrationRun:
    """Runs one migration to an end state (or until cancelled) in this process."""

    engine: EngineContext
    coordinator: Coordinator
    poll_seconds: float = 2.0
    checksum_wait_seconds: float = 300.0
    lane_ids: list[str] = field(default_factory=list)
    _slices: int = field(default=0, init=False)
    _asked_at: float | None = field(default=None, init=False)

    async def run(
        self,
        name: str,
        spec: Background,
        *,
        concurrency: int = 1,
        checksum: str | None = None,
        reload: Callable[[], tuple[Background, str]] | None = None,
    ) -> State | None:
        """Drive ``name`` to an end state. ``checksum`` is the version of the file this process imported:
        while the registration pins another one (a rolling deploy), it does not run the wrong code.
        A finished or paused migration has nothing to wait for: its state is returned at once. A
        live one waits, reloading the file with ``reload``, until the two agree, for at most
        ``checksum_wait_seconds``; then :class:`BackgroundFileChangedError`."""
        try:
            return await self._run(name, spec, concurrency=concurrency, checksum=checksum, reload=reload)
        finally:
            await self._stop_asking(name)

    async def _run(
        self, name: str, spec: Background, *, concurrency: int, checksum: str | None, reload: Callable[[], tuple[Background, str]] | None
    ) -> State | None:
        lanes = max(1, min(concurrency, spec.max_parallel))
        said = None
        waiting_since: float | None = None
        told = 0.0
        while not self.engine.cancel.is_set():
            state = await self.engine.store.state(name)
            if state is not None and checksum is not None and state.checksum != checksum:
                if reload is not None:
                    spec, checksum = reload()
                if state.checksum != checksum:
                    if state.status in TERMINAL or state.status == "paused":
                        _tell_changed_file(name, state.status)
                        return state
                    now = self.engine.now()
                    if waiting_since is None:
                        waiting_since = told = now
                        log.warning(
                            "%s: the file differs from the registered version (a deploy in progress?): waiting up to "
                            "%gs for them to agree. 'mongoshift background repin %s' pins the file as it is now",
                            name, self.checksum_wait_seconds, name,
                        )
                    waited = now - waiting_since
                    if waited >= self.checksum_wait_seconds:
                        raise BackgroundFileChangedError(
                            f"{name}: the file still differs from the registered version after "
                            f"{self.checksum_wait_seconds:g}s, so nothing was run. Deploy the registered file to every "
                            f"runner, or pin this one with 'mongoshift background repin {name}'",
                            file=name,
                            status=state.status,
                        )
                    if now - told >= CHECKSUM_WAIT_LOG_SECONDS:
                        told = now
                        log.warning(
                            "%s: still waiting for the file to match the registered version (%.0fs of %gs)",
                            name, waited, self.checksum_wait_seconds,
                        )
                    left = self.checksum_wait_seconds - waited
                    await sleep(max(0.0, min(self.poll_seconds, left)) * 1000, self.engine.cancel)
                    continue
                if waiting_since is not None:
                    log.info("%s: the file matches the registered version again; running it", name)
                    waiting_since = None
                lanes = max(1, min(concurrency, spec.max_parallel))
            decision = await self.coordinator.step(name, spec)
            if decision.next == "done":
                return decision.state
            if decision.next == "wait" and decision.reason != said:
                said = decision.reason
                log.info("%s: waiting: %s", name, decision.reason)
            if decision.next == "process" and decision.lanes == 0:
                await self._ask(name)  # every lane is held elsewhere: ask for a share of them
            if decision.next != "process" or decision.lanes == 0:
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
                continue
            slices = self._slices
            await asyncio.gather(*(self._lane(name, spec, checksum) for _ in range(lanes)))
            if self._slices == slices:  # no lane got a partition: look again after a poll, not at once
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
        return await self.engine.store.state(name)

    async def _lane(self, name: str, spec: Background, checksum: str | None) -> str:
        lane = Lane(self.engine, f"lane-{secrets.token_hex(4)}")
        errors = 0
        while not self.engine.cancel.is_set():
            state = await self.engine.store.state(name)
            if state is None or state.status != "running" or (checksum is not None and state.checksum != checksum):
                return "stale"
            result = await lane.run_slice(state, spec)
            if result.outcome == "busy":  # every slot is held, or this runner holds its fair share while another waits
                await self._ask(name)
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
                continue
            if result.outcome != "exhausted":
                self._slices += 1
            if result.outcome in ("yielded", "done"):
                errors = 0
                continue
            if result.outcome == "error":
                errors += 1
                await sleep(min(60_000, 200 * 2**errors), self.engine.cancel)
                continue
            return result.outcome
        return "stopped"

    async def _ask(self, name: str) -> None:
        """Ask for a share of the lanes (see :mod:`.share`), at most twice a poll; the ask outlives a few polls and a lease."""
        now = self.engine.now()
        if self._asked_at is not None and now - self._asked_at < self.poll_seconds / 2:
            return
        self._asked_at = now
        ttl_ms = max(self.engine.lease_ttl_ms, int(3 * self.poll_seconds * 1000))
        await self.engine.store.ask(name, self.engine.runner, ttl_ms=ttl_ms)

    async def _stop_asking(self, name: str) -> None:
        """Withdraw this runner's ask as it leaves, so the others take the free lanes at once; else it lapses."""
        if self._asked_at is None:
            return
        self._asked_at = None
        try:
            await self.engine.store.stop_asking(name, self.engine.runner)
        except PyMongoError as exc:
            log.debug("withdrawing the ask for a lane failed: %s", type(exc).__name__)


def _tell_changed_file(name: str, status: str) -> None:
    """What to do about a finished or paused migration whose file changed since it was registered."""
    then = {
        "failed": f"then 'mongoshift background retry {name}'",
        "cancelled": f"then 'mongoshift background retry {name}'",
        "paused": f"then 'mongoshift background resume {name}'",
        "completed": "so that status shows the file as it is",
    }.get(status, "")
    log.warning(
        "%s is %s and its file differs from the registered version; nothing was run. Pin the file as it is now "
        "with 'mongoshift background repin %s' (or deploy the registered file), %s",
        name, status, name, then,
    )
