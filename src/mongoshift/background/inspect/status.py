"""What ``background status`` reports: progress with a rate and an ETA, not just counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from ...project.wording import plural
from ...schema.background import Adaptive
from ..state.failures import counted, recent
from ..state.model import COUNTERS, Partition, State, aware
from ..state.store import BackgroundStore
from .input_probe import not_a_version_words

#: How many documents the zero-migrated check counts at most: enough to tell, cheap on any size.
PROBE_LIMIT = 1000


@dataclass
class PartitionRow:
    seq: int
    status: str
    bracket: str | None
    estimate: int
    scanned: int
    migrated: int
    failed: int
    leased: bool
    slot: int | None
    failures: int
    #: The shard its key ranges live on (None: not planned by shard); its bounds are data, never shown.
    shard: str | None = None

    @classmethod
    def of(cls, p: Partition) -> PartitionRow:
        return cls(
            seq=p.seq,
            status=p.status,
            bracket=p.scope.bracket,
            estimate=p.estimate,
            scanned=p.counters["scanned"],
            migrated=p.counters["migrated"],
            failed=p.counters["failed"],
            leased=p.lease is not None,
            slot=(p.lease or {}).get("slot"),
            failures=p.failures,
            shard=p.scope.shard,
        )


@dataclass
class ShardProgress:
    """One shard's partitions of the current pass, summed."""

    shard: str
    partitions: int
    done: int
    estimate: int
    scanned: int
    migrated: int
    failed: int
    leased: int


def per_shard(rows: list[PartitionRow]) -> list[ShardProgress]:
    """Progress by shard, in shard order; empty when the pass was not planned by shard."""
    out: dict[str, ShardProgress] = {}
    for r in rows:
        if r.shard is None:
            continue
        p = out.setdefault(r.shard, ShardProgress(r.shard, 0, 0, 0, 0, 0, 0, 0))
        p.partitions += 1
        p.done += r.status == "done"
        p.estimate += r.estimate
        p.scanned += r.scanned
        p.migrated += r.migrated
        p.failed += r.failed
        p.leased += r.leased
    return [out[k] for k in sorted(out)]


@dataclass
class BackgroundReport:
    name: str
    status: str
    direction: str
    collection: str
    mode: str
    pass_number: int
    generation: int
    partitions_total: int
    partitions_open: int
    partitions_done: int
    partitions_failed: int
    leases: int
    totals: dict[str, int]
    failed_documents: int
    estimate: int
    remaining: int
    rate_per_second: float | None
    eta_seconds: float | None
    elapsed_seconds: float | None
    last_error: str | None
    registered_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    history: list[dict[str, Any]] = field(default_factory=list)
    #: The most recent reasons documents failed (oldest first), redacted: see :mod:`..state.failures`.
    doc_errors: list[dict[str, Any]] = field(default_factory=list)
    #: Every failed document counted once per reason, largest first.
    doc_error_counts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: While blocked: the migrations it requires that are not done yet.
    waits_for: list[str] = field(default_factory=list)
    #: How its batches are sized (:func:`batch_sizing`): the adaptive controller's bounds and targets,
    #: and its state on each open partition (the size a lane works it at, and why).
    batch_size: dict[str, Any] = field(default_factory=dict)
    #: The operator's pace set by the throttle control (``batch_size``, ``pause_ms``); None: the file's.
    throttle: dict[str, int] | None = None
    #: When it stopped working (completed, or its move to failed, cancelled or paused); None while it runs
    #: or waits to. Its elapsed time and rate end there, and so does the dashboard's chart.
    stopped_at: datetime | None = None

    def progress(self) -> tuple[int, int]:
        """Documents done and the total they count towards: while it runs, the pass's estimate less what is left
        (an estimate); once completed, what every pass scanned, which is exact (the estimate was the plan's guess).
        ``totals`` count every pass: after a retry they are more than this pass's estimate, so they are no progress."""
        scanned = int(self.totals.get("scanned", 0))
        if self.status == "completed" and scanned:
            return scanned, scanned
        return ((self.estimate - self.remaining) if self.estimate else scanned), self.estimate

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, datetime):
                data[key] = value.isoformat()
        data["history"] = [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in h.items()} for h in self.history]
        data["doc_errors"] = [{k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in e.items()} for e in self.doc_errors]
        return data


def _stopped_at(state: State) -> datetime | None:
    """When a migration that is not working stopped: completed, or failed, cancelled or paused (its move
    there, from its history); None while it runs or waits to. Its elapsed time and rate end there."""
    if state.status == "completed":
        return aware(state.completed_at)
    if state.status in ("failed", "cancelled", "paused"):
        moves = [h for h in state.history if h.get("to") == state.status and isinstance(h.get("at"), datetime)]
        return aware(moves[-1]["at"]) if moves else aware(state.updated_at)
    return None


