"""Metrics from events: durations as histograms (seconds), what happened as counters.

Each point carries ``db.namespace`` and the few attributes its instrument lists in
:mod:`.names` (never a run id, a document or a free-text reason: the series a backend keeps
must stay few).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.metrics import Counter, Histogram, Meter

from ..project.events import Event
from . import names
from .names import Instrument


class Metrics:
    """The instruments of one meter, fed with the events of the runs one observer sees."""

    def __init__(self, meter: Meter, attributes: Mapping[str, Any]) -> None:
        self.attributes = dict(attributes)
        self._histograms: dict[str, Histogram] = {
            spec.name: meter.create_histogram(
                spec.name, unit=spec.unit, description=spec.description, explicit_bucket_boundaries_advisory=list(names.SECONDS_BUCKETS)
            )
            for spec in names.INSTRUMENTS
            if spec.kind == "histogram"
        }
        self._counters: dict[str, Counter] = {
            spec.name: meter.create_counter(spec.name, unit=spec.unit, description=spec.description)
            for spec in names.INSTRUMENTS
            if spec.kind == "counter"
        }
        #: How each open run stands with the lock: ``skipped`` from ``run_start``, then ``taken`` or ``refused`` by its
        #: lock event; None while it has not tried (a run that never connected records no lock).
        self._lock: dict[str | None, str | None] = {}

    def on(self, event: Event) -> None:
        kind, data, migration = event.kind, event.data, event.migration
        if kind == "run_start":
            self._lock[event.run_id] = names.LOCK_AT_START.get(str(data.get("lock")))
        elif kind == "run_end":
            lock = self._lock.pop(event.run_id, None)
            if lock != "refused":  # a run refused the lock did not run: lock.refused counts it
                self._seconds(names.RUN_DURATION, data["duration_ms"], _ended(data, **{names.COMMAND: data.get("command"), names.LOCK: lock}))
        elif kind == "migration_end":
            attributes = _ended(data, **{names.MIGRATION: migration, names.DIRECTION: data.get("direction")})
            self._seconds(names.MIGRATION_DURATION, data["duration_ms"], attributes)
        elif kind == "converge_end":
            self._seconds(names.CONVERGE_DURATION, data["duration_ms"], _ended(data, **{names.TRIGGER: data.get("trigger")}))
        elif kind in ("lock_acquired", "lock_refused"):
            outcome = {names.OUTCOME: "acquired" if kind == "lock_acquired" else "refused"}
            self._seconds(names.LOCK_ACQUIRE_DURATION, data.get("waited_ms", 0), outcome)
            if "held_ms" in data:  # the lock was held: the part of the acquisition spent waiting for its holder
                self._seconds(names.LOCK_WAIT_DURATION, data["held_ms"], outcome)
            if event.run_id in self._lock:
                self._lock[event.run_id] = names.LOCK_OUTCOMES[kind]
            if kind == "lock_refused":
                self._add(names.LOCK_REFUSED, 1, {})
        elif kind == "lock_lost":
            self._add(names.LOCK_LOST, 1, {})
        elif kind == "slice_end":
            self._seconds(names.SLICE_DURATION, data.get("duration_ms", 0), {names.MIGRATION: migration, names.OUTCOME: data.get("outcome")})
        elif kind == "batch":
            of = {names.MIGRATION: migration}
            self._seconds(names.BATCH_DURATION, data.get("duration_ms", 0), of)
            for spec, key in (
                (names.DOCUMENTS_MIGRATED, "migrated"),
                (names.DOCUMENTS_FAILED, "failed"),
                (names.CONFLICTS, "conflicts"),
                (names.TRANSACTION_RETRIES, "txn_retries"),
            ):
                self._add(spec, data.get(key, 0), of)
        elif kind == "migration_retry":
            self._add(names.TRANSACTION_RETRIES, 1, {names.MIGRATION: migration})
        elif kind == "throttle":
            self._add(names.THROTTLE_CHANGES, data.get("changes", 1), {names.MIGRATION: migration, names.CHANGE: data.get("change")})
        elif kind == "reclaimed":
            self._add(names.RECLAIMS, data.get("leases", 1), {names.MIGRATION: migration})
        elif kind == "lease_lost":
            self._add(names.LEASES_LOST, 1, {names.MIGRATION: migration})

    def _seconds(self, spec: Instrument, milliseconds: float, attributes: Mapping[str, Any]) -> None:
        self._record(spec, milliseconds / 1000, attributes)

    def _record(self, spec: Instrument, seconds: float, attributes: Mapping[str, Any]) -> None:
        self._histograms[spec.name].record(max(0.0, seconds), self._point(attributes))

    def _add(self, spec: Instrument, amount: Any, attributes: Mapping[str, Any]) -> None:
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            return  # nothing happened (a counter only goes up)
        self._counters[spec.name].add(amount, self._point(attributes))

    def _point(self, attributes: Mapping[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in {**self.attributes, **attributes}.items() if value is not None}


def _ended(data: Mapping[str, Any], **attributes: Any) -> dict[str, Any]:
    """An ``*_end`` event's outcome, and its ``error.type`` when it failed."""
    return {**attributes, names.OUTCOME: data.get("outcome"), names.ERROR_TYPE: data.get("error_kind")}
