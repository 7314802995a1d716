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

from .coordinator import Coordinator
from .lane import EngineContext, Lane
from .model import State
from .spec import Background
from .throttle import sleep

log = logging.getLogger("mongoshift.background")



@dataclass
class MigrationRun:
    """Runs one migration to an end state (or until cancelled) in this process."""

    engine: EngineContext
    coordinator: Coordinator
    poll_seconds: float = 2.0
    lane_ids: list[str] = field(default_factory=list)

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
        while the registration pins another one (a rolling deploy), it warns and waits instead of
        running the wrong code, reloading the file with ``reload`` until the two agree."""
        lanes = max(1, min(concurrency, spec.max_parallel))
        said = None
        while not self.engine.cancel.is_set():
            state = await self.engine.store.state(name)
            if state is not None and checksum is not None and state.checksum != checksum:
                if reload is not None:
                    spec, checksum = reload()
                if state.checksum != checksum:
                    if said != "checksum":
                        said = "checksum"
                        log.warning(
                            "%s: the file differs from the registered version (a deploy in progress?); waiting. "
                            "'mongoshift background repin %s' pins the file as it is now",
                            name,
                            name,
                        )
                    await sleep(self.poll_seconds * 1000, self.engine.cancel)
                    continue
                lanes = max(1, min(concurrency, spec.max_parallel))
            decision = await self.coordinator.step(name, spec)
            if decision.next == "done":
                return decision.state
            if decision.next == "wait" and decision.reason != said:
                said = decision.reason
                log.info("%s: waiting: %s", name, decision.reason)
            if decision.next != "process" or decision.lanes == 0:
                await sleep(self.poll_seconds * 1000, self.engine.cancel)
                continue
            count = min(lanes, decision.lanes)
            outcomes = await asyncio.gather(*(self._lane(name, spec, checksum) for _ in range(count)))
            if all(o in ("busy", "stale") for o in outcomes):
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
            if result.outcome in ("yielded", "done"):
                errors = 0
                continue
            if result.outcome == "error":
                errors += 1
                await sleep(min(60_000, 200 * 2**errors), self.engine.cancel)
                continue
            return result.outcome
        return "stopped"