async def report(store: BackgroundStore, state: State, *, now: datetime | None = None) -> BackgroundReport:
    parts = await store.partitions_of(state) if state.generation else []
    counters = dict(state.totals)
    rolled = state.rolled_generation >= state.generation
    scanned_now = 0
    for p in parts:
        scanned_now += p.counters["scanned"]
        if not rolled:
            for key in COUNTERS:
                counters[key] += p.counters[key]
    plan = state.plan or {}
    estimate = int(plan.get("estimate", 0))
    done_parts = sum(1 for p in parts if p.status == "done")
    remaining = 0 if state.status == "completed" else max(0, estimate - scanned_now)
    started = aware(state.started_at)
    end = _stopped_at(state) or now or datetime.now(UTC)
    elapsed = (end - started).total_seconds() if started and end else None
    processed = counters["scanned"] - state.rate_base  # since the last retry
    rate = processed / elapsed if elapsed and elapsed > 0 and processed else None
    eta = remaining / rate if rate and state.status in ("running", "pending") else None
    failed_documents = len(state.bad_ids) if rolled else await store.bad_id_count(state)
    entries, error_counts = await store.live_doc_errors(state)
    warnings = []
    if state.status == "completed" and failed_documents:
        warnings.append(
            f"completed with {plural(failed_documents, 'document')} that could not be migrated (within max_document_errors): they stay "
            f"in the old shape; fix the transform, pin it, then 'mongoshift background retry {state.name.removesuffix('.py')} --from-start'"
        )
    if plan.get("not_a_version"):  # counted when the pass was planned (docs/background.md, "Versions that are not numbers")
        field_ = str(state.spec.get("version_field") or "__v")
        said = not_a_version_words(state.name, state.collection, field_, int(plan["not_a_version"]), plan.get("not_a_version_stopped"))
        warnings.append(said.removeprefix(f"{state.name}: "))
    if state.status == "completed" and counters["migrated"] == 0 and state.mode != "step":
        warning = await zero_migrated_warning(store.db[state.collection], state)
        if warning:
            warnings.append(warning)
    return BackgroundReport(
        name=state.name,
        status=state.status,
        direction=state.direction,
        collection=state.collection,
        mode=state.mode,
        pass_number=state.pass_number,
        generation=state.generation,
        partitions_total=len(parts),
        partitions_open=sum(1 for p in parts if p.status in ("pending", "running")),
        partitions_done=done_parts,
        partitions_failed=sum(1 for p in parts if p.status == "failed"),
        leases=sum(1 for p in parts if p.lease is not None),
        totals=counters,
        failed_documents=failed_documents,
        estimate=estimate,
        remaining=remaining,
        rate_per_second=round(rate, 1) if rate else None,
        eta_seconds=round(eta, 1) if eta is not None else None,
        elapsed_seconds=round(elapsed, 1) if elapsed is not None else None,
        last_error=state.last_error,
        registered_at=state.registered_at,
        started_at=state.started_at,
        completed_at=state.completed_at,
        history=state.history[-10:],
        doc_errors=recent(entries),
        doc_error_counts=counted(error_counts, entries),
        warnings=warnings,
        waits_for=list(state.waits_for),
        batch_size=batch_sizing(state, parts),
        throttle=state.throttle,
        stopped_at=_stopped_at(state),
    )


#: Open partitions whose batch size ``background status NAME`` lists, leased ones first.
PACE_SHOWN = 8


def batch_sizing(state: State, parts: list[Partition]) -> dict[str, Any]:
    """How the batches of ``state`` are sized: ``mode`` (``adaptive``, ``fixed`` with ``adaptive=False``,
    ``transaction``: halved on a failed transaction, grown back, or ``step``), the ``start``
    (``batch_size``) and, when adaptive, its bounds, targets and the controller's saved state on the
    open partitions (``lanes``: ``partition``, ``leased``, ``batch_size``, ``pause_ms``, ``reason``,
    ``work_percent``, ``batch_ms``; numbers and words only)."""
    spec = state.spec
    start = int(spec.get("batch_size") or 0)
    if state.mode == "step":
        return {"mode": "step"}
    if spec.get("transaction"):
        return {"mode": "transaction", "start": start}
    options = spec.get("adaptive")
    if not isinstance(options, dict):
        return {"mode": "fixed", "start": start}
    try:
        adaptive = Adaptive.model_validate(options)
    except ValueError:  # a registration from another version of mongoshift: say what is known
        adaptive = Adaptive()
    low, high = adaptive.bounds(start)
    open_parts = [p for p in parts if p.status in ("pending", "running") and p.throttle]
    open_parts.sort(key=lambda p: (p.lease is None, p.seq))
    lanes = [
        {
            "partition": p.seq,
            "leased": p.lease is not None,
            **{k: v for k, v in (p.throttle or {}).items() if k in ("batch_size", "pause_ms", "reason", "work_percent", "batch_ms")},
        }
        for p in open_parts[:PACE_SHOWN]
    ]
    return {
        "mode": "adaptive",
        "start": start,
        "min": low,
        "max": high,
        "target_work_percent": adaptive.target_work_percent,
        "target_latency_ms": adaptive.target_latency_ms,
        "lanes": lanes,
        "open": len(open_parts),
    }


