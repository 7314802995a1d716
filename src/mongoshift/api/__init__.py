"""The Python API of mongoshift: everything the CLI does, as async functions with typed results.

Load settings once, then call what you need::

    from mongoshift import api

    settings = api.load_settings()
    report = await api.up(settings)

Migrations: :func:`up`, :func:`down`, :func:`redo`, :func:`status`,
:func:`list_migrations`, :func:`dry_run`, :func:`lock_status`, :func:`unlock`. Declared collections:
:func:`converge`, :func:`plan_converge`. Background migrations:
:func:`run_background`, :func:`background_status`, :func:`background_partitions`,
:func:`control_background`, :func:`repin_background`, and :class:`BackgroundRunner`
(:func:`start_background_runner`) inside an application. Every failure is a
:class:`~mongoshift.errors.MongoshiftError` with a stable ``exit_code``.
See ``docs/api.md``.
"""

from ..background.controls import ControlResult, RepinResult
from ..background.events import Observer
from ..background.status import BackgroundReport, PartitionRow
from ..converge.report import ConvergeReport
from ..errors import ExitCode, MongoshiftError
from ..project.lock import LockHolder
from ..project.run import CancelSignal
from ..project.settings import Settings, load_settings
from ..runner.executor import MigrationResult
from ..runner.plan import StatusRow
from .background import BackgroundRunner, start_background_runner
from .background import apply_control as control_background
from .background import partitions as background_partitions
from .background import repin as repin_background
from .background import run as run_background
from .background import status as background_status
from .collections import converge, plan_converge
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
    status,
    unlock,
    up,
)

__all__ = [
    "BackgroundReport",
    "BackgroundRunner",
    "CancelSignal",
    "ControlResult",
    "ConvergeReport",
    "DryRunReport",
    "DryRunRow",
    "ExitCode",
    "LockHolder",
    "MigrationResult",
    "MongoshiftError",
    "Observer",
    "PartitionRow",
    "RepinResult",
    "RunReport",
    "Settings",
    "StatusRow",
    "background_partitions",
    "background_status",
    "control_background",
    "converge",
    "down",
    "dry_run",
    "list_migrations",
    "load_settings",
    "lock_status",
    "plan_converge",
    "redo",
    "repin_background",
    "rows_to_json",
    "run_background",
    "start_background_runner",
    "status",
    "unlock",
    "up",
]
