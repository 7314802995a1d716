"""The records a background migration keeps in MongoDB, as typed values.

``State`` is one document per migration in ``_mongoshift_background``;
``Partition`` one ``_id`` range of one pass in
``_mongoshift_background_partitions``, with its ``Lease`` while a lane works
it and its ``Checkpoint`` (the cursor) between batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from ...errors import CollectionClashError
from ...project.redaction import redact

Status = Literal["blocked", "pending", "running", "paused", "completed", "failed", "cancelled"]
PartitionStatus = Literal["pending", "running", "done", "failed", "superseded"]
Direction = Literal["forward", "revert"]

COUNTERS = ("scanned", "migrated", "skipped", "conflicts", "failed", "retried", "batches", "txn_retries")
#: What a throughput sample counts (see :meth:`~.store.BackgroundStore.add_sample`).
SAMPLE_COUNTERS = ("scanned", "migrated", "failed", "conflicts")
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})


def zero_counters() -> dict[str, int]:
    return dict.fromkeys(COUNTERS, 0)


@dataclass(frozen=True)
class Scope:
    """What a partition reads: an ``_id`` range inside one BSON type bracket (``gte <= _id < lt``),
    or, on a sharded collection, shard-key ``ranges`` on one ``shard``.

    ``key`` (the shard key's fields and directions) is kept whenever the key is known, even on
    an ``_id`` range: the guarded writes carry the shard key either way."""

    bracket: str | None
    gte: Any = None
    lt: Any = None
    shard: str | None = None
    key: tuple[tuple[str, Any], ...] = ()
    ranges: tuple[tuple[tuple[Any, ...], tuple[Any, ...]], ...] = ()
    jumbo: bool = False

    @property
    def key_fields(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.key)

    @property
    def targeted(self) -> bool:
        """Read by shard-key ranges (keyset over the key and ``_id``, or drained by hash range), not by ``_id`` ranges."""
        return bool(self.ranges)

    @property
    def drains(self) -> bool:
        """Ranges of a hashed key's hash space: read through the index's ``min``/``max`` bounds and
        drained (see :mod:`..plan.hash_drain`), since no query filter compares a field's hash."""
        return bool(self.ranges) and bool(self.key) and self.key[0][1] == "hashed"

    def to_document(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"bracket": self.bracket}
        if self.gte is not None:
            doc["gte"] = self.gte
        if self.lt is not None:
            doc["lt"] = self.lt
        if self.key:
            doc["key"] = [[f, d] for f, d in self.key]  # pairs: a dotted field is not a stored key
        if self.shard is not None:
            doc["shard"] = self.shard
        if self.ranges:
            doc["ranges"] = [{"min": list(low), "max": list(high)} for low, high in self.ranges]
        if self.jumbo:
            doc["jumbo"] = True
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Scope:
        return cls(
            doc.get("bracket"),
            doc.get("gte"),
            doc.get("lt"),
            shard=doc.get("shard"),
            key=tuple((f, d) for f, d in doc.get("key") or ()),
            ranges=tuple((tuple(r["min"]), tuple(r["max"])) for r in doc.get("ranges") or ()),
            jumbo=bool(doc.get("jumbo")),
        )


@dataclass(frozen=True)
class Lease:
    """A lane's claim on a partition: fenced by ``token``, capped by ``slot``."""

    partition_id: Any
    token: str
    slot: int
    owner: str
    ttl_ms: int


@dataclass(frozen=True)
class Checkpointed:
    """A checkpoint that held (the lease still had the partition), with the partition's control stamp after it.

    Every change of the migration's state stamps its open partitions anew (see
    :meth:`~.store.BackgroundStore.stamp_control`): a stamp other than the one a lane saw
    last means that the state changed since, and the lane reads it before its next batch."""

    control: Any


@dataclass
class Checkpoint:
    """Where a partition's scan stands: the last ``_id`` done (with its shard-key values on a
    targeted partition, whose keyset is the key then ``_id``), or a step's own value.

    A draining partition (hash ranges, :mod:`..plan.hash_drain`) keeps no position in a range, only
    which of its ``segment``s it is in and the ids it steps over there (``stuck``)."""

    last_id: Any = None
    started: bool = False
    step: Any = None
    last_key: tuple[Any, ...] | None = None
    segment: int = 0
    stuck: tuple[Any, ...] = ()

    def to_document(self) -> dict[str, Any]:
        if not self.started:
            return {}
        doc: dict[str, Any] = {"last_id": self.last_id}
        if self.step is not None:
            doc["step"] = self.step
        if self.last_key is not None:
            doc["last_key"] = list(self.last_key)
        if self.segment:
            doc["segment"] = self.segment
        if self.stuck:
            doc["stuck"] = list(self.stuck)
        return doc

    @classmethod
    def from_document(cls, doc: dict[str, Any] | None) -> Checkpoint:
        if not doc:
            return cls()
        key = doc.get("last_key")
        return cls(
            last_id=doc.get("last_id"),
            started=True,
            step=doc.get("step"),
            last_key=tuple(key) if key is not None else None,
            segment=int(doc.get("segment") or 0),
            stuck=tuple(doc.get("stuck") or ()),
        )


@dataclass
class Partition:
    id: Any
    background: str
    generation: int
    plan: str
    seq: int
    scope: Scope
    status: PartitionStatus
    estimate: int
    cursor: Checkpoint
    counters: dict[str, int]
    throttle: dict[str, Any] | None
    lease: dict[str, Any] | None
    failures: int = 0
    #: The control stamp when the partition was read (see :class:`Checkpointed`).
    control: Any = None
    #: The batch a lane was writing when it last checkpointed (its lease token, ids and revisions
    #: as read), or None: left by a lane that never checkpointed again, it is counted at the next claim.
    inflight: dict[str, Any] | None = None

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> Partition:
        return cls(
            id=doc["_id"],
            background=doc["background"],
            generation=doc["generation"],
            plan=doc["plan"],
            seq=doc["seq"],
            scope=Scope.from_document(doc.get("scope") or {}),
            status=doc["status"],
            estimate=doc.get("estimate", 0),
            cursor=Checkpoint.from_document(doc.get("cursor")),
            counters={k: int(doc.get("counters", {}).get(k, 0)) for k in COUNTERS},
            throttle=doc.get("throttle"),
            lease=doc.get("lease"),
            failures=int(doc.get("failures", 0)),
            control=doc.get("control"),
            inflight=doc.get("inflight"),
        )


@dataclass
class State:
    name: str
    registration: str
    status: Status
    direction: Direction
    collection: str
    spec: dict[str, Any]
    checksum: str
    generation: int
    pass_number: int
    plan: dict[str, Any] | None
    totals: dict[str, int]
    bad_ids: list[Any]
    doc_errors: list[dict[str, Any]]
    history: list[dict[str, Any]]
    registered_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    updated_at: datetime | None = None
    last_error: str | None = None
    previous: dict[str, Any] | None = None
    #: The last generation whose partition counters were added into ``totals`` (once each).
    rolled_generation: int = 0
    #: A repin changed what the pass covers: the coordinator re-cuts it.
    replan: bool = False
    #: Background migrations that must complete first, and those of them still unmet.
    requires: list[str] = field(default_factory=list)
    waits_for: list[str] = field(default_factory=list)
    #: ``scanned`` at the last retry: the rate counts from there.
    rate_base: int = 0
    #: Failed documents per reason, over the rolled-up generations.
    error_counts: dict[str, int] = field(default_factory=dict)
    #: The operator's pace (the throttle control): ``batch_size`` and ``pause_ms``, each optional; None: the file's.
    throttle: dict[str, int] | None = None

    @property
    def mode(self) -> str:
        return str(self.spec.get("mode", "documents"))

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> State:
        """A stored state. One missing a field the engine needs or holding one of the wrong type (edited by hand) is
        refused naming the record (exit 39), where a command crashed on it, exit 1 "please report it"."""
        try:
            return cls._read(doc)
        except (KeyError, TypeError, ValueError, AttributeError):
            name = doc.get("_id")
            which = f"the state record of {redact(name, limit=200)}" if isinstance(name, str) else "a state record without a name"
            raise CollectionClashError(
                f"background migration states: {which} is not one mongoshift writes (a field missing, or of the wrong type "
                "or value: edited by hand?); restore it, or delete it and register the migration again ('mongoshift up --force NAME')",
                record=name if isinstance(name, str) else None,
            ) from None

    @classmethod
    def _read(cls, doc: dict[str, Any]) -> State:
        return cls(
            name=doc["_id"],
            registration=doc["registration"],
            status=doc["status"],
            direction=doc.get("direction", "forward"),
            collection=doc["collection"],
            spec=doc.get("spec", {}),
            checksum=doc.get("checksum", ""),
            generation=int(doc.get("generation", 0)),
            pass_number=int(doc.get("pass", 0)),
            plan=doc.get("plan"),
            totals={k: int(doc.get("totals", {}).get(k, 0)) for k in COUNTERS},
            bad_ids=list(doc.get("bad_ids", [])),
            doc_errors=list(doc.get("doc_errors", [])),
            history=list(doc.get("history", [])),
            registered_at=doc.get("registered_at"),
            started_at=doc.get("started_at"),
            completed_at=doc.get("completed_at"),
            updated_at=doc.get("updated_at"),
            last_error=doc.get("last_error"),
            previous=doc.get("previous"),
            rolled_generation=int(doc.get("rolled_generation") or 0),
            replan=bool(doc.get("replan")),
            requires=list(doc.get("requires") or []),
            waits_for=list(doc.get("waits_for") or []),
            rate_base=int(doc.get("rate_base") or 0),
            error_counts={str(k): int(v) for k, v in (doc.get("error_counts") or {}).items()},
            throttle=pace_override(doc.get("throttle")),
        )


def pace_override(value: Any) -> dict[str, int] | None:
    """The stored throttle override as ``{batch_size?, pause_ms?}`` of whole numbers; None when there is none."""
    if not isinstance(value, dict):
        return None
    pace = {k: int(v) for k, v in value.items() if k in ("batch_size", "pause_ms") and isinstance(v, int) and not isinstance(v, bool)}
    return pace or None


def aware(value: Any) -> datetime | None:
    """A stored time as an aware UTC datetime (the driver reads them back naive); None for anything else."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LaneSigns:
    """The traces runners and lanes leave on a migration's records: what ``audit`` judges "is anyone on it" by.

    ``leases``: (last renewal, TTL in ms) of every lease held; ``last_seen``: the latest lease
    renewal, finished partition or runner ask (None: no trace at all)."""

    leases: tuple[tuple[datetime, int], ...] = ()
    last_seen: datetime | None = None

    def live_leases(self, now: datetime) -> int:
        """Leases renewed within their TTL at ``now``: a lane that stopped renewing no longer counts."""
        return sum(1 for renewed, ttl_ms in self.leases if renewed + timedelta(milliseconds=ttl_ms) > now)


#: The per-collection counters of a live watcher (``background status``); see :mod:`..watch.watcher`.
WATCH_COUNTERS = ("events", "upgraded", "skipped", "stranded", "failed", "restarts", "reopened")


@dataclass(frozen=True)
class WatchRecord:
    """One collection's live watcher as stored in ``<background_collection>_watch``, without its resume token.

    The token is the watcher's own position in the server's history: it is never shown."""

    collection: str
    state: str
    #: The completed migrations it guards (their names).
    guards: tuple[str, ...]
    counters: dict[str, int]
    #: Who leads (``host``, ``pid``, ``runner``) and when it last saved (``at``); None before any leader.
    leader: dict[str, Any] | None
    updated_at: datetime | None
    last_event_at: datetime | None
    has_position: bool

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> WatchRecord:
        leader = doc.get("leader")
        return cls(
            collection=str(doc["_id"]),
            state=str(doc.get("state") or "unknown"),
            guards=tuple(doc.get("guards") or ()),
            counters={k: int((doc.get("counters") or {}).get(k, 0)) for k in WATCH_COUNTERS},
            leader=dict(leader) if isinstance(leader, dict) else None,
            updated_at=aware(doc.get("updated_at")),
            last_event_at=aware(doc.get("last_event_at")),
            has_position=doc.get("resume_token") is not None,
        )

    def to_json(self) -> dict[str, Any]:
        leader = dict(self.leader) if self.leader else None
        if leader and isinstance(leader.get("at"), datetime):
            leader["at"] = leader["at"].isoformat()
        return {
            "collection": self.collection,
            "state": self.state,
            "guards": list(self.guards),
            "counters": dict(self.counters),
            "leader": leader,
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
            "last_event_at": self.last_event_at.isoformat() if self.last_event_at else None,
            "has_position": self.has_position,
        }