def pace_words(sizing: dict[str, Any], held_at: int | None = None) -> list[str]:
    """``batch_sizing`` in words: one line for the rule, then one per listed partition, with why.

    ``held_at``: the batch size ``background throttle`` set, which the lanes use instead while it is set: the
    first line says so, as the sizes listed are not the ones in use then."""
    lines = _pace_lines(sizing)
    if lines and held_at is not None:
        lines[0] += (
            f"; set aside while 'background throttle' holds batches at {held_at:,} "
            "(the sizes below are used again once it is cleared)"
        )
    return lines


def _pace_lines(sizing: dict[str, Any]) -> list[str]:
    mode, start = sizing.get("mode"), sizing.get("start", 0)
    if mode == "step" or not sizing:
        return []
    if mode == "fixed":
        return [f"{start:,}, fixed (adaptive=False)"]
    if mode == "transaction":
        return [f"up to {start:,}: each transaction's batch is halved when it fails, grown back after clean ones"]
    aim, target_ms = sizing["target_work_percent"], sizing["target_latency_ms"]
    lines = [
        f"adaptive from {start:,}, within {sizing['min']:,}–{sizing['max']:,}: aims at {aim}% of a lane's time "
        f"reading and writing, batches within {target_ms:,} ms"
    ]
    for lane in sizing.get("lanes", []):
        size, reason = lane.get("batch_size", start), lane.get("reason", "resumed")
        share, took = lane.get("work_percent"), lane.get("batch_ms")
        why = {
            "grow": f"grew, the lane worked {share}% of its time, under {aim}%",
            "shrink": f"shrank, the lane worked {share}% of its time, over {aim}%",
            "slow": f"shrank, batches took {took:,} ms, over {target_ms:,} ms" if took is not None else "shrank, batches were slow",
            "overload": "shrank, the server reported it is overloaded",
            "conflicts": "shrank, the application wrote documents between their batch's read and write",
            "recover": "pause shortened, batches within the target again",
            "start": "as started, no batches judged yet",
        }.get(reason, "as saved")
        if reason in ("grow", "shrink") and share is None:
            why = why.split(",")[0]
        pause = lane.get("pause_ms") or 0
        held = " (leased)" if lane.get("leased") else ""
        lines.append(f"partition {lane['partition']}{held}: {size:,} ({why}){f', adaptive pause {pause:,} ms' if pause else ''}")
    hidden = sizing.get("open", 0) - len(sizing.get("lanes", []))
    if hidden > 0:
        lines.append(f"and {plural(hidden, 'more open partition')}")
    return lines


async def zero_migrated_warning(collection: AsyncCollection[dict[str, Any]], state: State) -> str | None:
    """A completed migration that rewrote nothing while documents of the filter sit at another version.

    Most often ``from_version`` is wrong: documents written before versioning have no version
    field, which counts as 0, not 1. Counted with a limit, so it stays cheap on a large collection.
    """
    spec = state.spec
    field_ = str(spec.get("version_field") or "__v")
    forward = state.direction == "forward"
    source = int(spec.get("from_version", 0) if forward else spec.get("to_version", 0))
    target = int(spec.get("to_version", 0) if forward else spec.get("from_version", 0))
    other = {field_: {"$nin": [None, 0]}} if target == 0 else {field_: {"$ne": target}}
    query = {"$and": [dict(spec.get("filter") or {}), other]}
    try:
        found = await collection.count_documents(query, limit=PROBE_LIMIT)
    except Exception:  # a warning is not worth failing the status
        return None
    if not found:
        return None
    many = f"{PROBE_LIMIT:,} or more documents" if found >= PROBE_LIMIT else plural(found, "document")
    return (
        f"completed but migrated 0 documents, with {many} in {state.collection} matching the filter "
        f"at a version other than {target}: was from_version ({source}) right? "
        f"Documents without a {field_} field count as version 0"
    )
