"""mongoshift on Celery (``pip install mongoshift[celery]``): the migration line and background
migrations as tasks of the application's own Celery app. See ``docs/celery.md``.

::

    from celery import Celery
    from mongoshift.celery import register

    app = Celery("jobs", broker="redis://localhost:6379/0", backend="redis://localhost:6379/0")
    migrations = register(app, settings="mongoshift.toml")

    line = migrations.enqueue_up()       # in a deploy step
    results = line.wait(timeout=600)     # LineResult per migration, in order
"""

from __future__ import annotations

try:
    import celery as _celery  # noqa: F401  (the extra: a clear message instead of a bare ModuleNotFoundError)
except ModuleNotFoundError as exc:  # pragma: no cover - the test extra installs it
    raise ModuleNotFoundError("mongoshift.celery needs Celery: pip install 'mongoshift[celery]'", name=exc.name) from exc

from .background import BackgroundOptions
from .line import LineOptions
from .payloads import VERSIONS, CoordinatorPayload, LanePayload, TenantPayload, UpPayload
from .results import BackgroundResult, LineResult
from .tasks import CONVERGE_DESTRUCTIVE, DEFAULT_ALLOW, LINE_KINDS, TASK_KINDS, BackgroundStart, LineGroup, MongoshiftTasks, TenantGroup, register

__all__ = [
    "CONVERGE_DESTRUCTIVE",
    "DEFAULT_ALLOW",
    "LINE_KINDS",
    "TASK_KINDS",
    "VERSIONS",
    "BackgroundOptions",
    "BackgroundResult",
    "BackgroundStart",
    "CoordinatorPayload",
    "LanePayload",
    "LineGroup",
    "LineOptions",
    "LineResult",
    "MongoshiftTasks",
    "TenantGroup",
    "TenantPayload",
    "UpPayload",
    "register",
]
