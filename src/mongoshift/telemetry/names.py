"""What mongoshift sends to OpenTelemetry, by name: spans, instruments, attributes.

Plain data, without the OpenTelemetry API, so that the documentation table
(docs/observability.md) is checked against it by a test, and so that a name is spelled
once. The names that OpenTelemetry's semantic conventions define (``db.namespace``,
``db.system.name``, ``error.type``, durations in seconds named ``*.duration``) are used
as defined; the rest live under ``mongoshift.``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The tracer's and the meter's instrumentation scope.
SCOPE = "mongoshift"

# Span names.
RUN_SPAN = "mongoshift.run"
MIGRATION_SPAN = "mongoshift.migration"
CONVERGE_SPAN = "mongoshift.converge"
COORDINATE_SPAN = "mongoshift.background.coordinate"
SLICE_SPAN = "mongoshift.background.slice"

# Attributes (semantic conventions first).
DB_NAMESPACE = "db.namespace"
DB_SYSTEM = "db.system.name"
ERROR_TYPE = "error.type"
RUN_ID = "mongoshift.run_id"
COMMAND = "mongoshift.command"
#: How a run stood with the migration lock: ``taken``, ``skipped`` (``--no-lock``) or ``refused``; absent when
#: it stopped before trying (an unreachable server): set from what happened, never from what the run meant to do.
LOCK = "mongoshift.lock"
#: ``run_start``'s ``lock`` as :data:`LOCK` says it then: only ``skipped`` is known; a run that means to take
#: the lock says nothing until its lock event (:data:`LOCK_OUTCOMES`).
LOCK_AT_START = {"skipped": "skipped"}
#: What each lock event makes :data:`LOCK` say.
LOCK_OUTCOMES = {"lock_acquired": "taken", "lock_refused": "refused"}
MIGRATION = "mongoshift.migration"
DIRECTION = "mongoshift.direction"
BATCH = "mongoshift.batch"
KIND = "mongoshift.kind"
OUTCOME = "mongoshift.outcome"
TRIGGER = "mongoshift.trigger"
PRUNE = "mongoshift.prune"
ACTIONS = "mongoshift.converge.actions"
ATTEMPT = "mongoshift.attempt"
PARTITION = "mongoshift.background.partition"
LANE = "mongoshift.background.lanes.lane"
SLOT = "mongoshift.background.slot"
#: A slice's counts (``slice_end``) go on its span under this prefix: ``mongoshift.background.migrated``, ...
SLICE_COUNT_PREFIX = "mongoshift.background."
CHANGE = "mongoshift.background.lanes.throttle.change"

#: The value of ``db.system.name`` on every span.
DB_SYSTEM_VALUE = "mongodb"

#: Histogram buckets in seconds: from a fast batch (5 ms) to an hour-long migration.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


@dataclass(frozen=True)
class Instrument:
    """One metric instrument: every point it records carries ``db.namespace`` and ``attributes``."""

    name: str
    kind: Literal["histogram", "counter"]
    unit: str
    description: str
    attributes: tuple[str, ...] = ()


RUN_DURATION = Instrument(
    "mongoshift.run.duration", "histogram", "s",
    "A writing command (up, down, redo, converge, import, baseline), connect to close; not a run refused the lock",
    (COMMAND, LOCK, OUTCOME, ERROR_TYPE),
)
MIGRATION_DURATION = Instrument(
    "mongoshift.migration.duration", "histogram", "s", "One migration body (or a background file's registration)",
    (MIGRATION, DIRECTION, OUTCOME, ERROR_TYPE),
)
CONVERGE_DURATION = Instrument(
    "mongoshift.converge.duration", "histogram", "s", "A converge of the declared collections", (TRIGGER, OUTCOME, ERROR_TYPE)
)
LOCK_ACQUIRE_DURATION = Instrument(
    "mongoshift.lock.acquire.duration", "histogram", "s", "Taking the migration lock, waits included", (OUTCOME,)
)
LOCK_WAIT_DURATION = Instrument(
    "mongoshift.lock.wait.duration", "histogram", "s", "Waiting while another run held the migration lock (only when it was held)",
    (OUTCOME,),
)
SLICE_DURATION = Instrument(
    "mongoshift.background.slice.duration", "histogram", "s", "One lane's slice of a background migration, claim to release",
    (MIGRATION, OUTCOME),
)
BATCH_DURATION = Instrument(
    "mongoshift.background.write.batch.duration", "histogram", "s", "One batch (or step call) of a background migration, read to checkpoint",
    (MIGRATION,),
)
DOCUMENTS_MIGRATED = Instrument(
    "mongoshift.background.documents.migrated", "counter", "{document}", "Documents a background migration rewrote", (MIGRATION,)
)
DOCUMENTS_FAILED = Instrument(
    "mongoshift.background.documents.failed", "counter", "{document}", "Documents whose transform or write failed", (MIGRATION,)
)
CONFLICTS = Instrument(
    "mongoshift.background.documents.conflicts", "counter", "{conflict}",
    "Guarded writes that found the document changed by the application since it was read", (MIGRATION,),
)
TRANSACTION_RETRIES = Instrument(
    "mongoshift.transaction.retries", "counter", "{retry}",
    "Transactions run again after a transient error: a migration body's, or a background batch's", (MIGRATION,),
)
THROTTLE_CHANGES = Instrument(
    "mongoshift.background.lanes.throttle.changes", "counter", "{change}",
    "Changes of a lane's pace: slowed down, overloaded, recovered, or a wait for a health signal", (MIGRATION, CHANGE),
)
RECLAIMS = Instrument(
    "mongoshift.background.reclaims", "counter", "{lease}", "Leases of stopped lanes freed for others to take over", (MIGRATION,)
)
LEASES_LOST = Instrument(
    "mongoshift.background.leases.lost", "counter", "{lease}", "Slices that found their lease taken by another lane", (MIGRATION,)
)
LOCK_REFUSED = Instrument("mongoshift.lock.refused", "counter", "{lock}", "Runs refused because the migration lock stayed held")
LOCK_LOST = Instrument("mongoshift.lock.lost", "counter", "{lock}", "Migration locks lost during a run")

INSTRUMENTS: tuple[Instrument, ...] = (
    RUN_DURATION,
    MIGRATION_DURATION,
    CONVERGE_DURATION,
    LOCK_ACQUIRE_DURATION,
    LOCK_WAIT_DURATION,
    SLICE_DURATION,
    BATCH_DURATION,
    DOCUMENTS_MIGRATED,
    DOCUMENTS_FAILED,
    CONFLICTS,
    TRANSACTION_RETRIES,
    THROTTLE_CHANGES,
    RECLAIMS,
    LEASES_LOST,
    LOCK_REFUSED,
    LOCK_LOST,
)
