"""What a migration function or hook receives.

A migration author writes ``def up(ctx)`` or ``async def up(ctx)``. An async
function gets the async driver objects and runs on the event loop; a sync one
gets pymongo's sync objects and runs in a worker thread, so the lock heartbeat
keeps beating while it works (:mod:`mongoshift.project.user_code`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..project.run import CancelSignal

if TYPE_CHECKING:
    from ..project.migration_log import MigrationLog

Direction = Literal["up", "down"]


@dataclass
class MigrationContext:
    """Passed to ``up(ctx)``/``down(ctx)`` and to hooks.

    ``db``/``client``/``session`` are async driver objects for an ``async def``
    function and sync ones for a plain ``def``; ``session`` is set only inside a
    transaction and must be passed to every operation that belongs to it.
    ``log`` turns lines into events (:mod:`.migration_log`); ``logger`` is the stdlib
    logger, its records carrying the run id, migration, direction and attempt.
    """

    db: Any
    client: Any
    run_id: str
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    cancelled: CancelSignal
    name: str | None = None
    direction: Direction | None = None
    session: Any = None
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    log: MigrationLog | None = None
