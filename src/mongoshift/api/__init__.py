"""The Python API of mongoshift: everything the CLI does, as async functions with typed results.

Open a session once, then call what you need; the project (files, URI, client, own
collections) is opened once for every call, the lock taken per writing call::

    import mongoshift

    async with mongoshift.connect(mongoshift.load_settings()) as ms:
        report = await ms.up()

Its groups: the migration line and adoption on ``ms``, ``ms.collections``, ``ms.background``
(with ``start_runner``, the in-application runner) and ``ms.intents`` (a job system's).
The functions below are the same calls, each on a project of its own (one-shot), with the
same options as the session's call plus ``client=`` (and ``observers=`` / ``cancel=`` where
the call uses them)::

    from mongoshift import api

    report = await api.up(api.load_settings())

Migrations: :func:`up`, :func:`down`, :func:`redo`, :func:`status`,
:func:`list_migrations`, :func:`dry_run`, :func:`lock_status`, :func:`unlock`, :func:`run_log` (a run's
stored ``ctx.log`` lines, :class:`RunLogLine`). Adoption:
:func:`import_history` (another tool's changelog), :func:`baseline`. Keeping the line short:
:func:`squash` (:func:`squash_across` judges every tenant first), :func:`lint` (risky operations, before they run). Health:
:func:`audit` (read-only, an :class:`AuditReport` with a verdict). Across tenant databases
(docs/tenants.md): :func:`across_tenants` (any session call per tenant, a :class:`RolloutReport`),
:func:`up_across`, :func:`down_across`, :func:`status_across` (with :func:`migration_counts`). Declared collections:
:func:`converge`, :func:`plan_converge`, :func:`declaration_for`; from the application's models (docs/models.md):
:func:`generate_collections`, :func:`create_from_models`. Background migrations:
:func:`run_background`, :func:`background_status`, :func:`background_partitions`,
:func:`control_background`, :func:`repin_background`, :func:`preview_background`, :func:`verify_background`,
one step or one slice at a time for a job system (:func:`coordinate_background`, :func:`run_background_slice`),
the live watcher (:func:`watch_background`, :func:`background_watch_status`), and :class:`BackgroundRunner`
(:func:`start_background_runner`; ``watch=True`` adds the live watcher) inside an application. Every call takes ``client=``, an
application's open ``AsyncMongoClient`` (left open); writing calls take ``observers=``, functions
that receive each :class:`Event` (see ``docs/observability.md``). A runtime making several
calls per unit of work opens a session (or connects once with :func:`open_client`); a job system keeps its queued
and running intents with :func:`claim_intents`, :func:`read_intents`, :func:`settle_intent`. Every failure is a
:class:`~mongoshift.errors.MongoshiftError` with a stable ``exit_code``.
See ``docs/api.md``.

Every name loads with its module on first use: importing ``mongoshift.api`` (or one of its
modules, as the CLI does) does not load the background engine or converge until they are
used (start-up time, see bench/cli.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..background.inspect.drift import Verified
    from ..background.inspect.preview import Preview, PreviewRow
    from ..background.inspect.status import BackgroundReport, PartitionRow
    from ..background.state.controls import ControlResult, RepinResult
    from ..background.state.model import WatchRecord
    from ..background.watch.watcher import WatchOptions
    from ..converge.report import ConvergeReport
    from ..errors import ExitCode, MongoshiftError
    from ..line.executor import MigrationResult
    from ..line.plan import StatusRow
    from ..models.generate import GenerateReport
    from ..project.events import Event, Observer
    from ..project.lock import LockHolder
    from ..project.redaction import describe_error, redact
    from ..project.run import CancelSignal
    from ..project.run_log import RunLogLine
    from ..project.settings import Settings, load_settings
    from ..project.wording import clock, plural
    from ..tenants.report import RolloutReport, TenantError, TenantRow
    from ..tenants.selection import Tenant
    from .adoption import AdoptionReport, baseline, import_history
    from .background import (
        BackgroundRunner,
        CoordinatorStep,
        SliceReport,
        apply_control as control_background,
        apply_throttle as throttle_background,
        check_throttle,
        coordinate as coordinate_background,
        failed_ids as background_failed_ids,
        partitions as background_partitions,
        per_shard as background_shard_progress,
        preview as preview_background,
        repin as repin_background,
        run as run_background,
        run_slice as run_background_slice,
        samples as background_samples,
        start_background_runner,
        status as background_status,
        verify as verify_background,
        watch as watch_background,
        watch_status as background_watch_status,
    )
    from .client import open_client
    from .collections import converge, declaration_for, plan_converge
    from .health import AuditReport, Finding, audit
    from .hygiene import LintReport, SquashReport, lint, squash, squash_across
    from .intents import Claim, Intent, claim_intents, read_intents, settle_intent
    from .migrations import (
        DryRunReport,
        DryRunRow,
        RunReport,
        down,
        dry_run,
        list_migrations,
        lock_status,
        redo,
        rows_to_json,
        run_log,
        status,
        unlock,
        up,
    )
    from .models import FromModelsReport, create_from_models, generate_collections
    from .options import Confirmation, Lock
    from .session import Mongoshift, connect
    from .tenants import Tenants, across_tenants, down_across, migration_counts, select_tenants, status_across, up_across

__all__ = [
    "LintReport",
    "lint",
    "SquashReport",
    "squash",
    "squash_across",
    "RolloutReport",
    "Tenant",
    "TenantError",
    "TenantRow",
    "Tenants",
    "across_tenants",
    "down_across",
    "migration_counts",
    "select_tenants",
    "status_across",
    "up_across",
    "Confirmation",
    "Lock",
    "Mongoshift",
    "connect",
    "AdoptionReport",
    "Claim",
    "CoordinatorStep",
    "Intent",
    "SliceReport",
    "claim_intents",
    "coordinate_background",
    "describe_error",
    "clock",
    "plural",
    "redact",
    "open_client",
    "read_intents",
    "run_background_slice",
    "settle_intent",
    "AuditReport",
    "BackgroundReport",
    "BackgroundRunner",
    "CancelSignal",
    "ControlResult",
    "ConvergeReport",
    "DryRunReport",
    "DryRunRow",
    "Event",
    "ExitCode",
    "Finding",
    "LockHolder",
    "MigrationResult",
    "MongoshiftError",
    "Observer",
    "PartitionRow",
    "Preview",
    "PreviewRow",
    "RepinResult",
    "RunReport",
    "Settings",
    "StatusRow",
    "Verified",
    "WatchOptions",
    "WatchRecord",
    "audit",
    "background_failed_ids",
    "background_partitions",
    "background_samples",
    "background_shard_progress",
    "background_watch_status",
    "background_status",
    "baseline",
    "control_background",
    "converge",
    "down",
    "dry_run",
    "import_history",
    "list_migrations",
    "load_settings",
    "lock_status",
    "plan_converge",
    "declaration_for",
    "generate_collections",
    "create_from_models",
    "FromModelsReport",
    "GenerateReport",
    "preview_background",
    "redo",
    "repin_background",
    "rows_to_json",
    "run_background",
    "run_log",
    "RunLogLine",
    "start_background_runner",
    "status",
    "throttle_background",
    "check_throttle",
    "unlock",
    "up",
    "verify_background",
    "watch_background",
]

#: Public name → (module, name there), imported on first access.
_LAZY: dict[str, tuple[str, str]] = {
    "ControlResult": ("..background.state.controls", "ControlResult"),
    "RepinResult": ("..background.state.controls", "RepinResult"),
    "Verified": ("..background.inspect.drift", "Verified"),
    "Event": ("..project.events", "Event"),
    "Observer": ("..project.events", "Observer"),
    "Preview": ("..background.inspect.preview", "Preview"),
    "PreviewRow": ("..background.inspect.preview", "PreviewRow"),
    "BackgroundReport": ("..background.inspect.status", "BackgroundReport"),
    "PartitionRow": ("..background.inspect.status", "PartitionRow"),
    "WatchRecord": ("..background.state.model", "WatchRecord"),
    "WatchOptions": ("..background.watch.watcher", "WatchOptions"),
    "ConvergeReport": ("..converge.report", "ConvergeReport"),
    "ExitCode": ("..errors", "ExitCode"),
    "MongoshiftError": ("..errors", "MongoshiftError"),
    "LockHolder": ("..project.lock", "LockHolder"),
    "RunLogLine": ("..project.run_log", "RunLogLine"),
    "CancelSignal": ("..project.run", "CancelSignal"),
    "Settings": ("..project.settings", "Settings"),
    "load_settings": ("..project.settings", "load_settings"),
    "MigrationResult": ("..line.executor", "MigrationResult"),
    "StatusRow": ("..line.plan", "StatusRow"),
    "AdoptionReport": (".adoption", "AdoptionReport"),
    "baseline": (".adoption", "baseline"),
    "import_history": (".adoption", "import_history"),
    "AuditReport": (".health", "AuditReport"),
    "Finding": (".health", "Finding"),
    "audit": (".health", "audit"),
    "BackgroundRunner": (".background", "BackgroundRunner"),
    "start_background_runner": (".background", "start_background_runner"),
    "control_background": (".background", "apply_control"),
    "throttle_background": (".background", "apply_throttle"),
    "check_throttle": (".background", "check_throttle"),
    "background_samples": (".background", "samples"),
    "background_failed_ids": (".background", "failed_ids"),
    "background_partitions": (".background", "partitions"),
    "background_shard_progress": (".background", "per_shard"),
    "preview_background": (".background", "preview"),
    "repin_background": (".background", "repin"),
    "run_background": (".background", "run"),
    "background_status": (".background", "status"),
    "verify_background": (".background", "verify"),
    "watch_background": (".background", "watch"),
    "background_watch_status": (".background", "watch_status"),
    "CoordinatorStep": (".background", "CoordinatorStep"),
    "SliceReport": (".background", "SliceReport"),
    "coordinate_background": (".background", "coordinate"),
    "run_background_slice": (".background", "run_slice"),
    "open_client": (".client", "open_client"),
    "Confirmation": (".options", "Confirmation"),
    "Lock": (".options", "Lock"),
    "Mongoshift": (".session", "Mongoshift"),
    "connect": (".session", "connect"),
    "Claim": (".intents", "Claim"),
    "Intent": (".intents", "Intent"),
    "claim_intents": (".intents", "claim_intents"),
    "read_intents": (".intents", "read_intents"),
    "settle_intent": (".intents", "settle_intent"),
    "describe_error": ("..project.redaction", "describe_error"),
    "redact": ("..project.redaction", "redact"),
    "clock": ("..project.wording", "clock"),
    "plural": ("..project.wording", "plural"),
    "converge": (".collections", "converge"),
    "RolloutReport": ("..tenants.report", "RolloutReport"),
    "TenantRow": ("..tenants.report", "TenantRow"),
    "TenantError": ("..tenants.report", "TenantError"),
    "Tenant": ("..tenants.selection", "Tenant"),
    **{
        name: (".tenants", name)
        for name in ("Tenants", "across_tenants", "down_across", "migration_counts", "select_tenants", "status_across", "up_across")
    },
    "plan_converge": (".collections", "plan_converge"),
    "declaration_for": (".collections", "declaration_for"),
    "generate_collections": (".models", "generate_collections"),
    "create_from_models": (".models", "create_from_models"),
    "FromModelsReport": (".models", "FromModelsReport"),
    "GenerateReport": ("..models.generate", "GenerateReport"),
    **{name: (".hygiene", name) for name in ("LintReport", "SquashReport", "lint", "squash", "squash_across")},
    **{
        name: (".migrations", name)
        for name in (
            "DryRunReport", "DryRunRow", "RunReport", "down", "dry_run", "list_migrations",
            "lock_status", "redo", "rows_to_json", "run_log", "status", "unlock", "up",
        )
    },
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where[0], __name__), where[1])
    globals()[name] = value  # once: later lookups do not come back here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
