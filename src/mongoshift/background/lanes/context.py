"""What the lanes and the coordinator of one process share: the database, the store, events, timing."""

from __future__ import annotations

import asyncio
import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from pymongo.asynchronous.database import AsyncDatabase

from ...project.changelog import Changelog
from ...project.run import CancelSignal
from ...schema.background import Background
from ..state.events import Events
from ..state.store import SAMPLE_BUCKET_SECONDS, BackgroundStore
from .health import CallableSignal, HealthSignal, ReplicationLag


@dataclass
class EngineContext:
    """What lanes and coordinators of one process share."""

    db: AsyncDatabase[dict[str, Any]]
    store: BackgroundStore
    events: Events
    cancel: CancelSignal
    lease_ttl_ms: int = 30_000
    now: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    version_index_warned: set[str] = field(default_factory=set)
    client: Any = None
    lag_signals: dict[int, ReplicationLag] = field(default_factory=dict)
    #: Where a ``requires`` that names an ordinary migration is judged met (applied).
    changelog: Changelog | None = None
    #: This runner's identity on its leases and asks (the fair share counts lanes by it).
    runner: str = field(default_factory=lambda: secrets.token_hex(8))
    #: The ``shard_aware`` and ``shard_keys`` settings (see :mod:`..plan.shards`), and the collections already warned about.
    shard_aware: Literal["auto", "on", "off"] = "auto"
    shard_keys: dict[str, dict[str, Any]] = field(default_factory=dict)
    shard_warned: set[str] = field(default_factory=set)
    #: Held by a lane from judging its share to its claim: two lanes of this runner that end their
    #: slices together would otherwise both count the same leases and both claim again.
    claiming: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: The throughput samples' bucket (seconds of the wall clock): a lane adds to them mid-slice once the wall clock
    #: has entered another bucket, and at a slice's end (``inf``: only there).
    sample_seconds: float = SAMPLE_BUCKET_SECONDS
    #: The wall clock the samples are stamped with (injected by tests).
    wall: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))

    async def reap(self, name: str) -> int:
        """Free the expired leases of ``name`` (:meth:`BackgroundStore.reap`); a ``reclaimed`` event counts them."""
        freed = await self.store.reap(name)
        if freed:
            self.events.emit("reclaimed", name, leases=freed)
        return freed

    async def free_gone(self, name: str) -> int:
        """Free the leases of ``name`` whose runner died on this host (:meth:`BackgroundStore.free_gone`): a runner
        started again after a ``kill -9`` goes on at once instead of waiting out their TTL; a ``reclaimed`` event
        (``holder: "died"``) counts them."""
        freed = await self.store.free_gone(name)
        if freed:
            self.events.emit("reclaimed", name, leases=freed, holder="died")
        return freed

    def health_signals(self, spec: Background) -> list[HealthSignal]:
        """The replication-lag reader (one per limit, shared by the lanes) and the spec's own signals."""
        signals: list[HealthSignal] = [CallableSignal(fn) for fn in spec.health]
        if spec.max_replication_lag_ms is not False and self.client is not None:
            limit = spec.max_replication_lag_ms
            if limit not in self.lag_signals:
                self.lag_signals[limit] = ReplicationLag(self.client.admin.command, max_lag_ms=limit)
            signals.insert(0, self.lag_signals[limit])
        return signals
