"""Events of background migrations, through one observer interface and the stdlib logger.

Kinds: ``registered``, ``partitioned``, ``pass``, ``slice_start``, ``slice_end``,
``batch``, ``lease_lost``, ``throttle``, ``control``, ``completed``, ``failed``, ``drift``
(``background verify``: found, and what was done; the live watcher: ``upgraded`` or ``failed``,
``source="stream"``) and ``watch`` (a live watcher's new state; its ``migration`` is the collection).
Events carry counts and names, never a document or an ``_id``. A lane emits at most one
``throttle`` every 10 s, counting the changes folded into it (:class:`.throttle.ThrottleReport`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("mongoshift.background")

#: Kinds logged at INFO; the rest (per batch, per slice) at DEBUG.
NOTABLE = frozenset({"registered", "unblocked", "partitioned", "pass", "lease_lost", "control", "completed", "failed", "drift", "watch"})


@dataclass(frozen=True)
class Event:
    kind: str
    migration: str
    data: dict[str, Any] = field(default_factory=dict)


Observer = Callable[[Event], None]


class Events:
    """Fans events out to observers; an observer that raises is logged and ignored."""

    def __init__(self, observers: Iterable[Observer] = ()) -> None:
        self.observers = list(observers)

    def emit(self, kind: str, migration: str, **data: Any) -> None:
        event = Event(kind, migration, data)
        noisy = (kind == "throttle" and data.get("overloads")) or (kind == "drift" and data.get("found") and data.get("action") != "upgraded")
        if kind in ("failed", "lease_lost") or noisy:
            level = logging.WARNING
        else:
            level = logging.INFO if kind in NOTABLE else logging.DEBUG
        if log.isEnabledFor(level):
            details = " ".join(f"{k}={v}" for k, v in data.items())
            log.log(level, "%s %s %s", migration, kind, details)
        for observer in self.observers:
            try:
                observer(event)
            except Exception:
                log.exception("a background event observer failed")
