"""Options every API call shares: the application's client, observers (with OpenTelemetry), and how log events print.

Checked when the call starts, so a wrong one fails at once with exit code 6 instead of in
a lane, or never.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import Any

from bson import json_util
from pymongo import AsyncMongoClient

from ..errors import ConfigInvalidError
from ..project.events import Event, Observer
from ..project.settings import Settings


def checked_client(client: object) -> AsyncMongoClient[Any] | None:
    """``client=``: an open :class:`~pymongo.AsyncMongoClient` of the application, used and left open."""
    if client is not None and not isinstance(client, AsyncMongoClient):
        raise ConfigInvalidError(f"client must be a pymongo AsyncMongoClient, not {type(client).__name__}")
    return client


def checked_observers(observers: object) -> list[Observer]:
    """``observers=``: plain functions (called, not awaited) that receive every event."""
    if isinstance(observers, (str, bytes)) or not isinstance(observers, Iterable):
        raise ConfigInvalidError(f"observers must be a list of functions, not {type(observers).__name__}")
    listed = list(observers)
    for observer in listed:
        checked_function("observers", observer)
    return listed


def run_observers(observers: object, settings: Settings) -> list[Observer]:
    """A writing call's ``observers=``, checked, with OpenTelemetry when its API is installed
    (:func:`mongoshift.telemetry.with_telemetry`: imported here, not by the read-only calls)."""
    from ..telemetry import with_telemetry

    return with_telemetry(checked_observers(observers), settings.db)


def checked_function(option: str, function: object) -> None:
    if not callable(function) or inspect.iscoroutinefunction(function):
        raise ConfigInvalidError(f"{option} takes plain functions (called, not awaited), not {type(function).__name__}")


def log_entries(events: list[Event]) -> list[dict[str, Any]]:
    """``ctx.log`` events as JSON: BSON values of ``data`` as relaxed extended JSON (``{"$oid": ...}``)."""
    return [
        {
            "migration": e.migration,
            "direction": e.data.get("direction"),
            "attempt": e.data.get("attempt"),
            "level": e.data.get("level"),
            "message": e.data.get("message"),
            "data": to_json(e.data.get("data") or {}),
        }
        for e in events
    ]


def to_json(value: Any) -> Any:
    """``value`` as plain JSON types, BSON types kept as relaxed extended JSON."""
    return json.loads(json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS))
